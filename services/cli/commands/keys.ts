// `ais keys list|create|revoke`: management and identity keys.
import { ApiRequestError } from '../../sdk/client.js';
import { client, requireIdentity, resolveIdentity, type Command } from '../context.js';
import { CliError, EXIT, usage } from '../errors.js';
import { kv, show, table } from '../output.js';

export const keysCommands: Record<string, Command> = {
  'keys list': {
    usage: 'ais keys list [--kind management|identity]',
    summary: 'List management and identity keys (masked).',
    options: { kind: { type: 'string' } },
    async run(ctx, _p, v) {
      // An unknown kind listed everything, as if none was given.
      if (v.kind !== undefined && v.kind !== 'management' && v.kind !== 'identity') throw new CliError('usage', `--kind takes management or identity, not ${JSON.stringify(v.kind)}.\nUsage: ${this.usage}`, EXIT.usage);
      const c = client(ctx);
      const management = v.kind === 'identity' ? [] : await c.keys.management.list();
      const identity = v.kind === 'management' ? [] : await c.keys.identity.list();
      // An identity key's identity by its name too: a uuid alone says little.
      const names = new Map<string, string>();
      if (identity.length && !ctx.json) for (const i of await c.identities.list().catch(() => [])) names.set(i.uuid, i.name);
      const rows = [
        ...management.map((k) => ({ kind: 'management', ...k, identity: null })),
        ...identity.map((k) => ({ kind: 'identity', ...k, identity: names.get(k.identity) ?? null, identity_uuid: k.identity })),
      ];
      show(ctx, { management, identity }, () => table(rows as any, ['kind', 'uuid', 'label', 'masked_key', 'identity', 'identity_uuid', 'last_used_at', 'created_dt']));
    },
  },
  'keys create': {
    usage: 'ais keys create <label> [--management | --identity UUID]',
    summary: 'Mint a key; the full key is printed once. Default: an identity key for the default identity.',
    options: { management: { type: 'boolean' } },
    async run(ctx, p, v) {
      if (!p[0]) throw usage('ais keys create <label>');
      const c = client(ctx);
      const k = v.management ? await c.keys.management.create(p[0]) : await c.keys.identity.create(p[0], (await resolveIdentity(c, requireIdentity(ctx, false), ctx.config.identity)).uuid);
      show(ctx, k, () => `${kv(k as any, ['uuid', 'label', 'identity_uuid', 'created_dt'])}\nkey: ${k.key}\n(This is the only time the full key is shown.)`);
    },
  },
  'keys revoke': {
    usage: 'ais keys revoke <uuid>',
    summary: 'Revoke a key (management or identity).',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais keys revoke <uuid>');
      const c = client(ctx);
      await c.keys.identity.revoke(p[0]).catch(async (e) => {
        if (e instanceof ApiRequestError && e.status === 404) return c.keys.management.revoke(p[0]);
        throw e;
      });
      show(ctx, { revoked: p[0] }, () => `Revoked key ${p[0]}.`);
    },
  },
};
