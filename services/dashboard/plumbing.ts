/**
 * What every dashboard page module uses: sending a page, the session, CSRF-checked forms,
 * the loopback API and its errors. `pageKit` closes over the runtime's web sign-in; the
 * rest needs no state. Page modules get the kit from index.ts and never import index.ts
 * (it imports them).
 */
import type { Context } from 'koa';
import type { Shared } from '../../infra/runtime.js';
import { ApiError, OTHER_ACCOUNTS_IDENTITY } from '../gateway/errors.js';
import { formBody } from '../gateway/http.js';
import { isUuid } from '../kernel/ids.js';
import { html, type Safe } from '../gateway/html.js';
import { layout, PAGE_CSP } from './html.js';
import { SESSION_COOKIE, safeReturnPath, seeOther, type WebSession } from '../gateway/web-session.js';
import type { Flash, WebSignIn } from './sign-in.js';

export type { Flash } from './sign-in.js';
export type DashboardSession = WebSession;

export type Errors = Record<string, string[]>;
export interface ApiAnswer {
  status: number;
  body: any;
  /** A list's next page (path and query of its Link rel="next"), or null. */
  next: string | null;
}

export const str = (x: unknown): string => (typeof x === 'string' ? x : '');

/**
 * 409s of the identities API about one field of the dashboard's forms (services/identities/
 * service.ts: `nameTaken`, a taken address): the message goes next to that field.
 */
const CONFLICT_FIELDS: [field: string, about: RegExp][] = [
  ['name', /with this name already exists/i],
  ['email_identifier', /email address is already taken/i],
];

/**
 * A human sentence from an API error body (`{detail}` or `{field: [msgs]}`): the messages
 * only, never the API's field keys (`name: …` means nothing to a person; a form shows a
 * field's message next to that field, see apiErrors).
 */
export function errorText(answer: ApiAnswer): string {
  const b = answer.body;
  if (b && typeof b === 'object' && !Array.isArray(b)) {
    if (typeof b.detail === 'string') return b.detail;
    const parts = Object.values(b).flatMap((msgs) => (Array.isArray(msgs) ? [msgs.join(' ')] : []));
    if (parts.length) return parts.join(' ');
  }
  return `The request failed (HTTP ${answer.status}).`;
}


/** What the API answers about an identity that does not exist (services/identities, gateway/auth.ts). */
export const NO_IDENTITY: ApiAnswer = { status: 404, body: { detail: 'Identity not found.' }, next: null };
/** What the API answers at an address with nothing. */
const NOTHING_THERE: ApiAnswer = { status: 404, body: { detail: 'Not found.' }, next: null };

/**
 * A `.` or `..` segment (escaped or not: encodeURIComponent keeps dots, and URL parsers read
 * `%2E` as one) is resolved away before the request leaves: `/api/email-inbox/./` is the
 * list. A page's id is never one, so such a call finds nothing.
 */
const dotSegment = (path: string) => path.split('?')[0]!.split('/').some((segment) => /^(\.|%2e){1,2}$/i.test(segment));

/**
 * Calls the gateway's own API over loopback with the session cookie as the credential.
 * A session acts for one account only, so to the dashboard an identity of another account
 * (the API's 403) does not exist: it is answered as an unknown one ({@link NO_IDENTITY}), and
 * so is `identity: null`, a page's path naming no identity at all (see uuidParam): the pages do
 * not tell "someone else's", "not an id" and "no such identity" apart.
 */
export async function api(ctx: Context, s: DashboardSession, method: string, path: string, opts: { body?: unknown; identity?: string | null; opens?: boolean } = {}): Promise<ApiAnswer> {
  if (opts.identity === null) return NO_IDENTITY;
  if (dotSegment(path)) return NOTHING_THERE;
  // `opens`: the GET marks what it reads (opening marks read). The page's HEAD asks with a HEAD,
  // which marks nothing (RFC 9110 §9.2.1: a safe method), and gets the same status.
  if (opts.opens && method === 'GET' && ctx.method === 'HEAD') method = 'HEAD';
  const sock = ctx.req.socket;
  let host = (sock.localAddress ?? '127.0.0.1').replace(/^::ffff:/, '');
  if (host.includes(':')) host = `[${host}]`;
  const headers: Record<string, string> = { cookie: `${SESSION_COOKIE}=${s.cookie}`, accept: 'application/json' };
  if (opts.identity) headers['x-service-identity'] = opts.identity;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`http://${host}:${sock.localPort}${path}`, { method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  const text = await res.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : method === 'HEAD' ? {} : null;
  } catch {
    parsed = text;
  }
  if (res.status === 403 && (parsed as { detail?: unknown } | null)?.detail === OTHER_ACCOUNTS_IDENTITY) return NO_IDENTITY;
  const link = /<([^>]+)>;\s*rel="next"/.exec(res.headers.get('link') ?? '');
  const nextUrl = link ? new URL(link[1]) : null;
  return { status: res.status, body: parsed, next: nextUrl ? `${nextUrl.pathname}${nextUrl.search}` : null };
}

