/**
 * The SMS context (SPEC "SMS"; DECISIONS "Mail, SMS, events"): the inbound webhook of the
 * configured provider, conversations per identity and peer number, messages, and the
 * identity's phone numbers. Inbound messages are `SmsReceived` events in
 * `smsbox-<identity>`, which the event stream (services/events) forwards as `sms`.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { ContextFactory } from '../../infra/runtime.js';
import { body, markOnOpen, pageOfList, pageParams, queryFlag, queryParam, sendPage } from '../gateway/http.js';
import { validator } from '../gateway/validate.js';
import { ApiError, badRequest, notFound, type FieldErrors } from '../gateway/errors.js';
import { isUuid, newId, nowIso } from '../kernel/ids.js';
import { IDENTITIES, type IdentityDoc } from '../../projections/identities/index.js';
import {
  SMS_CONVERSATIONS,
  SMS_MESSAGES,
  SMS_PHONES,
  smsProjection,
  type SmsConversationDoc,
  type SmsMessageDoc,
  type SmsPhonesDoc,
} from '../../projections/sms/index.js';
import { SmsRead, SmsReceived, conversationIdOf, previewOf, receiptEventIdOf, smsboxStream, type SmsReadData, type SmsReceivedData } from './events.js';
import { verifyWebhook } from './providers.js';
import { parseAddress } from './address.js';

const validateInbound = validator<{ MessageSid: string; From: string; To: string; Body?: string; NumMedia?: number }>('sms.json#InboundSms', { allowNul: true });

/** Empty TwiML: "received, no reply" (https://www.twilio.com/docs/messaging/twiml). */
const EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>';
/** Messages embedded in a conversation's detail; older ones are paged via /api/messages/. */
const CONVERSATION_MESSAGES = 500;
const MAX_MEDIA = 10;

/**
 * The webhook's From and To, normalised once (services/sms/address.ts) before anything is
 * looked up or stored; a malformed one is a 400 naming the field(s).
 */
function addressesOf(input: { From: string; To: string }): { from: string; to: string } {
  const from = parseAddress(input.From, 'from');
  const to = parseAddress(input.To, 'to');
  if (from.ok && to.ok) return { from: from.value, to: to.value };
  const fields: FieldErrors = {};
  if (!from.ok) fields.From = [from.error];
  if (!to.ok) fields.To = [to.error];
  throw badRequest(fields);
}

