/**
 * Mail: an email thread page and the document that shows one mail's HTML in the thread's
 * sandboxed frame (GET /identities/{id}/mail-body/{message}).
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import { html, Safe } from '../gateway/html.js';
import { fmtDate, MAIL_FRAME_CSP } from './html.js';
import { api, errorText, str, uuidParam, type DashboardSession, type PageKit } from './plumbing.js';

/** The most messages a thread's page shows (its newest). */
const THREAD_PAGE_MESSAGES = 200;

/** In place of an empty subject (thread list, a message's Subject row): not a subject, so set apart. */
export const NO_SUBJECT = html`<em>(no subject)</em>`;

export function mailRoutes(r: Router, kit: PageKit): void {
  const { send, requireSession } = kit;

  const htmlOf = (m: any): string => str(m.html ?? m.body_html ?? (typeof m.body === 'string' && /<[a-z]/i.test(m.body) ? m.body : ''));

  function messageBody(m: any, identity: string): Safe {
    const text = str(m.text ?? m.body_text ?? m.body ?? m.preview);
    if (htmlOf(m)) {
      // The sender's HTML never runs: a sandboxed frame (no allow-scripts, no allow-same-origin)
      // showing a document of its own, whose CSP loads nothing but lets the mail's own styles
      // apply (a srcdoc frame would inherit this page's `style-src 'self'` and lose them). Its
      // links open in a new tab of their own (allow-popups, escaping the sandbox: a page the
      // reader chose to visit), without a Referer naming this page.
      // The frame takes no keyboard focus when the mail has no link, so a long mail could not be
      // scrolled without a mouse: the same document opens on its own too (its CSP sandboxes it there as well).
      const src = `/identities/${identity}/mail-body/${str(m.uuid)}`;
      // Its height is a guess (frameSize): the box around it can be dragged taller (CSS resize).
      return html`<div class="mail-frame ${frameSize(htmlOf(m))}"><iframe class="mail-html" sandbox="allow-popups allow-popups-to-escape-sandbox" referrerpolicy="no-referrer" title="Message content" src="${src}"></iframe></div>
<p><a href="${src}">Open this message on its own</a></p>
<details><summary>Plain text</summary><pre class="mail-text">${text}</pre></details>`;
    }
    return html`<pre class="mail-text">${text}</pre>`;
  }

  /** How far a sent message got: queued (and why it waits), sent (and to whom not: refused or bounced), failed (why). */
  function delivery(m: any): string {
    const rejected = Array.isArray(m.rejected) ? (m.rejected as unknown[]).map(str).filter(Boolean) : [];
    if (m.status === 'queued') return m.error ? `Waiting to be sent (the last attempt: ${str(m.error)})` : 'Waiting to be sent';
    if (m.status === 'failed') return `Not delivered: ${str(m.error) || 'refused'}`;
    return rejected.length ? `Sent; not delivered to ${rejected.join(', ')}` : 'Sent';
  }

  /** `id`: the identity's uuid; null when the path's is none (answered as an unknown identity). */
  async function threadPage(ctx: Context, s: DashboardSession, id: string | null, thread: string) {
    const t = await api(ctx, s, 'GET', `/api/email-inbox/${encodeURIComponent(thread)}/`, { identity: id, opens: true });
    if (!id || t.status !== 200) return send(ctx, 'Email thread', html`<p><a href="${id ? `/identities/${id}` : '/'}">Back</a></p>`, s, { kind: 'error', text: errorText(t) }, t.status === 404 ? 404 : 400);
    const all: any[] = Array.isArray(t.body.messages) ? t.body.messages : [];
    const messages = all.slice(-THREAD_PAGE_MESSAGES); // the newest: a page of thousands of mails helps nobody
    const count = typeof t.body.message_count === 'number' ? t.body.message_count : all.length;
    send(
      ctx,
      str(t.body.subject) || '(no subject)',
      html`<p><a href="/identities/${id}">← Back to the identity</a></p>
${count > messages.length ? html`<p class="note">The newest ${messages.length} of ${count} messages are shown; the API and the CLI list them all.</p>` : ''}
${messages.map((m) => html`<article class="message card">
<header><h2 class="message-h">${sender(m)}, ${fmtDate(m.received_at ?? m.created_dt ?? m.sent_at)}</h2>
<dl class="kv"><dt>From</dt><dd>${addr({ name: m.from_name, address: m.from })}</dd><dt>To</dt><dd>${addr(m.to)}</dd>${m.cc && (m.cc as unknown[]).length ? html`<dt>Cc</dt><dd>${addr(m.cc)}</dd>` : ''}<dt>Date</dt><dd>${fmtDate(m.received_at ?? m.created_dt ?? m.sent_at)}</dd><dt>Subject</dt><dd>${str(m.subject) || NO_SUBJECT}</dd>${m.direction === 'outbound' ? html`<dt>Delivery</dt><dd>${delivery(m)}</dd>` : ''}</dl></header>
${messageBody(m, id)}
${Array.isArray(m.attachments) && m.attachments.length ? html`<p>Attachments: ${m.attachments.map((a: any) => html`<a class="tag" href="/api/email-attachments/${encodeURIComponent(str(a.uuid))}/?identity=${id}" download="${str(a.filename)}">${str(a.filename)} (${String(a.size ?? '')} B)</a> `)}</p>` : ''}
</article>`)}`,
      s,
    );
  }

  r.get('/identities/:id/mail/:thread', async (ctx) => {
    const s = await requireSession(ctx);
    if (s) await threadPage(ctx, s, uuidParam(ctx), String(ctx.params.thread));
  });
  // The HTML of one mail, framed by the thread page and opened on its own from there (see messageBody).
  r.get('/identities/:id/mail-body/:message', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    const id = uuidParam(ctx);
    const m = await api(ctx, s, 'GET', `/api/email-messages/${encodeURIComponent(String(ctx.params.message))}/`, { identity: id, opens: true });
    ctx.set('Cache-Control', 'no-store');
    if (m.status !== 200) {
      ctx.status = m.status === 404 ? 404 : 400;
      ctx.type = 'text/plain; charset=utf-8';
      ctx.body = errorText(m);
      return;
    }
    ctx.set('Content-Security-Policy', MAIL_FRAME_CSP);
    ctx.set('X-Frame-Options', 'SAMEORIGIN');
    ctx.set('Referrer-Policy', 'no-referrer'); // a link followed from the mail names no page of ours
    ctx.type = 'text/html; charset=utf-8';
    // The mail's own HTML is the one value not escaped: the sandbox and the CSP contain it.
    ctx.body = html`<!doctype html><html><head><meta charset="utf-8"><title>${str(m.body.subject) || '(no subject)'}</title><base target="_blank"></head><body>${new Safe(htmlOf(m.body))}</body></html>`.value;
  });
}