/** At most this many items of a list are shown whole (more would make a page nobody can use). */
const WHOLE_LIST_CAP = 5_000;

/**
 * Every item of an API list, page after page (Link rel="next"): the identities and keys pages
 * show whole lists, so nothing an account made is out of the dashboard's reach. Stops at the
 * first refusal (its answer is returned) or at {@link WHOLE_LIST_CAP} items (`capped`).
 */
export async function apiAll(ctx: Context, s: DashboardSession, path: string, opts: { identity?: string } = {}): Promise<ApiAnswer & { capped: boolean }> {
  const items: unknown[] = [];
  for (let next: string | null = path; next; ) {
    const page = await api(ctx, s, 'GET', next, opts);
    if (page.status !== 200 || !Array.isArray(page.body)) return { ...page, capped: false };
    items.push(...page.body);
    if (items.length >= WHOLE_LIST_CAP) return { status: 200, body: items, next: page.next, capped: page.next !== null };
    next = page.next;
  }
  return { status: 200, body: items, next: null, capped: false };
}

/**
 * The field errors of a refused API call, for the form's `fields`: a 400's `{field: [msgs]}`,
 * or a 409 (`{detail}`) about one of them, e.g. an identity name already in use (see
 * CONFLICT_FIELDS). Null when the refusal is about no field (shown as the flash alone).
 */
export const apiErrors = (a: ApiAnswer, fields: string[]): Errors | null => {
  if (!a.body || typeof a.body !== 'object' || Array.isArray(a.body)) return null;
  if (a.status === 400 && !('detail' in a.body)) {
    // A message about anything but the form's fields is the form's own (non_field_errors).
    const out: Errors = {};
    for (const [k, msgs] of Object.entries(a.body as Record<string, unknown>)) {
      if (!Array.isArray(msgs)) continue;
      const key = fields.includes(k) ? k : 'non_field_errors';
      out[key] = [...(out[key] ?? []), ...msgs.map(String)];
    }
    return Object.keys(out).length ? out : null;
  }
  if (a.status === 409 && typeof a.body.detail === 'string') {
    const field = CONFLICT_FIELDS.find(([, about]) => about.test(a.body.detail))?.[0];
    if (field && fields.includes(field)) return { [field]: [a.body.detail] };
  }
  return null;
};

export function fieldsOf(err: unknown): Errors {
  if (err instanceof ApiError) return err.fields ?? { non_field_errors: [err.detail] };
  throw err;
}

/**
 * The `:id` route parameter as a uuid (lower-cased), or null when it is not one: the page then
 * answers as for an id nobody has (its "not found" page), never the API with the raw text.
 */
export const uuidParam = (ctx: Context): string | null => {
  const id = String(ctx.params.id ?? '').toLowerCase();
  return isUuid(id) ? id : null;
};

/** The page a dashboard form is on (`/identities/<uuid>`, `/account`, `/keys`, else `/`): where a form's address leads a browser back to. */
export function formPageOf(path: string): string {
  const identity = /^\/identities\/[0-9a-fA-F-]{36}(?=\/|$)/.exec(path);
  if (identity) return identity[0];
  if (path.startsWith('/account/')) return '/account';
  if (path.startsWith('/keys/')) return '/keys';
  return '/';
}

