/**
 * Runs a command against one stream: read it, fold it into state, decide the new events,
 * append them at the revision that was read. A concurrent writer makes the append fail
 * with WrongExpectedRevisionError; then the whole decision is retried on fresh state.
 *
 * Within one process, the commands on one stream also run one after another: a burst of
 * independent writes to one stream (an agent storing 50 secrets at once) then never
 * exhausts the retries, which remain for writers in other processes (cluster gateways).
 * Hence the rule: `decide` must not run commands itself (no lock order, no deadlock).
 */
import {
  WrongExpectedRevisionError,
  type EventData,
  type EventStore,
  type ExpectedRevision,
  type RecordedEvent,
  type AppendResult,
} from '../../infra/ports/event-store.js';
import { newId } from './ids.js';
import { keyedSerial } from './serial.js';

export interface Evolver<S> {
  initial: () => S;
  evolve: (state: S, event: RecordedEvent) => S;
}

export interface StreamState<S> {
  state: S;
  /** -1 when the stream does not exist. */
  revision: number;
}

export async function loadStream<S>(store: EventStore, stream: string, evolver: Evolver<S>): Promise<StreamState<S>> {
  const events = await store.readStream(stream);
  let state = evolver.initial();
  for (const e of events) state = evolver.evolve(state, e);
  return { state, revision: events.length ? events[events.length - 1].revision : -1 };
}

/** An event to append: id and metadata are filled in by {@link event}. */
export function event<T>(type: string, data: T, metadata?: Record<string, unknown>): EventData<T> {
  return { id: newId(), type, data, ...(metadata ? { metadata } : {}) };
}

export const expectedFor = (revision: number): ExpectedRevision => (revision < 0 ? 'no_stream' : revision);

/**
 * Decide-and-append with optimistic concurrency. `decide` may throw (an ApiError, say) to
 * refuse the command; it returns [] when nothing needs to change.
 */
export async function execute<S, R = void>(
  store: EventStore,
  stream: string,
  evolver: Evolver<S>,
  decide: (state: S, revision: number) => { events: EventData[]; result: R } | Promise<{ events: EventData[]; result: R }>,
  retries = 5,
): Promise<{ result: R; append: AppendResult | null; state: S }> {
  let serial = queues.get(store);
  if (!serial) queues.set(store, (serial = keyedSerial()));
  return serial(stream, () => decideAndAppend(store, stream, evolver, decide, retries));
}

/** Per event store (tests run several in one process): one queue per stream. */
const queues = new WeakMap<EventStore, ReturnType<typeof keyedSerial>>();

async function decideAndAppend<S, R>(
  store: EventStore,
  stream: string,
  evolver: Evolver<S>,
  decide: (state: S, revision: number) => { events: EventData[]; result: R } | Promise<{ events: EventData[]; result: R }>,
  retries: number,
): Promise<{ result: R; append: AppendResult | null; state: S }> {
  for (let attempt = 0; ; attempt++) {
    const { state, revision } = await loadStream(store, stream, evolver);
    const { events, result } = await decide(state, revision);
    if (events.length === 0) return { result, append: null, state };
    try {
      const append = await store.append(stream, events, { expectedRevision: expectedFor(revision) });
      let next = state;
      for (const e of append.events) next = evolver.evolve(next, e);
      return { result, append, state: next };
    } catch (err) {
      if (!(err instanceof WrongExpectedRevisionError) || attempt >= retries) throw err;
    }
  }
}
