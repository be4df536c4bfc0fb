/** HTTP surface of API keys (SPEC "API keys") and GET /api/health/whoami/ (DECISIONS "Auth"). */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { HttpModule } from '../gateway/app.js';
import type { Authenticator } from '../gateway/auth.js';
import { body, created, noContent, pageParams, queryParam, sendPage } from '../gateway/http.js';
import { validator } from '../gateway/validate.js';
import { badRequest, forbidden, notFound, otherAccountsIdentity, tokenNotValid } from '../gateway/errors.js';
import { isUuid } from '../kernel/ids.js';
import type { Accounts } from '../accounts/service.js';
import { toIdentityKey, toManagementKey, type Keys } from './service.js';

const v = {
  identityCreate: validator<{ label: string; identity_uuid?: string; identity?: string }>('keys.json#IdentityKeyCreate'),
  managementCreate: validator<{ label: string }>('keys.json#ManagementKeyCreate'),
};

export interface KeyRoutesDeps {
  keys: Keys;
  accounts: Accounts;
  auth: () => Authenticator;
  findIdentity: (id: string) => Promise<{ id: string; ownerPk: number } | null>;
  publicUrl: string;
}

function cleanLabel(raw: string): string {
  const label = raw.trim();
  if (!label) throw badRequest({ label: ['This field may not be blank.'] });
  return label;
}

/** Identity keys cannot mint, list or revoke keys (SPEC "Key kinds": management is the account's). */
const keyAdmin = async (auth: Authenticator, ctx: Context) => {
  const p = await auth.principal(ctx);
  if (p.kind === 'identity_key') throw forbidden('An identity key cannot manage API keys; use a management key or a user token.');
  return p;
};

export function keyRoutes(deps: KeyRoutesDeps): HttpModule {
  const { keys } = deps;

  /** The identity a key is minted for, or listed by: own account's live identity. */
  async function ownIdentity(id: string, userPk: number, field: string): Promise<string> {
    const lower = id.trim().toLowerCase(); // trimmed as every identity selector is (header, query)
    if (!isUuid(lower)) throw badRequest({ [field]: ['Must be a valid UUID.'] });
    const found = await deps.findIdentity(lower);
    if (!found) throw notFound('Identity not found.');
    if (found.ownerPk !== userPk) throw otherAccountsIdentity();
    return lower;
  }

  return {
    routes(r: Router) {
      r.get('/api/auth/keys/identity/', async (ctx) => {
        const p = await keyAdmin(deps.auth(), ctx);
        // The identity the request names, by header or by query (SPEC: the query "instead" of
        // the header), filters the list; both were checked with the credential already.
        const named = ctx.get('x-service-identity').trim() || queryParam(ctx, 'identity');
        const filter = named ? await ownIdentity(named, p.userPk, 'identity') : undefined;
        sendPage(ctx, await keys.list(p.userPk, 'identity', pageParams(ctx), filter), toIdentityKey, deps.publicUrl);
      });

      r.post('/api/auth/keys/identity/', async (ctx) => {
        const p = await keyAdmin(deps.auth(), ctx);
        const b = v.identityCreate(await body(ctx));
        // DECISIONS "Auth": the body may name the identity `identity_uuid` or `identity`.
        if (b.identity_uuid && b.identity && b.identity_uuid.toLowerCase() !== b.identity.toLowerCase()) {
          throw badRequest({ non_field_errors: ['identity_uuid and identity name different identities.'] });
        }
        const target = b.identity_uuid ?? b.identity;
        if (!target) throw badRequest({ identity_uuid: ['This field is required.'] });
        const identityId = await ownIdentity(target, p.userPk, b.identity_uuid ? 'identity_uuid' : 'identity');
        const k = await keys.mintAsked(p.userPk, { kind: 'identity', label: cleanLabel(b.label), identityId });
        created(ctx, { uuid: k.keyId, label: k.label, identity_uuid: identityId, key: k.secret, masked_key: k.maskedKey, created_dt: k.createdAt });
      });

      r.delete('/api/auth/keys/identity/:uuid/', async (ctx) => {
        const p = await keyAdmin(deps.auth(), ctx);
        const id = String(ctx.params.uuid).toLowerCase();
        if (!isUuid(id)) throw notFound('Key not found.');
        await keys.revoke(p.userPk, 'identity', id);
        noContent(ctx);
      });

      r.get('/api/auth/keys/management/', async (ctx) => {
        const p = await keyAdmin(deps.auth(), ctx);
        sendPage(ctx, await keys.list(p.userPk, 'management', pageParams(ctx)), toManagementKey, deps.publicUrl);
      });

      r.post('/api/auth/keys/management/', async (ctx) => {
        const p = await keyAdmin(deps.auth(), ctx);
        const b = v.managementCreate(await body(ctx));
        const k = await keys.mintAsked(p.userPk, { kind: 'management', label: cleanLabel(b.label) });
        created(ctx, { uuid: k.keyId, label: k.label, key: k.secret, masked_key: k.maskedKey, created_dt: k.createdAt });
      });

      r.delete('/api/auth/keys/management/:uuid/', async (ctx) => {
        const p = await keyAdmin(deps.auth(), ctx);
        const id = String(ctx.params.uuid).toLowerCase();
        if (!isUuid(id)) throw notFound('Key not found.');
        await keys.revoke(p.userPk, 'management', id);
        // A device sign-up handed out a session with this key: the agent is signed out too.
        await deps.accounts.revokeSessionsOfKey(id, 'key_revoked');
        noContent(ctx);
      });

      // Who the credential is. Needs no identity; when one is selected (header, query, key
      // fence or bound token) it is validated like on any identity-scoped endpoint.
      r.get('/api/health/whoami/', async (ctx) => {
        const auth = deps.auth();
        const p = await auth.principal(ctx);
        const selects = Boolean(ctx.get('x-service-identity') || (typeof ctx.query.identity === 'string' && ctx.query.identity) || p.fencedIdentity || p.boundIdentity);
        const identity = selects ? (await auth.identity(ctx)).identityId : null;
        const user = await deps.accounts.findUser(p.userPk);
        if (!user) throw tokenNotValid('User not found.');
        const key = p.keyId ? await keys.get(p.keyId) : null;
        ctx.body = {
          // DECISIONS names three kinds: a user's own sign-in (session cookie, HTTP basic)
          // is a user credential like a JWT.
          kind: p.kind === 'session' || p.kind === 'basic' ? 'jwt' : p.kind,
          user: { pk: user.pk, username: user.username, email: user.email },
          identity,
          key: key ? { uuid: key.id, label: key.label, masked_key: key.maskedKey } : null,
        };
      });
    },
  };
}

