/**
 * Events of the SMS context. Every event of an identity's SMS lives in ONE stream,
 * `smsbox-<identityUuid>`: the SSE stream replays it, and a read marking appended at the
 * stream's revision cannot interleave with a message it did not see.
 */
import { v5 as uuidv5 } from 'uuid';
import { streamName } from '../../infra/ports/event-store.js';
import { startOf } from '../kernel/text.js';

export const SmsReceived = 'SmsReceived';
export const SmsRead = 'SmsRead';

export interface SmsReceivedData {
  identityId: string;
  messageId: string;
  conversationId: string;
  /** Provider's id of the message (Twilio's SM... sid); the idempotency key of the webhook. */
  messageSid: string;
  provider: 'local' | 'twilio';
  /** The sender (the peer of the conversation). */
  from: string;
  /** The identity's number. */
  to: string;
  body: string;
  preview: string;
  mediaUrls: string[];
  at: string;
}

export interface SmsReadData {
  identityId: string;
  conversationId: string;
  messageIds: string[];
  at: string;
}

export const SMSBOX = 'smsbox';
export const smsboxStream = (identityId: string) => streamName(SMSBOX, identityId);

// Fixed namespace of this service's name-based (v5) ids; never change it (ids would move).
const NAMESPACE = '6f1d3a52-8c1e-4f7b-9a4e-2b3c5d7e9f10';

/** Stable per (identity, peer): the same sender always lands in the same conversation. */
export const conversationIdOf = (identityId: string, peer: string) => uuidv5(`sms-conversation:${identityId}:${peer}`, NAMESPACE);

/**
 * Event id of a received message: derived from the provider's MessageSid, so a webhook
 * retried by the provider appends nothing new (the store is idempotent by event id).
 */
export const receiptEventIdOf = (identityId: string, messageSid: string) => uuidv5(`sms-receipt:${identityId}:${messageSid}`, NAMESPACE);

const PREVIEW_CHARS = 100;

/** First characters of the body on one line (listings and the SSE `sms` event). */
export function previewOf(body: string): string {
  const flat = body.replace(/\s+/g, ' ').trim();
  return flat.length > PREVIEW_CHARS ? `${startOf(flat, PREVIEW_CHARS - 1)}…` : flat;
}

/**
 * A phone number as the webhook received it, made comparable with the E.164 numbers the
 * identities hold. Form bodies posted by hand often turn `+` into a space (`To=+1555...`
 * unencoded), so a leading space or no sign at all is read as `+`.
 */
export function normalizeNumber(raw: string): string {
  const trimmed = raw.trim();
  const compact = trimmed.replace(/[\s().-]/g, '');
  if (/^00\d{6,15}$/.test(compact)) return `+${compact.slice(2)}`;
  if (/^\d{3,15}$/.test(compact)) return `+${compact}`;
  return compact;
}
