/**
 * The browser session shared by every server-rendered page (the dashboard and the /device
 * page): one cookie session, one CSRF scheme, one return-path rule, one sealed-cookie helper.
 *
 * Session: the cookie `ais_session` holds the refresh token of a cookie-kind session family
 * (accounts.startSession(..., { kind: 'cookie' })); the Authenticator resolves it to a
 * principal of kind 'session' (infra/runtime.ts findSession). HttpOnly, SameSite=Lax, Path=/,
 * Secure when PUBLIC_URL is https.
 *
 * CSRF: every POST form carries `csrf` = HMAC(hmacKey, "web-csrf" | subject), where the
 * subject is the session id once signed in, else a random pre-session value kept in the
 * HttpOnly cookie `ais_presession` (sign-in, register and reset forms: no login CSRF). A
 * token minted before sign-in is worthless after it. Compared in constant time.
 */
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import { macOf, sameSecret } from '../kernel/secrets.js';
import type { Context } from 'koa';
import type { Accounts } from '../accounts/service.js';
import { SESSION_COOKIE, type Authenticator } from './auth.js';

export { SESSION_COOKIE };
export const PRESESSION_COOKIE = 'ais_presession';

export interface CookieOptions {
  /** Secure attribute: on when PUBLIC_URL is https. */
  secure: boolean;
}

export const cookieOptionsFor = (publicUrl: string): CookieOptions => ({ secure: publicUrl.startsWith('https:') });

function serialize(name: string, value: string, o: CookieOptions, maxAgeS: number | null, path: string): string {
  const parts = [`${name}=${value}`, `Path=${path}`, 'HttpOnly', 'SameSite=Lax'];
  if (o.secure) parts.push('Secure');
  if (maxAgeS !== null) parts.push(`Max-Age=${Math.max(0, Math.floor(maxAgeS))}`);
  if (maxAgeS === 0) parts.push('Expires=Thu, 01 Jan 1970 00:00:00 GMT');
  return parts.join('; ');
}

/** Set-Cookie written by hand: Koa refuses Secure cookies on a plain connection behind a TLS proxy. */
export function setCookie(ctx: Context, name: string, value: string, o: CookieOptions, maxAgeS: number | null = null, path = '/'): void {
  ctx.append('Set-Cookie', serialize(name, value, o, maxAgeS, path));
}

export function clearCookie(ctx: Context, name: string, o: CookieOptions, path = '/'): void {
  ctx.append('Set-Cookie', serialize(name, '', o, 0, path));
}

export function setSessionCookie(ctx: Context, refresh: string, expiresAt: string, o: CookieOptions): void {
  setCookie(ctx, SESSION_COOKIE, refresh, o, (Date.parse(expiresAt) - Date.now()) / 1000);
}

export interface WebSession {
  userPk: number;
  sessionId: string;
  /** The raw cookie value (forwarded to the gateway's own API). */
  cookie: string;
}

/**
 * The signed-in browser session, or null. Only the session cookie counts here (a request
 * with an Authorization header is an API client, not a browser); a revoked or expired
 * cookie is the same as none. Memoized per request.
 */
export async function currentSession(ctx: Context, auth: () => Authenticator): Promise<WebSession | null> {
  if (ctx.state.webSession !== undefined) return ctx.state.webSession as WebSession | null;
  const cookie = ctx.cookies.get(SESSION_COOKIE);
  let found: WebSession | null = null;
  if (cookie && !ctx.get('authorization')) {
    const p = await auth().credential(ctx).catch(() => null);
    if (p && p.kind === 'session' && p.sessionId) found = { userPk: p.userPk, sessionId: p.sessionId, cookie };
  }
  ctx.state.webSession = found;
  return found;
}

/** Forget the memoized session of this request (after signing in or out). */
export function resetCurrentSession(ctx: Context, to?: WebSession | null): void {
  ctx.state.webSession = to;
}

/**
 * Starts a cookie session for `user` in this browser: the session cookie is set, the
 * pre-session cookie (and with it every pre-sign-in CSRF token) is dropped.
 */
export async function startWebSession(ctx: Context, accounts: Accounts, user: Parameters<Accounts['startSession']>[0], via: string, o: CookieOptions): Promise<void> {
  const started = await accounts.startSession(user, { via, kind: 'cookie' });
  setSessionCookie(ctx, started.refresh, started.refreshExpiresAt, o);
  clearCookie(ctx, PRESESSION_COOKIE, o);
  ctx.state.presession = undefined;
  ctx.state.webSession = undefined;
}

