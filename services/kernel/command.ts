/**
 * Runs a command against one stream: read it, fold it into state, decide the new events,
 * append them at the revision that was read. A concurrent writer makes the append fail
 * with WrongExpectedRevisionError; then the whole decision is retried on fresh state.
 *
 * Within one process, the commands on one stream also run one after another: a burst of
 * independent writes to one stream (an agent storing 50 secrets at once) then never
 * exhausts the retries, which remain for writers in other processes (cluster gateways).
 * Hence the rule: `decide` must not run commands itself (no lock order, no deadlock).
 *
 * A long stream is read whole once per process: the state it folds to is kept (see
 * {@link loadStream}) and later loads fold only the events appended since, by any process.
 * Streams that live long (an identity's vault, a user's, the user-number sequence) would
 * otherwise make every command cost their whole history.
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
  /**
   * The state after one more event. States are kept between loads and handed to every
   * caller, so nobody changes one in place (not `decide`, not a reader), and `evolve` only
   * when the evolver has `copy`.
   */
  evolve: (state: S, event: RecordedEvent) => S;
  /**
   * Present when `evolve` changes the state it is given (cheaper for a large state than a
   * copy per event). Such a kept state is then held by one command at a time (commands on a
   * stream take turns, see {@link execute}), {@link loadStream} hands out copies, and the
   * state `execute` returns is good until the next command on the stream.
   */
  copy?: (state: S) => S;
  /**
   * How much the state holds, for the bound on kept states: one per entry of a state that
   * grows with its stream (the vault's names), 1 when absent (a state of fixed size).
   */
  weight?: (state: S) => number;
  /**
   * The state is what the stream's last event says (a sequence's latest number): a load
   * reads that event alone, however long the stream.
   */
  lastOnly?: boolean;
}

export interface StreamState<S> {
  state: S;
  /** -1 when the stream does not exist. */
  revision: number;
  /** The log position of the stream's last event (null when it does not exist). */
  position: string | null;
}

const unborn = <S>(evolver: Evolver<S>): StreamState<S> => ({ state: evolver.initial(), revision: -1, position: null });

/**
 * The stream's state and revision. Kept per event store and stream (for the evolver that
 * last loaded it), so a load reads only the events appended since the last one (appends of
 * other processes too: the store is the truth, the kept state a prefix of it). Evolvers made
 * per call are never found again; keep them at module level.
 */
export async function loadStream<S>(store: EventStore, stream: string, evolver: Evolver<S>): Promise<StreamState<S>> {
  const folds = foldsOf(store);
  const kept = folds.get(stream, evolver);
  if (evolver.copy) {
    const own = kept ? { ...kept, state: evolver.copy(kept.state) } : unborn(evolver);
    return catchUp(store, stream, evolver, own);
  }
  const loaded = await catchUp(store, stream, evolver, kept ?? unborn(evolver));
  if (loaded.revision >= 0) folds.keep(stream, evolver, loaded);
  return loaded;
}

/** `from` with the events appended after it. */
async function catchUp<S>(store: EventStore, stream: string, evolver: Evolver<S>, from: StreamState<S>): Promise<StreamState<S>> {
  if (evolver.lastOnly) {
    const last = await store.readStream(stream, { direction: 'backwards', maxCount: 1 });
    return last.length && last[0].revision > from.revision ? foldOnto(evolver, unborn(evolver), last) : from;
  }
  return foldOnto(evolver, from, await store.readStream(stream, from.revision >= 0 ? { fromRevision: from.revision + 1 } : undefined));
}

/**
 * `events` must be the ones right after `from`. Changes `from.state` when the evolver works in
 * place: callers fold only onto states they own.
 */
function foldOnto<S>(evolver: Evolver<S>, from: StreamState<S>, events: RecordedEvent[]): StreamState<S> {
  if (events.length === 0) return from;
  let state = from.state;
  for (const e of events) state = evolver.evolve(state, e);
  const last = events[events.length - 1];
  return { state, revision: last.revision, position: last.position };
}

/**
 * Kept folds, least recently loaded out first: at most {@link FOLDS_KEPT} of them, weighing
 * at most {@link FOLD_BUDGET} in all (see Evolver.weight). A stream shorter than
 * {@link FOLD_MIN_EVENTS} events is read as cheaply as it is found here, and most are (a
 * session, an identity), so it is not kept.
 */
export const FOLD_BUDGET = 100_000;
export const FOLDS_KEPT = 5_000;
export const FOLD_MIN_EVENTS = 4;

interface KeptFold {
  evolver: Evolver<any>;
  fold: StreamState<any>;
  weight: number;
}

