/**
 * Identities: the home page (subscription and usage, identities list, create form) and an
 * identity's page (details, email usage, its mail threads and SMS conversations, rename,
 * delete). The thread and conversation pages are mail.ts and sms.ts.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import { streamName } from '../../infra/ports/event-store.js';
import { OUTBOX } from '../mail/events.js';
import { html, Safe } from '../gateway/html.js';
import { withoutControls } from '../kernel/text.js';
import { fieldErrors, describedBy, fmtDate, tableRegion } from './html.js';
import { addr, NO_SUBJECT } from './mail.js';
import { api, apiAll, apiErrors, errorText, NO_IDENTITY, str, uuidParam, type ApiAnswer, type DashboardSession, type Errors, type Flash, type PageKit } from './plumbing.js';
import { createSealer, seeOther } from '../gateway/web-session.js';
import { maxLengthOf } from '../gateway/validate.js';

/**
 * At the end of the link of an unread thread or conversation: its bold row says nothing to a
 * screen reader. (Last in the link: a pointer aims at the link's first box, its visible text.)
 */
const UNREAD = html`<span class="sr-only"> (unread)</span>`;

/** The longest identity name the API takes (schemas/identities.json, Name): the create and rename fields take as much. */
const NAME_MAX = maxLengthOf('identities.json#Name');

/** How long the home page's "Identity … deleted." shows again on a reload. */
const DELETED_NOTICE_TTL_S = 600;