/** Revokes the browser's session server-side and clears its cookie. */
export async function endWebSession(ctx: Context, accounts: Accounts, session: WebSession | null, reason: string, o: CookieOptions): Promise<void> {
  if (session) await accounts.revokeSession(session.sessionId, reason);
  clearCookie(ctx, SESSION_COOKIE, o);
  ctx.state.webSession = null;
}

export function createCsrf(hmacKey: Buffer, o: CookieOptions) {
  const sign = (subject: string) => macOf(hmacKey, 'web-csrf', subject);

  /** The CSRF subject of this request; creates the pre-session cookie for anonymous forms. */
  function subject(ctx: Context, session: WebSession | null, create: boolean): string | null {
    if (session) return `session:${session.sessionId}`;
    let pre = ctx.state.presession as string | undefined;
    pre ??= ctx.cookies.get(PRESESSION_COOKIE);
    if (!pre || !/^[A-Za-z0-9_-]{32,64}$/.test(pre)) {
      if (!create) return null;
      pre = randomBytes(24).toString('base64url');
      setCookie(ctx, PRESESSION_COOKIE, pre, o);
    }
    ctx.state.presession = pre;
    return `pre:${pre}`;
  }

  return {
    /** The token to embed in a form rendered for this request. */
    token(ctx: Context, session: WebSession | null): string {
      return sign(subject(ctx, session, true)!);
    },
    /** Constant-time check of a posted token. */
    check(ctx: Context, session: WebSession | null, posted: unknown): boolean {
      const s = subject(ctx, session, false);
      if (!s || typeof posted !== 'string') return false;
      return sameSecret(posted, sign(s));
    },
  };
}

export type Csrf = ReturnType<typeof createCsrf>;

/**
 * A return path after sign-in, or null when unsafe: only a same-origin relative path
 * ("/x?y"), never a scheme, a host ("//evil", "/\\evil"), a backslash or a control character.
 */
export function safeReturnPath(raw: unknown): string | null {
  if (typeof raw !== 'string' || raw.length === 0 || raw.length > 2048) return null;
  if (!raw.startsWith('/') || raw.startsWith('//')) return null;
  if (/[\\\u0000-\u001f\u007f]/.test(raw)) return null;
  let u: URL;
  try {
    u = new URL(raw, 'http://same.invalid');
  } catch {
    return null;
  }
  if (u.origin !== 'http://same.invalid') return null;
  // Normalisation can make a network-path reference of a harmless-looking one (`/..//evil`
  // → `//evil`): check what is actually returned.
  if (u.pathname.startsWith('//')) return null;
  return `${u.pathname}${u.search}${u.hash}`;
}

/**
 * A value the browser keeps for us but can neither read nor alter: AES-256-GCM under a key
 * derived from the server key and the purpose (a value sealed for one purpose does not open
 * for another), with an expiry inside. Read by the OIDC sign-in (PKCE verifier, state, nonce)
 * and by the keys page (a minted key on its way to the one page that shows it).
 */
export function createSealer(hmacKey: Buffer, purpose: string) {
  const key = createHmac('sha256', hmacKey).update(`sealer\0${purpose}`).digest();
  const aad = Buffer.from(purpose);
  return {
    seal(value: object, ttlS: number): string {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv).setAAD(aad);
      const plain = Buffer.from(JSON.stringify({ ...value, exp: Math.floor(Date.now() / 1000) + ttlS }));
      return Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]).toString('base64url');
    },
    open<T extends object>(sealed: string | undefined): T | null {
      if (!sealed || !/^[A-Za-z0-9_-]+$/.test(sealed)) return null;
      const raw = Buffer.from(sealed, 'base64url');
      if (raw.length < 12 + 16 + 2) return null;
      try {
        const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12)).setAAD(aad);
        decipher.setAuthTag(raw.subarray(raw.length - 16));
        const plain = Buffer.concat([decipher.update(raw.subarray(12, raw.length - 16)), decipher.final()]);
        const v = JSON.parse(plain.toString('utf8'));
        return v && typeof v.exp === 'number' && v.exp * 1000 > Date.now() ? (v as T) : null;
      } catch {
        return null; // altered, sealed for another purpose or under another key
      }
    },
  };
}

/**
 * A page's answer to a form or a sign-in step: 303 See Other (the browser follows with a GET),
 * never stored (it may follow a sign-in or carry a return path).
 */
export function seeOther(ctx: Context, to: string): void {
  ctx.set('Cache-Control', 'no-store');
  ctx.redirect(to);
  ctx.status = 303;
}
