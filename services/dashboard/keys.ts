/**
 * API keys: GET /keys (management and identity keys, listed masked; a new key shown once),
 * minting, and revocation behind a confirmation page.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import { html } from '../gateway/html.js';
import { describedBy, fieldErrors, fmtDate, tableRegion } from './html.js';
import { api, apiAll, apiErrors, errorText, str, uuidParam, type ApiAnswer, type DashboardSession, type Errors, type Flash, type PageKit } from './plumbing.js';
import { clearCookie, createSealer, seeOther, setCookie } from '../gateway/web-session.js';
import { maxLengthOf } from '../gateway/validate.js';

/** The sealed cookie carrying minted keys from their POST to the page that shows them once. */
const MINTED_COOKIE = 'ais_minted';
const MINTED_TTL_S = 120;
/** Keys minted before the page showed the last ones (a double submit): the newest are kept. */
const MINTED_KEPT = 5;
/** Bytes of the sealed value: under browsers' 4096 per cookie with its name and attributes. */
const MINTED_COOKIE_MAX = 3800;
interface Minted {
  key: string;
  label: string;
  kind: string;
}
interface MintedCookie {
  /** The session that minted them: another session's browser never sees them. */
  sid: string;
  keys: Minted[];
}

type KeyKind = 'management' | 'identity';
/** The longest label the API takes (schemas/keys.json, Label). */
const LABEL_MAX = maxLengthOf('keys.json#Label');
/** The id of each form's label field (both are named `label`): its errors are keyed by it. */
const LABEL_ID: Record<KeyKind, string> = { management: 'mlabel', identity: 'ilabel' };

/** A mint form the API refused: which one, what it sent (shown again), its field errors. */
interface SentForm {
  kind: KeyKind;
  label: string;
  identity: string;
  errors: Errors | null;
}

