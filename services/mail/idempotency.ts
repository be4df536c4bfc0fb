/**
 * `Idempotency-Key` for sends (compose, reply, reply-all), as Stripe's API has it: a send
 * repeated with the key of one the identity made in the last 24 hours answers that message
 * again instead of sending another (a client whose answer was lost can retry safely); the
 * same key with another request is refused (422). Other writes need none: vault writes
 * upsert, identity names are unique, SMS and inbound mail are deduplicated at the door.
 *
 * The key (hashed with the identity: a key is the client's, never stored as given) and the
 * request's fingerprint ride in the `EmailQueued` event itself, so the check and the send are
 * one append at the outbox's revision: no crash between them sends twice or loses the key, and
 * a concurrent send with the same key makes the append fail and the check run again.
 *
 * Each outbox's keys of the window are kept with the revision they were read up to, so a check
 * reads only what was appended since (by this process or another); bounded, least recently
 * used out, as ./send-limits.ts keeps send times.
 */
import { createHash } from 'node:crypto';
import type { EventStore, RecordedEvent } from '../../infra/ports/event-store.js';

/** How long a key names its send. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3600_000;

/** A key as clients send it: 1 to 255 visible ASCII characters (a UUID, as Stripe suggests, fits). */
const KEY = /^[\x21-\x7e]{1,255}$/;

export function validIdempotencyKey(value: string): boolean {
  return KEY.test(value);
}

/** What an `EmailQueued` carries of the key: its hash with the identity, and the request's. */
export interface IdempotencyTag {
  key: string;
  fingerprint: string;
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** The tag of a send by `identityId` with header value `key`, for the request `request` (any JSON value that says what was asked). */
export function idempotencyTag(identityId: string, key: string, request: unknown): IdempotencyTag {
  return { key: sha256(`${identityId}\n${key}`), fingerprint: sha256(JSON.stringify(request)) };
}

/** The send an earlier request with the key made. */
export interface EarlierSend {
  messageId: string;
  fingerprint: string;
}

interface Kept {
  revision: number;
  /** Key → the send and its time (ms), oldest first. */
  keys: Map<string, EarlierSend & { at: number }>;
}

const PAGE = 256;

export function createIdempotentSends(deps: { events: EventStore; held?: number }) {
  const held = deps.held ?? 2_000;
  const streams = new Map<string, Kept>();

  const tagOf = (e: RecordedEvent) => {
    const d = e.data as { idempotency?: IdempotencyTag; messageId: string; at: string };
    return d.idempotency ? { key: d.idempotency.key, send: { messageId: d.messageId, fingerprint: d.idempotency.fingerprint, at: Date.parse(d.at) } } : null;
  };

  /** The outbox's keys of the window, read up to its last revision. */
  async function current(stream: string, nowMs: number): Promise<Kept | null> {
    let kept = streams.get(stream);
    if (kept) {
      streams.delete(stream); // re-inserted below: most recently used last
      for (const e of await deps.events.readStream(stream, { fromRevision: kept.revision + 1 })) {
        const tag = tagOf(e);
        if (tag) kept.keys.set(tag.key, tag.send);
        kept.revision = e.revision;
      }
    } else {
      // Back from the end until a send older than the window (send times are in log order).
      const found: RecordedEvent[] = [];
      let from: number | undefined;
      let revision: number | null = null;
      for (;;) {
        const page = await deps.events.readStream(stream, { direction: 'backwards', maxCount: PAGE, ...(from === undefined ? {} : { fromRevision: from }) });
        if (!page.length) break;
        revision ??= page[0].revision;
        found.push(...page);
        const last = page[page.length - 1];
        if (page.length < PAGE || last.revision === 0 || nowMs - Date.parse((last.data as { at: string }).at) > IDEMPOTENCY_WINDOW_MS) break;
        from = last.revision - 1;
      }
      if (revision === null) return null;
      kept = { revision, keys: new Map() };
      for (const e of found.reverse()) {
        const tag = tagOf(e);
        if (tag) kept.keys.set(tag.key, tag.send);
      }
    }
    for (const [key, send] of kept.keys) {
      if (nowMs - send.at <= IDEMPOTENCY_WINDOW_MS) break; // oldest first: the rest are newer
      kept.keys.delete(key);
    }
    streams.set(stream, kept);
    if (streams.size > held) streams.delete(streams.keys().next().value!);
    return kept;
  }

  /** The send of `stream` (an outbox) that carried `key` within the window at `nowMs`, if any. */
  async function earlier(stream: string, key: string, nowMs: number): Promise<EarlierSend | null> {
    const send = (await current(stream, nowMs))?.keys.get(key);
    return send ? { messageId: send.messageId, fingerprint: send.fingerprint } : null;
  }

  return { earlier };
}

export type IdempotentSends = ReturnType<typeof createIdempotentSends>;
