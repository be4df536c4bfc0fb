/**
 * Runs every projection off one catch-up subscription to the event store.
 *
 * Events are gathered into a batch until the subscription has nothing more immediately
 * available (next macrotask) or the batch reaches {@link MAX_BATCH} events. Then, per event,
 * each projection that has not seen it yet and reads its type names the documents it
 * touches; the runner reads every one of them not already pending in one read per
 * collection (a batch of inbound mail read its new documents one query each before),
 * evolves them in log order, and keeps the results in a per-projection overlay, committed
 * together with the projection's checkpoint in one read-store transaction. Busy catch-up
 * thus costs one transaction per batch, while an idle service sees its write in the read
 * model within a macrotask.
 */
import { comparePositions, type EventStore, type RecordedEvent, type Subscription } from '../infra/ports/event-store.js';
import type { Change, Doc, ReadStore } from '../infra/ports/read-store.js';
import type { DocUpdate, Projection } from './projection.js';
import type { EventFeed } from '../infra/ports/event-feed.js';
import { isStorageFault } from '../services/kernel/faults.js';

/** The consumer group of the projections when they follow a feed (cluster worker: Kafka). */
export const PROJECTIONS_GROUP = 'ais-projections';

/** Events per batch before a commit is forced (bounds memory and replay work). */
const MAX_BATCH = 500;
/**
 * A projection with nothing to write is not committed on every batch (that would be one
 * transaction per projection per event when idle); its checkpoint is persisted at least
 * this often, and on stop. Lagging there only means re-skipping those events after a restart.
 */
const CHECKPOINT_EVERY = 1000;
const DEFAULT_WAIT_MS = 5000;

export interface ProjectionRunner {
  /** Ensures collections, reads checkpoints, and subscribes from the lowest checkpoint. */
  start(): Promise<void>;
  /**
   * Resolves once every projection has processed `position` (read-your-writes after an
   * append). Rejects with {@link ProjectionLagError} after `timeoutMs` (default 5000; pass
   * Infinity to wait forever), or with {@link ProjectionFailedError} if the runner failed.
   */
  waitFor(position: string, timeoutMs?: number): Promise<void>;
  /** Last position processed (and committed) by all projections, or null. */
  position(): string | null;
  /** Each projection's last processed position (a projection with nothing to write saves its checkpoint only now and then). */
  positions(): Array<{ projection: string; position: string | null }>;
  /** Resets the projections (all when absent) and replays them; resolves once caught up with the head. */
  rebuild(names?: string[]): Promise<void>;
  /** Stops the subscription and commits what was processed. */
  stop(): Promise<void>;
  /**
   * Settles when the runner ends: resolves on stop, rejects with the failure when a
   * projection or a store failed (main should exit then: the read models are frozen).
   */
  readonly done: Promise<void>;
}

export interface RunnerLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** The read models did not reach a position in time (the write itself succeeded). */
export class ProjectionLagError extends Error {
  readonly code = 'projection_lag' as const;
  constructor(
    readonly position: string,
    readonly processed: string | null,
    readonly timeoutMs: number,
  ) {
    super(`projections did not reach position ${position} within ${timeoutMs} ms (at ${processed ?? 'start'})`);
    this.name = 'ProjectionLagError';
  }
}

/** The runner stopped because a projection or the stores failed; read models are frozen. */
export class ProjectionFailedError extends Error {
  readonly code = 'projection_failed' as const;
  constructor(
    message: string,
    readonly projection?: string,
    readonly event?: { type: string; position: string; stream: string },
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ProjectionFailedError';
  }
}

interface ProjectionState {
  projection: Projection;
  types: Set<string>;
  collections: Set<string>;
  /** Last event position this projection has processed (maybe not yet committed). */
  position: string | null;
  /** Position of its last commit (its stored checkpoint). */
  committed: string | null;
  /** Events processed since its last commit. */
  sinceCommit: number;
  /** Pending document writes of the current batch, by `collection\0id`. */
  overlay: Map<string, Change>;
  /** Position of the last event of the batch that changed a document (null: none did). */
  lastChange: string | null;
}

