/**
 * A minimal Server-Sent Events reader over fetch, parsing by the WHATWG rules (HTML
 * "Server-sent events" 9.2.6): lines end with CRLF, LF or CR; `:` starts a comment; a
 * blank line dispatches; one leading space after the colon is dropped. Unlike the
 * EventSource API it also exposes comments, the `retry:` field and the raw response, so
 * tests can check the wire format itself.
 */
export interface SseFrame {
  id: string | null;
  event: string;
  data: string;
}

export interface SseReader {
  status: number;
  headers: Headers;
  /** Resolves with the next n frames (not comments). */
  frames(n: number, timeoutMs?: number): Promise<SseFrame[]>;
  /** Resolves when a comment with this text has arrived. */
  comment(text: string, timeoutMs?: number): Promise<void>;
  /** Every comment, retry value and frame seen so far (in order of arrival). */
  log: ({ kind: 'frame'; frame: SseFrame } | { kind: 'comment'; text: string } | { kind: 'retry'; value: string } | { kind: 'id'; value: string })[];
  /** Resolves when the server ends the stream. */
  ended: Promise<void>;
  close(): void;
  /** Error body when status is not 200. */
  errorBody: unknown;
}

export async function openSse(url: string, headers: Record<string, string>): Promise<SseReader> {
  const abort = new AbortController();
  const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: abort.signal });
  const log: SseReader['log'] = [];
  const frames: SseFrame[] = [];
  let waiters: (() => void)[] = [];
  const notify = () => {
    const w = waiters;
    waiters = [];
    w.forEach((f) => f());
  };
  if (res.status !== 200) {
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: res.status, headers: res.headers, frames: async () => [], comment: async () => {}, log, ended: Promise.resolve(), close: () => {}, errorBody: body };
  }

  let ended = false;
  const endedPromise = (async () => {
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    let data: string[] = [];
    let event = '';
    let id: string | null = null;
    let lastId: string | null = null;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        for (;;) {
          const m = /\r\n|\n|\r/.exec(buffer);
          if (!m) break;
          if (m[0] === '\r' && m.index === buffer.length - 1) break; // maybe CRLF split across chunks
          const line = buffer.slice(0, m.index);
          buffer = buffer.slice(m.index + m[0].length);
          if (line === '') {
            if (id !== null) lastId = id; // a frame without data sets the id too, and dispatches nothing
            if (data.length) {
              const frame = { id: lastId, event: event || 'message', data: data.join('\n') };
              frames.push(frame);
              log.push({ kind: 'frame', frame });
            } else if (id !== null) log.push({ kind: 'id', value: id });
            data = [];
            event = '';
            id = null;
            notify();
            continue;
          }
          if (line.startsWith(':')) {
            log.push({ kind: 'comment', text: line.slice(1).replace(/^ /, '') });
            notify();
            continue;
          }
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
          if (field === 'data') data.push(val);
          else if (field === 'event') event = val;
          else if (field === 'id' && !val.includes('\0')) id = val;
          else if (field === 'retry' && /^\d+$/.test(val)) log.push({ kind: 'retry', value: val });
        }
      }
    } catch {
      /* aborted or cut */
    } finally {
      ended = true;
      notify();
    }
  })();

  let consumed = 0;
  function waitUntil<T>(check: () => T | undefined, timeoutMs: number, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}; log: ${JSON.stringify(log).slice(0, 2000)}`)), timeoutMs);
      const attempt = () => {
        const r = check();
        if (r !== undefined) {
          clearTimeout(timer);
          resolve(r);
        } else if (ended) {
          clearTimeout(timer);
          reject(new Error(`stream ended while waiting for ${what}; log: ${JSON.stringify(log).slice(0, 2000)}`));
        } else waiters.push(attempt);
      };
      attempt();
    });
  }

  return {
    status: res.status,
    headers: res.headers,
    log,
    errorBody: null,
    ended: endedPromise,
    frames(n, timeoutMs = 5000) {
      return waitUntil(
        () => {
          if (frames.length - consumed < n) return undefined;
          const out = frames.slice(consumed, consumed + n);
          consumed += n;
          return out;
        },
        timeoutMs,
        `${n} frames`,
      );
    },
    comment(text, timeoutMs = 5000) {
      return waitUntil(() => (log.some((l) => l.kind === 'comment' && l.text === text) ? true : undefined), timeoutMs, `comment "${text}"`).then(() => {});
    },
    close: () => abort.abort(),
  };
}
