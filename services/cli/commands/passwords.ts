// `ais passwords list|add|get|rm|generate`: entries encrypted on this machine.
import type { PlainPassword } from '../../sdk/unlocked.js';
import { client, isUuid, type Command } from '../context.js';
import { CliError, EXIT, usage } from '../errors.js';
import { readSecret } from '../input.js';
import { kv, show, table, warn } from '../output.js';
import { DEVICE_SECRET_HELP, unlocked } from '../vault.js';

export const passwordsCommands: Record<string, Command> = {
  'passwords list': {
    usage: 'ais passwords list',
    summary: 'Password entries, decrypted locally (needs the PIN).',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)', AIS_DEVICE_SECRET: DEVICE_SECRET_HELP },
    async run(ctx) {
      const v = await unlocked(ctx);
      const { entries: list, failed } = await v.listPasswordsReport();
      for (const f of failed) warn(ctx, `entry ${f.uuid} (${f.domain}) does not decrypt (${f.error}): written by another client, or changed without this PIN's key; left out.`);
      show(ctx, list, () => table(list.map((e) => ({ ...e, password: '********' })) as any, ['uuid', 'domain', 'username', 'password', 'notes']));
    },
  },
  'passwords add': {
    usage: 'ais passwords add <domain> --username U [--password P | --generate] [--notes N]',
    summary: 'Store a password entry, encrypted on this machine.',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)', AIS_DEVICE_SECRET: DEVICE_SECRET_HELP, AIS_ENTRY_PASSWORD: 'the password to store, when neither --password nor --generate' },
    options: { username: { type: 'string' }, password: { type: 'string' }, generate: { type: 'boolean' }, notes: { type: 'string' } },
    async run(ctx, p, o) {
      if (!p[0] || !o.username) throw usage('ais passwords add <domain> --username U --password P');
      // Both would store one and drop the other (the given one also showed in `ps` for nothing).
      if (o.generate && o.password !== undefined) throw usage('ais passwords add <domain> --username U [--password P | --generate] (one of them, not both)');
      const v = await unlocked(ctx);
      const password = o.generate ? (await v.client.passwords.generate()).password : (o.password ?? (await readSecret(ctx, 'AIS_ENTRY_PASSWORD', 'Password to store', { value: true })));
      const e = await v.addPassword({ domain: p[0], username: o.username, password, notes: o.notes ?? '' });
      // A generated password is shown once here: it is what the agent types into the sign-up form.
      show(ctx, e, () => `Stored ${e.domain} (${e.uuid}).${o.generate ? `\nPassword: ${password}` : ''}`);
    },
  },
  'passwords get': {
    usage: 'ais passwords get <uuid|domain>',
    summary: 'Show one entry, decrypted.',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)', AIS_DEVICE_SECRET: DEVICE_SECRET_HELP },
    async run(ctx, p) {
      if (!p[0]) throw usage('ais passwords get <uuid|domain>');
      const v = await unlocked(ctx);
      let e: PlainPassword | undefined;
      if (isUuid(p[0])) e = await v.getPassword(p[0]);
      else {
        const { entries, failed } = await v.listPasswordsReport();
        e = entries.find((x) => x.domain === p[0]);
        const bad = failed.find((x) => x.domain === p[0]);
        if (!e && bad) throw new CliError(bad.error, `The entry for ${p[0]} (${bad.uuid}) does not decrypt: written by another client, or changed without this PIN's key.`, EXIT.error);
      }
      if (!e) throw new CliError('not_found', `No password entry for ${p[0]}.`, EXIT.api_error);
      show(ctx, e, () => kv(e as any));
    },
  },
  'passwords rm': {
    usage: 'ais passwords rm <uuid|domain>',
    summary: 'Delete an entry (by domain when only one entry has it; the domain is stored in the clear, so no PIN is needed).',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais passwords rm <uuid|domain>');
      const c = client(ctx, { identity: true });
      let id = p[0];
      if (!isUuid(id)) {
        const matching = (await c.passwords.list()).filter((x) => x.domain === p[0]);
        if (matching.length === 0) throw new CliError('not_found', `No password entry for ${p[0]}.`, EXIT.api_error);
        if (matching.length > 1) throw new CliError('usage', `${matching.length} entries are for ${p[0]}: give the uuid of the one to delete (${matching.map((x) => x.uuid).join(', ')}).`, EXIT.usage);
        id = matching[0]!.uuid;
      }
      await c.passwords.delete(id);
      show(ctx, { deleted: id }, () => `Deleted ${p[0]}${id === p[0] ? '' : ` (${id})`}.`);
    },
  },
  'passwords generate': {
    usage: 'ais passwords generate',
    summary: 'A random password from the server generator.',
    async run(ctx) {
      const g = await client(ctx, { identity: true }).passwords.generate();
      show(ctx, g, () => g.password);
    },
  },
};