interface Waiter {
  position: string;
  resolve: () => void;
  reject: (error: Error) => void;
  timer?: NodeJS.Timeout;
}

const consoleLogger: RunnerLogger = {
  info: (obj, msg) => console.info(msg ?? '', obj),
  warn: (obj, msg) => console.warn(msg ?? '', obj),
  error: (obj, msg) => console.error(msg ?? '', obj),
};

function minPosition(positions: (string | null)[]): string | null {
  return positions.reduce<string | null>((min, p, i) => (i === 0 || comparePositions(p, min) < 0 ? p : min), null);
}

/**
 * Creates a runner for `projections` (not started). It subscribes to every event, not only
 * the projections' types, so that its position also passes events nobody reads and
 * {@link ProjectionRunner.waitFor} works for any append.
 */
export function createProjectionRunner(deps: {
  eventStore: EventStore;
  readStore: ReadStore;
  projections: Projection[];
  logger?: RunnerLogger;
  /**
   * Where events come from (group {@link PROJECTIONS_GROUP}); default: the event store's
   * catch-up subscription. With a feed, each event is reported settled once the batch that
   * holds it is committed, so the feed's durable position (Kafka offsets) never passes an
   * uncommitted read-model write. Rebuilds always replay from the event store (the only
   * complete log).
   */
  feed?: EventFeed;
}): ProjectionRunner {
  const { eventStore, readStore } = deps;
  const logger = deps.logger ?? consoleLogger;

  const names = new Set<string>();
  const states: ProjectionState[] = deps.projections.map((projection) => {
    if (names.has(projection.name)) throw new Error(`duplicate projection name: ${projection.name}`);
    names.add(projection.name);
    return {
      projection,
      types: new Set(projection.eventTypes),
      collections: new Set(projection.collections.map((c) => c.name)),
      position: null,
      committed: null,
      sinceCommit: 0,
      lastChange: null,
      overlay: new Map(),
    };
  });

  let subscription: Subscription | null = null;
  let generation = 0; // bumped on each (re)subscription; stale deliveries are dropped
  let started = false;
  let stopped = false;
  let failure: Error | null = null;
  let seen: string | null = null; // last event processed, maybe not yet committed
  let processed: string | null = null; // last event processed and committed by all
  let pendingEvents = 0;
  /** Events received and not yet processed (the batch being gathered). */
  let gathered: RecordedEvent[] = [];
  let flushTimer: NodeJS.Immediate | null = null;
  const waiters = new Set<Waiter>();

  let resolveDone!: () => void;
  let rejectDone!: (error: Error) => void;
  const done = new Promise<void>((resolve, reject) => {
    resolveDone = resolve;
    rejectDone = reject;
  });
  done.catch(() => {}); // only explicit listeners should see the failure

  // Event processing and commits run one at a time: a commit in flight must not interleave
  // with loading documents (the read store would not yet have the batch being committed).
  let chain: Promise<unknown> = Promise.resolve();
  function serial<T>(work: () => Promise<T>): Promise<T> {
    const run = chain.then(work);
    chain = run.catch(() => {});
    return run;
  }

  const overlayKey = (collection: string, id: string) => `${collection}\0${id}`;

  function projectionFailed(state: ProjectionState, event: RecordedEvent, error: unknown): ProjectionFailedError {
    return new ProjectionFailedError(
      `projection ${state.projection.name} failed on ${event.type} at ${event.position}: ${(error as Error)?.message ?? String(error)}`,
      state.projection.name,
      { type: event.type, position: event.position, stream: event.stream },
      { cause: error },
    );
  }

  /** One event's updates for one projection, waiting for their documents. */
  interface Pending {
    state: ProjectionState;
    event: RecordedEvent;
    updates: DocUpdate[];
  }

  /**
   * Processes the gathered events: every projection's updates are named first, the documents
   * they touch that no pending write holds are read (one read per collection), then they
   * evolve in log order into the overlays.
   */
  async function processGathered(): Promise<void> {
    if (!gathered.length) return;
    const events = gathered;
    gathered = [];
    const work: Pending[] = [];
    const wanted = new Map<string, Set<string>>(); // collection → ids no overlay holds
    for (const event of events) {
      for (const state of states) {
        if (comparePositions(event.position, state.position) <= 0) continue; // already has it (replay)
        if (state.types.has(event.type)) {
          let updates: DocUpdate[];
          try {
            updates = state.projection.apply(event);
            for (const update of updates) {
              // Rebuild resets only declared collections; writing elsewhere would leave stale docs.
              if (!state.collections.has(update.collection)) throw new Error(`writes to undeclared collection ${update.collection}`);
              if (state.overlay.has(overlayKey(update.collection, update.id))) continue;
              let ids = wanted.get(update.collection);
              if (!ids) wanted.set(update.collection, (ids = new Set()));
              ids.add(update.id);
            }
          } catch (error) {
            throw projectionFailed(state, event, error);
          }
          work.push({ state, event, updates });
        }
        state.position = event.position;
        state.sinceCommit += 1;
      }
      seen = event.position;
      pendingEvents += 1;
    }
    const stored = new Map<string, Doc | null>();
    for (const [collection, ids] of wanted) {
      const list = [...ids];
      const docs = await readStore.collection(collection).getMany(list);
      list.forEach((id, i) => stored.set(overlayKey(collection, id), docs[i]));
    }
    for (const { state, event, updates } of work) {
      try {
        for (const update of updates) {
          const key = overlayKey(update.collection, update.id);
          const current = state.overlay.has(key) ? state.overlay.get(key)!.doc : (stored.get(key) ?? null);
          const next = update.evolve(current);
          if (next === current) continue; // unchanged by contract
          if (next && next.id !== update.id) throw new Error(`evolve of ${update.collection}/${update.id} returned id ${String(next.id)}`);
          state.overlay.set(key, { collection: update.collection, id: update.id, doc: next as Doc | null });
          state.lastChange = event.position;
        }
      } catch (error) {
        throw projectionFailed(state, event, error);
      }
    }
  }

  /**
   * One read-store commit. A disk that is full right now (a storage fault) is waited out,
   * retrying with backoff, instead of failing the runner (which stops the process: one full
   * disk took the whole service down, reads and streams included); requests waiting for
   * these read models answer 503 `projection_lag` meanwhile. False when stopped while
   * waiting: nothing was committed, and the next start replays from the checkpoint.
   */
  async function commitWhenPossible(name: string, position: string, changes: Change[]): Promise<boolean> {
    const since = performance.now();
    let told = since;
    for (let attempt = 0; ; attempt++) {
      try {
        await readStore.commit(name, position, changes);
        if (attempt > 0) logger.info({ projection: name, position, stalledMs: Math.round(performance.now() - since) }, 'read models written again');
        return true;
      } catch (error) {
        if (!isStorageFault(error)) throw error;
        if (stopped) return false; // the last flush of a stop: the next start replays it
        if (attempt === 0) logger.warn({ err: error, projection: name, position }, 'read models cannot be written (storage full?); retrying until they can');
        else if (performance.now() - told >= 60_000) {
          // Still refused a minute later: a full disk nobody freed, or a failing one (SQLite
          // reports EIO as a refused write too). Said louder, once a minute.
          told = performance.now();
          logger.error({ err: error, projection: name, position, stalledMs: Math.round(told - since) }, 'read models still cannot be written');
        }
        for (let waited = 0, delay = Math.min(1_000, 50 * 2 ** attempt); waited < delay; waited += 50) {
          if (stopped) return false;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      }
    }
  }

  /** Processes the gathered events, commits each projection's pending changes and checkpoint; then wakes the waiters. */
  async function flush(force = false): Promise<void> {
    if (failure) return; // a failed batch may hold half an event: never commit it
    await processGathered();
    for (const state of states) {
      if (comparePositions(state.position, state.committed) <= 0) continue;
      if (state.overlay.size === 0 && !force && state.sinceCommit < CHECKPOINT_EVERY) continue;
      // Changes are committed at the position of the last event that made one, not at the end
      // of the batch: every process that projects the same log (the cluster's worker and the
      // gateways following it) then names the same position for the same change, and a
      // gateway waiting for the worker to hold its change waits for exactly that one (the
      // worker, batching differently, may never commit at this batch's end). The events
      // after it changed nothing here; a restart replays them as no-ops (or, when the
      // checkpoint is due anyway, a commit without changes moves it to the batch's end).
      if (state.overlay.size > 0) {
        if (!(await commitWhenPossible(state.projection.name, state.lastChange!, [...state.overlay.values()]))) return;
        state.overlay.clear();
        state.committed = state.lastChange;
        state.lastChange = null;
      }
      if ((force || state.sinceCommit >= CHECKPOINT_EVERY) && comparePositions(state.position, state.committed) > 0) {
        if (!(await commitWhenPossible(state.projection.name, state.position!, []))) return;
        state.committed = state.position;
      }
      state.sinceCommit = 0;
    }
    pendingEvents = 0;
    if (comparePositions(seen, processed) > 0) processed = seen;
    for (const waiter of waiters) {
      if (comparePositions(processed, waiter.position) >= 0) settle(waiter);
    }
  }

  function scheduleFlush(): void {
    if (flushTimer) return;
    // setImmediate runs after the pending microtasks, i.e. after the subscription delivered
    // whatever it already had in hand: that is the batch.
    flushTimer = setImmediate(() => {
      flushTimer = null;
      serial(() => flush()).catch((error) => fail(error));
    });
  }

  function settle(waiter: Waiter, error?: Error): void {
    waiters.delete(waiter);
    if (waiter.timer) clearTimeout(waiter.timer);
    if (error) waiter.reject(error);
    else waiter.resolve();
  }

  function fail(error: unknown): void {
    if (failure) return;
    failure =
      error instanceof ProjectionFailedError
        ? error
        : new ProjectionFailedError(`projection runner failed: ${(error as Error)?.message ?? String(error)}`, undefined, undefined, {
            cause: error,
          });
    const failed = failure as ProjectionFailedError;
    logger.error(
      { err: error, projection: failed.projection, eventType: failed.event?.type, position: failed.event?.position, stream: failed.event?.stream },
      'projection runner stopped: read models will not advance until the cause is fixed and the service restarted',
    );
    subscription?.close();
    subscription = null;
    if (flushTimer) clearImmediate(flushTimer);
    flushTimer = null;
    for (const waiter of waiters) settle(waiter, failure);
    rejectDone(failure);
  }

  /** What `subscribe` follows now: the event store (null), or the feed once caught up. */
  let feed: EventFeed | null = null;

  function subscribe(): void {
    const mine = ++generation;
    const after = minPosition(states.map((s) => s.position));
    const handle = (event: RecordedEvent) =>
      serial(async () => {
        if (mine !== generation || failure || stopped) return;
        try {
          gathered.push(event);
          if (pendingEvents + gathered.length >= MAX_BATCH) await flush();
          else scheduleFlush();
        } catch (error) {
          fail(error);
        }
      });
    const sub = feed
      ? feed.subscribe({ after, group: PROJECTIONS_GROUP }, async (event) => {
          await handle(event);
          // Settled once committed by every projection (rejects, holding the feed, on failure or stop).
          return { settled: waitFor(event.position, Infinity) };
        })
      : eventStore.subscribeAll({ after }, handle);
    sub.done.catch((error) => {
      if (mine === generation) fail(error);
    });
    subscription = sub;
  }

  /** Stops delivery and commits everything processed so far. */
  async function pause(): Promise<void> {
    generation += 1;
    subscription?.close();
    subscription = null;
    if (flushTimer) clearImmediate(flushTimer);
    flushTimer = null;
    await serial(() => flush(true)).catch((error) => {
      fail(error);
      throw failure;
    });
  }

  function failIfFailed(): void {
    if (failure) throw failure;
  }

  /**
   * Follows the log: the event store, and with a feed (the cluster worker), the event store up
   * to its head first and the feed from then on. The feed's consumer group resumes at its own
   * committed offset, which can be past what a projection has (new in this release, a `:vN`
   * bump, a rebuild, a catch-up cut short by a stop): read from the event store, those events
   * are not skipped, and once every projection is at the head the group's offset (never past
   * the head) is at or below every checkpoint.
   */
  async function followLog(): Promise<void> {
    feed = null;
    subscribe();
    if (!deps.feed) return;
    const head = await eventStore.headPosition();
    if (head) await waitFor(head, Infinity);
    await pause();
    if (stopped || failure) return; // stopped (or failed) during the catch-up: no feed to open
    feed = deps.feed;
    subscribe();
    logger.info({ position: head }, 'projections caught up from the event store: following the feed');
  }

  async function start(): Promise<void> {
    failIfFailed();
    if (started) return;
    if (stopped) throw new Error('projection runner was stopped');
    started = true;
    await readStore.ensureCollections(deps.projections.flatMap((p) => p.collections));
    for (const state of states) {
      state.committed = state.position = await readStore.getCheckpoint(state.projection.name);
      // No checkpoint: the projection starts from the first event, so whatever its collections
      // hold came from an earlier version of it (a `:vN` bump) or from a commit the store did
      // not finish; both are rebuilt from the log (by the writer: a follower only observes).
      if (state.position === null && !readStore.follower) {
        await readStore.reset(state.projection.name, [...state.collections]);
        logger.info({ projection: state.projection.name }, 'building projection from the first event');
      }
    }
    processed = seen = minPosition(states.map((s) => s.position));
    logger.info({ projections: [...names], from: processed }, 'projection runner started');
    await followLog();
  }

  function waitFor(position: string, timeoutMs = DEFAULT_WAIT_MS): Promise<void> {
    if (failure) return Promise.reject(failure);
    if (comparePositions(processed, position) >= 0) return Promise.resolve();
    if (stopped) return Promise.reject(new Error('projection runner is stopped'));
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { position, resolve, reject };
      if (Number.isFinite(timeoutMs)) {
        waiter.timer = setTimeout(() => settle(waiter, new ProjectionLagError(position, processed, timeoutMs)), timeoutMs);
      }
      waiters.add(waiter);
    });
  }

  return {
    start,
    done,
    waitFor,
    position: () => processed,
    positions: () => states.map((s) => ({ projection: s.projection.name, position: s.position })),

    async rebuild(only) {
      failIfFailed();
      if (stopped) throw new Error('projection runner is stopped');
      // A projection is named with or without its version (`mail` or `mail:v2`).
      const named = (s: ProjectionState, name: string) => s.projection.name === name || s.projection.name.split(':')[0] === name;
      const selected = only ? states.filter((s) => only.some((name) => named(s, name))) : states;
      const unknown = (only ?? []).filter((name) => !states.some((s) => named(s, name)));
      if (unknown.length) throw new Error(`unknown projections: ${unknown.join(', ')} (there are: ${[...names].join(', ')})`);

      if (!started) await start();
      await pause();
      for (const state of selected) {
        await readStore.reset(state.projection.name, [...state.collections]);
        state.position = state.committed = null;
        state.lastChange = null;
        state.sinceCommit = 0;
      }
      // The others keep their checkpoints and skip what they already have. The replay reads
      // the event store (followLog): a feed's group resumes from its own position, not the start.
      processed = seen = minPosition(states.map((s) => s.position));
      logger.info({ projections: selected.map((s) => s.projection.name) }, 'rebuilding projections');
      await followLog();
      const head = await eventStore.headPosition();
      if (head) await waitFor(head, Infinity);
      logger.info({ projections: selected.map((s) => s.projection.name), position: head }, 'projections rebuilt');
    },

    async stop() {
      if (stopped) return;
      stopped = true;
      if (started && !failure) await pause();
      const error = failure ?? new Error('projection runner is stopped');
      for (const waiter of waiters) settle(waiter, error);
      if (!failure) resolveDone();
    },
  };
}
