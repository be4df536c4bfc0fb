// `ais secrets list|set|get|rm`: values encrypted on this machine.
import { ApiRequestError } from '../../sdk/client.js';
import { client, type Command } from '../context.js';
import { CliError, EXIT, usage } from '../errors.js';
import { readSecret } from '../input.js';
import { show, table } from '../output.js';
import { DEVICE_SECRET_HELP, unlocked } from '../vault.js';

export const secretsCommands: Record<string, Command> = {
  'secrets list': {
    usage: 'ais secrets list',
    summary: 'Secret names (values are never listed).',
    async run(ctx) {
      const list = await client(ctx, { identity: true }).vault.list();
      show(ctx, list, () => table(list as any, ['uuid', 'key', 'created_dt', 'updated_dt']));
    },
  },
  'secrets set': {
    usage: 'ais secrets set <key> [value]   (value from AIS_SECRET_VALUE or stdin when omitted)',
    summary: 'Create or update a secret, encrypted on this machine.',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)', AIS_DEVICE_SECRET: DEVICE_SECRET_HELP, AIS_SECRET_VALUE: 'the value, when not given as an argument' },
    async run(ctx, p) {
      if (!p[0]) throw usage('ais secrets set <key> [value]');
      const v = await unlocked(ctx);
      const value = p[1] ?? (await readSecret(ctx, 'AIS_SECRET_VALUE', 'Secret value', { value: true }));
      const s = await v.setSecret(p[0], value);
      show(ctx, { uuid: s.uuid, key: s.key }, () => `Stored secret ${s.key} (${s.uuid}).`);
    },
  },
  'secrets get': {
    usage: 'ais secrets get <key|uuid>',
    summary: 'Print a secret, decrypted.',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)', AIS_DEVICE_SECRET: DEVICE_SECRET_HELP },
    async run(ctx, p) {
      if (!p[0]) throw usage('ais secrets get <key|uuid>');
      const v = await unlocked(ctx);
      const s = await v.getSecret(p[0]).catch((e) => {
        // A missing secret name; an API 404 goes through translate (it may be the identity that is gone).
        if (e?.code === 'not_found' && !(e instanceof ApiRequestError)) throw new CliError('not_found', e.message, EXIT.api_error);
        throw e;
      });
      show(ctx, s, () => s.value ?? '');
    },
  },
  'secrets rm': {
    usage: 'ais secrets rm <key|uuid>',
    summary: 'Delete a secret.',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais secrets rm <key|uuid>');
      const c = client(ctx, { identity: true });
      const id = (await c.vault.find(p[0]))?.uuid;
      if (!id) throw new CliError('not_found', `No secret named ${p[0]}.`, EXIT.api_error);
      await c.vault.delete(id);
      show(ctx, { deleted: id }, () => `Deleted ${p[0]}.`);
    },
  },
};