/** Characters of a line in the mail frame at the widest page (60rem less padding). */
const FRAME_LINE_CHARS = 90;
/** Lines of text per frame height class (dashboard.css `.mail-h-*`), smallest first; past the last, `mail-h-xl`. */
const FRAME_SIZES: [maxLines: number, cls: string][] = [
  [3, 'mail-h-s'],
  [8, 'mail-h-m'],
  [18, 'mail-h-l'],
];

/** Elements whose content is never shown as text. */
const HIDDEN_ELEMENTS = new Set(['style', 'script', 'head', 'title']);
/** Elements that start a line of their own (paragraph margins, line breaks, rows). */
const BLOCK_ELEMENTS = new Set(['p', 'div', 'br', 'li', 'tr', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'blockquote', 'pre', 'hr', 'img', 'table']);

/**
 * A height class for a mail's frame, guessed from its HTML. The frame cannot be measured: it
 * holds a document of an opaque origin (sandbox without allow-same-origin) that runs no
 * script, and loosening either to measure it would let the mail's HTML reach this page. So
 * its visible text in lines of FRAME_LINE_CHARS, plus a line per block, picks one of a few
 * heights (classes: the page's CSP allows no inline style) of the box around the frame; the
 * reader can drag that box taller or shorter (CSS resize) or open the mail on its own.
 *
 * One pass over at most 20,000 characters, whatever they are: the HTML is anyone's who can
 * send mail, and a page shows up to 200 mails (regular expressions over tags went quadratic
 * on a mail of unclosed `<`: seconds for every request of the server).
 */
export function frameSize(mailHtml: string): string {
  const s = mailHtml.slice(0, 20_000);
  const lower = s.toLowerCase();
  let text = 0;
  let blocks = 0;
  let space = true; // runs of white space count as one character
  let i = 0;
  while (i < s.length) {
    const lt = s.indexOf('<', i);
    for (let j = i, end = lt === -1 ? s.length : lt; j < end; j++) {
      const white = s.charCodeAt(j) <= 32;
      if (!white || !space) text++;
      space = white;
    }
    if (lt === -1) break;
    const gt = s.indexOf('>', lt + 1);
    if (gt === -1) break; // an unclosed tag: the rest is not shown as text
    const name = /^\/?([a-z][a-z0-9]*)/.exec(lower.slice(lt + 1, Math.min(gt, lt + 12)));
    i = gt + 1;
    if (!name || lower[lt + 1] === '/') continue;
    if (BLOCK_ELEMENTS.has(name[1]!)) blocks++;
    if (HIDDEN_ELEMENTS.has(name[1]!)) {
      const close = lower.indexOf(`</${name[1]}`, i);
      if (close === -1) break; // never closed: nothing after it is shown
      i = close;
    }
  }
  const lines = Math.ceil(text / FRAME_LINE_CHARS) + blocks;
  return FRAME_SIZES.find(([max]) => lines <= max)?.[1] ?? 'mail-h-xl';
}

/** Who sent a message, for its heading: the sender's name, else the address. */
function sender(m: { from_name?: unknown; from?: unknown }): string {
  return str(m.from_name) || str(m.from) || 'Unknown sender';
}

/**
 * Addresses from the API's shapes: "a@b", a list of them, or {name, address} (a thread's
 * `from_name`/`from_email`, a message's `from_name`/`from`). Name and address are separate
 * values, each isolated (html), so a name cannot reorder the address shown after it.
 */
export function addr(x: unknown): Safe {
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
