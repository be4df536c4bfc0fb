/**
 * The human step of RFC 8628 (§3.3): the server-rendered `/device` page. The person enters
 * (or confirms, from verification_uri_complete) the user code, sees it shown back to compare
 * with the device (§3.3.1), signs in and approves or denies.
 *
 * Signing in is the dashboard's (services/dashboard/sign-in.ts): a person who is not signed
 * in gets the one sign-in form of the service in place, with the code shown back and the
 * return path `/device?user_code=…`; the local password and "continue with <provider>"
 * both come back here. `/device/login`, `/device/oidc/start` and `/device/oidc/callback`
 * (the redirect URI registered at the provider) are routes of that same sign-in.
 *
 * Security:
 * - No script at all; CSP `default-src 'none'` plus our own stylesheets and form targets.
 * - Session and CSRF are the shared web session (services/gateway/web-session.ts): the
 *   `ais_session` cookie (HttpOnly, SameSite=Lax, Secure when PUBLIC_URL is https) and a
 *   CSRF token bound to the session id, or before sign-in to the pre-session cookie.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import { readFileSync } from 'node:fs';
import type { Accounts } from '../accounts/service.js';
import { ApiError } from '../gateway/errors.js';
import { formBody } from '../gateway/http.js';
import type { UserDoc } from '../../projections/users/index.js';
import { strictCsp, type WebSignIn } from '../dashboard/sign-in.js';
import type { Safe } from '../gateway/html.js';
import { seeOther, type WebSession } from '../gateway/web-session.js';
import { formatUserCode, normalizeUserCode } from './codes.js';
import { approvePage, enterCodePage, resultPage, type Frame, type Notice } from './html.js';
import { CODE_MESSAGES, type DeviceService, type AuthorizationView } from './service.js';
import { withoutControls } from '../kernel/text.js';

/** The words of an API error for a person: the field messages or the detail. */
const errorText = (err: ApiError): string => (err.fields ? Object.values(err.fields).flat().join(' ') : err.detail);

const CSS = readFileSync(new URL('./device.css', import.meta.url), 'utf8');

/** Where a decision lands (post/redirect/get): the outcome page of its code. */
const DONE_PATH = '/device/done';

/** What the outcome page says of a decision the person made. */
const DECIDED: Record<'approve' | 'deny', { title: string; notice: Notice }> = {
  approve: { title: 'Device approved', notice: { kind: 'success', text: 'Done. You can close this page and return to your device.' } },
  deny: { title: 'Device denied', notice: { kind: 'success', text: 'The device was denied access. You can close this page.' } },
};

export interface DevicePageDeps {
  service: DeviceService;
  accounts: Accounts;
  web: WebSignIn;
}

