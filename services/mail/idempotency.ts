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
 * reads only what was appended since (by this process or another); bounded in outboxes and in
 * keys in all, least recently used out (an outbox read again comes back from the log).
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

/** What a lookup found, and the outbox revision it read up to (null: no outbox yet). */
export interface KeyLookup {
  earlier: EarlierSend | null;
  revision: number | null;
}

interface Kept {
  revision: number;
  /** Key → the send and its time (ms), oldest first (a key used again moves to the end). */
  keys: Map<string, EarlierSend & { at: number }>;
}

const PAGE = 256;

export function createIdempotentSends(deps: { events: EventStore; held?: number; maxKeys?: number }) {
  const held = deps.held ?? 2_000;
  const maxKeys = deps.maxKeys ?? 100_000;
  const streams = new Map<string, Kept>();
  let total = 0;

  /** The key an `EmailQueued` carries, if any, with its send. */
  function tagOf(e: RecordedEvent): { key: string; send: EarlierSend & { at: number } } | null {
    const d = e.data as { idempotency?: IdempotencyTag; messageId: string; at: string };
    return d.idempotency ? { key: d.idempotency.key, send: { messageId: d.messageId, fingerprint: d.idempotency.fingerprint, at: Date.parse(d.at) } } : null;
  }

  /** Keeps a key's latest send, at the end of the outbox's keys (newest last). */
  function keep(kept: Kept, tag: { key: string; send: EarlierSend & { at: number } } | null): void {
    if (!tag) return;
    if (kept.keys.delete(tag.key)) total--;
    kept.keys.set(tag.key, tag.send);
    total++;
  }

  /** The outbox's keys of the window, read up to its last revision. */
  async function current(stream: string, nowMs: number): Promise<Kept | null> {
    let kept = streams.get(stream);
    if (kept) {
      streams.delete(stream); // re-inserted below: most recently used last
      for (const e of await deps.events.readStream(stream, { fromRevision: kept.revision + 1 })) {
        keep(kept, tagOf(e));
        kept.revision = e.revision;
      }
    } else {
      // Back from the end, a page at a time, until a send older than the window (send times
      // are in log order); only the keys are kept of each page, then taken oldest first.
      const tags: Array<ReturnType<typeof tagOf>> = []; // newest first
      let from: number | undefined;
      let revision: number | null = null;
      for (;;) {
        const page = await deps.events.readStream(stream, { direction: 'backwards', maxCount: PAGE, ...(from === undefined ? {} : { fromRevision: from }) });
        if (!page.length) break;
        revision ??= page[0].revision;
        for (const e of page) tags.push(tagOf(e));
        const last = page[page.length - 1];
        if (page.length < PAGE || last.revision === 0 || nowMs - Date.parse((last.data as { at: string }).at) > IDEMPOTENCY_WINDOW_MS) break;
        from = last.revision - 1;
      }
      if (revision === null) return null;
      kept = { revision, keys: new Map() };
      for (let i = tags.length - 1; i >= 0; i--) keep(kept, tags[i]);
    }
    for (const [key, send] of kept.keys) {
      if (nowMs - send.at <= IDEMPOTENCY_WINDOW_MS) break; // oldest first: the rest are newer
      kept.keys.delete(key);
      total--;
    }
    streams.set(stream, kept);
    // Least recently used out, past the outboxes held or the keys held in all.
    while (streams.size > 1 && (streams.size > held || total > maxKeys)) {
      const [oldest, dropped] = streams.entries().next().value!;
      streams.delete(oldest);
      total -= dropped.keys.size;
    }
    return kept;
  }

  /** The send of `stream` (an outbox) that carried `key` within the window at `nowMs`, if any, and the revision read. */
  async function lookup(stream: string, key: string, nowMs: number): Promise<KeyLookup> {
    const kept = await current(stream, nowMs);
    const send = kept?.keys.get(key);
    const earlier = send && nowMs - send.at <= IDEMPOTENCY_WINDOW_MS ? { messageId: send.messageId, fingerprint: send.fingerprint } : null;
    return { earlier, revision: kept?.revision ?? null };
  }

  return { lookup, keys: () => total };
}

export type IdempotentSends = ReturnType<typeof createIdempotentSends>;
