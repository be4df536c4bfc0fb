// `ais identities list|create|update|delete|use`.
import type { Identity } from '../../sdk/client.js';
import { client, identityLabel, maySetDefaultIdentity, otherThanStoredLogin, resolveIdentity, type Command, type Ctx } from '../context.js';
import { updateConfig } from '../config.js';
import { CliError, usage } from '../errors.js';
import { kv, show, table, warn } from '../output.js';

export const identitiesCommands: Record<string, Command> = {
  'identities list': {
    usage: 'ais identities list',
    summary: 'List the identities of the account.',
    async run(ctx) {
      const list = await client(ctx).identities.list();
      show(ctx, list, () => table(list.map((i) => ({ ...i, default: i.uuid === ctx.config.identity ? '*' : '' })) as any, ['default', 'uuid', 'name', 'inbox', 'phone', 'created_dt']));
    },
  },
  'identities create': {
    usage: 'ais identities create <name> [--email-identifier LOCAL] [--phone] [--use]',
    summary: 'Create an identity (with an inbox); --use makes it the default.',
    options: { 'email-identifier': { type: 'string' }, phone: { type: 'boolean' }, use: { type: 'boolean' } },
    async run(ctx, p, v) {
      if (!p[0]) throw usage('ais identities create <name>');
      const c = client(ctx);
      const i = await c.identities.create({ name: p[0], ...(v['email-identifier'] ? { email_identifier: v['email-identifier'] } : {}), ...(v.phone ? { provision_phone: true } : {}) });
      if (v.use || !ctx.config.identity) {
        if (await maySetDefaultIdentity(ctx, c)) ctx.config = await updateConfig(ctx.env, (stored) => ({ ...stored, identity: i.uuid }));
        // A warning, not an error: the identity is made, and a failure would have it made again.
        else if (v.use) warn(ctx, `${notTheStoredLogins(ctx, i)}`);
      }
      show(ctx, i, () => kv(i as any, ['uuid', 'name', 'inbox', 'phone', 'created_dt']) + (ctx.config.identity === i.uuid ? '\n(default identity)' : ''));
    },
  },
  'identities update': {
    usage: 'ais identities update <uuid|name> [--name NEW] [--phone | --release-phone]',
    summary: 'Rename an identity, give it a phone number (--phone; a paid plan) or give its number up (--release-phone).',
    options: { name: { type: 'string' }, phone: { type: 'boolean' }, 'release-phone': { type: 'boolean' } },
    async run(ctx, p, v) {
      if (!p[0] || (v.name === undefined && !v.phone && !v['release-phone']) || (v.phone && v['release-phone'])) throw usage(this.usage);
      const c = client(ctx);
      const { uuid: id } = await resolveIdentity(c, p[0], ctx.config.identity);
      // The number first: a rename refused after it would leave the release done anyway.
      if (v['release-phone']) await c.identities.releasePhone(id);
      const i =
        v.name !== undefined || v.phone
          ? await c.identities.update(id, { ...(v.name !== undefined ? { name: v.name } : {}), ...(v.phone ? { provision_phone: true } : {}) })
          : await c.identities.get(id);
      show(ctx, i, () => kv(i as any, ['uuid', 'name', 'inbox', 'phone', 'created_dt']));
    },
  },
  'identities delete': {
    usage: 'ais identities delete <uuid|name>',
    summary: 'Delete an identity.',
    async run(ctx, p) {
      if (!p[0]) throw usage(this.usage);
      const c = client(ctx);
      const identity = await resolveIdentity(c, p[0], ctx.config.identity);
      const id = identity.uuid;
      await c.identities.delete(id);
      const wasDefault = id === ctx.config.identity ? ' It was the default identity: pick another with `ais identities use <uuid|name>`.' : '';
      show(ctx, { deleted: id }, () => `Deleted identity ${identityLabel(identity)}.${wasDefault}`);
    },
  },
  'identities use': {
    usage: 'ais identities use <uuid|name>',
    summary: 'Make an identity the default for identity-scoped commands.',
    async run(ctx, p) {
      if (!p[0]) throw usage(this.usage);
      const c = client(ctx);
      const identity = await resolveIdentity(c, p[0], ctx.config.identity);
      const id = identity.uuid;
      if (!(await maySetDefaultIdentity(ctx, c))) {
        throw new CliError('other_account', notTheStoredLogins(ctx, identity));
      }
      ctx.config = await updateConfig(ctx.env, (stored) => ({ ...stored, identity: id }));
      show(ctx, { identity: id }, () => `Default identity: ${identityLabel(identity)}.`);
    },
  },
};

/** Why an identity is not made the default here: the default is the stored login's. */
function notTheStoredLogins(ctx: Ctx, identity: Identity): string {
  const credential = ctx.env.AIS_API_KEY ? 'AIS_API_KEY' : 'AIS_TOKEN';
  return `${otherThanStoredLogin(ctx)}, and the default identity belongs to that login: ${identityLabel(identity)} is not made the default. Pass --identity ${identity.uuid} (or set AIS_IDENTITY) in the runs that use ${credential}.`;
}
