/**
 * The one web sign-in of the service, shared by the dashboard and the /device page:
 * the sign-in page, the local password login, and "continue with <provider>" through the
 * external OpenID provider (services/device/oidc.ts: authorization code + PKCE + state +
 * nonce) when config.oidc is set. After signing in, the browser goes back to the
 * validated return path `next` (a same-origin relative path, else `/`); "Create an account"
 * carries it to the register page (registerHref), which comes back there too.
 *
 * The browser session and CSRF are services/gateway/web-session.ts. The OIDC redirect URI
 * is `$PUBLIC_URL/device/oidc/callback` (the one registered at the provider; its route is
 * mounted by the device context and handled here).
 *
 * One instance per runtime (memoized on `Shared`), so both contexts share the OIDC client.
 */
import type { Context } from 'koa';
import type { Shared } from '../../infra/runtime.js';
import type { UserDoc } from '../../projections/users/index.js';
import { USERS, externalKeyOf } from '../../projections/users/index.js';
import { ApiError } from '../gateway/errors.js';
import { formBody } from '../gateway/http.js';
import {
  cookieOptionsFor,
  clearCookie,
  createCsrf,
  createSealer,
  currentSession,
  endWebSession,
  safeReturnPath,
  seeOther,
  setCookie,
  startWebSession,
  type WebSession,
} from '../gateway/web-session.js';
import { createOidcClient, OidcLoginError, type OidcPending } from '../device/oidc.js';
import { formatUserCode, normalizeUserCode } from '../device/codes.js';
import { codeShown } from '../device/html.js';
import { html, Safe } from '../gateway/html.js';
import { layout, pageCsp } from './html.js';

export const OIDC_CALLBACK_PATH = '/device/oidc/callback';
const OIDC_COOKIE = 'ais_oidc';
const OIDC_COOKIE_PATH = '/device/oidc';
const OIDC_COOKIE_TTL_S = 600;

/** The strict CSP of script-free pages outside the dashboard's shell (the /device page). */
export function strictCsp(extraFormTargets: string[] = []): string {
  return `default-src 'none'; style-src 'self'; img-src 'self'; form-action ${["'self'", ...extraFormTargets].join(' ')}; frame-ancestors 'none'; base-uri 'none'`;
}

export type Flash = { kind: 'ok' | 'error'; text: string | Safe } | null;

export interface SignInRender {
  /** Where to go after signing in (validated again here). */
  next?: string | null;
  login?: string;
  flash?: Flash;
  status?: number;
  /** 'strict': the /device page's CSP (default-src 'none'); else the dashboard's. */
  csp?: 'dashboard' | 'strict';
}

/** `/device?user_code=…` return paths carry a code to show back (RFC 8628 §3.3.1). */
function deviceCodeOf(next: string | null): string | null {
  if (!next) return null;
  const u = new URL(next, 'http://same.invalid');
  if (u.pathname !== '/device' && u.pathname !== '/device/') return null;
  const code = normalizeUserCode(u.searchParams.get('user_code') ?? '');
  return code ? formatUserCode(code) : null;
}

/**
 * The register page, carrying the sign-in's return path: a person who creates an account
 * from a sign-in page (say at `/device?user_code=…`) comes back to where they were going.
 */
function registerHref(next: string | null): string {
  return next ? `/register?next=${encodeURIComponent(next)}` : '/register';
}

