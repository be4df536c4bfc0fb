/**
 * A Server-Sent Events response (WHATWG HTML "Server-sent events") written straight to
 * the Node response: Koa steps aside (`ctx.respond = false`), headers are flushed at once,
 * and the socket has no idle timeout (the keepalive comments keep proxies from cutting it).
 *
 * Backpressure: a frame is never held back for a slow reader; instead the bytes the socket
 * has not taken yet are bounded. Past {@link SseOptions.maxBufferedBytes} the connection
 * is destroyed and the client resumes with Last-Event-ID, so the server's memory per
 * stream stays bounded whatever the client does.
 */
import type { Context } from 'koa';
import type { ServerResponse } from 'node:http';

export interface SseOptions {
  /** Reconnection delay the client should use (the `retry:` field), in ms. */
  retryMs: number;
  /**
   * An id sent with the `retry:` field, before any event: the client's last event id until
   * an event comes (WHATWG: a frame without data sets it and dispatches nothing).
   */
  lastEventId?: string;
  /** Bytes the socket may hold unsent before the connection is cut. */
  maxBufferedBytes: number;
  /** Called once when the stream ends, whatever the cause. */
  onClose?: () => void;
}

/** How long a reader may stay over the buffer bound before it counts as slow. */
const SLOW_AFTER_MS = 10_000;
/** Over this many times the bound, a reader is cut at once (memory per stream stays bounded). */
const HARD_BOUND_FACTOR = 8;

export class SseConnection {
  #closed = false;
  /** When the bytes not yet taken by the socket last went over the bound (null: under it). */
  #behindSince: number | null = null;
  readonly #res: ServerResponse;
  readonly #max: number;
  readonly #onClose?: () => void;

  /** A stream's headers (also a HEAD's answer, which opens none). */
  static readonly HEADERS = {
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-cache',
    'X-Accel-Buffering': 'no', // nginx: do not buffer the stream
  } as const;

  private constructor(res: ServerResponse, options: SseOptions) {
    this.#res = res;
    this.#max = options.maxBufferedBytes;
    this.#onClose = options.onClose;
    res.once('close', () => this.#finish());
  }

  /** Whether the client went away before the stream opened (its 'close' already came). */
  static gone(ctx: Context): boolean {
    return ctx.req.socket.destroyed || ctx.res.destroyed;
  }

  /** Takes the response over from Koa and sends the headers and the `retry:` line (with the stream's first id, when given). */
  static open(ctx: Context, options: SseOptions): SseConnection {
    ctx.respond = false;
    const res = ctx.res;
    const socket = ctx.req.socket;
    socket.setTimeout(0);
    socket.setNoDelay(true);
    socket.setKeepAlive(true);
    res.writeHead(200, { ...SseConnection.HEADERS, Connection: 'keep-alive' });
    res.flushHeaders();
    const conn = new SseConnection(res, options);
    conn.#write(`retry: ${options.retryMs}\n${options.lastEventId === undefined ? '' : `id: ${options.lastEventId}\n`}\n`);
    return conn;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** True while the socket still takes writes without queueing (see {@link drained}). */
  get writable(): boolean {
    return !this.#closed && !this.#res.writableNeedDrain;
  }

  /** The text of one event frame. `id` and `event` never contain line breaks (we make them). */
  static frame(id: string, event: string, data: unknown): string {
    // JSON.stringify escapes line breaks inside strings, so the data is one `data:` line.
    return `id: ${id}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
  }

  /** Writes a frame made by {@link SseConnection.frame} (made once, for every stream it goes to). */
  send(frame: string): void {
    this.#write(frame);
  }

  /** A comment line (ignored by clients; keeps intermediaries from timing out). */
  comment(text: string): void {
    this.#write(`: ${text}\n\n`);
  }

  /** Resolves when the socket has taken what was queued, or the stream closed. */
  drained(): Promise<void> {
    if (!this.#res.writableNeedDrain || this.#closed) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.#res.off('drain', done);
        this.#res.off('close', done);
        resolve();
      };
      this.#res.on('drain', done);
      this.#res.on('close', done);
    });
  }

  /** Ends the stream cleanly (the client may reconnect). */
  end(): void {
    if (this.#closed) return;
    this.#res.end();
    this.#finish();
  }

  /** Cuts the connection (slow reader, shutdown). */
  destroy(): void {
    if (this.#closed) return;
    this.#res.destroy();
    this.#finish();
  }

  #write(chunk: string): void {
    if (this.#closed) return;
    this.#res.write(chunk);
    // A slow reader is one that stays behind: over the bound for SLOW_AFTER_MS (checked at
    // every write, keepalives included), or far over it. Large frames (a mail with a huge
    // subject) put a reader that keeps up over the bound for a moment; cutting it then would
    // also cut every replay that includes those frames, for good.
    const behind = this.#res.writableLength;
    if (behind <= this.#max) this.#behindSince = null;
    else if (behind > this.#max * HARD_BOUND_FACTOR) this.destroy();
    else if (this.#behindSince === null) this.#behindSince = performance.now(); // monotonic: a clock step is not time behind
    else if (performance.now() - this.#behindSince > SLOW_AFTER_MS) this.destroy();
  }

  #finish(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#onClose?.();
  }
}