export function devicePage(deps: DevicePageDeps) {
  const { service, accounts, web } = deps;

  async function signedIn(ctx: Context): Promise<{ user: UserDoc; session: WebSession } | null> {
    const session = await web.session(ctx);
    if (!session) return null;
    const user = await accounts.findUser(session.userPk);
    return user ? { user, session } : null;
  }

  async function send(ctx: Context, status: number, page: Safe): Promise<void> {
    ctx.status = status;
    ctx.type = 'text/html; charset=utf-8';
    ctx.set('Cache-Control', 'no-store');
    ctx.set('Content-Security-Policy', strictCsp());
    ctx.body = page.value;
  }

  /** A signed-in person sees the page in the dashboard's shell (its menu, a way back); others in this page's own. */
  const frameFor = (ctx: Context, who: { user: UserDoc; session: WebSession } | null): Frame | undefined => (who ? web.frame(ctx, who.session, who.user.username, '/device') : undefined);

  const displayName = (u: UserDoc) => (u.email ? `${u.username} (${u.email})` : u.username);
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  const backTo = (userCode: string | null) => (userCode ? `/device?user_code=${encodeURIComponent(userCode)}` : '/device');
  /** The return path of a form that names a user code. */
  const returnPathOf = (raw: unknown) => {
    const code = normalizeUserCode(str(raw));
    return backTo(code ? formatUserCode(code) : null);
  };

  /** GET /device: enter, confirm, sign in, approve. */
  async function show(ctx: Context, notice?: Notice, status = 200): Promise<void> {
    const who = await signedIn(ctx);
    const csrf = web.csrf.token(ctx, who?.session ?? null);
    const raw = str(ctx.query.user_code).trim();
    const userCode = raw ? normalizeUserCode(raw) : null;
    if (!userCode) {
      const bad: Notice | undefined = raw ? { kind: 'error', text: 'That is not a valid code. Codes are 8 letters, like BCDF-GHJK.' } : undefined;
      return send(ctx, raw ? 400 : status, enterCodePage({ notice: notice ?? bad, value: raw, invalid: Boolean(raw), signedInAs: who ? displayName(who.user) : null, csrf }, frameFor(ctx, who)));
    }
    const shown = formatUserCode(userCode);
    if (!who) {
      return web.renderSignIn(ctx, {
        next: backTo(shown),
        flash: notice ? { kind: notice.kind === 'error' ? 'error' : 'ok', text: notice.text } : null,
        status,
        csp: 'strict',
      });
    }
    // Only a visit the person made (typed, opened from the device's link, or this site's own
    // form) looks the code up: another site may send a signed-in browser here too, and a GET
    // carries no CSRF token. Anything else (a link on another site, an old browser that does
    // not say) is asked to confirm the code first, with a CSRF-checked form.
    if (!isOwnVisit(ctx)) return send(ctx, status, enterCodePage({ notice, value: shown, confirm: true, signedInAs: displayName(who.user), csrf }, frameFor(ctx, who)));
    return choicePage(ctx, who, shown, csrf, notice, status);
  }

  /** A signed-in person's own look at a code: said at once when it cannot be approved, else the choice with what asks. */
  async function choicePage(ctx: Context, who: { user: UserDoc; session: WebSession }, shown: string, csrf: string, notice?: Notice, status = 200): Promise<void> {
    const signedInAs = displayName(who.user);
    const frame = frameFor(ctx, who);
    const found = await lookUp(ctx, who.user.pk, shown);
    if (found && 'answered' in found) return send(ctx, found.answered.status, enterCodePage({ notice: { kind: 'error', text: found.answered.text }, value: shown, invalid: found.answered.status === 404, signedInAs, csrf }, frame));
    if (found) {
      // A code that cannot be approved says so now, not after the click.
      const settled = settledNotice(found.view, who.user.pk);
      if (settled) return send(ctx, settled.status, resultPage({ title: settled.title, notice: settled.notice, userCode: shown, again: settled.notice.kind === 'error' }, frame));
    }
    const request = found ? { clientId: found.view.clientId && withoutControls(found.view.clientId), requestedAt: found.view.requestedAt, expiresAt: found.view.expiresAt, now: Date.now() } : undefined;
    return send(ctx, status, approvePage({ userCode: shown, csrf, signedInAs, notice, request }, frame));
  }

  /** A form's fields; null once the page said why its body could not be read. */
  async function formOf(ctx: Context): Promise<Record<string, unknown> | null> {
    const b = await formBody(ctx);
    if (!(b instanceof ApiError)) return b;
    await show(ctx, { kind: 'error', text: b.detail }, b.status);
    return null;
  }

  /** POST /device/lookup: the confirmation of a code another site's link (or an old browser) brought. */
  async function confirmed(ctx: Context): Promise<void> {
    const b = await formOf(ctx);
    if (!b) return;
    const raw = str(b.user_code);
    ctx.query = { user_code: raw };
    const who = await signedIn(ctx);
    if (!who) return show(ctx, { kind: 'error', text: 'Please sign in first.' }, 401);
    const csrf = web.csrf.token(ctx, who.session);
    if (!web.csrf.check(ctx, who.session, b.csrf)) return send(ctx, 403, enterCodePage({ notice: { kind: 'error', text: 'Your form expired. Please try again.' }, value: raw, confirm: true, signedInAs: displayName(who.user), csrf }, frameFor(ctx, who)));
    const code = normalizeUserCode(raw);
    if (!code) return show(ctx);
    return choicePage(ctx, who, formatUserCode(code), csrf);
  }

  /** Sec-Fetch-Site (all current browsers send it): the person's own visit, not another site's navigation. */
  const isOwnVisit = (ctx: Context) => ['none', 'same-origin'].includes(ctx.get('sec-fetch-site'));

  /**
   * The code's authorization; or the refusal to show (unknown or malformed code); or null when
   * the page's own lookups are spent (then it shows the choice as it did before looking up:
   * the decision is still checked, under its own budget).
   */
  async function lookUp(ctx: Context, userPk: number, userCode: string): Promise<{ view: AuthorizationView } | { answered: { status: number; text: string } } | null> {
    try {
      return { view: await service.inspect({ userPk, userCode, ip: ctx.ip }) };
    } catch (err) {
      if (!(err instanceof ApiError) || err.status >= 500) throw err;
      if (err.status === 429) return null;
      return { answered: { status: err.status, text: errorText(err) } };
    }
  }

  /** The page for a code that is no longer pending, or null while it is. */
  function settledNotice(v: AuthorizationView, userPk: number): { status: number; title: string; notice: Notice } | null {
    const refused = (status: number, text: string) => ({ status, title: 'This code cannot be used', notice: { kind: 'error' as const, text } });
    switch (v.status) {
      case 'pending':
        return null;
      case 'expired':
        return refused(400, CODE_MESSAGES.expired);
      case 'redeemed':
        return refused(409, CODE_MESSAGES.used);
      case 'approved':
      case 'denied':
        return v.userPk === userPk
          ? { status: 200, title: v.status === 'approved' ? 'Device approved' : 'Device denied', notice: { kind: 'success', text: `You already ${v.status} this device. You can close this page.` } }
          : refused(409, CODE_MESSAGES.decided(v.status));
      default:
        return refused(404, CODE_MESSAGES.unknown);
    }
  }

  async function logout(ctx: Context): Promise<void> {
    const b = await formOf(ctx);
    if (!b) return;
    const who = await signedIn(ctx);
    const back = returnPathOf(b.user_code);
    if (who) {
      if (!web.csrf.check(ctx, who.session, b.csrf)) {
        ctx.query = { user_code: str(b.user_code) };
        return show(ctx, { kind: 'error', text: 'Your form expired. Please try again.' }, 403);
      }
    }
    await web.endSession(ctx, who?.session ?? null, 'device_page_logout');
    seeOther(ctx, back);
  }

  async function decide(ctx: Context, action: 'approve' | 'deny'): Promise<void> {
    const b = await formOf(ctx);
    if (!b) return;
    const raw = str(b.user_code);
    ctx.query = { user_code: raw };
    const who = await signedIn(ctx);
    if (!who) return show(ctx, { kind: 'error', text: 'Please sign in first.' }, 401);
    if (!web.csrf.check(ctx, who.session, b.csrf)) return show(ctx, { kind: 'error', text: 'Your form expired. Please try again.' }, 403);
    try {
      const done = await service.decide({ userPk: who.user.pk, userCode: raw, action, via: 'device-page', ip: ctx.ip });
      // Post/redirect/get: reloading the outcome decides nothing again, and it still says
      // "approved" once the device has collected its tokens (a second POST would be refused then).
      return seeOther(ctx, `${DONE_PATH}?${new URLSearchParams({ user_code: done.userCode, decision: action })}`);
    } catch (err) {
      if (!(err instanceof ApiError) || err.status >= 500) throw err;
      for (const [k, v] of Object.entries(err.headers ?? {})) ctx.set(k, v);
      return send(ctx, err.status, resultPage({ title: 'This code cannot be used', notice: { kind: 'error', text: errorText(err) }, again: true }, frameFor(ctx, who)));
    }
  }

  /** This person's decision on a code, as its outcome page says it; null when they made none that stands. */
  function decisionOf(v: AuthorizationView, userPk: number): { title: string; notice: Notice } | null {
    if (v.userPk !== userPk) return null;
    if (v.status === 'approved' || v.status === 'redeemed') return DECIDED.approve; // redeemed: the device has its tokens
    if (v.status === 'denied') return DECIDED.deny;
    return null;
  }

  /**
   * GET /device/done?user_code=…&decision=…: where approve and deny land. It shows the person's
   * decision on that code from the code's state (it decides nothing); anything else (not signed
   * in, another site's link, which looks nothing up as on /device, a code they did not decide,
   * or one that expired) is the code's own page. When the page's own lookups are spent (see
   * lookUp), the decision the redirect names is shown: only this site's pages lead here
   * (isOwnVisit), and the decision itself was checked under its own budget.
   */
  async function outcome(ctx: Context): Promise<void> {
    const code = normalizeUserCode(str(ctx.query.user_code));
    const shown = code ? formatUserCode(code) : null;
    const who = await signedIn(ctx);
    if (!who || !shown || !isOwnVisit(ctx)) return seeOther(ctx, backTo(shown));
    const found = await lookUp(ctx, who.user.pk, shown);
    const named = ctx.query.decision === 'approve' || ctx.query.decision === 'deny' ? DECIDED[ctx.query.decision] : null;
    const decided = found === null ? named : 'view' in found ? decisionOf(found.view, who.user.pk) : null;
    if (!decided) return seeOther(ctx, backTo(shown));
    return send(ctx, 200, resultPage({ ...decided, userCode: shown }, frameFor(ctx, who)));
  }

  /** The sign-in's routes under /device read the return path from the form's user_code. */
  async function withReturnPath(ctx: Context, then: (fallbackNext: string) => Promise<void>): Promise<void> {
    const b = await formOf(ctx); // memoized per request: the sign-in reads the same form
    if (!b) return;
    await then(returnPathOf(b.user_code));
  }

  return {
    routes(r: Router) {
      for (const path of ['/device', '/device/']) r.get(path, (ctx) => show(ctx));
      r.get('/device/device.css', (ctx) => {
        ctx.type = 'text/css; charset=utf-8';
        ctx.set('Cache-Control', 'public, max-age=3600');
        ctx.body = CSS;
      });
      r.post('/device/login', (ctx) => withReturnPath(ctx, (next) => web.passwordLogin(ctx, next)));
      r.post('/device/logout', logout);
      r.post('/device/lookup', confirmed);
      r.post('/device/approve', (ctx) => decide(ctx, 'approve'));
      r.post('/device/deny', (ctx) => decide(ctx, 'deny'));
      r.get(DONE_PATH, outcome);
      r.post('/device/oidc/start', (ctx) => withReturnPath(ctx, (next) => web.oidcStart(ctx, next)));
      r.get('/device/oidc/callback', (ctx) => web.oidcCallback(ctx));
    },
  };
}
