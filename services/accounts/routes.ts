/** HTTP surface of accounts (SPEC "Sign-up and tokens", except the device flow). */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { HttpModule } from '../gateway/app.js';
import type { Authenticator, IdentityRecord } from '../gateway/auth.js';
import { SESSION_COOKIE } from '../gateway/auth.js';
import { body, created, noContent, pageParams, sendPage } from '../gateway/http.js';
import { isUuid } from '../kernel/ids.js';
import type { SessionDoc } from '../../projections/sessions/index.js';
import { bodyWith, validator } from '../gateway/validate.js';
import { badRequest, forbidden, notFound, otherAccountsIdentity, tokenExpired, tokenNotValid } from '../gateway/errors.js';
import { normalUsername, toPublicUser, type Accounts } from './service.js';
import type { TokenService } from './tokens.js';

const v = {
  register: validator<{ username: string; email: string; password1: string; password2: string; first_name?: string; last_name?: string }>('accounts.json#Register'),
  // A password set before NUL was refused still signs in (the username's pattern refuses NUL anyway).
  login: validator<{ username?: string; email?: string; password: string }>('accounts.json#Login', { allowNul: true }),
  refresh: validator<{ refresh: string }>('accounts.json#Refresh'),
  verify: validator<{ token: string }>('accounts.json#Verify'),
  logout: validator<{ refresh?: string }>('accounts.json#Logout'),
  bind: validator<{ identity: string }>('accounts.json#BindIdentity'),
  emailOnly: validator<{ email: string }>('accounts.json#EmailOnly'),
  verifyEmail: validator<{ key: string }>('accounts.json#VerifyEmail'),
  passwordChange: validator<{ new_password1: string; new_password2: string }>('accounts.json#PasswordChange'),
  resetConfirm: validator<{ new_password1: string; new_password2: string; uid: string; token: string }>('accounts.json#PasswordResetConfirm'),
  userPut: validator<{ username: string; first_name?: string; last_name?: string }>('accounts.json#UserPut'),
  userPatch: validator<{ username?: string; first_name?: string; last_name?: string }>('accounts.json#UserPatch'),
};

export interface AccountRoutesDeps {
  accounts: Accounts;
  tokens: TokenService;
  auth: Authenticator;
  findIdentity: (id: string) => Promise<IdentityRecord | null>;
  /** Public keys that verify our JWTs. */
  jwks: unknown;
  /** PUBLIC_URL: the base of a list's Link rel="next". */
  publicUrl: string;
}

/**
 * The two new passwords must be the same: a cross-field rule, so `non_field_errors`
 * (DECISIONS); password change and reset also name `new_password2`, where Django's
 * SetPasswordForm (dj-rest-auth) reports it.
 */
const passwordsMatch = (a: string, b: string, ...fields: string[]) => {
  if (a !== b) throw badRequest(Object.fromEntries(['non_field_errors', ...fields].map((f) => [f, ["The two password fields didn't match."]])));
};

/**
 * The body with its username normalised (normalUsername) and its email trimmed (as Django
 * REST framework's EmailField does) before the schema checks them; other values as sent.
 */
export function withAccountNames(raw: unknown): unknown {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return raw;
  const { username, email } = raw as { username?: unknown; email?: unknown };
  const changes: Record<string, string> = {};
  if (typeof username === 'string') changes.username = normalUsername(username);
  if (typeof email === 'string') changes.email = email.trim();
  return Object.keys(changes).length ? bodyWith(raw, changes) : raw;
}

/**
 * A blank `email` at login is no email, as in dj-rest-auth's LoginSerializer (`allow_blank`):
 * its clients send `email: ""` beside the username. Elsewhere an email is required, blank or not.
 */
function withoutBlankEmail(raw: unknown): unknown {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return raw;
  const { email } = raw as { email?: unknown };
  return typeof email === 'string' && email.trim() === '' ? bodyWith(raw, { email: undefined }) : raw;
}

/**
 * A session as the API shows it (schemas/accounts.json#Session). `current`: the session of
 * the request's credential (a token's or cookie's own; for a device sign-up's management key,
 * the session handed out with it).
 */