export const smsContext: ContextFactory = (shared) => {
  const { platform } = shared;
  const { config, events, reads, progress } = platform;
  const log = platform.logger.child({ context: 'sms' });

  async function receive(raw: Record<string, unknown>): Promise<SmsReceivedData> {
    const input = validateInbound(raw);
    const { from, to } = addressesOf(input);
    const identity = await reads.collection<IdentityDoc>(IDENTITIES).findOne({ phone: to });
    if (!identity) {
      log.warn({ to, messageSid: input.MessageSid }, 'inbound SMS for a number no identity holds; rejected');
      throw new ApiError(404, 'unknown_number', `No identity holds the number ${to}.`);
    }
    const mediaUrls: string[] = [];
    for (let i = 0; i < Math.min(input.NumMedia ?? 0, MAX_MEDIA); i++) {
      const u = raw[`MediaUrl${i}`];
      if (typeof u === 'string' && u) mediaUrls.push(u);
    }
    const text = input.Body ?? '';
    const data: SmsReceivedData = {
      identityId: identity.id,
      messageId: newId(),
      conversationId: conversationIdOf(identity.id, from),
      messageSid: input.MessageSid,
      provider: config.smsProvider,
      from,
      to,
      body: text,
      preview: previewOf(text),
      mediaUrls,
      at: nowIso(),
    };
    // A retried delivery carries the same MessageSid: same event id, so the store returns
    // the original append (and its data) instead of recording a second message.
    const append = await events.append(smsboxStream(identity.id), [{ id: receiptEventIdOf(identity.id, input.MessageSid), type: SmsReceived, data }], {
      expectedRevision: 'any',
    });
    await progress.waitFor(append.position);
    return append.events[0].data as SmsReceivedData;
  }

  async function markRead(identityId: string, conversationId: string, messageIds: string[]): Promise<void> {
    if (messageIds.length === 0) return;
    const data: SmsReadData = { identityId, conversationId, messageIds, at: nowIso() };
    const append = await events.append(smsboxStream(identityId), [{ id: newId(), type: SmsRead, data }], { expectedRevision: 'any' });
    await progress.waitFor(append.position);
  }

  const identityOf = async (ctx: Context) => (await shared.auth.identity(ctx)).identityId;

  async function conversationOf(identityId: string, id: string): Promise<SmsConversationDoc> {
    const c = isUuid(id) ? await reads.collection<SmsConversationDoc>(SMS_CONVERSATIONS).get(id.toLowerCase()) : null;
    if (!c || c.identityId !== identityId) throw notFound('Conversation not found.');
    return c;
  }

  const routes = (r: Router) => {
    r.post('/api/webhooks/sms/', async (ctx) => {
      const params = await body(ctx);
      const form = (ctx.get('content-type') || '').split(';')[0].trim().toLowerCase() === 'application/x-www-form-urlencoded';
      try {
        verifyWebhook(config, {
          header: (name) => ctx.get(name),
          originalUrl: ctx.originalUrl,
          params: Object.fromEntries(Object.entries(params).map(([k, v]) => [k, String(v)])),
          form,
        });
      } catch (err) {
        // A wrong PUBLIC_URL or provider token refuses every SMS: say so where an operator looks.
        log.warn({ code: (err as { code?: string }).code, provider: config.smsProvider }, 'inbound SMS webhook refused: its signature or secret does not match (check PUBLIC_URL and the provider token)');
        throw err;
      }
      const sms = await receive(params);
      log.info({ identityId: sms.identityId, messageId: sms.messageId, messageSid: sms.messageSid }, 'inbound SMS recorded');
      ctx.type = 'text/xml';
      ctx.body = EMPTY_TWIML;
    });

    r.get('/api/sms-inbox/', async (ctx) => {
      const identityId = await identityOf(ctx);
      const { limit, cursor } = pageParams(ctx);
      const where: Record<string, string | boolean> = queryFlag(ctx, 'unread') ? { identityId, unread: true } : { identityId };
      const page = await reads.collection<SmsConversationDoc>(SMS_CONVERSATIONS).find({ where, orderBy: { field: 'lastSeq', direction: 'desc' }, limit, cursor });
      sendPage(ctx, page, toConversation, config.publicUrl);
    });

    r.get('/api/sms-inbox/:conversation_id/', async (ctx) => {
      const identityId = await identityOf(ctx);
      let c = await conversationOf(identityId, ctx.params.conversation_id);
      const page = await reads
        .collection<SmsMessageDoc>(SMS_MESSAGES)
        .find({ where: { identityId, conversationId: c.id }, orderBy: { field: 'seq', direction: 'desc' }, limit: CONVERSATION_MESSAGES });
      // Opening marks read what it shows: older unread messages past the latest
      // CONVERSATION_MESSAGES stay unread (GET /api/messages/?conversation_id= pages to them).
      const shown = new Set(page.items.map((m) => m.id));
      const unreadShown = page.items.filter((m) => !m.read).map((m) => m.id);
      const marked = unreadShown.length > 0 && (await markOnOpen(ctx, () => markRead(identityId, c.id, unreadShown)));
      if (marked) c = await conversationOf(identityId, c.id);
      const read = (m: SmsMessageDoc) => (marked && shown.has(m.id) ? { ...m, read: true } : m);
      ctx.body = { ...toConversation(c), messages: [...page.items].reverse().map((m) => toMessage(read(m))) }; // a copy: read-store pages are frozen (shared cache)
    });

    r.get('/api/messages/', async (ctx) => {
      const identityId = await identityOf(ctx);
      const { limit, cursor } = pageParams(ctx);
      const where: Record<string, string | boolean> = { identityId };
      const conv = queryParam(ctx, 'conversation_id');
      if (conv) {
        if (!isUuid(conv)) throw new ApiError(400, 'invalid', 'Invalid input.', { conversation_id: ['Must be a valid UUID.'] });
        where.conversationId = conv.toLowerCase();
      }
      if (queryFlag(ctx, 'unread')) where.read = false;
      const page = await reads.collection<SmsMessageDoc>(SMS_MESSAGES).find({ where, orderBy: { field: 'seq', direction: 'desc' }, limit, cursor });
      sendPage(ctx, page, toMessage, config.publicUrl);
    });

    r.get('/api/messages/:id/', async (ctx) => {
      const identityId = await identityOf(ctx);
      const id = ctx.params.id.toLowerCase();
      const m = isUuid(id) ? await reads.collection<SmsMessageDoc>(SMS_MESSAGES).get(id) : null;
      if (!m || m.identityId !== identityId) throw notFound('Message not found.');
      const marked = !m.read && (await markOnOpen(ctx, () => markRead(identityId, m.conversationId, [m.id])));
      ctx.body = toMessage(marked ? { ...m, read: true } : m);
    });

    r.get('/api/phone/', async (ctx) => {
      const identityId = await identityOf(ctx);
      const params = pageParams(ctx);
      const doc = await reads.collection<SmsPhonesDoc>(SMS_PHONES).get(identityId);
      const page = pageOfList(doc?.numbers ?? [], (n) => n.number, params);
      sendPage(ctx, page, (n) => ({ number: n.number, provider: n.provider, capabilities: ['sms'], created_dt: n.createdAt }), config.publicUrl);
    });
  };

  async function start(): Promise<void> {
    if (config.smsProvider === 'local' && !config.smsWebhookSecret) {
      log.warn('the local SMS webhook is open: anyone who can reach the gateway can post simulated SMS; set SMS_WEBHOOK_SECRET to require X-Webhook-Secret');
    }
  }

  return { name: 'sms', projections: [smsProjection], module: { routes }, start };
};

function toConversation(c: SmsConversationDoc) {
  return {
    conversation_id: c.id,
    uuid: c.id, // as email threads carry both
    peer: c.peer,
    from_number: c.peer,
    to_number: c.ourNumber,
    preview: c.preview,
    message_count: c.messageCount,
    unread_count: c.unreadCount,
    unread: c.unreadCount > 0, // as email threads say it
    last_message_at: c.lastMessageAt,
    created_dt: c.createdAt,
  };
}

function toMessage(m: SmsMessageDoc) {
  return {
    id: m.id,
    uuid: m.id, // as email messages carry both
    conversation_id: m.conversationId,
    direction: 'inbound' as const,
    from_number: m.from,
    to_number: m.to,
    body: m.body,
    preview: m.preview,
    media_urls: m.mediaUrls,
    message_sid: m.messageSid,
    read: m.read,
    created_dt: m.receivedAt,
  };
}
