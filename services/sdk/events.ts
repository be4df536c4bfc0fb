/**
 * Client of GET /api/events/stream/ (SPEC "Events"): fetch streaming + a WHATWG
 * "Server-sent events" parser (§9.2.6 "Interpreting an event stream"), so it can send the
 * Authorization and X-Service-Identity headers the browser EventSource cannot.
 *
 * After ANY disconnect (network error, server restart, clean end of stream) it reconnects
 * with `Last-Event-ID` set to the last id it saw, waiting the server's `retry:` value grown
 * by exponential backoff with jitter while connects keep failing. The server replays every
 * later event (DECISIONS "SSE": no gap, no duplicate). An expired access token is refreshed
 * through the client (a refresh that cannot reach the service is retried like a connect; one
 * the service refuses ends the stream as token_expired); other 4xx answers end the stream
 * with the ApiRequestError, and an answer that is no event stream (a web page at that
 * address) with an UnexpectedResponseError.
 */
import type { AisClient } from './client.js';
import type { EventsEmailEvent, EventsSmsEvent } from './types.gen.js';
import { ApiRequestError, contentTypeOf, hasExpired, sleep, UnexpectedResponseError } from './client.js';

export interface ServerEvent<T = Record<string, unknown>> {
  /** The id to resume after (opaque). */
  id: string;
  /** `email`, `sms`, ... (`message` when the server names none). */
  event: string;
  /** `data` parsed as JSON (the raw string when it is not JSON). */
  data: T;
  raw: string;
}

/** An `email` frame (SPEC "Events"): `if (isEmailEvent(e)) e.data.thread_id` is typed. */
export const isEmailEvent = (e: ServerEvent<unknown>): e is ServerEvent<EventsEmailEvent> => e.event === 'email' && typeof e.data === 'object' && e.data !== null;

/** An `sms` frame (SPEC "Events"): `if (isSmsEvent(e)) e.data.conversation_id` is typed. */
export const isSmsEvent = (e: ServerEvent<unknown>): e is ServerEvent<EventsSmsEvent> => e.event === 'sms' && typeof e.data === 'object' && e.data !== null;

export interface EventStreamOptions {
  /** Resume after this id. */
  lastEventId?: string;
  signal?: AbortSignal;
  /** Max wait between reconnects, ms (default 30 s). */
  maxBackoffMs?: number;
  /**
   * A connection that sends nothing for this long (not even the service's keepalive comment,
   * every 30 s by default) is taken for dead and replaced, ms (default 75 s). A connection
   * cut without a close (a NAT or proxy dropping it) otherwise waits for TCP's own timeout.
   */
  idleTimeoutMs?: number;
  /** Called on each (re)connect and disconnect, e.g. for a status line. */
  onStatus?: (status: { state: 'open' | 'closed' | 'reconnecting'; attempt: number; delayMs?: number; error?: unknown }) => void;
}

/** Incremental WHATWG SSE parser: feed it chunks, it calls back per dispatched event. */
export class SseParser {
  #buf = '';
  #data: string[] = [];
  #event = '';
  #id: string | undefined;
  #sawCr = false;
  #first = true;
  /** The last event id (persists across events, per spec). */
  lastEventId = '';

  constructor(
    private readonly onEvent: (e: { id: string; event: string; data: string }) => void,
    private readonly onRetry: (ms: number) => void = () => undefined,
    /** A frame that set the id without data (the service's first frame: where the stream starts). */
    private readonly onId: (id: string) => void = () => undefined,
  ) {}

  push(chunk: string): void {
    if (this.#first) {
      this.#first = false;
      if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
    }
    this.#buf += chunk;
    let start = 0;
    for (let i = 0; i < this.#buf.length; i++) {
      const c = this.#buf[i];
      if (c === '\n' && this.#sawCr) {
        // The LF of a CRLF pair whose CR ended the previous line.
        this.#sawCr = false;
        start = i + 1;
        continue;
      }
      this.#sawCr = false;
      if (c === '\r' || c === '\n') {
        this.#line(this.#buf.slice(start, i));
        if (c === '\r') this.#sawCr = true;
        start = i + 1;
      }
    }
    this.#buf = this.#buf.slice(start);
  }

  #line(line: string): void {
    if (line === '') return this.#dispatch();
    if (line.startsWith(':')) return; // comment (`: keepalive`)
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        this.#data.push(value);
        break;
      case 'event':
        this.#event = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.#id = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) this.onRetry(Number(value));
        break;
    }
  }

  #dispatch(): void {
    const id = this.#id;
    if (id !== undefined) this.lastEventId = id;
    this.#id = undefined;
    if (this.#data.length === 0) {
      this.#event = '';
      if (id !== undefined) this.onId(id);
      return;
    }
    const data = this.#data.join('\n');
    const event = this.#event || 'message';
    this.#data = [];
    this.#event = '';
    this.onEvent({ id: this.lastEventId, event, data });
  }
}

export class EventStream implements AsyncIterable<ServerEvent> {
  lastEventId: string | undefined;
  #retryMs = 1000;

  constructor(
    private readonly client: AisClient,
    private readonly options: EventStreamOptions = {},
  ) {
    this.lastEventId = options.lastEventId;
  }