function createWebSignIn(shared: Shared) {
  const { platform, accounts } = shared;
  const { config, logger } = platform;
  const cookieOpts = cookieOptionsFor(config.publicUrl);
  const csrf = createCsrf(shared.keys.hmacKey, cookieOpts);
  const pending = createSealer(shared.keys.hmacKey, 'web-oidc-pending');
  const oidc = config.oidc ? createOidcClient(config.oidc, `${config.publicUrl}${OIDC_CALLBACK_PATH}`) : null;
  const users = platform.reads.collection<UserDoc>(USERS);
  const auth = () => shared.auth;

  const session = (ctx: Context): Promise<WebSession | null> => currentSession(ctx, auth);

  /** Form targets beyond 'self' the sign-in page needs (the provider, once discovered). */
  async function formTargets(): Promise<string[]> {
    const origin = oidc ? await oidc.authorizationOrigin() : null;
    return origin ? [origin] : [];
  }


  /** The sign-in page (also shown in place at /device for a person who is not signed in). */
  async function renderSignIn(ctx: Context, o: SignInRender = {}): Promise<void> {
    const next = safeReturnPath(o.next);
    const code = deviceCodeOf(next);
    const token = csrf.token(ctx, null);
    const hidden = html`<input type="hidden" name="csrf" value="${token}">${next ? html`<input type="hidden" name="next" value="${next}">` : ''}`;
    const body: Safe = html`${code
      ? html`<p>Check that this code matches the one shown on your device:</p>
${codeShown(code)}
<p class="note">Not the same code? <a href="/device">Enter a different code</a>. If you did not start this, close this page.</p>`
      : ''}
${oidc
  ? html`<form method="post" action="/login/oidc" class="card oidc">
  ${hidden}
  <button type="submit" class="secondary" id="oidc-continue">Continue with ${oidc.label}</button>
</form>
<p class="divider">or sign in with a password</p>`
  : ''}
<form method="post" action="/login" class="card">
  ${hidden}
  <label for="login">Username or email</label>
  <input id="login" name="login" autocomplete="username" required value="${o.login ?? ''}">
  <label for="password">Password</label>
  <input id="password" name="password" type="password" autocomplete="current-password" required>
  <button type="submit" id="sign-in">Sign in</button>
</form>
<p><a href="${registerHref(next)}">Create an account</a> · <a href="/forgot-password">Forgot your password?</a></p>`;
    const extra = await formTargets();
    ctx.status = o.status ?? 200;
    ctx.set('Content-Security-Policy', o.csp === 'strict' ? strictCsp(extra) : pageCsp(extra));
    ctx.set('Cache-Control', 'no-store');
    ctx.type = 'text/html; charset=utf-8';
    ctx.body = layout(code ? 'Sign in to approve a device' : 'Sign in', body, null, o.flash ?? null, { script: false, path: ctx.path });
  }

  /** The sign-in form's fields; null once the page said why its body could not be read. */
  async function form(ctx: Context, next: string | null): Promise<Record<string, string> | null> {
    const raw = await formBody(ctx);
    if (raw instanceof ApiError) {
      await renderSignIn(ctx, { next, flash: { kind: 'error', text: raw.detail }, status: raw.status });
      return null;
    }
    return Object.fromEntries(Object.entries(raw).map(([k, x]) => [k, typeof x === 'string' ? x : ''])) as Record<string, string>;
  }

  const expired: Flash = { kind: 'error', text: 'Your form expired or did not come from this site. Please try again.' };

  /**
   * POST /login (and the /device/login alias): username or email + password.
   * `fallbackNext` is the return path when the form names none.
   */
  async function passwordLogin(ctx: Context, fallbackNext: string | null = null): Promise<void> {
    const f = await form(ctx, fallbackNext);
    if (!f) return;
    const next = safeReturnPath(f.next) ?? fallbackNext;
    const login = (f.login ?? '').trim();
    if (!csrf.check(ctx, null, f.csrf)) return renderSignIn(ctx, { next, login, flash: expired, status: 403 });
    if (!login || !f.password) return renderSignIn(ctx, { next, login, flash: { kind: 'error', text: 'Enter your username or email and your password.' }, status: 400 });
    let user: UserDoc | null;
    try {
      user = await accounts.checkPassword(login, f.password, ctx.ip);
    } catch (err) {
      if (err instanceof ApiError && err.status === 429) {
        for (const [k, v] of Object.entries(err.headers ?? {})) ctx.set(k, v);
        return renderSignIn(ctx, { next, login, flash: { kind: 'error', text: err.detail }, status: 429 });
      }
      throw err;
    }
    if (!user) return renderSignIn(ctx, { next, login, flash: { kind: 'error', text: 'Wrong username/email or password.' }, status: 400 });
    await startWebSession(ctx, accounts, user, next?.startsWith('/device') ? 'device-page' : 'dashboard', cookieOpts);
    seeOther(ctx, next ?? '/');
  }

  /** POST /login/oidc (and the /device/oidc/start alias): off to the provider. */
  async function oidcStart(ctx: Context, fallbackNext: string | null = null): Promise<void> {
    if (!oidc) throw new ApiError(404, 'not_found', 'Not found.');
    const f = await form(ctx, fallbackNext);
    if (!f) return;
    const next = safeReturnPath(f.next) ?? fallbackNext;
    if (!csrf.check(ctx, await session(ctx), f.csrf)) return renderSignIn(ctx, { next, flash: expired, status: 403 });
    let started: Awaited<ReturnType<typeof oidc.begin>>;
    try {
      started = await oidc.begin();
    } catch (err) {
      logger.warn({ err }, 'OIDC provider unavailable');
      return renderSignIn(ctx, { next, flash: { kind: 'error', text: 'The identity provider could not be reached. Try again, or sign in with a password.' }, status: 502 });
    }
    setCookie(ctx, OIDC_COOKIE, pending.seal({ ...started.pending, next: next ?? '' }, OIDC_COOKIE_TTL_S), cookieOpts, OIDC_COOKIE_TTL_S, OIDC_COOKIE_PATH);
    seeOther(ctx, started.url);
  }

  /** GET /device/oidc/callback: checks state, nonce, PKCE; finds or creates the account. */
  async function oidcCallback(ctx: Context): Promise<void> {
    if (!oidc) throw new ApiError(404, 'not_found', 'Not found.');
    const p = pending.open<OidcPending & { next: string }>(ctx.cookies.get(OIDC_COOKIE));
    clearCookie(ctx, OIDC_COOKIE, cookieOpts, OIDC_COOKIE_PATH);
    const next = safeReturnPath(p?.next);
    const fail = (status: number, text: string) => renderSignIn(ctx, { next, flash: { kind: 'error', text }, status });
    if (!p) return fail(400, 'This sign-in attempt expired or was started in another browser. Start again.');
    // The URL the provider redirected to, as the browser saw it (PUBLIC_URL, not the bind address).
    const callbackUrl = new URL(`${config.publicUrl}${OIDC_CALLBACK_PATH}`);
    callbackUrl.search = ctx.querystring ? `?${ctx.querystring}` : '';
    let who;
    try {
      who = await oidc.finish(callbackUrl, p);
    } catch (err) {
      if (!(err instanceof OidcLoginError)) throw err;
      logger.warn({ err: err.cause ?? err }, 'OIDC sign-in failed');
      return fail(400, err.message);
    }
    let user = await users.findOne({ externalKey: externalKeyOf(who.issuer, who.subject) });
    if (!user) {
      // The first sign-in through the provider creates the account, from its verified email.
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
    await startWebSession(ctx, accounts, user, next?.startsWith('/device') ? 'device-oidc' : 'dashboard-oidc', cookieOpts);
    seeOther(ctx, next ?? '/');
  }

  /**
   * The dashboard's shell (header, menu, stylesheet) around another context's page body, for a
   * signed-in person: the /device page (services/device/page.ts) looks like every other page
   * of theirs. The body brings its own h1 and notice (`shown`: an error one puts "Error: " in
   * the title); no script (that page's CSP allows none).
   */
  function frame(ctx: Context, s: WebSession, username: string, path: string) {
    return (title: string, body: Safe, shown?: { kind: string }): Safe =>
      new Safe(layout(title, html`<div class="device-page">${body}</div>`, { username, csrf: csrf.token(ctx, s) }, null, { script: false, path, heading: false, error: shown?.kind === 'error' }));
  }

  return {
    cookieOpts,
    csrf,
    session,
    frame,
    formTargets,
    renderSignIn,
    passwordLogin,
    oidcStart,
    oidcCallback,
    /** The provider's label ("continue with <label>"), or null when none is configured. */
    oidcLabel: oidc?.label ?? null,
    startSession: (ctx: Context, user: UserDoc, via: string) => startWebSession(ctx, accounts, user, via, cookieOpts),
    endSession: (ctx: Context, s: WebSession | null, reason: string) => endWebSession(ctx, accounts, s, reason, cookieOpts),
  };
}

export type WebSignIn = ReturnType<typeof createWebSignIn>;

const instances = new WeakMap<Shared, WebSignIn>();

/** The runtime's web sign-in (created on first use). */
export function webSignIn(shared: Shared): WebSignIn {
  let w = instances.get(shared);
  if (!w) {
    w = createWebSignIn(shared);
    instances.set(shared, w);
  }
  return w;
}