export function identityRoutes(r: Router, kit: PageKit): void {
  const { platform, send, hidden, requireSession, form } = kit;
  // The deleted identity's name travels sealed, for the session that deleted it: a link
  // written by someone else (`/?deleted=Pay the invoice…`) shows nothing.
  const deletedSealer = createSealer(kit.hmacKey, 'web-deleted-identity');

  async function homePage(ctx: Context, s: DashboardSession, flash: Flash = null, errors: Errors | null = null, values: Record<string, string> = {}, status = errors ? 400 : 200) {
    const [ids, sub] = await Promise.all([apiAll(ctx, s, '/api/identities/?limit=200'), api(ctx, s, 'GET', '/api/subscription/')]);
    const list: any[] = Array.isArray(ids.body) ? ids.body : [];
    const user = ctx.state.dashboardUser;
    const noPhone = noPhoneReason(sub);
    send(
      ctx,
      'Identities',
      html`${user && !user.emailVerified ? html`<p class="note">Your email address ${user.email} is not verified yet: open the link we mailed you.</p>` : ''}
<section aria-labelledby="sub-h"><h2 id="sub-h">Subscription and usage</h2>${subscription(sub)}</section>
<section aria-labelledby="ids-h">
<h2 id="ids-h">Your identities</h2>
${ids.capped ? html`<p class="note">The first ${list.length} identities are shown; the API and the CLI list them all.</p>` : ''}
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
  <input id="name" name="name" required maxlength="${String(NAME_MAX)}" value="${values.name ?? ''}"${describedBy(errors, 'name')}>
  ${fieldErrors(errors, 'name')}
  <label for="email_identifier">Email identifier (optional: the part before @${platform.config.mailDomain})</label>
  <input id="email_identifier" name="email_identifier" value="${values.email_identifier ?? ''}"${describedBy(errors, 'email_identifier')}>
  ${fieldErrors(errors, 'email_identifier')}
  ${noPhone
    ? html`<p class="note" id="phone-note">${noPhone}</p>`
    : html`<label class="check"><input type="checkbox" name="provision_phone" value="true"${values.provision_phone ? new Safe(' checked') : ''}> Provision a phone number</label>
  ${fieldErrors(errors, 'provision_phone')}`}
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
<dt>Phone numbers</dt><dd id="phone-usage">${n(b.phone_limit) > 0
  ? html`${String(n(b.phones_used))} of ${String(n(b.phone_limit))} used <meter min="0" max="${String(n(b.phone_limit))}" value="${String(n(b.phones_used))}" aria-label="Phone numbers used">${String(n(b.phones_used))}</meter> · ${String(n(b.phones_available))} available`
  : // A bar of 0 of 0 says nothing: say the plan has none.
    html`Not included in the ${str(b.plan)} plan${n(b.phones_used) > 0 ? html` (${String(n(b.phones_used))} in use)` : ''}`}</dd>
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

  /**
   * An identity that cannot be shown: unknown, another account's (see `api`) or not even a uuid
   * (the same "not found" page: the dashboard does not tell them apart), or the API's refusal.
   */
  const identityMissing = (ctx: Context, s: DashboardSession, answer: ApiAnswer = NO_IDENTITY) =>
    send(ctx, 'Identity', html``, s, { kind: 'error', text: errorText(answer) }, answer.status === 404 ? 404 : 400);

  /** `values`: what the rename form sent, shown again when it was refused (else the current name). */
  async function identityPage(ctx: Context, s: DashboardSession, id: string, flash: Flash = null, errors: Errors | null = null, values: { name?: string } = {}, status = errors ? 400 : 200) {
    const ident = await api(ctx, s, 'GET', `/api/identities/${id}/`);
    if (ident.status !== 200) return identityMissing(ctx, s, ident);
    const i = ident.body;
    // Threads and conversations come a page at a time (an inbox may hold thousands): each
    // list has its own cursor in the page's query, and a link to the next page and back to the newest.
    const cursors = { threads: str(ctx.query.threads), sms: str(ctx.query.sms) };
    const pageOf = (path: string, cursor: string) => api(ctx, s, 'GET', `${path}?limit=50${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { identity: id });
    const [threads, convs, usage, sub] = await Promise.all([
      pageOf('/api/email-inbox/', cursors.threads),
      pageOf('/api/sms-inbox/', cursors.sms),
      emailUsage(id),
      str(i.phone) ? null : api(ctx, s, 'GET', '/api/subscription/'), // only asked when a number could be offered
    ]);
    const noPhone = sub && noPhoneReason(sub);
    const cursorOf = (a: ApiAnswer) => (a.next ? new URLSearchParams(a.next.split('?')[1] ?? '').get('cursor') : null);
    const pageLink = (list: 'threads' | 'sms', cursor: string | null, text: string) => {
      const query = new URLSearchParams({ ...cursors, [list]: cursor ?? '' });
      for (const [k, v] of [...query]) if (!v) query.delete(k);
      const q = query.toString();
      return html`<a href="/identities/${id}${q ? `?${q}` : ''}">${text}</a>`;
    };
    const pager = (list: 'threads' | 'sms', a: ApiAnswer, older: string) => {
      const next = cursorOf(a);
      if (!next && !cursors[list]) return '';
      return html`<p class="pager">${cursors[list] ? pageLink(list, null, 'Newest') : ''}${cursors[list] && next ? ' · ' : ''}${next ? pageLink(list, next, older) : ''}</p>`;
    };
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
    : tableRegion('Email threads', html`<table><thead><tr><th scope="col">Subject</th><th scope="col">With</th><th scope="col">Messages</th><th scope="col">Last</th></tr></thead><tbody>
${threadList.map((t) => html`<tr${t.unread ? new Safe(' class="unread"') : ''}><td class="subject"><a href="/identities/${id}/mail/${str(t.uuid)}">${str(t.subject) || NO_SUBJECT}${t.unread ? UNREAD : ''}</a></td><td class="with">${threadWith(t, str(i.inbox))}</td><td>${String(t.message_count ?? '')}</td><td class="when">${fmtDate(t.last_message_at)}</td></tr>`)}
</tbody></table>`)}
${pager('threads', threads, 'Older threads')}
</section>
<section aria-labelledby="sms-h"><h2 id="sms-h">SMS conversations</h2>
${convs.status !== 200
  ? html`<p>SMS is not available (${errorText(convs)}).</p>`
  : convList.length === 0
    ? html`<p>No SMS yet.</p>`
    : tableRegion('SMS conversations', html`<table><thead><tr><th scope="col">With</th><th scope="col">Last message</th><th scope="col">Messages</th><th scope="col">When</th></tr></thead><tbody>
${convList.map((c) => html`<tr${Number(c.unread_count) > 0 ? new Safe(' class="unread"') : ''}><td class="with"><a href="/identities/${id}/sms/${str(c.conversation_id)}">${str(c.peer) || '—'}${Number(c.unread_count) > 0 ? UNREAD : ''}</a></td><td>${str(c.preview)}</td><td>${String(c.message_count ?? '')}</td><td>${fmtDate(c.last_message_at)}</td></tr>`)}
</tbody></table>`)}
${pager('sms', convs, 'Older conversations')}
</section>
${str(i.phone)
  ? html`<section aria-labelledby="phone-h"><h2 id="phone-h">Phone number</h2>
<form method="post" action="/identities/${id}/phone/release" class="card danger">
  ${hidden(ctx, s)}
  <p>${str(i.phone)} receives this identity's SMS. Releasing it gives the number back (it may go to someone else) and frees its place in the plan; the SMS received so far stay readable here.</p>
  <label class="check"><input type="checkbox" name="confirm" value="yes" required${describedBy(errors, 'release')}> Release ${str(i.phone)}</label>
  ${fieldErrors(errors, 'release')}
  <button type="submit" class="danger">Release the number</button>
</form></section>`
  : noPhone
    ? html`<section aria-labelledby="phone-h"><h2 id="phone-h">Phone number</h2>
<p class="note" id="phone-note">This identity has no phone number. ${noPhone}</p></section>`
    : html`<section aria-labelledby="phone-h"><h2 id="phone-h">Phone number</h2>
<form method="post" action="/identities/${id}/phone" class="card">
  ${hidden(ctx, s)}
  <p>This identity has no phone number. A number receives SMS.</p>
  <button type="submit">Get a phone number</button>
</form></section>`}
<section aria-labelledby="rename-h"><h2 id="rename-h">Rename</h2>
<form method="post" action="/identities/${id}/rename" class="card">
  ${hidden(ctx, s)}
  ${fieldErrors(errors, 'non_field_errors')}
  <label for="name">New name</label>
  <input id="name" name="name" required maxlength="${String(NAME_MAX)}" value="${values.name ?? str(i.name)}"${describedBy(errors, 'name')}>
  ${fieldErrors(errors, 'name')}
  <button type="submit">Rename</button>
</form></section>
<section aria-labelledby="delete-h"><h2 id="delete-h">Delete</h2>
<form method="post" action="/identities/${id}/delete" class="card danger">
  ${hidden(ctx, s)}
  <p>Deleting the identity revokes its keys and releases its phone number; its mail and SMS can no longer be read here, and its address is retired for good (never given to another identity). This cannot be undone.</p>
  <label for="confirm">Type the identity's name (<strong>${str(i.name)}</strong>) to confirm</label>
  <input id="confirm" name="confirm" required autocomplete="off"${describedBy(errors, 'confirm')}>
  ${fieldErrors(errors, 'confirm')}
  <button type="submit" class="danger">Delete identity</button>
</form></section>`,
      s,
      flash,
      status,
    );
  }

  r.get('/', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    // Where a deletion lands (post/redirect/get): the deleted identity's name.
    const deleted = deletedSealer.open<{ sid?: unknown; name?: unknown }>(str(ctx.query.deleted));
    const name = deleted?.sid === s.sessionId ? str(deleted.name).slice(0, NAME_MAX) : '';
    await homePage(ctx, s, name ? { kind: 'ok', text: html`Identity “${name}” deleted.` } : null);
  });

  r.post('/identities', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    const f = await form(ctx, s, '/');
    if (!f) return;
    const values = { name: (f.name ?? '').trim(), email_identifier: (f.email_identifier ?? '').trim(), provision_phone: f.provision_phone === 'true' ? 'true' : '' };
    const payload: Record<string, unknown> = { name: values.name };
    if (values.email_identifier) payload.email_identifier = values.email_identifier;
    if (values.provision_phone) payload.provision_phone = true;
    const a = await api(ctx, s, 'POST', '/api/identities/', { body: payload });
    if (a.status === 201) return seeOther(ctx, `/identities/${str(a.body.uuid)}?created=1`);
    if (a.status === 402) return homePage(ctx, s, { kind: 'error', text: errorText(a) }, null, values); // the API's detail names the plan needed
    // Each error once: next to its field (the flash says so), or, about no field, in the flash alone.
    const errors = apiErrors(a, ['name', 'email_identifier', 'provision_phone']);
    return homePage(ctx, s, { kind: 'error', text: errors ? 'Please correct the errors below.' : errorText(a) }, errors, values, a.status >= 400 && a.status < 500 ? a.status : 400);
  });

  /** A form posted about one identity: the session, the identity's uuid and the fields (null: answered already). */
  async function identityForm(ctx: Context) {
    const s = await requireSession(ctx);
    if (!s) return null;
    const id = uuidParam(ctx);
    if (!id) {
      identityMissing(ctx, s);
      return null;
    }
    const f = await form(ctx, s, `/identities/${id}`);
    return f ? { s, id, f } : null;
  }

  r.get('/identities/:id', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    const id = uuidParam(ctx);
    if (!id) return identityMissing(ctx, s);
    const done = ctx.query.created ? 'Identity created.' : ctx.query.renamed ? 'Identity renamed.' : ctx.query.phone ? 'Phone number added.' : ctx.query.released ? 'Phone number released.' : null;
    await identityPage(ctx, s, id, done ? { kind: 'ok', text: done } : null);
  });
  r.post('/identities/:id/rename', async (ctx) => {
    const post = await identityForm(ctx);
    if (!post) return;
    const { s, id, f } = post;
    const name = (f.name ?? '').trim();
    const a = await api(ctx, s, 'PUT', `/api/identities/${id}/`, { body: { name } });
    if (a.status === 200) return seeOther(ctx, `/identities/${id}?renamed=1`);
    // The name typed stays in the field (a taken or blank name next to its error), as in the other forms.
    const errors = apiErrors(a, ['name']);
    await identityPage(ctx, s, id, { kind: 'error', text: errors ? 'The identity was not renamed.' : errorText(a) }, errors, { name }, a.status >= 400 && a.status < 500 ? a.status : 400);
  });
  r.post('/identities/:id/phone', async (ctx) => {
    const post = await identityForm(ctx);
    if (!post) return;
    const { s, id } = post;
    const a = await api(ctx, s, 'PATCH', `/api/identities/${id}/`, { body: { provision_phone: true } });
    if (a.status === 200) return seeOther(ctx, `/identities/${id}?phone=1`);
    await identityPage(ctx, s, id, { kind: 'error', text: errorText(a) });
  });
  r.post('/identities/:id/phone/release', async (ctx) => {
    const post = await identityForm(ctx);
    if (!post) return;
    const { s, id, f } = post;
    if (f.confirm !== 'yes') return identityPage(ctx, s, id, { kind: 'error', text: 'The number was not released.' }, { release: ['Tick the box to confirm.'] });
    const a = await api(ctx, s, 'DELETE', `/api/identities/${id}/phone/`);
    // Post/redirect/get; a number released already (another tab) is the same outcome.
    if (a.status === 204 || a.status === 404) return seeOther(ctx, `/identities/${id}?released=1`);
    await identityPage(ctx, s, id, { kind: 'error', text: errorText(a) });
  });
  r.post('/identities/:id/delete', async (ctx) => {
    const post = await identityForm(ctx);
    if (!post) return;
    const { s, id, f } = post;
    const current = await api(ctx, s, 'GET', `/api/identities/${id}/`);
    if (current.status !== 200) return seeOther(ctx, '/');
    if (nameKey(f.confirm ?? '') !== nameKey(str(current.body.name))) {
      const why = (f.confirm ?? '').trim() ? 'The name typed is not this identity\'s name.' : 'Type the name of the identity to confirm.';
      return identityPage(ctx, s, id, { kind: 'error', text: 'The identity was not deleted.' }, { confirm: [why] });
    }
    const a = await api(ctx, s, 'DELETE', `/api/identities/${id}/`);
    if (a.status !== 204) return identityPage(ctx, s, id, { kind: 'error', text: errorText(a) });
    // Post/redirect/get, as create and rename: reloading the home page posts nothing.
    seeOther(ctx, `/?deleted=${deletedSealer.seal({ sid: s.sessionId, name: str(current.body.name) }, DELETED_NOTICE_TTL_S)}`);
  });
}

/**
 * Why no phone number can be had now (the API would answer 402), from GET /api/subscription/
 * (services/billing: `phones_available` is what may still be provisioned); null when one can,
 * or when the subscription is not known (the API decides). The dashboard offers a button only
 * when it can work: plans change only through the admin API, never from here.
 */
function noPhoneReason(sub: ApiAnswer): string | null {
  const b = sub.status === 200 && sub.body && typeof sub.body === 'object' ? (sub.body as Record<string, unknown>) : null;
  if (!b || typeof b.phones_available !== 'number' || b.phones_available > 0) return null;
  const limit = typeof b.phone_limit === 'number' ? b.phone_limit : 0;
  if (limit <= 0) return `Your plan (${str(b.plan)}) includes no phone numbers; plans are changed by the service's operator.`;
  if (str(b.status) !== 'active') return `Your subscription is ${str(b.status)}; phone numbers need an active subscription, which the service's operator sets.`;
  return `All ${limit} phone numbers of your plan (${str(b.plan)}) are in use; deleting an identity releases its number.`;
}

/** At most this many of a thread's other parties are named in its row; the rest are counted. */
const WITH_SHOWN = 3;

/**
 * Who a thread is with: its participants but the identity itself, as the CLI's `inbox list`
 * WITH column (services/cli/commands/mail.ts). The last sender says nothing once the identity
 * answered, and on a thread it started it is always the identity. The last sender's name goes
 * with its address when it is one of them; a thread with nobody else (a mail to itself, or no
 * participants given) shows its last sender.
 */
function threadWith(t: { participants?: unknown; from_email?: unknown; from_name?: unknown }, ownInbox: string): Safe {
  const own = ownInbox.toLowerCase();
  const lastFrom = str(t.from_email).toLowerCase();
  const others = (Array.isArray(t.participants) ? t.participants : []).map(str).filter((a) => a && a.toLowerCase() !== own);
  if (!others.length) return addr({ name: t.from_name, address: t.from_email });
  const shown = others.slice(0, WITH_SHOWN).map((a) => (a.toLowerCase() === lastFrom ? { name: t.from_name, address: a } : a));
  const more = others.length - shown.length;
  return html`${addr(shown)}${more > 0 ? ` and ${more} more` : ''}`;
}

/**
 * Identity names as the API compares them for uniqueness (services/identities/service.ts,
 * nameKeyOf: NFC, lower-cased; the API trims names before it keeps them), as a person can
 * type them to confirm: invisible characters (a bidi override, a zero-width space) left out.
 */
const nameKey = (name: string): string => withoutControls(name).trim().normalize('NFC').toLowerCase();
