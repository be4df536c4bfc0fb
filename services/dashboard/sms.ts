/**
 * SMS: one conversation of an identity (GET /identities/{id}/sms/{conversation_id}), read-only;
 * opening it marks it read, as the API does.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import { html } from '../gateway/html.js';
import { fmtDate } from './html.js';
import { api, errorText, str, uuidParam, type DashboardSession, type PageKit } from './plumbing.js';

export function smsRoutes(r: Router, kit: PageKit): void {
  const { send, requireSession } = kit;

  /** `id`: the identity's uuid; null when the path's is none (answered as an unknown identity). */
  async function smsPage(ctx: Context, s: DashboardSession, id: string | null, conv: string) {
    // GET /api/sms-inbox/{conversation_id}/ (services/sms): the conversation with its messages, oldest first.
    const c = await api(ctx, s, 'GET', `/api/sms-inbox/${encodeURIComponent(conv)}/`, { identity: id, opens: true });
    if (!id || c.status !== 200) return send(ctx, 'SMS conversation', html`<p><a href="${id ? `/identities/${id}` : '/'}">Back</a></p>`, s, { kind: 'error', text: errorText(c) }, c.status === 404 ? 404 : 400);
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

  r.get('/identities/:id/sms/:conv', async (ctx) => {
    const s = await requireSession(ctx);
    if (s) await smsPage(ctx, s, uuidParam(ctx), String(ctx.params.conv));
  });
}