function toSession(doc: SessionDoc, credential: { sessionId?: string; keyId?: string }) {
  return {
    uuid: doc.id,
    kind: doc.kind === 'cookie' ? 'browser' : 'token',
    via: doc.via,
    current: doc.id === credential.sessionId || (credential.keyId !== undefined && doc.keyId === credential.keyId),
    key_uuid: doc.keyId ?? null,
    started_dt: doc.startedAt,
    refreshed_dt: doc.refreshedAt,
    expires_dt: doc.expiresAt,
  };
}

export function accountRoutes(deps: AccountRoutesDeps): HttpModule {
  const { accounts, tokens, auth } = deps;

  async function currentUser(ctx: Context) {
    const p = await auth.principal(ctx);
    return accounts.getUser(p.userPk);
  }

  return {
    routes(r: Router) {
      r.post('/api/auth/social/', async (ctx) => {
        const b = v.register(withAccountNames(await body(ctx)));
        passwordsMatch(b.password1, b.password2);
        const user = await accounts.register({ username: b.username, email: b.email, password: b.password1, firstName: b.first_name, lastName: b.last_name, ip: ctx.ip });
        created(ctx, await accounts.tokenPair(user, 'register'));
      });

      r.post('/api/auth/login/', async (ctx) => {
        const raw = await body(ctx);
        const b = v.login(withAccountNames(withoutBlankEmail(raw)));
        // Looked up as typed too (findByLogin): an account named before usernames were normalised.
        const byUsername = (typeof (raw as { username?: unknown }).username === 'string' ? (raw as { username: string }).username : b.username)?.trim();
        const login = byUsername || b.email?.trim();
        if (!login) throw badRequest({ non_field_errors: ['Must include "username" or "email" and "password".'] });
        const user = await accounts.checkPassword(login, b.password, ctx.ip, byUsername ? 'username' : 'email');
        if (!user) throw badRequest({ non_field_errors: ['Unable to log in with provided credentials.'] });
        ctx.body = await accounts.tokenPair(user, 'password');
      });

      r.post('/api/auth/logout/', async (ctx) => {
        const b = v.logout(await body(ctx));
        let principal = null;
        try {
          principal = await auth.credential(ctx);
        } catch {
          // Logout is anonymous-friendly: an expired or bad credential still logs out.
          // (Identities named in the request are not checked: a stale one must not keep a session alive.)
        }
        // An identity key is one agent's runtime credential, not a sign-in: it ends no session
        // of the account (logout stays anonymous-friendly: 200, as without a credential).
        if (principal?.kind === 'identity_key') principal = null;
        // The accounts named by the credential and by a refresh token in the body (once each).
        const users = new Set<number>();
        if (principal) users.add(principal.userPk);
        // A refresh token counts only while it is its family's live one (a spent or revoked one
        // someone kept must not end the account's current sessions).
        const claims = b.refresh ? await tokens.verify(b.refresh, 'refresh').catch(() => null) : null;
        const session = claims ? await accounts.liveSession(claims.sessionId) : null;
        if (claims && session && session.tokenId === claims.jti) users.add(claims.userPk);
        for (const pk of users) await accounts.revokeAllSessions(pk, 'logout');
        ctx.cookies.set(SESSION_COOKIE, null);
        ctx.body = { detail: 'Successfully logged out.' };
      });

      r.post('/api/auth/token/refresh/', async (ctx) => {
        const b = v.refresh(await body(ctx));
        ctx.body = await accounts.refresh(b.refresh);
      });

      r.post('/api/auth/token/verify/', async (ctx) => {
        const b = v.verify(await body(ctx));
        const claims = await tokens.verify(b.token, 'any');
        if (claims.tokenType === 'refresh') {
          const session = await accounts.liveSession(claims.sessionId);
          if (!session) throw tokenExpired('Token has been revoked.');
          // A dashboard cookie is a browser session, no refresh token of the API (refresh refuses it too).
          if (session.kind === 'cookie') throw tokenNotValid('Token is invalid');
          // Rotated away: only the family's newest refresh token is valid (using this one would revoke the family).
          if (session.tokenId !== claims.jti) throw tokenNotValid('Token has already been used (refresh tokens rotate).');
        }
        // "200, no body" (SPEC). Koa turns a null body into 204, so: an empty one, untyped.
        ctx.status = 200;
        ctx.body = '';
        ctx.remove('Content-Type');
      });

      r.post('/api/auth/bind-identity/', async (ctx) => {
        const p = await auth.principal(ctx);
        if (p.kind !== 'jwt') throw forbidden('bind-identity requires a user token (JWT).'); // SPEC: "Bind-identity requires a JWT"
        const b = v.bind(await body(ctx));
        const id = b.identity.toLowerCase();
        const identity = await deps.findIdentity(id);
        if (!identity) throw notFound('Identity not found.');
        if (identity.ownerPk !== p.userPk) throw otherAccountsIdentity();
        const user = await accounts.getUser(p.userPk);
        const s = await accounts.startSession(user, { via: 'bind-identity', identity: id });
        ctx.body = { access: s.access, refresh: s.refresh, identity: id };
      });

      r.post('/api/auth/social/resend-email/', async (ctx) => {
        const b = v.emailOnly(withAccountNames(await body(ctx)));
        await accounts.resendVerification(b.email);
        created(ctx, { detail: 'ok' });
      });

      r.post('/api/auth/social/verify-email/', async (ctx) => {
        const b = v.verifyEmail(await body(ctx));
        await accounts.verifyEmail(b.key);
        ctx.body = { detail: 'ok' };
      });

      // The account's sessions: what signed in as it, and a way to end one (a lost device, a
      // leaked refresh token) without ending them all (logout, a password change).
      r.get('/api/auth/sessions/', async (ctx) => {
        const p = await auth.accountPrincipal(ctx);
        const page = await accounts.listSessions(p.userPk, pageParams(ctx));
        sendPage(ctx, page, (doc) => toSession(doc, p), deps.publicUrl);
      });
      r.delete('/api/auth/sessions/:uuid/', async (ctx) => {
        const p = await auth.accountPrincipal(ctx);
        const id = String(ctx.params.uuid).toLowerCase();
        if (!isUuid(id) || !(await accounts.endSession(p.userPk, id, 'api_session_ended'))) throw notFound('No such session.');
        noContent(ctx);
      });

      r.post('/api/auth/password/change/', async (ctx) => {
        const p = await auth.accountPrincipal(ctx);
        const b = v.passwordChange(await body(ctx));
        passwordsMatch(b.new_password1, b.new_password2, 'new_password2');
        await accounts.setPassword(p.userPk, b.new_password1, 'change');
        ctx.body = { detail: 'New password has been saved.' };
      });

      r.post('/api/auth/password/reset/', async (ctx) => {
        const b = v.emailOnly(withAccountNames(await body(ctx)));
        await accounts.requestPasswordReset(b.email);
        ctx.body = { detail: 'Password reset e-mail has been sent.' };
      });

      r.post('/api/auth/password/reset/confirm/', async (ctx) => {
        const b = v.resetConfirm(await body(ctx));
        passwordsMatch(b.new_password1, b.new_password2, 'new_password2');
        await accounts.confirmPasswordReset(b.uid, b.token, b.new_password1);
        ctx.body = { detail: 'Password has been reset with the new password.' };
      });

      r.get('/api/auth/user/', async (ctx) => {
        ctx.body = toPublicUser(await currentUser(ctx));
      });

      r.put('/api/auth/user/', async (ctx) => {
        const p = await auth.accountPrincipal(ctx);
        const b = v.userPut(withAccountNames(await body(ctx)));
        ctx.body = toPublicUser(await accounts.updateProfile(p.userPk, { username: b.username, firstName: b.first_name, lastName: b.last_name }));
      });

      r.patch('/api/auth/user/', async (ctx) => {
        const p = await auth.accountPrincipal(ctx);
        const b = v.userPatch(withAccountNames(await body(ctx)));
        ctx.body = toPublicUser(await accounts.updateProfile(p.userPk, { username: b.username, firstName: b.first_name, lastName: b.last_name }));
      });

      r.get('/api/master/', async (ctx) => {
        const u = await currentUser(ctx);
        ctx.body = { first_name: u.firstName, last_name: u.lastName, email: u.email };
      });

      r.get('/.well-known/jwks.json', async (ctx) => {
        ctx.set('Cache-Control', 'public, max-age=300');
        ctx.body = deps.jwks;
      });
    },
  };
}