export function keyRoutes(r: Router, kit: PageKit): void {
  const { send, hidden, requireSession, form, web } = kit;
  const cookieOpts = web.cookieOpts;
  const mintedSealer = createSealer(kit.hmacKey, 'web-minted-key');

  /** The keys this session minted and no page showed yet (newest first). */
  function mintedOf(ctx: Context, s: DashboardSession): Minted[] {
    const m = mintedSealer.open<MintedCookie>(ctx.cookies.get(MINTED_COOKIE));
    return m && m.sid === s.sessionId && Array.isArray(m.keys) ? m.keys : [];
  }

  /** Those keys, once: the cookie is cleared as it is read. */
  function takeMinted(ctx: Context, s: DashboardSession): Minted[] {
    if (ctx.cookies.get(MINTED_COOKIE) === undefined) return [];
    const keys = mintedOf(ctx, s);
    clearCookie(ctx, MINTED_COOKIE, cookieOpts, '/keys');
    return keys;
  }

  /** `sent`: a refused mint form, shown with what was typed and its errors (the other form is blank). */
  async function keysPage(ctx: Context, s: DashboardSession, minted: Minted[] = [], flash: Flash = null, status = 200, sent: SentForm | null = null) {
    const [mgmt, idk, ids] = await Promise.all([
      apiAll(ctx, s, '/api/auth/keys/management/?limit=200'),
      apiAll(ctx, s, '/api/auth/keys/identity/?limit=200'),
      apiAll(ctx, s, '/api/identities/?limit=200'),
    ]);
    const identities: any[] = Array.isArray(ids.body) ? ids.body : [];
    const names = new Map(identities.map((i) => [str(i.uuid), str(i.name)]));
    const of = (kind: KeyKind) => (sent?.kind === kind ? sent : null);
    const errs = (kind: KeyKind) => of(kind)?.errors ?? null;
    const chosen = of('identity')?.identity;
    const table = (answer: ApiAnswer & { capped: boolean }, kind: KeyKind) => {
      if (answer.status !== 200) return html`<p class="flash error" role="alert">${errorText(answer)}</p>`;
      const rows: any[] = Array.isArray(answer.body) ? answer.body : [];
      if (!rows.length) return html`<p>No ${kind} key.</p>`;
      return html`${answer.capped ? html`<p class="note">The first ${rows.length} ${kind} keys are shown; the API and the CLI list them all.</p>` : ''}${tableRegion(kind === 'management' ? 'Management keys' : 'Identity keys', html`<table><thead><tr><th scope="col">Label</th><th scope="col">Key</th>${kind === 'identity' ? html`<th scope="col">Identity</th>` : ''}<th scope="col">Last used</th><th scope="col">Created</th><th scope="col" class="actions"><span class="sr-only">Actions</span></th></tr></thead><tbody>
${rows.map((k) => html`<tr><td>${str(k.label)}</td><td><code>${str(k.masked_key)}</code></td>${kind === 'identity' ? html`<td>${names.get(str(k.identity ?? k.identity_uuid)) ?? str(k.identity ?? k.identity_uuid)}</td>` : ''}<td>${fmtDate(k.last_used_at)}</td><td>${fmtDate(k.created_dt)}</td>
<td class="actions"><form method="get" action="/keys/${kind}/${str(k.uuid)}/revoke" class="inline"><button type="submit" class="danger" aria-label="Revoke ${kind} key ${str(k.label)} (${str(k.masked_key)})">Revoke</button></form></td></tr>`)}
</tbody></table>`)}`;
    };
    send(
      ctx,
      'API keys',
      html`${minted.map((m, i) => {
  const id = i === 0 ? 'new-key' : `new-key-${i + 1}`;
  return html`<section class="minted" aria-labelledby="${id}-h"><h2 id="${id}-h">Your new ${m.kind} key “${m.label}”</h2>
<p class="warning"><strong>Copy it now: it is shown only once.</strong> Only a hash is stored; if you lose it, revoke it and mint another.</p>
<p><label for="${id}">Key</label><input id="${id}" class="secret" readonly value="${m.key}" autocomplete="off" spellcheck="false">
<button type="button" data-copy="${id}" hidden>Copy</button> <span class="copy-status" role="status" aria-live="polite"></span></p></section>`;
})}
<section aria-labelledby="mk-h"><h2 id="mk-h">Management keys</h2>
<p>A management key (<code>svc_mgmt_…</code>) acts for the whole account: it creates identities and mints identity keys.</p>
${table(mgmt, 'management')}
<form method="post" action="/keys/management" class="card">${hidden(ctx, s)}
${fieldErrors(errs('management'), 'non_field_errors')}
<label for="mlabel">Label of the new management key</label><input id="mlabel" name="label" required maxlength="${String(LABEL_MAX)}" value="${of('management')?.label ?? ''}"${describedBy(errs('management'), 'mlabel')}>
${fieldErrors(errs('management'), 'mlabel')}
<button type="submit">Create management key</button></form></section>
<section aria-labelledby="ik-h"><h2 id="ik-h">Identity keys</h2>
<p>An identity key (<code>svc_id_…</code>) gives an agent access to exactly one identity.</p>
${table(idk, 'identity')}
${identities.length
  ? html`<form method="post" action="/keys/identity" class="card">${hidden(ctx, s)}
${fieldErrors(errs('identity'), 'non_field_errors')}
<label for="ilabel">Label of the new identity key</label><input id="ilabel" name="label" required maxlength="${String(LABEL_MAX)}" value="${of('identity')?.label ?? ''}"${describedBy(errs('identity'), 'ilabel')}>
${fieldErrors(errs('identity'), 'ilabel')}
<label for="identity">Identity</label><select id="identity" name="identity"${describedBy(errs('identity'), 'identity')}>${identities.map((i) => html`<option value="${str(i.uuid)}"${str(i.uuid) === chosen ? html` selected` : ''}>${str(i.name)} (${str(i.inbox)})</option>`)}</select>
${fieldErrors(errs('identity'), 'identity')}
<button type="submit">Create identity key</button></form>`
  : html`<p>Create an identity first to mint identity keys.</p>`}</section>`,
      s,
      flash,
      status,
      '/keys',
      { script: minted.length > 0 }, // the Copy buttons
    );
  }

  /**
   * GET /keys/{kind}/{uuid}/revoke: the confirmation of a revocation (WCAG 3.3.4), no script
   * needed. The list's Revoke button leads here (a GET form: nothing changes yet); this page's
   * Revoke button posts (CSRF) to the same path. A key no longer listed: 404, back to the list.
   */
  async function revokePage(ctx: Context, s: DashboardSession, kind: KeyKind, id: string) {
    const list = await apiAll(ctx, s, `/api/auth/keys/${kind}/?limit=200`);
    const k = Array.isArray(list.body) ? (list.body as any[]).find((x) => str(x?.uuid).toLowerCase() === id) : undefined;
    if (list.status !== 200) return send(ctx, 'Revoke a key', html`<p><a href="/keys">Back to the API keys</a></p>`, s, { kind: 'error', text: errorText(list) }, 400);
    if (!k) return keyMissing(ctx, s);
    send(
      ctx,
      `Revoke ${kind} key ${str(k.label)}?`,
      html`<form method="post" action="/keys/${kind}/${id}/revoke" class="card danger">${hidden(ctx, s)}
<dl class="kv"><dt>Label</dt><dd>${str(k.label)}</dd><dt>Key</dt><dd><code>${str(k.masked_key)}</code></dd><dt>Last used</dt><dd>${fmtDate(k.last_used_at)}</dd></dl>
<p>Requests with this key fail at once, and an agent that got it by signing in through the device flow is signed out (a token it already holds works until it expires, within the hour). This cannot be undone.</p>
<p class="actions"><button type="submit" class="danger">Revoke</button> <a href="/keys">Cancel</a></p>
</form>`,
      s,
    );
  }

  /** A key that is not listed (revoked, another account's, never was, or a path that names none): 404, back to the list. */
  const keyMissing = (ctx: Context, s: DashboardSession) =>
    send(ctx, 'Revoke a key', html`<p><a href="/keys">Back to the API keys</a></p>`, s, { kind: 'error', text: 'This key does not exist or was already revoked.' }, 404);

  r.get('/keys', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    const minted = takeMinted(ctx, s);
    if (minted.length) return keysPage(ctx, s, minted, { kind: 'ok', text: minted.length === 1 ? 'Key created.' : `${minted.length} keys created.` });
    await keysPage(ctx, s, [], ctx.query.revoked ? { kind: 'ok', text: 'Key revoked. It no longer works.' } : null);
  });
  r.post('/keys/:kind', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    const kind = String(ctx.params.kind);
    if (kind !== 'management' && kind !== 'identity') return kit.pageNotFound(ctx, s); // a browser's form, not the API: a page
    const f = await form(ctx, s, '/keys');
    if (!f) return;
    const sent = { label: (f.label ?? '').trim(), identity: (f.identity ?? '').trim() };
    const payload: Record<string, unknown> = { label: sent.label };
    if (kind === 'identity') payload.identity_uuid = sent.identity;
    const a = await api(ctx, s, 'POST', `/api/auth/keys/${kind}/`, { body: payload });
    if (a.status !== 201 || typeof a.body?.key !== 'string') {
      // The form comes back as it was sent: each error next to its field (the flash says so), or, about no field, in the flash alone.
      const found = apiErrors(a, ['label', 'identity_uuid']);
      const errors = found && Object.fromEntries(Object.entries(found).map(([k, v]) => [k === 'label' ? LABEL_ID[kind] : k === 'identity_uuid' ? 'identity' : k, v]));
      const flash: Flash = { kind: 'error', text: errors ? 'Please correct the errors below.' : errorText(a) };
      return keysPage(ctx, s, [], flash, a.status >= 400 && a.status < 500 ? a.status : 400, { kind, ...sent, errors });
    }
    // Post/redirect/get: the key travels sealed to the one GET that shows it, so reloading that
    // page mints nothing (it re-posted the form before) and shows the list without the key.
    // A key minted before the page showed the previous one (a double submit) joins it.
    const keys = [{ key: a.body.key, label: str(a.body.label), kind }, ...mintedOf(ctx, s)].slice(0, MINTED_KEPT);
    // Browsers drop a cookie over 4 KB: the oldest keys give way until it fits (the newest always does).
    let sealed = mintedSealer.seal({ sid: s.sessionId, keys } satisfies MintedCookie, MINTED_TTL_S);
    while (sealed.length > MINTED_COOKIE_MAX && keys.length > 1) {
      keys.pop();
      sealed = mintedSealer.seal({ sid: s.sessionId, keys } satisfies MintedCookie, MINTED_TTL_S);
    }
    setCookie(ctx, MINTED_COOKIE, sealed, cookieOpts, MINTED_TTL_S, '/keys');
    seeOther(ctx, '/keys');
  });
  /**
   * The session, key uuid and kind of a /keys/{kind}/{id}/revoke request; null once answered
   * (sign-in; a path naming no key: the page of a key that does not exist).
   */
  const keyTarget = async (ctx: Context) => {
    const s = await requireSession(ctx);
    if (!s) return null;
    const id = uuidParam(ctx);
    const kind = String(ctx.params.kind);
    if (!id || (kind !== 'management' && kind !== 'identity')) {
      keyMissing(ctx, s);
      return null;
    }
    return { s, id, kind: kind as KeyKind };
  };
  r.get('/keys/:kind/:id/revoke', async (ctx) => {
    // The list's Revoke button is a GET form without fields: the browser ends the address with a bare "?"; it goes.
    if (ctx.querystring === '' && ctx.originalUrl.endsWith('?')) return seeOther(ctx, ctx.path);
    const t = await keyTarget(ctx);
    if (t) await revokePage(ctx, t.s, t.kind, t.id);
  });
  r.post('/keys/:kind/:id/revoke', async (ctx) => {
    const t = await keyTarget(ctx);
    if (!t) return;
    const { s, id, kind } = t;
    const f = await form(ctx, s, `/keys/${kind}/${id}/revoke`);
    if (!f) return;
    const a = await api(ctx, s, 'DELETE', `/api/auth/keys/${kind}/${id}/`);
    if (a.status === 404) return keyMissing(ctx, s); // as its confirmation page says (revoked meanwhile, or none of this account's)
    if (a.status !== 204) return keysPage(ctx, s, [], { kind: 'error', text: errorText(a) }, 400);
    seeOther(ctx, '/keys?revoked=1');
  });
}
