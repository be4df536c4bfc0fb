/**
 * The web dashboard for humans (issue 9): server-rendered pages at `/` outside /api/.
 *
 * Accounts (sign-in, register, sign-out, password change and reset, email verification)
 * call the Accounts service directly. Everything owned by other contexts (identities,
 * keys, mail, SMS, subscription) goes through the gateway's own public API over loopback
 * HTTP, with the session cookie as the credential: the dashboard sees exactly what an API
 * client sees (same validation, plan rules, errors) and depends on no context's internals.
 *
 * Security: the session cookie is HttpOnly, SameSite=Lax, Secure when PUBLIC_URL is https;
 * every POST form carries a CSRF token (session.ts); pages are sent with a strict CSP (no
 * inline script), `no-store`, and never framed. A freshly minted API key is rendered once in
 * the response to the POST that created it and is never put in a cookie or browser storage.
 */
import { readFileSync } from 'node:fs';
import type { Context } from 'koa';
import type Router from '@koa/router';
import type { ContextFactory, Shared } from '../../infra/runtime.js';
import { ApiError } from '../gateway/errors.js';
import { body as readForm } from '../gateway/http.js';
import { validator } from '../gateway/validate.js';
import { isUuid } from '../kernel/ids.js';
import { streamName } from '../../infra/ports/event-store.js';
import { OUTBOX } from '../mail/events.js';
import { normalUsername } from '../accounts/service.js';
import { html, escapeHtml, Safe } from '../gateway/html.js';
import { layout, fieldErrors, describedBy, fmtDate, tableRegion, PAGE_CSP, MAIL_FRAME_CSP } from './html.js';
import { SESSION_COOKIE, resetCurrentSession, safeReturnPath, type WebSession } from '../gateway/web-session.js';
import { webSignIn, type Flash } from './sign-in.js';

export { webSignIn, type WebSignIn } from './sign-in.js';
type DashboardSession = WebSession;

const STATIC: Record<string, { type: string; body: Buffer }> = {
  '/static/dashboard.css': { type: 'text/css; charset=utf-8', body: readFileSync(new URL('./static/dashboard.css', import.meta.url)) },
  '/static/dashboard.js': { type: 'text/javascript; charset=utf-8', body: readFileSync(new URL('./static/dashboard.js', import.meta.url)) },
};

const v = {
  register: validator<{ username: string; email: string; password1: string; password2: string }>('accounts.json#Register'),
  passwordChange: validator<{ new_password1: string; new_password2: string }>('accounts.json#PasswordChange'),
  resetConfirm: validator<{ new_password1: string; new_password2: string; uid: string; token: string }>('accounts.json#PasswordResetConfirm'),
  emailOnly: validator<{ email: string }>('accounts.json#EmailOnly'),
  profile: validator<{ username: string; first_name: string; last_name: string }>('accounts.json#UserPut'),
};

type Errors = Record<string, string[]>;
interface ApiAnswer {
  status: number;
  body: any;
}

const str = (x: unknown): string => (typeof x === 'string' ? x : '');

/**
 * 409s of the identities API about one field of the dashboard's forms (services/identities/
 * service.ts: `nameTaken`, a taken address): the message goes next to that field.
 */
const CONFLICT_FIELDS: [field: string, about: RegExp][] = [
  ['name', /with this name already exists/i],
  ['email_identifier', /email address is already taken/i],
];
/**
 * At the end of the link of an unread thread or conversation: its bold row says nothing to a
 * screen reader. (Last in the link: a pointer aims at the link's first box, its visible text.)
 */
const UNREAD = html`<span class="sr-only"> (unread)</span>`;

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

