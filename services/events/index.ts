/**
 * The real-time event stream (SPEC "Events"; DECISIONS "Mail, SMS, events"):
 * GET /api/events/stream/ sends the identity's inbound email and SMS as Server-Sent Events.
 *
 * The stream is read straight off the event log. A frame's `id:` is the event's global
 * position, so it is strictly increasing, and `Last-Event-ID` is a position to read after:
 * the stream replays every later event of the identity from the log, then goes live.
 * The stream registers with the hub BEFORE it reads the log and holds live events back
 * while it replays; anything the replay already sent is dropped by position. Every event
 * is therefore sent exactly once, in order, also when it is appended during the replay.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { ContextFactory } from '../../infra/runtime.js';
import { comparePositions, InvalidPositionError } from '../../infra/ports/event-store.js';
import { ApiError, tokenExpired } from '../gateway/errors.js';
import { SseConnection } from '../gateway/sse.js';
import { EventHub, MESSAGE_TYPES, READABLE_WAIT_MS, untilReadable, type Listener } from './hub.js';
import { mailboxStream } from '../mail/events.js';
import { smsboxStream } from '../sms/events.js';
import { frameOf, type Frame } from './frames.js';

/** Reconnection delay announced to clients (`retry:`). */
export const RETRY_MS = 3000;
/** Unsent bytes a slow reader may leave in its socket before it is cut (then resumes by id). */
export const MAX_BUFFERED_BYTES = 1024 * 1024;
/** Live events held back while a stream replays; past it the stream is cut (the client resumes). */
const MAX_HELD_EVENTS = 10_000;
/** Events read from the log per replay page. */
const REPLAY_PAGE = 256;
/** A reader that takes nothing for this long during a replay is cut. */
const REPLAY_STALL_MS = 60_000;

const EVENT_ID = /^\d{1,30}$/;

/** `Last-Event-ID` header, else `last_event_id` query; null when neither is given. */
export function lastEventIdOf(ctx: Context): string | null {
  const header = ctx.get('last-event-id');
  const q = ctx.query.last_event_id;
  if (Array.isArray(q)) throw new ApiError(400, 'invalid_last_event_id', 'Give one last_event_id.', { last_event_id: ['Give one last_event_id.'] });
  const raw = header !== '' ? header : q;
  if (raw === undefined || raw === '') return null;
  const value = raw.trim();
  if (!EVENT_ID.test(value)) {
    throw new ApiError(400, 'invalid_last_event_id', 'Last-Event-ID must be an id received from this stream (a decimal number).', {
      last_event_id: ['Last-Event-ID must be an id received from this stream (a decimal number).'],
    });
  }
  // Positions are canonical decimals (no leading zeros); "0007" means "after 7".
  return value.replace(/^0+(?=\d)/, '');
}

const invalidLastEventId = (why: string) => {
  const message = `Last-Event-ID is not an id received from this stream (${why}).`;
  return new ApiError(400, 'invalid_last_event_id', message, { last_event_id: [message] });
};