  /** Callback form; resolves when `signal` aborts, rejects on a fatal error. */
  async forEach(fn: (e: ServerEvent) => void | Promise<void>): Promise<void> {
    for await (const e of this) await fn(e);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ServerEvent> {
    const { signal } = this.options;
    let failures = 0;
    let refreshed = false;
    while (!signal?.aborted) {
      let res: Response;
      // One controller per connection: the caller's signal ends it, and so does the idle watchdog.
      const connection = new AbortController();
      const stop = () => connection.abort(signal?.reason);
      signal?.addEventListener('abort', stop, { once: true });
      let idle: ReturnType<typeof setTimeout> | undefined;
      const watch = () => {
        clearTimeout(idle);
        idle = setTimeout(() => connection.abort(new Error('no data from the event stream: connection taken for dead')), this.options.idleTimeoutMs ?? 75_000);
      };
      try {
        // The watchdog covers the wait for the answer too (a frozen process or a stalled proxy
        // that took the connection), and this loop does the reconnecting, with onStatus: the
        // request itself is not sent again.
        watch();
        res = await this.client.send('GET', '/api/events/stream/', {
          headers: { accept: 'text/event-stream', ...(this.lastEventId ? { 'last-event-id': this.lastEventId } : {}) },
          signal: connection.signal,
          accept: [401],
          retries: 0,
        });
        clearTimeout(idle);
        if (res.status === 401) {
          const body = (await res.json().catch(() => ({}))) as { code?: string; detail?: string };
          // Once per connection, or again when the token the last refresh gave has expired since
          // (connects failing for longer than it lives): a service refusing a fresh token ends it.
          const { access, refresh } = this.client.tokens;
          if (body.code === 'token_expired' && refresh && (!refreshed || hasExpired(access))) {
            signal?.removeEventListener('abort', stop);
            // Marked only once done: a refresh that could not reach the service (a NetworkError,
            // or its 5xx) is waited out below like any failed connect, and tried again on the
            // next 401. Only a refresh the service refuses is the session's end (token_expired).
            await this.client.refresh();
            refreshed = true;
            continue;
          }
          throw new ApiRequestError(401, body.code, body.detail ?? 'Unauthorized', undefined, body);
        }
        // Not an event stream (a web page at that address): failed for good, as an EventSource
        // fails a connection of another content type (WHATWG HTML §9.2), not retried.
        if (contentTypeOf(res) !== 'text/event-stream') {
          await res.body?.cancel().catch(() => undefined);
          throw UnexpectedResponseError.of(this.client.baseUrl, res, 'GET', '/api/events/stream/');
        }
      } catch (err) {
        clearTimeout(idle);
        signal?.removeEventListener('abort', stop);
        if (signal?.aborted) return;
        if ((err instanceof ApiRequestError && err.status < 500 && err.status !== 429) || err instanceof UnexpectedResponseError) throw err;
        yield* this.#wait(++failures, connection.signal.aborted ? connection.signal.reason : err);
        continue;
      }
      refreshed = false;
      this.options.onStatus?.({ state: 'open', attempt: failures });
      // Events, and ids the service sent without one (a string): in order, so the id to
      // resume from moves only as far as what the caller was given.
      const queue: (ServerEvent | string)[] = [];
      const parser = new SseParser(
        (e) => queue.push({ id: e.id, event: e.event, data: parseData(e.data), raw: e.data }),
        (ms) => (this.#retryMs = ms),
        (id) => queue.push(id),
      );
      let error: unknown;
      try {
        const decoder = new TextDecoder();
        watch(); // while waiting for data only: a consumer slow to take an event is no dead connection
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          clearTimeout(idle);
          parser.push(decoder.decode(chunk, { stream: true }));
          failures = 0; // the service answered: the next reconnect starts from the shortest wait
          while (queue.length) {
            const e = queue.shift()!;
            if (typeof e === 'string') {
              if (e) this.lastEventId = e; // where the stream started: a reconnect before any event resumes there
              continue;
            }
            if (e.id) this.lastEventId = e.id;
            yield e;
          }
          watch();
        }
      } catch (err) {
        error = connection.signal.aborted && !signal?.aborted ? connection.signal.reason : err;
      } finally {
        clearTimeout(idle);
        signal?.removeEventListener('abort', stop);
      }
      if (signal?.aborted) return;
      this.options.onStatus?.({ state: 'closed', attempt: failures, error });
      yield* this.#wait(++failures, error);
    }
  }

  // A generator so `yield*` keeps the iterator protocol simple; it yields nothing.
  async *#wait(attempt: number, error: unknown): AsyncGenerator<never> {
    const cap = this.options.maxBackoffMs ?? 30_000;
    const delay = Math.min(cap, this.#retryMs * 2 ** Math.min(attempt - 1, 10));
    // A 429 or 503 that said how long to wait (too many streams open) is not asked sooner.
    const asked = error instanceof ApiRequestError && error.retryAfter !== undefined ? error.retryAfter * 1000 : 0;
    const jittered = Math.max(asked, delay / 2 + Math.random() * (delay / 2));
    this.options.onStatus?.({ state: 'reconnecting', attempt, delayMs: Math.round(jittered), error });
    try {
      await sleep(jittered, this.options.signal);
    } catch {
      /* aborted: the loop ends */
    }
  }
}

function parseData(s: string): any {
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}