export const dashboardContext: ContextFactory = (shared: Shared) => {
  const { platform, accounts } = shared;
  const web = webSignIn(shared);
  const csrf = web.csrf;

  // ---------- plumbing ----------

  /** Sends a page; `here` is the page's own path (its menu link is marked current), the request's by default. */
  function send(ctx: Context, title: string, content: Safe, nav: DashboardSession | null, flash: Flash = null, status = 200, here: string = ctx.path): void {
    ctx.status = status;
    ctx.set('Content-Security-Policy', PAGE_CSP);
    ctx.set('Cache-Control', 'no-store');
    ctx.type = 'text/html; charset=utf-8';
    const username = nav ? (ctx.state.dashboardUser?.username as string) ?? '' : '';
    ctx.body = layout(title, content, nav ? { username, csrf: csrf.token(ctx, nav) } : null, flash, { path: here });
  }

  const token = (ctx: Context, s: DashboardSession | null) => csrf.token(ctx, s);
  const hidden = (ctx: Context, s: DashboardSession | null) => html`<input type="hidden" name="csrf" value="${token(ctx, s)}">`;

  function redirect(ctx: Context, to: string): void {
    ctx.status = 303;
    ctx.redirect(to);
  }

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
    if (!s) redirect(ctx, ctx.method === 'GET' && ctx.path !== '/' ? `/login?next=${encodeURIComponent(ctx.originalUrl)}` : '/login');
    return s;
  }

  /** Parsed form + CSRF check; null when refused (403 page already sent). */
  async function form(ctx: Context, s: DashboardSession | null): Promise<Record<string, string> | null> {
    let raw: Record<string, unknown>;
    try {
      raw = await readForm(ctx);
    } catch {
      raw = {};
    }
    if (!csrf.check(ctx, s, raw.csrf)) {
      send(ctx, 'Request refused', html`<p>The form expired or did not come from this site. <a href="/">Go back</a> and try again.</p>`, s, null, 403);
      return null;
    }
    return Object.fromEntries(Object.entries(raw).map(([k, x]) => [k, typeof x === 'string' ? x : ''])) as Record<string, string>;
  }

  /** Calls the gateway's own API over loopback with the session cookie as the credential. */
  async function api(ctx: Context, s: DashboardSession, method: string, path: string, opts: { body?: unknown; identity?: string } = {}): Promise<ApiAnswer> {
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
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = text;
    }
    return { status: res.status, body: parsed };
  }

  /**
   * The field errors of a refused API call, for the form's `fields`: a 400's `{field: [msgs]}`,
   * or a 409 (`{detail}`) about one of them, e.g. an identity name already in use (see
   * CONFLICT_FIELDS). Null when the refusal is about no field (shown as the flash alone).
   */
  const apiErrors = (a: ApiAnswer, fields: string[]): Errors | null => {
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

  function fieldsOf(err: unknown): Errors {
    if (err instanceof ApiError) return err.fields ?? { non_field_errors: [err.detail] };
    throw err;
  }

  // ---------- account pages ----------

  const loginPage = (ctx: Context, login = '', flash: Flash = null, status = 200, next: string | null = null) => web.renderSignIn(ctx, { login, flash, status, next });

  /** `next`: the sign-in's return path (safe), carried through registration (e.g. back to `/device?user_code=…`). */
  function registerPage(ctx: Context, values: Record<string, string> = {}, errors: Errors | null = null, next: string | null = null) {
    send(
      ctx,
      'Create an account',
      html`<form method="post" action="/register" class="card" novalidate>
  ${hidden(ctx, null)}${next ? html`<input type="hidden" name="next" value="${next}">` : ''}
  ${fieldErrors(errors, 'non_field_errors')}
  <label for="username">Username</label>
  <input id="username" name="username" autocomplete="username" required maxlength="150" value="${values.username ?? ''}"${describedBy(errors, 'username')}>
  ${fieldErrors(errors, 'username')}
  <label for="email">Email</label>
  <input id="email" name="email" type="email" autocomplete="email" required value="${values.email ?? ''}"${describedBy(errors, 'email')}>
  ${fieldErrors(errors, 'email')}
  <label for="password1">Password</label>
  <input id="password1" name="password1" type="password" autocomplete="new-password" required${describedBy(errors, 'password1')}>
  ${fieldErrors(errors, 'password1')}
  <label for="password2">Password again</label>
  <input id="password2" name="password2" type="password" autocomplete="new-password" required${describedBy(errors, 'password2')}>
  ${fieldErrors(errors, 'password2')}
  <button type="submit">Create account</button>
</form>`,
      null,
      errors ? { kind: 'error', text: 'Please correct the errors below.' } : null,
      errors ? 400 : 200,
      '/register',
    );
  }

  const signIn = (ctx: Context, user: Awaited<ReturnType<typeof accounts.getUser>>) => web.startSession(ctx, user, 'dashboard');

  // ---------- identities ----------

  async function homePage(ctx: Context, s: DashboardSession, flash: Flash = null, errors: Errors | null = null, values: Record<string, string> = {}, status = errors ? 400 : 200) {
    const [ids, sub] = await Promise.all([api(ctx, s, 'GET', '/api/identities/?limit=200'), api(ctx, s, 'GET', '/api/subscription/')]);
    const list: any[] = Array.isArray(ids.body) ? ids.body : [];
    const user = ctx.state.dashboardUser;
    send(
      ctx,
      'Identities',
      html`${user && !user.emailVerified ? html`<p class="note">Your email address ${user.email} is not verified yet: open the link we mailed you.</p>` : ''}
<section aria-labelledby="sub-h"><h2 id="sub-h">Subscription and usage</h2>${subscription(sub)}</section>
<section aria-labelledby="ids-h">
<h2 id="ids-h">Your identities</h2>
${ids.status !== 200
  ? html`<p class="flash error" role="alert">${errorText(ids)}</p>`
  : list.length === 0
    ? html`<p>No identity yet. Create one below.</p>`
    : tableRegion('Your identities', html`<table>
<thead><tr><th scope="col">Name</th><th scope="col">Email</th><th scope="col">Phone</th><th scope="col">Created</th></tr></thead>
<tbody>${list.map((i) => html`<tr><td><a href="/identities/${str(i.uuid)}">${str(i.name)}</a></td><td>${str(i.inbox)}</td><td>${str(i.phone) || '—'}</td><td>${fmtDate(i.created_dt)}</td></tr>`)}</tbody>
</table>`)}
</section>
<section aria-labelledby="new-h">
<h2 id="new-h">Create an identity</h2>
<form method="post" action="/identities" class="card">
  ${hidden(ctx, s)}
  ${fieldErrors(errors, 'non_field_errors')}
  <label for="name">Name</label>
  <input id="name" name="name" required maxlength="100" value="${values.name ?? ''}"${describedBy(errors, 'name')}>
  ${fieldErrors(errors, 'name')}
  <label for="email_identifier">Email identifier (optional: the part before @${platform.config.mailDomain})</label>
  <input id="email_identifier" name="email_identifier" value="${values.email_identifier ?? ''}"${describedBy(errors, 'email_identifier')}>
  ${fieldErrors(errors, 'email_identifier')}
  <label class="check"><input type="checkbox" name="provision_phone" value="true"${values.provision_phone ? new Safe(' checked') : ''}> Provision a phone number (depends on your plan)</label>
  ${fieldErrors(errors, 'provision_phone')}
  <button type="submit">Create identity</button>
</form>
</section>`,
      s,
      flash,
      status,
      '/',
    );
  }

  /** GET /api/subscription/ (services/billing): plan, status, phones used of the plan's limit, mail limits. */
  function subscription(sub: ApiAnswer): Safe {
    if (sub.status !== 200 || !sub.body || typeof sub.body !== 'object') return html`<p>Subscription details are not available (${errorText(sub)}).</p>`;
    const b = sub.body as Record<string, unknown>;
    const n = (x: unknown) => (typeof x === 'number' ? x : 0);
    const limit = (x: unknown, per: string) => (n(x) > 0 ? `${n(x)} per ${per}` : 'no limit');
    return html`<dl class="kv">
<dt>Plan</dt><dd>${str(b.plan)}</dd>
<dt>Status</dt><dd>${str(b.status)}</dd>
<dt>Phone numbers</dt><dd>${String(n(b.phones_used))} of ${String(n(b.phone_limit))} used <meter min="0" max="${String(Math.max(1, n(b.phone_limit)))}" value="${String(n(b.phones_used))}" aria-label="Phone numbers used">${String(n(b.phones_used))}</meter> · ${String(n(b.phones_available))} available</dd>
<dt>Outgoing email</dt><dd>${limit(b.email_limit_hour, 'hour')}, ${limit(b.email_limit_day, 'day')}, per identity</dd>
</dl>`;
  }

  /** Emails an identity queued in the last hour and day (its outbox stream, newest first; counted up to a cap). */
  async function emailUsage(identityId: string): Promise<{ hour: number; day: number; capped: boolean }> {
    const CAP = 1000;
    const recent = await platform.events.readStream(streamName(OUTBOX, identityId), { direction: 'backwards', maxCount: CAP }).catch(() => []);
    const now = Date.now();
    const ages = recent.map((e) => now - Date.parse(String((e.data as { at?: string }).at ?? '')));
    return { hour: ages.filter((a) => a < 3_600_000).length, day: ages.filter((a) => a < 86_400_000).length, capped: recent.length >= CAP };
  }

  async function identityPage(ctx: Context, s: DashboardSession, id: string, flash: Flash = null, errors: Errors | null = null) {
    const ident = await api(ctx, s, 'GET', `/api/identities/${id}/`);
    if (ident.status !== 200) return send(ctx, 'Identity', html``, s, { kind: 'error', text: errorText(ident) }, ident.status === 404 ? 404 : 400);
    const i = ident.body;
    const [threads, convs, usage] = await Promise.all([
      api(ctx, s, 'GET', '/api/email-inbox/?limit=50', { identity: id }),
      api(ctx, s, 'GET', '/api/sms-inbox/?limit=50', { identity: id }),
      emailUsage(id),
    ]);
    const { emailLimitHour, emailLimitDay } = platform.config;
    const of = (used: number, limit: number) => `${used}${usage.capped ? '+' : ''}${limit > 0 ? ` of ${limit}` : ''}`;
    const threadList: any[] = Array.isArray(threads.body) ? threads.body : [];
    const convList: any[] = Array.isArray(convs.body) ? convs.body : [];
    send(
      ctx,
      `Identity ${str(i.name)}`,
      html`<dl class="kv"><dt>Email</dt><dd>${str(i.inbox)}</dd><dt>Phone</dt><dd>${str(i.phone) || '—'}</dd><dt>Id</dt><dd><code>${str(i.uuid)}</code></dd><dt>Created</dt><dd>${fmtDate(i.created_dt)}</dd>
<dt>Emails sent</dt><dd id="email-usage">${of(usage.hour, emailLimitHour)} in the last hour, ${of(usage.day, emailLimitDay)} in the last day</dd></dl>
<section aria-labelledby="mail-h"><h2 id="mail-h">Email threads</h2>
${threads.status !== 200
  ? html`<p>Mail is not available (${errorText(threads)}).</p>`
  : threadList.length === 0
    ? html`<p>No mail yet.</p>`
    : tableRegion('Email threads', html`<table><thead><tr><th scope="col">Subject</th><th scope="col">From</th><th scope="col">Messages</th><th scope="col">Last</th></tr></thead><tbody>
${threadList.map((t) => html`<tr${t.unread ? new Safe(' class="unread"') : ''}><td><a href="/identities/${id}/mail/${str(t.uuid)}">${str(t.subject) || '(no subject)'}${t.unread ? UNREAD : ''}</a></td><td>${addr({ name: t.from_name, address: t.from_email })}</td><td>${String(t.message_count ?? '')}</td><td>${fmtDate(t.last_message_at)}</td></tr>`)}
</tbody></table>`)}
</section>
<section aria-labelledby="sms-h"><h2 id="sms-h">SMS conversations</h2>
${convs.status !== 200
  ? html`<p>SMS is not available (${errorText(convs)}).</p>`
  : convList.length === 0
    ? html`<p>No SMS yet.</p>`
    : tableRegion('SMS conversations', html`<table><thead><tr><th scope="col">With</th><th scope="col">Last message</th><th scope="col">Messages</th><th scope="col">When</th></tr></thead><tbody>
${convList.map((c) => html`<tr${Number(c.unread_count) > 0 ? new Safe(' class="unread"') : ''}><td><a href="/identities/${id}/sms/${str(c.conversation_id)}">${str(c.peer) || '—'}${Number(c.unread_count) > 0 ? UNREAD : ''}</a></td><td>${str(c.preview)}</td><td>${String(c.message_count ?? '')}</td><td>${fmtDate(c.last_message_at)}</td></tr>`)}
</tbody></table>`)}
</section>
<section aria-labelledby="rename-h"><h2 id="rename-h">Rename</h2>
<form method="post" action="/identities/${id}/rename" class="card">
  ${hidden(ctx, s)}
  ${fieldErrors(errors, 'non_field_errors')}
  <label for="name">New name</label>
  <input id="name" name="name" required maxlength="100" value="${str(i.name)}"${describedBy(errors, 'name')}>
  ${fieldErrors(errors, 'name')}
  <button type="submit">Rename</button>
</form></section>
<section aria-labelledby="delete-h"><h2 id="delete-h">Delete</h2>
<form method="post" action="/identities/${id}/delete" class="card danger">
  ${hidden(ctx, s)}
  <p>Deleting the identity releases its address and phone number and revokes its keys. This cannot be undone.</p>
  <label for="confirm">Type the identity's name (<strong>${str(i.name)}</strong>) to confirm</label>
  <input id="confirm" name="confirm" required autocomplete="off"${describedBy(errors, 'confirm')}>
  ${fieldErrors(errors, 'confirm')}
  <button type="submit" class="danger">Delete identity</button>
</form></section>`,
      s,
      flash,
      errors ? 400 : 200,
    );
  }

  // ---------- keys ----------

  async function keysPage(ctx: Context, s: DashboardSession, minted: { key: string; label: string; kind: string } | null = null, flash: Flash = null, status = 200) {
    const [mgmt, idk, ids] = await Promise.all([
      api(ctx, s, 'GET', '/api/auth/keys/management/?limit=200'),
      api(ctx, s, 'GET', '/api/auth/keys/identity/?limit=200'),
      api(ctx, s, 'GET', '/api/identities/?limit=200'),
    ]);
    const identities: any[] = Array.isArray(ids.body) ? ids.body : [];
    const names = new Map(identities.map((i) => [str(i.uuid), str(i.name)]));
    const table = (answer: ApiAnswer, kind: 'management' | 'identity') => {
      if (answer.status !== 200) return html`<p class="flash error" role="alert">${errorText(answer)}</p>`;
      const rows: any[] = Array.isArray(answer.body) ? answer.body : [];
      if (!rows.length) return html`<p>No ${kind} key.</p>`;
      return tableRegion(kind === 'management' ? 'Management keys' : 'Identity keys', html`<table><thead><tr><th scope="col">Label</th><th scope="col">Key</th>${kind === 'identity' ? html`<th scope="col">Identity</th>` : ''}<th scope="col">Last used</th><th scope="col">Created</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead><tbody>
${rows.map((k) => html`<tr><td>${str(k.label)}</td><td><code>${str(k.masked_key)}</code></td>${kind === 'identity' ? html`<td>${names.get(str(k.identity ?? k.identity_uuid)) ?? str(k.identity ?? k.identity_uuid)}</td>` : ''}<td>${fmtDate(k.last_used_at)}</td><td>${fmtDate(k.created_dt)}</td>
<td><form method="get" action="/keys/${kind}/${str(k.uuid)}/revoke" class="inline"><button type="submit" class="danger" aria-label="Revoke ${kind} key ${str(k.label)}">Revoke</button></form></td></tr>`)}
</tbody></table>`);
    };
    send(
      ctx,
      'API keys',
      html`${minted
  ? html`<section class="minted" aria-labelledby="minted-h"><h2 id="minted-h">Your new ${minted.kind} key “${minted.label}”</h2>
<p class="warning"><strong>Copy it now: it is shown only once.</strong> Only a hash is stored; if you lose it, revoke it and mint another.</p>
<p><label for="new-key">Key</label><input id="new-key" class="secret" readonly value="${minted.key}" autocomplete="off" spellcheck="false">
<button type="button" data-copy="new-key" hidden>Copy</button> <span class="copy-status" role="status" aria-live="polite"></span></p></section>`
  : ''}
<section aria-labelledby="mk-h"><h2 id="mk-h">Management keys</h2>
<p>A management key (<code>svc_mgmt_…</code>) acts for the whole account: it creates identities and mints identity keys.</p>
${table(mgmt, 'management')}
<form method="post" action="/keys/management" class="card">${hidden(ctx, s)}
<label for="mlabel">Label of the new management key</label><input id="mlabel" name="label" required maxlength="100">
<button type="submit">Create management key</button></form></section>
<section aria-labelledby="ik-h"><h2 id="ik-h">Identity keys</h2>
<p>An identity key (<code>svc_id_…</code>) gives an agent access to exactly one identity.</p>
${table(idk, 'identity')}
${identities.length
  ? html`<form method="post" action="/keys/identity" class="card">${hidden(ctx, s)}
<label for="ilabel">Label of the new identity key</label><input id="ilabel" name="label" required maxlength="100">
<label for="identity">Identity</label><select id="identity" name="identity">${identities.map((i) => html`<option value="${str(i.uuid)}">${str(i.name)} (${str(i.inbox)})</option>`)}</select>
<button type="submit">Create identity key</button></form>`
  : html`<p>Create an identity first to mint identity keys.</p>`}</section>`,
      s,
      flash,
      status,
      '/keys',
    );
  }

  /**
   * GET /keys/{kind}/{uuid}/revoke: the confirmation of a revocation (WCAG 3.3.4), no script
   * needed. The list's Revoke button leads here (a GET form: nothing changes yet); this page's
   * Revoke button posts (CSRF) to the same path. A key no longer listed: 404, back to the list.
   */
  async function revokePage(ctx: Context, s: DashboardSession, kind: 'management' | 'identity', id: string) {
    const list = await api(ctx, s, 'GET', `/api/auth/keys/${kind}/?limit=200`);
    const k = Array.isArray(list.body) ? (list.body as any[]).find((x) => str(x?.uuid).toLowerCase() === id) : undefined;
    if (list.status !== 200 || !k) {
      const text = list.status !== 200 ? errorText(list) : 'This key does not exist or was already revoked.';
      return send(ctx, 'Revoke a key', html`<p><a href="/keys">Back to the API keys</a></p>`, s, { kind: 'error', text }, list.status === 200 ? 404 : 400);
    }
    send(
      ctx,
      `Revoke ${kind} key ${str(k.label)}?`,
      html`<form method="post" action="/keys/${kind}/${id}/revoke" class="card danger">${hidden(ctx, s)}
<dl class="kv"><dt>Label</dt><dd>${str(k.label)}</dd><dt>Key</dt><dd><code>${str(k.masked_key)}</code></dd><dt>Last used</dt><dd>${fmtDate(k.last_used_at)}</dd></dl>
<p>Agents using it lose access at once. This cannot be undone.</p>
<p class="actions"><button type="submit" class="danger">Revoke</button> <a href="/keys">Cancel</a></p>
</form>`,
      s,
    );
  }

  // ---------- mail and SMS ----------

  const htmlOf = (m: any): string => str(m.html ?? m.body_html ?? (typeof m.body === 'string' && /<[a-z]/i.test(m.body) ? m.body : ''));

  function messageBody(m: any, identity: string): Safe {
    const text = str(m.text ?? m.body_text ?? m.body ?? m.preview);
    if (htmlOf(m)) {
      // The sender's HTML never runs: a sandboxed frame (no allow-scripts, no allow-same-origin)
      // showing a document of its own, whose CSP loads nothing but lets the mail's own styles
      // apply (a srcdoc frame would inherit this page's `style-src 'self'` and lose them).
      // The frame takes no keyboard focus when the mail has no link, so a long mail could not be
      // scrolled without a mouse: the same document opens on its own too (its CSP sandboxes it there as well).
      const src = `/identities/${identity}/mail-body/${str(m.uuid)}`;
      return html`<iframe class="mail-html" sandbox="" referrerpolicy="no-referrer" title="Message content" src="${src}"></iframe>
<p><a href="${src}">Open this message on its own</a></p>
<details><summary>Plain text</summary><pre class="mail-text">${text}</pre></details>`;
    }
    return html`<pre class="mail-text">${text}</pre>`;
  }

  async function threadPage(ctx: Context, s: DashboardSession, id: string, thread: string) {
    const t = await api(ctx, s, 'GET', `/api/email-inbox/${encodeURIComponent(thread)}/`, { identity: id });
    if (t.status !== 200) return send(ctx, 'Email thread', html`<p><a href="/identities/${id}">Back</a></p>`, s, { kind: 'error', text: errorText(t) }, t.status === 404 ? 404 : 400);
    const messages: any[] = Array.isArray(t.body.messages) ? t.body.messages : [];
    send(
      ctx,
      str(t.body.subject) || '(no subject)',
      html`<p><a href="/identities/${id}">← Back to the identity</a></p>
${messages.map((m) => html`<article class="message card">
<header><h2 class="message-h">${sender(m)}, ${fmtDate(m.received_at ?? m.created_dt ?? m.sent_at)}</h2>
<dl class="kv"><dt>From</dt><dd>${addr({ name: m.from_name, address: m.from })}</dd><dt>To</dt><dd>${addr(m.to)}</dd>${m.cc && (m.cc as unknown[]).length ? html`<dt>Cc</dt><dd>${addr(m.cc)}</dd>` : ''}<dt>Date</dt><dd>${fmtDate(m.received_at ?? m.created_dt ?? m.sent_at)}</dd><dt>Subject</dt><dd>${str(m.subject)}</dd></dl></header>
${messageBody(m, id)}
${Array.isArray(m.attachments) && m.attachments.length ? html`<p>Attachments: ${m.attachments.map((a: any) => html`<span class="tag">${str(a.filename)} (${String(a.size ?? '')} B)</span> `)}</p>` : ''}
</article>`)}`,
      s,
    );
  }

  async function smsPage(ctx: Context, s: DashboardSession, id: string, conv: string) {
    // GET /api/sms-inbox/{conversation_id}/ (services/sms): the conversation with its messages, oldest first.
    const c = await api(ctx, s, 'GET', `/api/sms-inbox/${encodeURIComponent(conv)}/`, { identity: id });
    if (c.status !== 200) return send(ctx, 'SMS conversation', html`<p><a href="/identities/${id}">Back</a></p>`, s, { kind: 'error', text: errorText(c) }, c.status === 404 ? 404 : 400);
    const messages: any[] = Array.isArray(c.body.messages) ? c.body.messages : [];
    send(
      ctx,
      `SMS with ${str(c.body.peer) || 'a number'}`,
      html`<p><a href="/identities/${id}">← Back to the identity</a></p>
<dl class="kv"><dt>With</dt><dd>${str(c.body.peer)}</dd><dt>Our number</dt><dd>${str(c.body.to_number)}</dd><dt>Messages</dt><dd>${String(c.body.message_count ?? messages.length)}</dd></dl>
<ol class="sms" aria-label="Messages, oldest first">${messages.map((m) => html`<li class="${str(m.direction) === 'outbound' ? 'out' : 'in'}"><p class="meta">${str(m.from_number)} → ${str(m.to_number)} · <time datetime="${str(m.created_dt)}">${fmtDate(m.created_dt)}</time></p><p class="sms-body">${str(m.body)}</p>${Array.isArray(m.media_urls) && m.media_urls.length ? html`<p class="meta">${m.media_urls.length} media attachment(s)</p>` : ''}</li>`)}</ol>`,
      s,
    );
  }

  // ---------- routes ----------

  function routes(r: Router): void {
    for (const [p, file] of Object.entries(STATIC)) {
      r.get(p, (ctx) => {
        ctx.type = file.type;
        ctx.set('Cache-Control', 'public, max-age=3600');
        ctx.body = file.body;
      });
    }

    r.get('/', async (ctx) => {
      const s = await requireSession(ctx);
      if (s) await homePage(ctx, s);
    });

    r.get('/login', async (ctx) => {
      const next = safeReturnPath(ctx.query.next);
      if (await session(ctx)) return redirect(ctx, next ?? '/');
      await loginPage(ctx, '', ctx.query.signed_out === '1' ? { kind: 'ok', text: 'You are signed out.' } : null, 200, next);
    });
    // Browsers ask for it on every page: no icon, and no 404 in their consoles.
    r.get('/favicon.ico', (ctx) => {
      ctx.status = 204;
      ctx.set('Cache-Control', 'public, max-age=86400');
    });
    r.post('/login', (ctx) => web.passwordLogin(ctx));
    r.post('/login/oidc', (ctx) => web.oidcStart(ctx));

    // `next`: the return path of the sign-in page that linked here (validated again at each step).
    r.get('/register', async (ctx) => {
      const next = safeReturnPath(ctx.query.next);
      if (await session(ctx)) return redirect(ctx, next ?? '/');
      registerPage(ctx, {}, null, next);
    });
    r.post('/register', async (ctx) => {
      const f = await form(ctx, null);
      if (!f) return;
      const next = safeReturnPath(f.next);
      const values = { username: (f.username ?? '').trim(), email: (f.email ?? '').trim() };
      try {
        const b = v.register({ ...values, username: normalUsername(values.username), password1: f.password1 ?? '', password2: f.password2 ?? '' });
        if (b.password1 !== b.password2) return registerPage(ctx, values, { password2: ["The two password fields didn't match."] }, next);
        const user = await accounts.register({ username: b.username, email: b.email, password: b.password1 });
        await signIn(ctx, user);
      } catch (err) {
        return registerPage(ctx, values, fieldsOf(err), next);
      }
      redirect(ctx, next ?? '/');
    });

    r.post('/logout', async (ctx) => {
      const s = await session(ctx);
      const f = await form(ctx, s);
      if (!f) return;
      await web.endSession(ctx, s, 'logout');
      redirect(ctx, '/login?signed_out=1'); // POST-redirect-GET: a reload does not post again
    });

    /** `errors` are those of the form `of` (the profile or the password form), shown in that form only. */
    const accountPage = (ctx: Context, s: DashboardSession, flash: Flash = null, errors: Errors | null = null, values: Record<string, string> | null = null, of: 'profile' | 'password' = 'profile') => {
      const u = ctx.state.dashboardUser;
      const profileErrors = of === 'profile' ? errors : null;
      const pwErrors = of === 'password' ? errors : null;
      const val = (k: string, fallback: unknown) => (values ? values[k] ?? '' : str(fallback));
      send(
        ctx,
        'Account',
        html`<dl class="kv"><dt>Username</dt><dd>${u.username}</dd><dt>Name</dt><dd>${[u.firstName, u.lastName].filter(Boolean).join(' ') || '—'}</dd><dt>Email</dt><dd>${u.email} ${u.emailVerified ? '(verified)' : '(not verified)'}</dd><dt>Account number</dt><dd>${String(u.pk)}</dd></dl>
${u.emailVerified
  ? ''
  : html`<section aria-labelledby="verify-h"><h2 id="verify-h">Verify your email address</h2>
<form method="post" action="/account/resend-verification" class="card">${hidden(ctx, s)}
<p>We mailed a verification link to <strong>${u.email}</strong>. Not received?</p>
<button type="submit">Resend verification email</button></form></section>`}
<section aria-labelledby="profile-h"><h2 id="profile-h">Profile</h2>
<form method="post" action="/account/profile" class="card" novalidate>${hidden(ctx, s)}
${fieldErrors(profileErrors, 'non_field_errors')}
<label for="username">Username</label><input id="username" name="username" autocomplete="username" required maxlength="150" value="${val('username', u.username)}"${describedBy(profileErrors, 'username')}>
${fieldErrors(profileErrors, 'username')}
<label for="first_name">First name</label><input id="first_name" name="first_name" autocomplete="given-name" maxlength="150" value="${val('first_name', u.firstName)}"${describedBy(profileErrors, 'first_name')}>
${fieldErrors(profileErrors, 'first_name')}
<label for="last_name">Last name</label><input id="last_name" name="last_name" autocomplete="family-name" maxlength="150" value="${val('last_name', u.lastName)}"${describedBy(profileErrors, 'last_name')}>
${fieldErrors(profileErrors, 'last_name')}
<button type="submit">Save profile</button></form></section>
<section aria-labelledby="pw-h"><h2 id="pw-h">Change password</h2>
<form method="post" action="/account/password" class="card">${hidden(ctx, s)}
${fieldErrors(pwErrors, 'non_field_errors')}
<label for="new_password1">New password</label><input id="new_password1" name="new_password1" type="password" autocomplete="new-password" required${describedBy(pwErrors, 'new_password1')}>
${fieldErrors(pwErrors, 'new_password1')}
<label for="new_password2">New password again</label><input id="new_password2" name="new_password2" type="password" autocomplete="new-password" required${describedBy(pwErrors, 'new_password2')}>
${fieldErrors(pwErrors, 'new_password2')}
<p class="note">Changing the password signs out every other session and invalidates refresh tokens.</p>
<button type="submit">Change password</button></form></section>`,
        s,
        flash,
        errors ? 400 : 200,
        '/account',
      );
    };
    const refused: Flash = { kind: 'error', text: 'Please correct the errors below.' };
    r.get('/account', async (ctx) => {
      const s = await requireSession(ctx);
      if (!s) return;
      const q = ctx.query;
      accountPage(ctx, s, q.changed ? { kind: 'ok', text: 'Your password was changed.' } : q.saved ? { kind: 'ok', text: 'Profile saved.' } : q.sent ? { kind: 'ok', text: 'A new verification link is on its way.' } : null);
    });
    r.post('/account/profile', async (ctx) => {
      const s = await requireSession(ctx);
      if (!s) return;
      const f = await form(ctx, s);
      if (!f) return;
      const values = { username: (f.username ?? '').trim(), first_name: (f.first_name ?? '').trim(), last_name: (f.last_name ?? '').trim() };
      try {
        const b = v.profile({ ...values, username: normalUsername(values.username) });
        await accounts.updateProfile(s.userPk, { username: b.username, firstName: b.first_name, lastName: b.last_name });
      } catch (err) {
        return accountPage(ctx, s, refused, fieldsOf(err), values);
      }
      redirect(ctx, '/account?saved=1');
    });
    r.post('/account/resend-verification', async (ctx) => {
      const s = await requireSession(ctx);
      if (!s) return;
      const f = await form(ctx, s);
      if (!f) return;
      // Same rules as POST /api/auth/social/resend-email/ (no-op once verified; throttled per account).
      await accounts.resendVerification(str(ctx.state.dashboardUser.email));
      redirect(ctx, '/account?sent=1');
    });
    r.post('/account/password', async (ctx) => {
      const s = await requireSession(ctx);
      if (!s) return;
      const f = await form(ctx, s);
      if (!f) return;
      try {
        const b = v.passwordChange({ new_password1: f.new_password1 ?? '', new_password2: f.new_password2 ?? '' });
        if (b.new_password1 !== b.new_password2) return accountPage(ctx, s, refused, { new_password2: ["The two password fields didn't match."] }, null, 'password');
        await accounts.setPassword(s.userPk, b.new_password1, 'change');
      } catch (err) {
        return accountPage(ctx, s, refused, fieldsOf(err), null, 'password');
      }
      // The change revoked every session, this one included: start a fresh one.
      const user = await accounts.getUser(s.userPk);
      await signIn(ctx, user);
      resetCurrentSession(ctx);
      redirect(ctx, '/account?changed=1');
    });

    const forgotPage = (ctx: Context, flash: Flash = null, status = 200) =>
      send(
        ctx,
        'Reset your password',
        html`<form method="post" action="/forgot-password" class="card">${hidden(ctx, null)}
<label for="email">Email of your account</label><input id="email" name="email" type="email" autocomplete="email" required>
<button type="submit">Send a reset link</button></form>`,
        null,
        flash,
        status,
      );
    r.get('/forgot-password', async (ctx) => forgotPage(ctx));
    r.post('/forgot-password', async (ctx) => {
      const f = await form(ctx, null);
      if (!f) return;
      try {
        const b = v.emailOnly({ email: (f.email ?? '').trim() });
        await accounts.requestPasswordReset(b.email);
      } catch (err) {
        return forgotPage(ctx, { kind: 'error', text: Object.values(fieldsOf(err)).flat().join(' ') }, 400);
      }
      // Same answer whether or not the address is known (no account enumeration).
      forgotPage(ctx, { kind: 'ok', text: 'If an account uses this address, a reset link is on its way.' });
    });

    /** A reset link that can never work (no token, wrong or expired): say so, and where to get a new one. */
    const deadResetLink = (ctx: Context) =>
      send(
        ctx,
        'This reset link cannot be used',
        html`<p>Reset links work once, for a limited time. <a href="/forgot-password">Ask for a new reset link</a>.</p>`,
        null,
        { kind: 'error', text: 'This reset link is invalid or has expired.' },
        400,
      );
    const resetPage = (ctx: Context, uid: string, tok: string, errors: Errors | null = null) => {
      if (!uid || !tok || errors?.uid || errors?.token) return deadResetLink(ctx);
      send(
        ctx,
        'Choose a new password',
        html`<form method="post" action="/reset-password" class="card">${hidden(ctx, null)}
<input type="hidden" name="uid" value="${uid}"><input type="hidden" name="token" value="${tok}">
${fieldErrors(errors, 'non_field_errors')}
<label for="new_password1">New password</label><input id="new_password1" name="new_password1" type="password" autocomplete="new-password" required${describedBy(errors, 'new_password1')}>
${fieldErrors(errors, 'new_password1')}
<label for="new_password2">New password again</label><input id="new_password2" name="new_password2" type="password" autocomplete="new-password" required${describedBy(errors, 'new_password2')}>
${fieldErrors(errors, 'new_password2')}
<button type="submit">Set password</button></form>`,
        null,
        errors ? { kind: 'error', text: 'Please correct the errors below.' } : null,
        errors ? 400 : 200,
      );
    };
    r.get('/reset-password', async (ctx) => resetPage(ctx, str(ctx.query.uid), str(ctx.query.token)));
    r.post('/reset-password', async (ctx) => {
      const f = await form(ctx, null);
      if (!f) return;
      try {
        const b = v.resetConfirm({ uid: f.uid ?? '', token: f.token ?? '', new_password1: f.new_password1 ?? '', new_password2: f.new_password2 ?? '' });
        if (b.new_password1 !== b.new_password2) return resetPage(ctx, b.uid, b.token, { new_password2: ["The two password fields didn't match."] });
        await accounts.confirmPasswordReset(b.uid, b.token, b.new_password1);
      } catch (err) {
        return resetPage(ctx, f.uid ?? '', f.token ?? '', fieldsOf(err));
      }
      await loginPage(ctx, '', { kind: 'ok', text: 'Your password was reset. Sign in with the new one.' });
    });

    r.get('/verify-email', async (ctx) => {
      const s = await session(ctx);
      try {
        await accounts.verifyEmail(str(ctx.query.key));
      } catch (err) {
        fieldsOf(err);
        return send(ctx, 'Email verification', html`<p>This verification link is invalid or has expired.</p>`, s, { kind: 'error', text: 'Not verified.' }, 400);
      }
      send(ctx, 'Email verification', html`<p><a href="/">Continue</a></p>`, s, { kind: 'ok', text: 'Your email address is verified.' });
    });

    // Identities
    r.post('/identities', async (ctx) => {
      const s = await requireSession(ctx);
      if (!s) return;
      const f = await form(ctx, s);
      if (!f) return;
      const values = { name: (f.name ?? '').trim(), email_identifier: (f.email_identifier ?? '').trim(), provision_phone: f.provision_phone === 'true' ? 'true' : '' };
      const payload: Record<string, unknown> = { name: values.name };
      if (values.email_identifier) payload.email_identifier = values.email_identifier;
      if (values.provision_phone) payload.provision_phone = true;
      const a = await api(ctx, s, 'POST', '/api/identities/', { body: payload });
      if (a.status === 201) return redirect(ctx, `/identities/${str(a.body.uuid)}?created=1`);
      if (a.status === 402) return homePage(ctx, s, { kind: 'error', text: `Your plan does not allow this: ${errorText(a)}` }, null, values);
      // Each error once: next to its field (the flash says so), or, about no field, in the flash alone.
      const errors = apiErrors(a, ['name', 'email_identifier', 'provision_phone']);
      return homePage(ctx, s, { kind: 'error', text: errors ? 'Please correct the errors below.' : errorText(a) }, errors, values, a.status >= 400 && a.status < 500 ? a.status : 400);
    });

    const uuidParam = (ctx: Context): string | null => {
      const id = String(ctx.params.id ?? '').toLowerCase();
      if (isUuid(id)) return id;
      ctx.status = 404;
      return null;
    };

    r.get('/identities/:id', async (ctx) => {
      const s = await requireSession(ctx);
      const id = s && uuidParam(ctx);
      if (!s || !id) return;
      await identityPage(ctx, s, id, ctx.query.created ? { kind: 'ok', text: 'Identity created.' } : ctx.query.renamed ? { kind: 'ok', text: 'Identity renamed.' } : null);
    });
    r.post('/identities/:id/rename', async (ctx) => {
      const s = await requireSession(ctx);
      const id = s && uuidParam(ctx);
      if (!s || !id) return;
      const f = await form(ctx, s);
      if (!f) return;
      const a = await api(ctx, s, 'PUT', `/api/identities/${id}/`, { body: { name: (f.name ?? '').trim() } });
      if (a.status === 200) return redirect(ctx, `/identities/${id}?renamed=1`);
      const errors = apiErrors(a, ['name']);
      await identityPage(ctx, s, id, { kind: 'error', text: errors ? 'The identity was not renamed.' : errorText(a) }, errors);
    });
    r.post('/identities/:id/delete', async (ctx) => {
      const s = await requireSession(ctx);
      const id = s && uuidParam(ctx);
      if (!s || !id) return;
      const f = await form(ctx, s);
      if (!f) return;
      const current = await api(ctx, s, 'GET', `/api/identities/${id}/`);
      if (current.status !== 200) return redirect(ctx, '/');
      if (nameKey(f.confirm ?? '') !== nameKey(str(current.body.name))) {
        return identityPage(ctx, s, id, { kind: 'error', text: 'The identity was not deleted.' }, { confirm: ['Type the name of the identity to confirm.'] });
      }
      const a = await api(ctx, s, 'DELETE', `/api/identities/${id}/`);
      if (a.status !== 204) return identityPage(ctx, s, id, { kind: 'error', text: errorText(a) });
      await homePage(ctx, s, { kind: 'ok', text: html`Identity “${str(current.body.name)}” deleted.` });
    });
    r.get('/identities/:id/mail/:thread', async (ctx) => {
      const s = await requireSession(ctx);
      const id = s && uuidParam(ctx);
      if (!s || !id) return;
      await threadPage(ctx, s, id, String(ctx.params.thread));
    });
    // The HTML of one mail, framed by the thread page and opened on its own from there (see messageBody).
    r.get('/identities/:id/mail-body/:message', async (ctx) => {
      const s = await requireSession(ctx);
      const id = s && uuidParam(ctx);
      if (!s || !id) return;
      const m = await api(ctx, s, 'GET', `/api/email-messages/${encodeURIComponent(String(ctx.params.message))}/`, { identity: id });
      ctx.set('Cache-Control', 'no-store');
      if (m.status !== 200) {
        ctx.status = m.status === 404 ? 404 : 400;
        ctx.type = 'text/plain; charset=utf-8';
        ctx.body = errorText(m);
        return;
      }
      ctx.set('Content-Security-Policy', MAIL_FRAME_CSP);
      ctx.set('X-Frame-Options', 'SAMEORIGIN');
      ctx.type = 'text/html; charset=utf-8';
      ctx.body = `<!doctype html><html><head><meta charset="utf-8"><title>${escapeHtml(str(m.body.subject) || '(no subject)')}</title><base target="_blank"></head><body>${htmlOf(m.body)}</body></html>`;
    });
    r.get('/identities/:id/sms/:conv', async (ctx) => {
      const s = await requireSession(ctx);
      const id = s && uuidParam(ctx);
      if (!s || !id) return;
      await smsPage(ctx, s, id, String(ctx.params.conv));
    });

    // Keys
    r.get('/keys', async (ctx) => {
      const s = await requireSession(ctx);
      if (s) await keysPage(ctx, s, null, ctx.query.revoked ? { kind: 'ok', text: 'Key revoked. It no longer works.' } : null);
    });
    r.post('/keys/:kind', async (ctx) => {
      const s = await requireSession(ctx);
      if (!s) return;
      const kind = String(ctx.params.kind);
      if (kind !== 'management' && kind !== 'identity') return void (ctx.status = 404);
      const f = await form(ctx, s);
      if (!f) return;
      const payload: Record<string, unknown> = { label: (f.label ?? '').trim() };
      if (kind === 'identity') payload.identity_uuid = (f.identity ?? '').trim();
      const a = await api(ctx, s, 'POST', `/api/auth/keys/${kind}/`, { body: payload });
      if (a.status !== 201 || typeof a.body?.key !== 'string') return keysPage(ctx, s, null, { kind: 'error', text: errorText(a) }, a.status >= 400 && a.status < 500 ? a.status : 400);
      await keysPage(ctx, s, { key: a.body.key, label: str(a.body.label), kind }, { kind: 'ok', text: 'Key created.' });
    });
    /** The session, key uuid and kind of a /keys/{kind}/{id}/revoke request; null once answered (sign-in, 404). */
    const keyTarget = async (ctx: Context) => {
      const s = await requireSession(ctx);
      const id = s && uuidParam(ctx);
      if (!s || !id) return null;
      const kind = String(ctx.params.kind);
      if (kind !== 'management' && kind !== 'identity') {
        ctx.status = 404;
        return null;
      }
      return { s, id, kind: kind as 'management' | 'identity' };
    };
    r.get('/keys/:kind/:id/revoke', async (ctx) => {
      const t = await keyTarget(ctx);
      if (t) await revokePage(ctx, t.s, t.kind, t.id);
    });
    r.post('/keys/:kind/:id/revoke', async (ctx) => {
      const t = await keyTarget(ctx);
      if (!t) return;
      const { s, id, kind } = t;
      const f = await form(ctx, s);
      if (!f) return;
      const a = await api(ctx, s, 'DELETE', `/api/auth/keys/${kind}/${id}/`);
      if (a.status !== 204) return keysPage(ctx, s, null, { kind: 'error', text: errorText(a) }, 400);
      redirect(ctx, '/keys?revoked=1');
    });
  }

  return { name: 'dashboard', module: { routes } };
};

/** Who sent a message, for its heading: the sender's name, else the address. */
function sender(m: { from_name?: unknown; from?: unknown }): string {
  return str(m.from_name) || str(m.from) || 'Unknown sender';
}

/**
 * Addresses from the API's shapes: "a@b", a list of them, or {name, address} (a thread's
 * `from_name`/`from_email`, a message's `from_name`/`from`). Name and address are separate
 * values, each isolated (html), so a name cannot reorder the address shown after it.
 */
function addr(x: unknown): Safe {
  if (Array.isArray(x)) {
    const parts = x.map(addr).filter((p) => p.value);
    return html`${parts.map((p, i) => (i ? html`, ${p}` : p))}`;
  }
  if (x && typeof x === 'object') {
    const a = x as { address?: unknown; name?: unknown };
    return str(a.name) ? html`${str(a.name)} &lt;${str(a.address)}&gt;` : html`${str(a.address)}`;
  }
  return html`${str(x)}`;
}

/**
 * Identity names as the API compares them for uniqueness (services/identities/service.ts,
 * nameKeyOf: NFC, lower-cased; the API trims names before it keeps them).
 */
const nameKey = (name: string): string => name.trim().normalize('NFC').toLowerCase();