/** The helpers that need the runtime: its web sign-in (CSRF, session) and accounts. */
export function pageKit(shared: Shared, web: WebSignIn) {
  const { platform, accounts } = shared;
  const csrf = web.csrf;

  /**
   * Sends a page; `here` is the page's own path (its menu link is marked current), the request's
   * by default. `script`: the page has a Copy button (dashboard.js shows it); no other page
   * loads the script.
   */
  function send(ctx: Context, title: string, content: Safe, nav: DashboardSession | null, flash: Flash = null, status = 200, here: string = ctx.path, opts: { script?: boolean } = {}): void {
    ctx.status = status;
    ctx.set('Content-Security-Policy', PAGE_CSP);
    ctx.set('Cache-Control', 'no-store');
    ctx.type = 'text/html; charset=utf-8';
    const username = nav ? (ctx.state.dashboardUser?.username as string) ?? '' : '';
    ctx.body = layout(title, content, nav ? { username, csrf: csrf.token(ctx, nav) } : null, flash, { path: here, script: opts.script === true });
  }

  const token = (ctx: Context, s: DashboardSession | null) => csrf.token(ctx, s);
  const hidden = (ctx: Context, s: DashboardSession | null) => html`<input type="hidden" name="csrf" value="${token(ctx, s)}">`;

  async function session(ctx: Context): Promise<DashboardSession | null> {
    const s = await web.session(ctx);
    if (s && !ctx.state.dashboardUser) {
      const user = await accounts.findUser(s.userPk);
      if (!user) return null;
      ctx.state.dashboardUser = user;
    }
    return s;
  }

  /** The signed-in session, or a redirect to the sign-in page (null: already answered). */
  async function requireSession(ctx: Context): Promise<DashboardSession | null> {
    const s = await session(ctx);
    if (!s) {
      const reading = ctx.method === 'GET' || ctx.method === 'HEAD';
      // A form of a page whose session ended meanwhile: back to that page after signing in, told why.
      if (!reading) seeOther(ctx, `/login?ended=1&next=${encodeURIComponent(formPageOf(ctx.path))}`);
      else seeOther(ctx, ctx.path !== '/' ? `/login?next=${encodeURIComponent(ctx.originalUrl)}` : '/login');
    }
    return s;
  }

  /**
   * The page a refused form goes back to: the Referer's path when it is a page of this site
   * (the pages send none: `Referrer-Policy: no-referrer`), else `page`, the form's own page as
   * its route knows it (from the posted fields, when it takes some), else `/`.
   */
  function backTo(ctx: Context, fields: Record<string, string>, page?: FormPage): string {
    const referer = ctx.get('referer');
    if (referer) {
      try {
        const u = new URL(referer);
        // This site: its public address, or the one the request came to (PUBLIC_URL unset, a local run).
        const own = [new URL(platform.config.publicUrl).origin, `${ctx.protocol}://${ctx.host}`];
        const back = own.includes(u.origin) ? safeReturnPath(`${u.pathname}${u.search}`) : null;
        if (back) return back;
      } catch {
        /* not a URL: no way back from it */
      }
    }
    return safeReturnPath(typeof page === 'function' ? page(fields) : page) ?? '/';
  }

  /**
   * Parsed form + CSRF check; null when refused (an error page already sent: why the body
   * could not be read, or 403; its "Go back" leading to `page`, see backTo).
   */
  async function form(ctx: Context, s: DashboardSession | null, page?: FormPage): Promise<Record<string, string> | null> {
    const raw = await formBody(ctx);
    if (raw instanceof ApiError) {
      send(ctx, 'Request refused', html`<p><a href="${backTo(ctx, {}, page)}">Go back</a> and try again.</p>`, s, { kind: 'error', text: raw.detail }, raw.status);
      return null;
    }
    const fields = Object.fromEntries(Object.entries(raw).map(([k, x]) => [k, typeof x === 'string' ? x : ''])) as Record<string, string>;
    if (!csrf.check(ctx, s, raw.csrf)) {
      send(ctx, 'Request refused', html`<p><a href="${backTo(ctx, fields, page)}">Go back</a> and try again.</p>`, s, { kind: 'error', text: 'The form expired or did not come from this site.' }, 403);
      return null;
    }
    return fields;
  }

  const loginPage = (ctx: Context, login = '', flash: Flash = null, status = 200, next: string | null = null) => web.renderSignIn(ctx, { login, flash, status, next });

  const signIn = (ctx: Context, user: Awaited<ReturnType<typeof accounts.getUser>>) => web.startSession(ctx, user, 'dashboard');

  /** The server key, for the pages' own sealed cookies (web-session.ts createSealer). */
  const hmacKey = shared.keys.hmacKey;

  /** An address with no page (the menu when signed in, a way home). */
  const pageNotFound = (ctx: Context, s: DashboardSession | null) =>
    send(ctx, 'Page not found', html`<p>There is no page at this address.</p><p><a href="/">Go to the dashboard</a></p>`, s, null, 404);

  return { platform, accounts, web, hmacKey, send, hidden, session, requireSession, form, loginPage, signIn, pageNotFound };
}

export type PageKit = ReturnType<typeof pageKit>;

/** A form's own page (where its refusal leads back): a path, or one made from the posted fields. */
export type FormPage = string | ((fields: Record<string, string>) => string);