class KeptFolds {
  private readonly kept = new Map<string, KeptFold>();
  private weight = 0;
  /**
   * The last fold heavier than the whole budget, kept outside it: its commands fold it whole
   * anyway, so keeping it takes no memory they would not take again, and spares them its
   * history (in the budget it would push out every other fold, and then be pushed out).
   */
  private heavy: { stream: string; kept: KeptFold } | null = null;

  /** The kept fold, no longer kept (a command of an in-place evolver holds it). */
  take<S>(stream: string, evolver: Evolver<S>): StreamState<S> | undefined {
    const fold = this.get(stream, evolver);
    if (fold) this.drop(stream);
    return fold;
  }

  get<S>(stream: string, evolver: Evolver<S>): StreamState<S> | undefined {
    if (this.heavy?.stream === stream) return this.heavy.kept.evolver === evolver ? this.heavy.kept.fold : undefined;
    const k = this.kept.get(stream);
    if (!k || k.evolver !== evolver) return undefined;
    this.kept.delete(stream); // to the young end
    this.kept.set(stream, k);
    return k.fold;
  }

  keep<S>(stream: string, evolver: Evolver<S>, fold: StreamState<S>): void {
    this.drop(stream);
    if (fold.revision + 1 < FOLD_MIN_EVENTS || evolver.lastOnly) return;
    const weight = Math.max(1, evolver.weight?.(fold.state) ?? 1);
    if (weight > FOLD_BUDGET) {
      this.heavy = { stream, kept: { evolver, fold, weight } };
      return;
    }
    this.kept.set(stream, { evolver, fold, weight });
    this.weight += weight;
    for (const [oldest] of this.kept) {
      if (this.weight <= FOLD_BUDGET && this.kept.size <= FOLDS_KEPT) break;
      this.drop(oldest);
    }
  }

  private drop(stream: string): void {
    if (this.heavy?.stream === stream) this.heavy = null;
    const k = this.kept.get(stream);
    if (!k) return;
    this.kept.delete(stream);
    this.weight -= k.weight;
  }
}

/** Per event store (tests run several in one process). */
const keptFolds = new WeakMap<EventStore, KeptFolds>();
function foldsOf(store: EventStore): KeptFolds {
  let folds = keptFolds.get(store);
  if (!folds) keptFolds.set(store, (folds = new KeptFolds()));
  return folds;
}

/** An event to append: id and metadata are filled in by {@link event}. */
export function event<T>(type: string, data: T, metadata?: Record<string, unknown>): EventData<T> {
  return { id: newId(), type, data, ...(metadata ? { metadata } : {}) };
}

export const expectedFor = (revision: number): ExpectedRevision => (revision < 0 ? 'no_stream' : revision);

/**
 * What a command did: `append` is null when it changed nothing. `position` is the log
 * position of the stream's last event after the command, its own append's or, when it changed
 * nothing, the one its decision read: a caller that waits for the read models to reach it
 * reads what the answer says also after a no-op that followed an identical write still being
 * projected (null: the stream does not exist).
 */
export interface Executed<S, R> {
  result: R;
  append: AppendResult | null;
  state: S;
  position: string | null;
}

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
): Promise<Executed<S, R>> {
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
): Promise<Executed<S, R>> {
  const folds = foldsOf(store);
  for (let attempt = 0; ; attempt++) {
    // Commands on this stream take turns here, so one may hold its kept state (see Evolver.copy).
    const kept = evolver.copy ? folds.take(stream, evolver) : folds.get(stream, evolver);
    const loaded = await catchUp(store, stream, evolver, kept ?? unborn(evolver));
    /** What to keep when this attempt ends: none while a fold is under way (one that throws may leave a state half changed). */
    let keeping: StreamState<S> | null = loaded;
    try {
      const { events, result } = await decide(loaded.state, loaded.revision);
      if (events.length === 0) return { result, append: null, state: loaded.state, position: loaded.position };
      const append = await store.append(stream, events, { expectedRevision: expectedFor(loaded.revision) });
      keeping = null;
      // An idempotent append answers with the events as recorded earlier, maybe after others.
      const next = append.events[0]?.revision === loaded.revision + 1 ? foldOnto(evolver, loaded, append.events) : await catchUp(store, stream, evolver, loaded);
      keeping = next;
      return { result, append, state: next.state, position: next.position };
    } catch (err) {
      if (!(err instanceof WrongExpectedRevisionError) || attempt >= retries) throw err;
    } finally {
      if (keeping && keeping.revision >= 0) folds.keep(stream, evolver, keeping);
    }
  }
}
