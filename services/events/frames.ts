/**
 * What a stream sends for an inbound message: the whole SSE frame, made once per event and
 * written as it is to every stream of its identity (live, or replayed). Only the frame is
 * kept while it waits for the read models or a slow reader, never the event with its bodies.
 */
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import { SseConnection } from '../gateway/sse.js';
import { EMAIL_RECEIVED } from '../mail/events.js';
import { SmsReceived } from '../sms/events.js';
import { startOf } from '../kernel/text.js';

/**
 * A frame's subject and preview at most (UTF-16 units): a frame says that something came,
 * GET says what. A mail's subject may be a megabyte of folded header, which every open
 * stream would otherwise copy.
 */
export const FRAME_TEXT_MAX = 1000;

/** An event's frame: its log position (the frame's `id:`) and the frame's text. */
export interface Frame {
  position: string;
  text: string;
}

/** The `email` or `sms` frame of an inbound-message event (all data values strings); null for any other event. */
export function frameOf(e: RecordedEvent): Frame | null {
  const d = e.data ?? {};
  const s = (v: unknown) => (v === undefined || v === null ? '' : startOf(String(v), FRAME_TEXT_MAX));
  if (e.type === EMAIL_RECEIVED) {
    const from = d.from && typeof d.from === 'object' ? d.from.address : d.from;
    const data = { thread_id: s(d.threadId), message_id: s(d.messageId), from_email: s(from), subject: s(d.subject), preview: s(d.preview) };
    return { position: e.position, text: SseConnection.frame(e.position, 'email', data) };
  }
  if (e.type === SmsReceived) {
    const data = { conversation_id: s(d.conversationId), message_id: s(d.messageId), from_number: s(d.from), preview: s(d.preview) };
    return { position: e.position, text: SseConnection.frame(e.position, 'sms', data) };
  }
  return null;
}
