/**
 * In-memory EventStore for unit tests. Follows the port's rules (0-based revisions,
 * decimal positions from "1", idempotent appends by event id, catch-up-then-live
 * subscriptions with an awaited handler) without any I/O.
 */
import {
  WrongExpectedRevisionError,
  type AllFilter,
  type AppendResult,
  type EventData,
  type EventStore,
  type ExpectedRevision,
  type RecordedEvent,
  type Subscription,
} from '../../infra/ports/event-store.js';

function matches(event: RecordedEvent, filter?: AllFilter): boolean {
  if (!filter) return true;
  if (filter.streams && !filter.streams.includes(event.stream)) return false;
  if (filter.streamPrefixes && !filter.streamPrefixes.some((p) => event.stream.startsWith(p))) return false;
  if (filter.eventTypes && !filter.eventTypes.includes(event.type)) return false;
  return true;
}

/** Creates an empty in-memory event store; `events` exposes everything appended, in order. */
export function createMemoryEventStore(): EventStore & { readonly events: readonly RecordedEvent[] } {
  const events: RecordedEvent[] = []; // events[i].position === String(i + 1)
  const streams = new Map<string, RecordedEvent[]>();
  const wakers = new Set<() => void>();

  function checkRevision(stream: string, expected: ExpectedRevision): void {
    const actual = (streams.get(stream)?.length ?? 0) - 1;
    const ok =
      expected === 'any' ||
      (expected === 'no_stream' && actual === -1) ||
      (expected === 'stream_exists' && actual >= 0) ||
      expected === actual;
    if (!ok) throw new WrongExpectedRevisionError(stream, expected, actual);
  }

  return {
    events,

    async append(stream: string, data: EventData[], options = {}): Promise<AppendResult> {
      const existing = streams.get(stream) ?? [];
      const retried = data.length > 0 ? existing.filter((e) => data.some((d) => d.id === e.id)) : [];
      if (retried.length > 0) {
        const last = retried[retried.length - 1]!;
        return { nextRevision: last.revision, position: last.position, events: retried };
      }
      checkRevision(stream, options.expectedRevision ?? 'any');
      const recorded = data.map((d, i): RecordedEvent => ({
        id: d.id,
        type: d.type,
        stream,
        revision: existing.length + i,
        position: String(events.length + i + 1),
        data: structuredClone(d.data),
        metadata: structuredClone(d.metadata ?? {}),
        recordedAt: new Date().toISOString(),
      }));
      events.push(...recorded);
      streams.set(stream, [...existing, ...recorded]);
      for (const wake of [...wakers]) wake();
      const last = recorded[recorded.length - 1];
      return {
        nextRevision: existing.length + recorded.length - 1,
        position: last?.position ?? String(events.length),
        events: recorded,
      };
    },

    async readStream(stream, options = {}) {
      const all = streams.get(stream) ?? [];
      const from = options.fromRevision ?? 0;
      let result =
        options.direction === 'backwards'
          ? all.filter((e) => e.revision <= from || options.fromRevision === undefined).reverse()
          : all.filter((e) => e.revision >= from);
      if (options.maxCount !== undefined) result = result.slice(0, options.maxCount);
      return result;
    },

    async readAll(options = {}) {
      const start = options.after == null ? 0 : Number(options.after);
      const result = events.slice(start).filter((e) => matches(e, options.filter));
      return options.maxCount === undefined ? result : result.slice(0, options.maxCount);
    },

    subscribeAll(options, handler): Subscription {
      let closed = false;
      let next = options.after == null ? 0 : Number(options.after); // index of the next event
      let wake: (() => void) | null = null;
      const done = (async () => {
        while (!closed) {
          const event = events[next];
          if (event) {
            next += 1;
            if (matches(event, options.filter)) await handler(event);
            continue;
          }
          // Caught up: wait for an append (or close) to wake us.
          await new Promise<void>((resolve) => {
            wake = resolve;
            wakers.add(resolve);
          });
          if (wake) wakers.delete(wake);
          wake = null;
        }
      })();
      done.catch(() => {}); // callers observe failures through `done`; never unhandled
      return {
        done,
        close() {
          closed = true;
          wake?.();
        },
      };
    },

    async headPosition() {
      return events.length === 0 ? null : String(events.length);
    },

    async close() {},
  };
}

/** `store` counting the events read back from streams: a test shows what a check reads. */
export function countingReads(store: EventStore): { store: EventStore; read: () => number } {
  let read = 0;
  const wrapped: EventStore = {
    ...store,
    append: store.append.bind(store),
    readAll: store.readAll.bind(store),
    subscribeAll: store.subscribeAll.bind(store),
    async readStream(stream, options) {
      const events = await store.readStream(stream, options);
      read += events.length;
      return events;
    },
  };
  return { store: wrapped, read: () => read };
}