export const eventsContext: ContextFactory = (shared) => {
  const { platform } = shared;
  const { config, events } = platform;
  const log = platform.logger.child({ context: 'events' });
  const hub = new EventHub(
    events,
    (error) => {
      log.error({ err: error }, 'event stream subscription failed; closing open streams and starting it again');
      for (const l of hub.all()) l.revoke('subscription failed');
    },
    // Cluster: live events from Kafka; embedded: the event store subscription, as always.
    config.store === 'cluster' ? platform.feed : undefined,
    platform.progress,
  );
  /** Open streams, with when their credential expires (an access token's exp; else never). */
  const open = new Map<SseConnection, number>();
  /** Open streams per account: an account holding a process's memory and sockets is refused (429). */
  const perAccount = new Map<number, number>();
  platform.metrics.gauge('sse_streams', 'Event streams (GET /api/events/stream/) open in this process.', [], () => open.size);
  let keepalive: NodeJS.Timeout | null = null;
  let stopping = false;

  async function stream(ctx: Context): Promise<void> {
    // Every refusal is a JSON error answered before the stream opens.
    const { principal, identityId } = await shared.auth.identity(ctx);
    // An access token is valid until it expires, but a stream outlives requests: it needs its
    // session alive too (a signed-out client would otherwise reconnect with the same token).
    // An end of the account's sessions the hub saw first is waited for in the read models;
    // one it sees before the stream registers is caught below.
    const sessionBound = principal.kind === 'jwt' && principal.sessionId !== undefined;
    const endedBefore = sessionBound ? hub.sessionsEndedAt(principal.userPk) : undefined;
    if (endedBefore) await platform.progress.waitFor(endedBefore).catch(() => {});
    if (sessionBound && !(await shared.accounts.liveSession(principal.sessionId!))) {
      throw tokenExpired('The session of this token has ended (signed out, or the password changed): sign in again.');
    }
    const after = lastEventIdOf(ctx);
    if (after !== null) {
      // An id beyond the log's last event was never sent: following it would drop every live
      // event until the log caught up, so it is refused like a malformed one.
      if (comparePositions(after, await events.headPosition()) > 0) throw invalidLastEventId('it is beyond its last event');
      // A store whose positions have a structure (EventStoreDB's commit and prepare) knows
      // others it never handed out: refused before the stream opens, not cut after its 200.
      await events.readAll({ after, maxCount: 1 }).catch((err: unknown) => {
        throw err instanceof InvalidPositionError ? invalidLastEventId('no event has it') : err;
      });
    }
    if (stopping) throw new ApiError(503, 'service_unavailable', 'The service is shutting down; reconnect shortly.', undefined, { 'Retry-After': '1' });
    if (!hub.live) throw new ApiError(503, 'service_unavailable', 'Live events are interrupted (the event log cannot be followed now); reconnect shortly.', undefined, { 'Retry-After': String(Math.ceil(RETRY_MS / 1000)) });
    if ((perAccount.get(principal.userPk) ?? 0) >= config.sseStreamsPerAccount) {
      throw new ApiError(
        429,
        'too_many_streams',
        `This account has ${config.sseStreamsPerAccount} event streams open already (SSE_STREAMS_PER_ACCOUNT); close one first (one stream per identity is enough).`,
        undefined,
        { 'Retry-After': String(Math.ceil(RETRY_MS / 1000)) },
      );
    }
    if (ctx.method === 'HEAD') {
      // The stream's headers, no stream: a HEAD that opened one would never end.
      ctx.status = 200;
      ctx.set(SseConnection.HEADERS);
      return;
    }

    // Gone during the checks above: its 'close' came before anyone listened, and a stream
    // registered now would be counted against the account for good.
    if (SseConnection.gone(ctx)) return;

    let lastSent: string | null = after;
    let held: Frame[] | null = after === null ? null : []; // non-null while replaying

    const send = (frame: Frame) => {
      if (comparePositions(frame.position, lastSent) <= 0) return; // already sent (replay/live overlap)
      conn.send(frame.text);
      lastSent = frame.position;
    };

    const listener: Listener = {
      identityId,
      keyId: principal.kind === 'management_key' || principal.kind === 'identity_key' ? principal.keyId : undefined,
      session: principal.sessionId ? { id: principal.sessionId, userPk: principal.userPk } : undefined,
      passwordOf: principal.kind === 'basic' ? principal.userPk : undefined,
      deliver(frame) {
        if (conn.closed) return;
        if (held) {
          if (held.length >= MAX_HELD_EVENTS) return conn.destroy();
          held.push(frame);
          return;
        }
        send(frame);
      },
      revoke(reason, error) {
        if (error) log.error({ err: error, identityId, reason }, 'event stream closed');
        else log.debug({ identityId, reason }, 'event stream closed');
        conn.end();
      },
    };

    const conn = SseConnection.open(ctx, {
      retryMs: RETRY_MS,
      // A live stream starts after the hub's position (the listener is added below, in this
      // same synchronous step): said as the first id, a client cut off before any event
      // resumes from there and misses nothing ('0': the log is empty, replay it all).
      lastEventId: after === null ? (hub.position ?? '0') : undefined,
      maxBufferedBytes: MAX_BUFFERED_BYTES,
      onClose: () => {
        hub.remove(listener);
        if (open.delete(conn)) {
          const left = (perAccount.get(principal.userPk) ?? 1) - 1;
          if (left > 0) perAccount.set(principal.userPk, left);
          else perAccount.delete(principal.userPk);
        }
      },
    });
    open.set(conn, principal.expiresAt ?? Infinity);
    perAccount.set(principal.userPk, (perAccount.get(principal.userPk) ?? 0) + 1);
    if (!hub.add(listener) || (sessionBound && hub.sessionsEndedAt(principal.userPk) !== endedBefore)) {
      conn.end(); // the key, identity or session went away between the check and now
      return;
    }
    if (after === null) return; // live only, from now

    try {
      const filter = { streams: [mailboxStream(identityId), smsboxStream(identityId)], eventTypes: [...MESSAGE_TYPES] };
      const readableBy = performance.now() + READABLE_WAIT_MS; // one wait for the whole replay, not one per page
      for (;;) {
        const page = await events.readAll({ after: lastSent, maxCount: REPLAY_PAGE, filter });
        // What the page names is readable before it is sent, as for live events (the hub).
        if (page.length) await untilReadable(platform.progress, page[page.length - 1]!.position, readableBy);
        // Only the frames are kept while a slow reader takes them: the events (bodies, headers) go now.
        const frames = page.map(frameOf);
        const full = page.length === REPLAY_PAGE;
        page.length = 0;
        for (const frame of frames) {
          if (conn.closed) return;
          if (frame) send(frame);
          // Paced per frame: a page of large frames written at once would count as a slow reader.
          if (!conn.writable) await stalled(conn);
        }
        if (conn.closed) return;
        if (!full) break;
      }
      // Synchronous from here: no live event can slip between the flush and going live.
      const pending = held ?? [];
      held = null;
      for (const frame of pending) send(frame);
    } catch (err) {
      log.error({ err, identityId }, 'event stream replay failed');
      conn.destroy();
    }
  }

  /** Waits for the socket to drain; cuts a reader that takes nothing for too long. */
  async function stalled(conn: SseConnection): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, REPLAY_STALL_MS)));
    await Promise.race([conn.drained(), timeout]);
    clearTimeout(timer);
    if (!conn.writable) conn.destroy();
  }

  const routes = (r: Router) => {
    r.get('/api/events/stream/', stream);
  };

  return {
    name: 'events',
    module: { routes },
    async start() {
      await hub.start();
      // One timer for every stream of the process (a timer per stream costs memory at 10k streams).
      // It also ends a stream whose access token expired (within one period): the token bounds
      // the stream as it bounds a request; the client reconnects with a fresh one, by id.
      keepalive = setInterval(() => {
        const now = Date.now();
        for (const [conn, expiresAt] of open) {
          if (expiresAt <= now) conn.end();
          else conn.comment('keepalive');
        }
      }, config.sseKeepaliveMs);
      keepalive.unref();
    },
    async stop() {
      stopping = true;
      if (keepalive) clearInterval(keepalive);
      hub.stop();
      // Open streams would keep server.close() waiting: end them (clients reconnect elsewhere).
      for (const conn of [...open.keys()]) conn.end();
    },
  };
};
