/**
 * One principal from every credential form (SPEC "Authentication" 1-5, 8; DECISIONS "Auth"):
 * identity key, management key, JWT, session cookie and HTTP basic all resolve to the
 * same shape: the account, and the fence the credential puts around it.
 *
 * The gateway knows only these resolver interfaces; the contexts that own the credentials
 * (accounts, keys, identities) implement them, and the composition root wires them in.
 */
import type { Context } from 'koa';
import { createIdentityGate } from './identity-gate.js';
import { body } from './http.js';
import { isUuid } from '../kernel/ids.js';
import { ApiError, badRequest, forbidden, notAuthenticated, notFound, otherAccountsIdentity, tokenNotValid } from './errors.js';

export type PrincipalKind = 'jwt' | 'management_key' | 'identity_key' | 'session' | 'basic';

export interface Principal {
  kind: PrincipalKind;
  userPk: number;
  /** The API key's uuid, for key credentials. */
  keyId?: string;
  /** Identity keys: the only identity this credential may touch. */
  fencedIdentity?: string;
  /** Tokens from bind-identity: the identity selected by default. */
  boundIdentity?: string;
  /** Session family (refresh-token family or cookie session). */
  sessionId?: string;
  /** When the credential stops being valid (ms since the epoch), for an access token. */
  expiresAt?: number;
}

export interface AccessTokenClaims {
  userPk: number;
  identity?: string;
  sessionId?: string;
  /** The token's `exp`, in ms since the epoch. */
  expiresAt?: number;
}

export interface KeyRecord {
  keyId: string;
  kind: 'management_key' | 'identity_key';
  userPk: number;
  identityId?: string;
}

export interface IdentityRecord {
  id: string;
  ownerPk: number;
}

export interface CredentialResolvers {
  /** Verifies an access JWT; throws ApiError 401 token_expired / token_not_valid. */
  verifyAccessToken(token: string): Promise<AccessTokenClaims>;
  /** A live (not revoked) API key by its full secret, or null. */
  findKey(secret: string): Promise<KeyRecord | null>;
  /** Records a use of the key (throttled by the implementation). */
  touchKey?(keyId: string): void;
  /** username-or-email + password, for HTTP basic; null when wrong. */
  verifyPassword(login: string, password: string, ip: string): Promise<number | null>;
  /** A live dashboard session by its cookie value, or null. */
  findSession?(cookie: string): Promise<{ userPk: number; sessionId: string } | null>;
  /** A live identity by uuid (deleted ones: null). */
  findIdentity(id: string): Promise<IdentityRecord | null>;
  /** The account still exists (JWTs outlive nothing that was deleted). */
  userExists?(pk: number): Promise<boolean>;
}

export const SESSION_COOKIE = 'ais_session';
export const KEY_PREFIXES = { management: 'svc_mgmt_', identity: 'svc_id_' } as const;

/** Methods a cross-site page can make a browser send with its cookies (forms, simple requests). */
const UNSAFE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/**
 * Cookie-authenticated API writes must not be forgeable by another page (CSRF): a body must be
 * JSON, which a page of another origin can only send after a CORS preflight (this gateway
 * grants none), and an `Origin`, when the browser sends one, must be ours. Form and
 * text/plain posts are what a hostile page can send without asking.
 */
function checkCookieWrite(ctx: Context, publicOrigin: string | null): void {
  // The HTML pages (dashboard, /device) post forms and carry their own CSRF tokens.
  if (!UNSAFE_METHODS.has(ctx.method) || !ctx.path.startsWith('/api/')) return;
  const type = (ctx.get('content-type') || '').split(';')[0].trim().toLowerCase();
  // A body without a Content-Type is read as JSON, and a page of any origin can send one
  // (fetch with a typeless Blob is a "simple" request): it must say it is JSON.
  const untypedBody = !type && (Number(ctx.get('content-length') || 0) > 0 || ctx.get('transfer-encoding') !== '');
  const origin = ctx.get('origin');
  if ((type && type !== 'application/json') || untypedBody || (origin && publicOrigin !== null && origin !== publicOrigin)) {
    throw forbidden('Cookie-authenticated requests must be JSON from this site.', 'csrf_failed');
  }
}

