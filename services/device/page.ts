/**
 * The human step of RFC 8628 (§3.3): the server-rendered `/device` page. The person enters
 * (or confirms, from verification_uri_complete) the user code, sees it shown back to compare
 * with the device (§3.3.1), signs in (local password, or the external OIDC provider when
 * configured) and approves or denies.
 *
 * Security:
 * - No script at all; CSP `default-src 'none'` plus our own stylesheet and form targets.
 * - The session is the dashboard's cookie session (`ais_session`: HttpOnly, SameSite=Lax,
 *   Secure when PUBLIC_URL is https), which the gateway resolves to a `session` principal.
 * - CSRF: every form carries a token = HMAC(server key, binding), where the binding is the
 *   session id once signed in, and before that a random value in a pre-session cookie
 *   (double submit). The OIDC round trip keeps state, nonce and the PKCE verifier in a
 *   signed, short-lived cookie scoped to /device/oidc.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import { createHmac, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Accounts } from '../accounts/service.js';
import type { Authenticator } from '../gateway/auth.js';
import { SESSION_COOKIE } from '../gateway/auth.js';
import { ApiError } from '../gateway/errors.js';
import { body } from '../gateway/http.js';
import type { UserDoc } from '../../projections/users/index.js';
import { USERS, externalKeyOf } from '../../projections/users/index.js';
import type { ReadStore } from '../../infra/ports/read-store.js';
import type { Logger } from 'pino';
import { formatUserCode, normalizeUserCode, safeEqual } from './codes.js';
import { approvePage, enterCodePage, resultPage, signInPage, type Notice } from './html.js';
import { OidcLoginError, type OidcClient, type OidcPending } from './oidc.js';
import type { DeviceService } from './service.js';

const CSS = readFileSync(new URL('./device.css', import.meta.url), 'utf8');
const PRE_SESSION_COOKIE = 'ais_device_csrf';
const OIDC_COOKIE = 'ais_device_oidc';
const OIDC_COOKIE_TTL_S = 600;

export interface DevicePageDeps {
  service: DeviceService;
  accounts: Accounts;
  reads: ReadStore;
  auth: () => Authenticator;
  hmacKey: Buffer;
  publicUrl: string;
  oidc: OidcClient | null;
  logger: Logger;
}

interface CookieOptions {
  maxAge?: number; // seconds; 0 deletes
  path?: string;
}

export function devicePage(deps: DevicePageDeps) {
  const { service, accounts, hmacKey, publicUrl, oidc } = deps;
  const secure = publicUrl.startsWith('https:');
  const users = deps.reads.collection<UserDoc>(USERS);

  // Set-Cookie is written by hand: Koa refuses `secure` cookies on a plain connection,
  // but behind a TLS-terminating proxy the browser does see https (PUBLIC_URL says so).
  function setCookie(ctx: Context, name: string, value: string, o: CookieOptions = {}): void {
    const parts = [`${name}=${value}`, `Path=${o.path ?? '/'}`, 'HttpOnly', 'SameSite=Lax'];
    if (o.maxAge !== undefined) parts.push(`Max-Age=${Math.max(0, Math.floor(o.maxAge))}`);
    if (o.maxAge === 0) parts.push('Expires=Thu, 01 Jan 1970 00:00:00 GMT');
    if (secure) parts.push('Secure');
    ctx.append('Set-Cookie', parts.join('; '));
  }

  const mac = (purpose: string, value: string) => createHmac('sha256', hmacKey).update(`${purpose}\n${value}`).digest('base64url');

  async function signedIn(ctx: Context): Promise<{ user: UserDoc; sessionId: string } | null> {
    let p = null;
    try {
      p = await deps.auth().optionalPrincipal(ctx);
    } catch {
      return null; // a bad credential is the same as none here: sign in again
    }
    if (!p || p.kind !== 'session' || !p.sessionId) return null;
    const user = await accounts.findUser(p.userPk);
    return user ? { user, sessionId: p.sessionId } : null;
  }

  /** The CSRF token of this browser: bound to its session, else to a pre-session cookie. */
  function csrfFor(ctx: Context, session: { sessionId: string } | null): string {
    if (session) return mac('device-csrf-session', session.sessionId);
    let pre = ctx.cookies.get(PRE_SESSION_COOKIE);
    if (!pre || !/^[\w-]{43}$/.test(pre)) {
      pre = randomBytes(32).toString('base64url');
      setCookie(ctx, PRE_SESSION_COOKIE, pre, { path: '/device' });
    }
    return mac('device-csrf-pre', pre);
  }

  function checkCsrf(ctx: Context, session: { sessionId: string } | null, token: unknown): boolean {
    if (typeof token !== 'string' || !token) return false;
    if (session) return safeEqual(token, mac('device-csrf-session', session.sessionId));
    const pre = ctx.cookies.get(PRE_SESSION_COOKIE);
    return Boolean(pre) && safeEqual(token, mac('device-csrf-pre', pre!));
  }

  async function html(ctx: Context, status: number, page: string): Promise<void> {
    const formTargets = ["'self'"];
    const idp = oidc ? await oidc.authorizationOrigin() : null;
    if (idp) formTargets.push(idp);
    ctx.status = status;
    ctx.type = 'text/html; charset=utf-8';
    ctx.set('Cache-Control', 'no-store');
    ctx.set(
      'Content-Security-Policy',
      `default-src 'none'; style-src 'self'; img-src 'self'; form-action ${formTargets.join(' ')}; frame-ancestors 'none'; base-uri 'none'`,
    );
    ctx.body = page;
  }

  const displayName = (u: UserDoc) => (u.email ? `${u.username} (${u.email})` : u.username);
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  const redirect = (ctx: Context, location: string) => {
    ctx.status = 303;
    ctx.set('Cache-Control', 'no-store');
    ctx.redirect(location);
    ctx.status = 303;
  };
  const backTo = (userCode: string | null) => (userCode ? `/device?user_code=${encodeURIComponent(userCode)}` : '/device');

  /** GET /device: enter, confirm, sign in, approve. */
  async function show(ctx: Context, notice?: Notice, status = 200, login?: string): Promise<void> {
    const session = await signedIn(ctx);
    const csrf = csrfFor(ctx, session);
    const raw = str(ctx.query.user_code).trim();
    const userCode = raw ? normalizeUserCode(raw) : null;
    if (!userCode) {
      const bad: Notice | undefined = raw ? { kind: 'error', text: 'That is not a valid code. Codes are 8 letters, like BCDF-GHJK.' } : undefined;
      return html(ctx, raw ? 400 : status, enterCodePage({ notice: notice ?? bad, value: raw, signedInAs: session ? displayName(session.user) : null, csrf }));
    }
    const shown = formatUserCode(userCode);
    if (!session) return html(ctx, status, signInPage({ userCode: shown, csrf, login, notice, oidcLabel: oidc?.label ?? null }));
    return html(ctx, status, approvePage({ userCode: shown, csrf, signedInAs: displayName(session.user), notice }));
  }

  async function login(ctx: Context): Promise<void> {
    const b = await body(ctx);
    const userCode = normalizeUserCode(str(b.user_code));
    ctx.query = { user_code: userCode ? formatUserCode(userCode) : '' };
    if (!checkCsrf(ctx, null, b.csrf)) return show(ctx, { kind: 'error', text: 'Your form expired. Please try again.' }, 403);
    const loginName = str(b.login).trim();
    const password = str(b.password);
    if (!loginName || !password) return show(ctx, { kind: 'error', text: 'Enter your username or email and your password.' }, 400, loginName);
    let user: UserDoc | null;
    try {
      user = await accounts.checkPassword(loginName, password, ctx.ip);
    } catch (err) {
      if (err instanceof ApiError && err.status === 429) {
        for (const [k, v] of Object.entries(err.headers ?? {})) ctx.set(k, v);
        return show(ctx, { kind: 'error', text: err.detail }, 429, loginName);
      }
      throw err;
    }
    if (!user) return show(ctx, { kind: 'error', text: 'Wrong username, email or password.' }, 400, loginName);
    await startCookieSession(ctx, user, 'device-page');
    redirect(ctx, backTo(userCode ? formatUserCode(userCode) : null));
  }

  async function startCookieSession(ctx: Context, user: UserDoc, via: string): Promise<void> {
    const s = await accounts.startSession(user, { via, kind: 'cookie' });
    const maxAge = (Date.parse(s.refreshExpiresAt) - Date.now()) / 1000;
    setCookie(ctx, SESSION_COOKIE, s.refresh, { maxAge });
    setCookie(ctx, PRE_SESSION_COOKIE, '', { path: '/device', maxAge: 0 });
  }

  async function logout(ctx: Context): Promise<void> {
    const b = await body(ctx);
    const session = await signedIn(ctx);
    const userCode = normalizeUserCode(str(b.user_code));
    if (session) {
      if (!checkCsrf(ctx, session, b.csrf)) {
        ctx.query = { user_code: userCode ? formatUserCode(userCode) : '' };
        return show(ctx, { kind: 'error', text: 'Your form expired. Please try again.' }, 403);
      }
      await accounts.revokeSession(session.sessionId, 'device_page_logout');
    }
    setCookie(ctx, SESSION_COOKIE, '', { maxAge: 0 });
    redirect(ctx, backTo(userCode ? formatUserCode(userCode) : null));
  }

  async function decide(ctx: Context, action: 'approve' | 'deny'): Promise<void> {
    const b = await body(ctx);
    const raw = str(b.user_code);
    ctx.query = { user_code: raw };
    const session = await signedIn(ctx);
    if (!session) return show(ctx, { kind: 'error', text: 'Please sign in first.' }, 401);
    if (!checkCsrf(ctx, session, b.csrf)) return show(ctx, { kind: 'error', text: 'Your form expired. Please try again.' }, 403);
    try {
      const done = await service.decide({ userPk: session.user.pk, userCode: raw, action, via: 'device-page', ip: ctx.ip });
      return html(
        ctx,
        200,
        action === 'approve'
          ? resultPage({ title: 'Device approved', notice: { kind: 'success', text: 'Done. You can close this page and return to your device.' }, userCode: done.userCode })
          : resultPage({ title: 'Device denied', notice: { kind: 'success', text: 'The device was denied access. You can close this page.' }, userCode: done.userCode }),
      );
    } catch (err) {
      if (!(err instanceof ApiError) || err.status >= 500) throw err;
      for (const [k, v] of Object.entries(err.headers ?? {})) ctx.set(k, v);
      const text = err.fields ? Object.values(err.fields).flat().join(' ') : err.detail;
      return html(ctx, err.status, resultPage({ title: 'This code cannot be used', notice: { kind: 'error', text }, again: true }));
    }
  }

  // ---- external provider ----

  function sealPending(p: OidcPending & { userCode: string; exp: number }): string {
    const payload = Buffer.from(JSON.stringify(p)).toString('base64url');
    return `${payload}.${mac('device-oidc', payload)}`;
  }

  function openPending(value: string | undefined): (OidcPending & { userCode: string; exp: number }) | null {
    if (!value) return null;
    const [payload, sig] = value.split('.');
    if (!payload || !sig || !safeEqual(sig, mac('device-oidc', payload))) return null;
    try {
      const p = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
      return typeof p.exp === 'number' && p.exp * 1000 > Date.now() ? p : null;
    } catch {
      return null;
    }
  }

  async function oidcStart(ctx: Context): Promise<void> {
    if (!oidc) throw new ApiError(404, 'not_found', 'Not found.');
    const b = await body(ctx);
    const userCode = normalizeUserCode(str(b.user_code));
    ctx.query = { user_code: userCode ? formatUserCode(userCode) : '' };
    if (!checkCsrf(ctx, await signedIn(ctx), b.csrf)) return show(ctx, { kind: 'error', text: 'Your form expired. Please try again.' }, 403);
    let started: Awaited<ReturnType<OidcClient['begin']>>;
    try {
      started = await oidc.begin();
    } catch (err) {
      deps.logger.warn({ err }, 'OIDC provider unavailable');
      return show(ctx, { kind: 'error', text: 'The identity provider could not be reached. Try again, or sign in with a password.' }, 502);
    }
    const exp = Math.floor(Date.now() / 1000) + OIDC_COOKIE_TTL_S;
    setCookie(ctx, OIDC_COOKIE, sealPending({ ...started.pending, userCode: userCode ? formatUserCode(userCode) : '', exp }), { path: '/device/oidc', maxAge: OIDC_COOKIE_TTL_S });
    redirect(ctx, started.url);
  }

  async function oidcCallback(ctx: Context): Promise<void> {
    if (!oidc) throw new ApiError(404, 'not_found', 'Not found.');
    const pending = openPending(ctx.cookies.get(OIDC_COOKIE));
    setCookie(ctx, OIDC_COOKIE, '', { path: '/device/oidc', maxAge: 0 });
    const fail = (status: number, text: string) =>
      html(ctx, status, resultPage({ title: 'Sign-in failed', notice: { kind: 'error', text }, again: true }));
    if (!pending) return fail(400, 'This sign-in attempt expired or was started in another browser. Start again.');
    // The URL the provider redirected to, as the browser saw it (PUBLIC_URL, not the bind address).
    const callbackUrl = new URL(`${publicUrl}/device/oidc/callback`);
    callbackUrl.search = ctx.querystring ? `?${ctx.querystring}` : '';
    let who;
    try {
      who = await oidc.finish(callbackUrl, pending);
    } catch (err) {
      if (!(err instanceof OidcLoginError)) throw err;
      deps.logger.warn({ err: err.cause ?? err }, 'OIDC sign-in failed');
      return fail(400, err.message);
    }
    let user = await users.findOne({ externalKey: externalKeyOf(who.issuer, who.subject) });
    if (!user) {
      // The first approval through the provider creates the account, from its verified email.
      if (!who.email) return fail(400, 'The identity provider did not share an email address, which a new account needs.');
      if (who.emailVerified === false) return fail(400, 'The identity provider says this email address is not verified.');
      try {
        user = await accounts.findOrCreateExternal(who.issuer, who.subject, who.email, { first: who.firstName, last: who.lastName, username: who.username });
      } catch (err) {
        if (err instanceof ApiError && err.status < 500) {
          const taken = err.fields?.email ? 'An account with this email address already exists. Sign in with its password instead.' : err.fields ? Object.values(err.fields).flat().join(' ') : err.detail;
          return fail(409, taken);
        }
        throw err;
      }
    }
    await startCookieSession(ctx, user, 'device-oidc');
    redirect(ctx, backTo(pending.userCode || null));
  }

  return {
    routes(r: Router) {
      for (const path of ['/device', '/device/']) r.get(path, (ctx) => show(ctx));
      r.get('/device/device.css', (ctx) => {
        ctx.type = 'text/css; charset=utf-8';
        ctx.set('Cache-Control', 'public, max-age=3600');
        ctx.body = CSS;
      });
      r.post('/device/login', login);
      r.post('/device/logout', logout);
      r.post('/device/approve', (ctx) => decide(ctx, 'approve'));
      r.post('/device/deny', (ctx) => decide(ctx, 'deny'));
      r.post('/device/oidc/start', oidcStart);
      r.get('/device/oidc/callback', oidcCallback);
    },
  };
}
