/**
 * Dashboard session and CSRF helpers.
 *
 * The session is the cookie `ais_session` holding the refresh token of a cookie-kind
 * session family (accounts.startSession(..., { kind: 'cookie' })); the gateway's
 * Authenticator resolves it to a principal of kind 'session' (infra/runtime.ts findSession).
 *
 * CSRF: every POST form carries a token = HMAC(hmacKey, "dashboard-csrf" | subject), where
 * the subject is the session id once signed in, else a random pre-session value kept in
 * the HttpOnly cookie `ais_presession` (sign-in, register and reset forms: login CSRF).
 * Tokens are compared in constant time.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Context } from 'koa';
import { SESSION_COOKIE, type Authenticator } from '../gateway/auth.js';

export { SESSION_COOKIE };
export const PRESESSION_COOKIE = 'ais_presession';

export interface CookieOptions {
  /** Secure attribute: on when PUBLIC_URL is https. */
  secure: boolean;
}

function serialize(name: string, value: string, o: CookieOptions, maxAgeS: number | null): string {
  const parts = [`${name}=${value}`, 'Path=/', 'HttpOnly', 'SameSite=Lax'];
  if (o.secure) parts.push('Secure');
  if (maxAgeS !== null) parts.push(`Max-Age=${maxAgeS}`);
  if (maxAgeS === 0) parts.push('Expires=Thu, 01 Jan 1970 00:00:00 GMT');
  return parts.join('; ');
}

/** Set-Cookie written by hand: Koa refuses Secure cookies on a plain connection behind a TLS proxy. */
export function setCookie(ctx: Context, name: string, value: string, o: CookieOptions, maxAgeS: number | null = null): void {
  ctx.append('Set-Cookie', serialize(name, value, o, maxAgeS));
}

export function clearCookie(ctx: Context, name: string, o: CookieOptions): void {
  ctx.append('Set-Cookie', serialize(name, '', o, 0));
}

export function setSessionCookie(ctx: Context, refresh: string, expiresAt: string, o: CookieOptions): void {
  const maxAge = Math.max(0, Math.floor((Date.parse(expiresAt) - Date.now()) / 1000));
  setCookie(ctx, SESSION_COOKIE, refresh, o, maxAge);
}

export interface DashboardSession {
  userPk: number;
  sessionId: string;
  /** The raw cookie value (forwarded to the gateway's own API). */
  cookie: string;
}

/** The signed-in dashboard session, or null (any other credential form is ignored here). */
export async function currentSession(ctx: Context, auth: () => Authenticator): Promise<DashboardSession | null> {
  if (ctx.state.dashboardSession !== undefined) return ctx.state.dashboardSession as DashboardSession | null;
  const cookie = ctx.cookies.get(SESSION_COOKIE);
  let found: DashboardSession | null = null;
  if (cookie && !ctx.get('authorization')) {
    const p = await auth().optionalPrincipal(ctx).catch(() => null);
    if (p && p.kind === 'session' && p.sessionId) found = { userPk: p.userPk, sessionId: p.sessionId, cookie };
  }
  ctx.state.dashboardSession = found;
  return found;
}

export function createCsrf(hmacKey: Buffer) {
  const sign = (subject: string) => createHmac('sha256', hmacKey).update(`dashboard-csrf\n${subject}`).digest('base64url');

  /** The CSRF subject of this request; creates the pre-session cookie for anonymous forms. */
  function subject(ctx: Context, session: DashboardSession | null, o: CookieOptions, create: boolean): string | null {
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
    token(ctx: Context, session: DashboardSession | null, o: CookieOptions): string {
      return sign(subject(ctx, session, o, true)!);
    },
    /** Constant-time check of a posted token. */
    check(ctx: Context, session: DashboardSession | null, o: CookieOptions, posted: unknown): boolean {
      const s = subject(ctx, session, o, false);
      if (!s || typeof posted !== 'string') return false;
      const a = Buffer.from(posted);
      const b = Buffer.from(sign(s));
      return a.length === b.length && timingSafeEqual(a, b);
    },
  };
}

export type Csrf = ReturnType<typeof createCsrf>;