/** An Authorization header's scheme (lower-cased; `Token`, DRF's, read as `bearer`) and credential. */
export function authorizationOf(header: string): { scheme: string; value: string } {
  const space = header.indexOf(' ');
  const scheme = (space < 0 ? header : header.slice(0, space)).toLowerCase();
  return { scheme: scheme === 'token' ? 'bearer' : scheme, value: space < 0 ? '' : header.slice(space + 1).trim() };
}

export function createAuthenticator(resolvers: CredentialResolvers, opts: { publicUrl?: string } = {}) {
  const publicOrigin = opts.publicUrl ? new URL(opts.publicUrl).origin : null;
  const gate = createIdentityGate();
  async function resolve(ctx: Context): Promise<Principal | null> {
    const header = ctx.get('authorization');
    if (header) {
      const { scheme, value } = authorizationOf(header);
      if (scheme === 'bearer') {
        if (!value) throw notAuthenticated('Invalid Authorization header. No credentials provided.'); // no credential: DECISIONS' not_authenticated
        if (value.startsWith(KEY_PREFIXES.management) || value.startsWith(KEY_PREFIXES.identity)) {
          const key = await resolvers.findKey(value);
          if (!key) throw tokenNotValid('Invalid or revoked API key.');
          resolvers.touchKey?.(key.keyId);
          return key.kind === 'identity_key'
            ? { kind: 'identity_key', userPk: key.userPk, keyId: key.keyId, fencedIdentity: key.identityId }
            : { kind: 'management_key', userPk: key.userPk, keyId: key.keyId };
        }
        const claims = await resolvers.verifyAccessToken(value);
        if (resolvers.userExists && !(await resolvers.userExists(claims.userPk))) throw tokenNotValid('User not found.');
        return { kind: 'jwt', userPk: claims.userPk, boundIdentity: claims.identity, sessionId: claims.sessionId, expiresAt: claims.expiresAt };
      }
      if (scheme === 'basic') {
        let decoded = '';
        try {
          decoded = Buffer.from(value, 'base64').toString('utf8');
        } catch {
          /* falls through to the error below */
        }
        const colon = decoded.indexOf(':');
        if (colon < 0) throw tokenNotValid('Invalid basic header. Credentials not correctly base64 encoded.');
        const pk = await resolvers.verifyPassword(decoded.slice(0, colon), decoded.slice(colon + 1), ctx.ip);
        if (pk === null) throw tokenNotValid('Invalid username/password.');
        return { kind: 'basic', userPk: pk };
      }
      throw tokenNotValid('Unsupported authorization scheme.');
    }
    const cookie = ctx.cookies.get(SESSION_COOKIE);
    if (cookie && resolvers.findSession) {
      const session = await resolvers.findSession(cookie);
      if (session) {
        checkCookieWrite(ctx, publicOrigin);
        return { kind: 'session', userPk: session.userPk, sessionId: session.sessionId };
      }
    }
    return null;
  }

  /** The identities the request names, lower-cased ('' when absent); two by header or by query is a 400. */
  function namedIdentities(ctx: Context): { header: string; query: string } {
    const header = ctx.get('x-service-identity').trim().toLowerCase();
    if (header.includes(',')) throw badRequest({ identity: ['Give one identity.'] }); // the header twice (Node joins them)
    if (!ctx.querystring) return { header, query: '' };
    const q = ctx.query.identity;
    if (Array.isArray(q)) throw badRequest({ identity: ['Give one identity.'] });
    return { header, query: (q ?? '').trim().toLowerCase() };
  }

  /**
   * Checks every identity the request names, by header and by query, against the credential
   * (DECISIONS "Auth"), on every endpoint, account-level ones too: an identity key naming
   * another identity → 403; an identity of another account → 403; an unknown one (or not a
   * uuid) → 404; then a header and a query naming two different ones → 400.
   */
  async function checkNamedIdentities(ctx: Context, p: Principal): Promise<void> {
    const { header, query } = namedIdentities(ctx);
    if (!header && !query) return; // the common case: nothing named
    for (const named of header === query ? [header] : [header, query]) {
      if (!named) continue;
      if (p.fencedIdentity) {
        if (named !== p.fencedIdentity) throw forbidden('This identity key is fenced to another identity.');
        continue;
      }
      const found = isUuid(named) ? await resolvers.findIdentity(named) : null;
      if (!found) throw notFound('Identity not found.');
      if (found.ownerPk !== p.userPk) throw otherAccountsIdentity();
    }
    // Either selects the identity (SPEC: the query parameter "instead" of the header); two
    // different ones, both the caller's, leave the request's meaning open.
    if (header && query && header !== query) throw badRequest({ identity: ['X-Service-Identity and ?identity= name different identities: give one.'] });
  }

  /** The caller's principal; 401 not_authenticated when there is no credential. */
  async function principal(ctx: Context): Promise<Principal> {
    if (ctx.state.principal) return ctx.state.principal as Principal;
    const p = await resolve(ctx);
    if (!p) throw notAuthenticated();
    await checkNamedIdentities(ctx, p);
    ctx.state.principal = p;
    return p;
  }

  /** The caller's principal or null (anonymous endpoints that use a credential when given). */
  async function optionalPrincipal(ctx: Context): Promise<Principal | null> {
    if (ctx.state.principal) return ctx.state.principal as Principal;
    const p = await resolve(ctx);
    if (p) await checkNamedIdentities(ctx, p);
    ctx.state.principal = p ?? undefined;
    return p;
  }

  /**
   * Who the credential is, or null, without checking the identities the request names:
   * for logout (a stale `X-Service-Identity` must not stop a sign-out) and the dashboard's
   * cookie session. Throws 401 for a bad credential.
   */
  async function credential(ctx: Context): Promise<Principal | null> {
    return resolve(ctx);
  }

  /** Refuses identity keys (they cannot manage the account: create identities or keys). */
  async function accountPrincipal(ctx: Context): Promise<Principal> {
    const p = await principal(ctx);
    if (p.kind === 'identity_key') throw forbidden('An identity key cannot manage the account; use a management key or a user token.');
    return p;
  }

  /**
   * The identity a request acts as (DECISIONS "Auth" scope rules): header, then query,
   * then the credential's own (identity key fence, bound token).
   */
  async function identity(ctx: Context): Promise<{ principal: Principal; identityId: string }> {
    const p = await principal(ctx); // every identity the request names is checked there
    const { header, query } = namedIdentities(ctx); // the header selects
    const chosen = (header || query || p.fencedIdentity || p.boundIdentity || '').toLowerCase();
    if (!chosen) {
      throw new ApiError(400, 'identity_required', 'Select an identity with the X-Service-Identity header or the identity query parameter.');
    }
    // Not a uuid: no such identity, as a malformed id in a path is (404 either way).
    const found = isUuid(chosen) ? await resolvers.findIdentity(chosen) : null;
    if (!found) {
      if (p.fencedIdentity) throw tokenNotValid('The identity of this key was deleted.');
      throw notFound('Identity not found.');
    }
    if (found.ownerPk !== p.userPk) throw otherAccountsIdentity();
    if (UNSAFE_METHODS.has(ctx.method) && !ctx.state.releaseIdentity) {
      // A write: held until the answer is sent (the edge middleware lets go), so the
      // identity's deletion waits for it; if a deletion came first, the identity is gone now.
      // The body is read first: a client slow to send it must not hold up the deletion.
      await body(ctx);
      const release = await gate.enterWrite(chosen);
      ctx.state.releaseIdentity = release;
      if (!(await resolvers.findIdentity(chosen))) {
        release();
        throw notFound('Identity not found.');
      }
    }
    return { principal: p, identityId: chosen };
  }

  /** Runs an identity's deletion once no write scoped to it is in flight (see identity-gate.ts). */
  const deletingIdentity = <T>(identityId: string, work: () => Promise<T>): Promise<T> => gate.exclusive(identityId.toLowerCase(), work);

  return { principal, optionalPrincipal, credential, accountPrincipal, identity, deletingIdentity };
}

export type Authenticator = ReturnType<typeof createAuthenticator>;
