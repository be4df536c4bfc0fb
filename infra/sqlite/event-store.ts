/**
 * Embedded event store: one SQLite file (through ./driver.js), no server to run.
 *
 * - Writes go through ONE writer connection in a worker thread (./event-store-writer.js).
 *   Appends are queued here and sent as batches: one transaction and one fsync for
 *   everything queued while the previous batch committed (group commit). WAL with
 *   `synchronous = FULL`: an append whose promise resolved survives kill -9 and power loss.
 * - Reads use a read-only connection on the main thread (WAL lets it run while the writer
 *   commits). They are synchronous but short: indexed lookups, bounded by maxCount.
 * - Live subscriptions are an in-memory fan-out of what the writer reports as committed,
 *   not a poll per subscriber; each subscription has its own queue, so a slow handler
 *   delays only itself. A recorded event object is shared by the append result and every
 *   subscriber that receives it: treat events as read-only.
 * - Positions are the table's INTEGER PRIMARY KEY, exposed as decimal strings.
 *
 * If the writer dies, pending appends reject with EventStoreUnavailableError, and so does
 * every later append: the process must be restarted (we never guess whether a batch
 * committed). Reads keep working.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { limitSql, openDatabase, type Database, type Statement } from './driver.js';
import {
  comparePositions,
  EventStoreUnavailableError,
  InvalidPositionError,
  WrongExpectedRevisionError,
  type AllFilter,
  type AppendResult,
  type EventData,
  type EventHandler,
  type EventStore,
  type ExpectedRevision,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  type Subscription,
} from '../ports/event-store.js';

export interface EventStoreLogger {
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

export interface SqliteEventStoreOptions {
  /** Path of the database file; its directory is created when missing. */
  file: string;
  /** Where writer failures and failed subscriptions are reported. Default: console. */
  logger?: EventStoreLogger;
}

export interface SqliteEventStoreStats {
  /** Transactions committed (or attempted) by the writer. */
  batches: number;
  /** Appends carried by those batches (successful or not). */
  appends: number;
}

/** The port plus what only this adapter offers. */
export interface SqliteEventStore extends EventStore {
  /** Group-commit counters since the store was opened. */
  stats(): SqliteEventStoreStats;
  /** Test hook: kills the writer thread as a crash would. */
  crashWriterForTesting(): Promise<void>;
}

/**
 * Opens (creating when missing) the event store in `options.file`. Resolves once the writer
 * thread has the schema ready; rejects with EventStoreUnavailableError when it cannot start.
 */
export async function openSqliteEventStore(options: SqliteEventStoreOptions): Promise<SqliteEventStore> {
  if (options.file === ':memory:' || options.file === '') {
    throw new Error('the SQLite event store needs a file: the writer thread and the reader share it');
  }
  fs.mkdirSync(path.dirname(path.resolve(options.file)), { recursive: true });
  const worker = new Worker(new URL('./event-store-writer.js', import.meta.url), {
    workerData: { file: options.file },
    // Plain JS: no TypeScript loader needed, so do not start `--import tsx` in the thread.
    execArgv: [],
  });
  try {
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      const onExit = (code: number) => reject(new Error(`writer thread exited with code ${code} while starting`));
      worker.once('error', onError);
      worker.once('exit', onExit);
      worker.once('message', (msg: WriterMessage) => {
        worker.off('error', onError);
        worker.off('exit', onExit);
        if (msg.type === 'ready') resolve();
        else reject(new Error(`unexpected first message from the writer thread: ${msg.type}`));
      });
    });
  } catch (err) {
    await worker.terminate();
    throw new EventStoreUnavailableError(`cannot open event store ${options.file}: ${errorMessage(err)}`, { cause: err });
  }
  // Opened after the writer created the file and the schema; readonly also guards against
  // a write slipping past the single-writer design.
  const reader = openDatabase(options.file, { readonly: true, fileMustExist: true });
  return new SqliteStore(worker, reader, options.logger ?? console);
}

// ---------------------------------------------------------------------------------------
// Messages shared with ./event-store-writer.js (which documents them in JSDoc).

interface SerializedEvent {
  id: string;
  type: string;
  data: string;
  metadata: string;
}
interface AppendRequest {
  stream: string;
  expected: ExpectedRevision;
  events: SerializedEvent[];
}
interface Row {
  position: number;
  id: string;
  stream: string;
  revision: number;
  type: string;
  data: string;
  metadata: string;
  recordedAt: string;
}
type Appended =
  | { replay: false; firstRevision: number; positions: number[]; recordedAt: string }
  | { replay: true; rows: Row[] };
type AppendFailure =
  | { kind: 'wrong_expected_revision'; stream: string; expected: ExpectedRevision; actual: number }
  | { kind: 'invalid'; message: string }
  | { kind: 'unavailable'; message: string };
type Outcome = { ok: true; value: Appended } | { ok: false; error: AppendFailure };
type WriterMessage =
  | { type: 'ready' }
  | { type: 'batch'; results: Outcome[] }
  | { type: 'batch_failed'; message: string };

// ---------------------------------------------------------------------------------------

interface PendingAppend {
  request: AppendRequest;
  resolve(result: AppendResult): void;
  reject(err: Error): void;
}

/** Bounds one transaction (and one message) when a huge backlog builds up. */
const MAX_APPENDS_PER_BATCH = 5000;
/** Page size of a subscription's catch-up. */
const CATCH_UP_PAGE = 500;
/** Up to this many streams, a filtered read goes stream by stream (readStreamsNow). */
const FEW_STREAMS = 8;
const POSITION = /^(0|[1-9][0-9]*)$/;
const COLUMNS = 'position, id, stream, revision, type, data, metadata, recorded_at AS recordedAt';

class SqliteStore implements SqliteEventStore {
  private queue: PendingAppend[] = [];
  private inFlight: PendingAppend[] | null = null;
  private flushScheduled = false;
  private idleWaiters: Array<() => void> = [];
  /** Set once the writer died: every later append fails with it. */
  private failure: EventStoreUnavailableError | null = null;
  private closing: Promise<void> | null = null;
  private readerClosed = false;
  private writerExitExpected = false;
  private readonly counters: SqliteEventStoreStats = { batches: 0, appends: 0 };
  private readonly fanout = new Fanout();

  constructor(
    private readonly worker: Worker,
    private readonly reader: Database,
    private readonly logger: EventStoreLogger,
  ) {
    worker.on('message', (msg: WriterMessage) => this.onWriterMessage(msg));
    worker.on('error', (err) => this.writerDied(err));
    worker.on('exit', (code) => {
      if (!this.writerExitExpected) this.writerDied(new Error(`writer thread exited with code ${code}`));
    });
    // An idle store must not keep the process alive; a busy one must (see flush()).
    worker.unref();
  }

  stats(): SqliteEventStoreStats {
    return { ...this.counters };
  }

  // ----- appends -------------------------------------------------------------------------

  append(
    stream: string,
    events: EventData[],
    options: { expectedRevision?: ExpectedRevision } = {},
  ): Promise<AppendResult> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.closing) return Promise.reject(new EventStoreUnavailableError('event store is closed'));
    let request: AppendRequest;
    try {
      request = serializeAppend(stream, events, options.expectedRevision ?? 'any');
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise<AppendResult>((resolve, reject) => {
      this.queue.push({ request, resolve, reject });
      // Everything appended in this same tick goes into one batch.
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        queueMicrotask(() => this.flush());
      }
    });
  }

  /** Sends the queue as one batch, unless a batch is in flight (its reply flushes again). */
  private flush(): void {
    this.flushScheduled = false;
    if (this.inFlight || this.queue.length === 0 || this.failure) return;
    const batch = this.queue.splice(0, MAX_APPENDS_PER_BATCH);
    this.inFlight = batch;
    this.worker.ref(); // keep the process alive until the batch is acknowledged
    this.worker.postMessage({ type: 'batch', appends: batch.map((p) => p.request) });
  }

  private onWriterMessage(msg: WriterMessage): void {
    const batch = this.inFlight;
    if (!batch || msg.type === 'ready') return;
    this.inFlight = null;
    this.counters.batches += 1;
    this.counters.appends += batch.length;
    if (msg.type === 'batch_failed') {
      const err = new EventStoreUnavailableError(`event store commit failed: ${msg.message}`);
      this.logger.error({ err }, 'event store: a batch of appends failed to commit');
      for (const p of batch) p.reject(err);
    } else {
      // Settle the appends and feed the subscriptions in the same synchronous step, in
      // position order: whoever observes a resolved append can also rely on live delivery.
      const committed: RecordedEvent[] = [];
      batch.forEach((pending, i) => {
        const outcome = msg.results[i];
        if (!outcome) {
          pending.reject(new EventStoreUnavailableError('event store writer returned no result for an append'));
        } else if (outcome.ok) {
          const result = toAppendResult(pending.request, outcome.value);
          if (!outcome.value.replay) committed.push(...result.events);
          pending.resolve(result);
        } else {
          pending.reject(toError(outcome.error));
        }
      });
      this.fanout.dispatch(committed);
    }
    if (this.queue.length > 0) this.flush();
    else this.becameIdle();
  }

  private becameIdle(): void {
    this.worker.unref();
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const wake of waiters) wake();
  }

  private whenIdle(): Promise<void> {
    if (!this.inFlight && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private writerDied(cause: unknown): void {
    if (this.failure) return;
    this.failure = new EventStoreUnavailableError(
      `event store writer stopped (${errorMessage(cause)}); appends are refused until the process restarts`,
      { cause },
    );
    this.logger.error({ err: cause }, 'event store: the writer thread died; pending appends were rejected');
    const pending = [...(this.inFlight ?? []), ...this.queue];
    this.inFlight = null;
    this.queue = [];
    for (const p of pending) p.reject(this.failure);
    // No live event will ever come again: tell the subscribers instead of leaving them hanging.
    this.fanout.failAll(this.failure);
    this.becameIdle();
  }

  // ----- reads ---------------------------------------------------------------------------

  async readStream(stream: string, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    const limit = maxCountOf(options.maxCount);
    if (options.fromRevision !== undefined) checkNonNegativeInteger('fromRevision', options.fromRevision);
    const rows =
      options.direction === 'backwards'
        ? // Backwards, fromRevision is where reading starts going down (default: the end).
          this.statement(`SELECT ${COLUMNS} FROM events WHERE stream = ? AND revision <= ? ORDER BY revision DESC${limitSql(limit)}`).all(
            stream,
            options.fromRevision ?? Number.MAX_SAFE_INTEGER,
          )
        : this.statement(`SELECT ${COLUMNS} FROM events WHERE stream = ? AND revision >= ? ORDER BY revision ASC${limitSql(limit)}`).all(stream, options.fromRevision ?? 0);
    return (rows as Row[]).map(fromRow);
  }

  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    return this.readAllNow(options);
  }

  /** Synchronous readAll: the subscriptions' catch-up relies on it not interleaving. */
  readAllNow(options: ReadAllOptions): RecordedEvent[] {
    const limit = maxCountOf(options.maxCount);
    const after = options.after == null ? 0 : parsePosition(options.after);
    const filter = options.filter ?? {};
    if (filter.streams && !filter.streamPrefixes && filter.streams.length <= FEW_STREAMS) return this.readStreamsNow(filter.streams, after, limit, filter.eventTypes);
    const where = ['position > ?'];
    const params: unknown[] = [after];
    if (filter.streams) {
      // json_each keeps one statement whatever the list length (and no parameter limit).
      where.push('stream IN (SELECT value FROM json_each(?))');
      params.push(JSON.stringify(filter.streams));
    }
    if (filter.streamPrefixes) {
      const ranges = filter.streamPrefixes.map((prefix) => {
        // A prefix is a range of the (stream, position) index: [prefix, successor).
        const upper = prefixSuccessor(prefix);
        if (upper !== null) {
          params.push(prefix, upper);
          return '(stream >= ? AND stream < ?)';
        }
        params.push([...prefix].length, prefix); // substr counts characters (code points)
        return '(substr(stream, 1, ?) = ?)';
      });
      where.push(ranges.length ? `(${ranges.join(' OR ')})` : '0');
    }
    if (filter.eventTypes) {
      where.push('type IN (SELECT value FROM json_each(?))');
      params.push(JSON.stringify(filter.eventTypes));
    }
    const sql = `SELECT ${COLUMNS} FROM events WHERE ${where.join(' AND ')} ORDER BY position${limitSql(limit)}`;
    return (this.statement(sql).all(...params) as Row[]).map(fromRow);
  }

  /**
   * A few streams' events after `after` in global order: each stream read along its own
   * (stream, position) index, then merged. As one statement, SQLite took the type index for
   * a type filter (every identity's mail since `after` scanned for one identity's replay) or
   * sorted each stream's whole rest for every page.
   */
  private readStreamsNow(streams: string[], after: number, limit: number, types: string[] | undefined): RecordedEvent[] {
    // `+type`: filtered per row, never the index to walk.
    const sql = `SELECT ${COLUMNS} FROM events WHERE stream = ? AND position > ?${types ? ' AND +type IN (SELECT value FROM json_each(?))' : ''} ORDER BY position${limitSql(limit)}`;
    const statement = this.statement(sql);
    const rows: Row[] = [];
    for (const stream of new Set(streams)) rows.push(...((types ? statement.all(stream, after, JSON.stringify(types)) : statement.all(stream, after)) as Row[]));
    rows.sort((a, b) => a.position - b.position);
    return (limit < 0 ? rows : rows.slice(0, limit)).map(fromRow); // -1: no limit
  }

  async headPosition(): Promise<string | null> {
    const { head } = this.statement('SELECT MAX(position) AS head FROM events').get() as { head: number | null };
    return head === null ? null : String(head);
  }

  private statement(sql: string): Statement {
    if (this.readerClosed) throw new EventStoreUnavailableError('event store is closed');
    return this.reader.statement(sql);
  }

  // ----- subscriptions -------------------------------------------------------------------

  subscribeAll(options: SubscribeOptions, handler: EventHandler): Subscription {
    if (this.closing) throw new EventStoreUnavailableError('event store is closed');
    if (options.after != null) parsePosition(options.after);
    return new CatchUpSubscription(this, this.fanout, options, handler, this.logger, this.failure);
  }

  // ----- lifecycle -----------------------------------------------------------------------

  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    await this.whenIdle(); // appends made before close() are committed, not dropped
    this.fanout.closeAll();
    if (!this.failure) {
      this.writerExitExpected = true;
      const exited = new Promise<void>((resolve) => this.worker.once('exit', () => resolve()));
      this.worker.ref();
      this.worker.postMessage({ type: 'close' });
      const timer = setTimeout(() => void this.worker.terminate(), 5000);
      await exited;
      clearTimeout(timer);
    }
    this.readerClosed = true;
    this.reader.close();
  }

  async crashWriterForTesting(): Promise<void> {
    await this.worker.terminate();
  }
}

// ---------------------------------------------------------------------------------------
// Live fan-out

/** Routes committed events to subscriptions; exact-stream subscriptions are indexed. */
class Fanout {
  private readonly byStream = new Map<string, Set<CatchUpSubscription>>();
  private readonly others = new Set<CatchUpSubscription>();

  add(sub: CatchUpSubscription): void {
    const streams = sub.filter.streams;
    if (!streams) {
      this.others.add(sub);
      return;
    }
    for (const stream of streams) {
      let set = this.byStream.get(stream);
      if (!set) this.byStream.set(stream, (set = new Set()));
      set.add(sub);
    }
  }

  remove(sub: CatchUpSubscription): void {
    if (!sub.filter.streams) {
      this.others.delete(sub);
      return;
    }
    for (const stream of sub.filter.streams) {
      const set = this.byStream.get(stream);
      set?.delete(sub);
      if (set?.size === 0) this.byStream.delete(stream);
    }
  }

  /** Events in position order; pushing only enqueues, so no handler runs in here. */
  dispatch(events: RecordedEvent[]): void {
    for (const event of events) {
      for (const sub of this.others) if (sub.matches(event)) sub.push(event);
      const subs = this.byStream.get(event.stream);
      if (subs) for (const sub of subs) if (sub.matches(event)) sub.push(event);
    }
  }

  closeAll(): void {
    for (const sub of this.all()) sub.close();
  }

  failAll(err: Error): void {
    for (const sub of this.all()) sub.fail(err);
  }

  private all(): Set<CatchUpSubscription> {
    const all = new Set(this.others);
    for (const subs of this.byStream.values()) for (const sub of subs) all.add(sub);
    return all;
  }
}

/**
 * Registers for live events first, then pages through history, then drains the live
 * queue skipping what the history already delivered: no gap (anything committed after
 * registration is queued) and no duplicate (positions only grow).
 */
class CatchUpSubscription implements Subscription {
  readonly done: Promise<void>;
  readonly filter: AllFilter;
  private readonly matchesFilter: (event: RecordedEvent) => boolean;
  private queue: Array<RecordedEvent | undefined> = [];
  private head = 0;
  private wake: (() => void) | null = null;
  private closed = false;
  private failure: Error | null = null;

  constructor(
    private readonly store: SqliteStore,
    private readonly fanout: Fanout,
    private readonly options: SubscribeOptions,
    private readonly handler: EventHandler,
    logger: EventStoreLogger,
    storeFailure: Error | null,
  ) {
    this.filter = options.filter ?? {};
    this.matchesFilter = compileFilter(this.filter);
    fanout.add(this);
    if (storeFailure) this.fail(storeFailure);
    this.done = this.run();
    // Whoever awaits `done` sees the error; if nobody does, it is logged instead of
    // crashing the process as an unhandled rejection.
    this.done.catch((err) => logger.warn({ err }, 'event store: a subscription stopped with an error'));
  }

  matches(event: RecordedEvent): boolean {
    return this.matchesFilter(event);
  }

  push(event: RecordedEvent): void {
    this.queue.push(event);
    this.notify();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.fanout.remove(this);
    this.notify();
  }

  fail(err: Error): void {
    this.failure ??= err;
    this.close();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  private async run(): Promise<void> {
    await null; // let subscribeAll() return before the first handler call
    try {
      await this.deliver();
    } catch (err) {
      this.fail(err instanceof Error ? err : new Error(String(err)));
    }
    this.close();
    if (this.failure) throw this.failure;
  }

  private async deliver(): Promise<void> {
    let last = this.options.after ?? null;
    // Catch-up. Reads are synchronous: nothing is dispatched between a read and its use.
    for (;;) {
      if (this.closed) return;
      const page = this.store.readAllNow({ after: last, maxCount: CATCH_UP_PAGE, filter: this.filter });
      for (const event of page) {
        if (this.closed) return;
        await this.handler(event);
        last = event.position;
      }
      if (page.length < CATCH_UP_PAGE) break;
    }
    // Live.
    for (;;) {
      while (this.head < this.queue.length) {
        if (this.closed) return;
        const event = this.queue[this.head] as RecordedEvent;
        this.queue[this.head++] = undefined; // let delivered events be collected
        if (comparePositions(event.position, last) <= 0) continue; // delivered by the catch-up
        await this.handler(event);
        last = event.position;
      }
      this.queue = [];
      this.head = 0;
      if (this.closed) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Helpers

function serializeAppend(stream: string, events: EventData[], expected: ExpectedRevision): AppendRequest {
  if (typeof stream !== 'string' || stream === '') throw new Error('append: stream name must be a non-empty string');
  if (!Array.isArray(events) || events.length === 0) throw new Error(`append to ${stream}: no events to append`);
  if (typeof expected === 'number') checkNonNegativeInteger('expectedRevision', expected);
  else if (expected !== 'any' && expected !== 'no_stream' && expected !== 'stream_exists') {
    throw new Error(`append to ${stream}: invalid expectedRevision ${String(expected)}`);
  }
  const ids = new Set<string>();
  const serialized = events.map((event, i) => {
    const where = `append to ${stream}: event #${i}`;
    if (typeof event?.id !== 'string' || event.id === '') throw new Error(`${where} has no id`);
    if (ids.has(event.id)) throw new Error(`${where} repeats event id ${event.id}`);
    ids.add(event.id);
    if (typeof event.type !== 'string' || event.type === '') throw new Error(`${where} (${event.id}) has no type`);
    return {
      id: event.id,
      type: event.type,
      data: toJson(event.data, `${where} (${event.id}) data`),
      metadata: toJson(event.metadata ?? {}, `${where} (${event.id}) metadata`),
    };
  });
  return { stream, expected, events: serialized };
}

function toJson(value: unknown, what: string): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (err) {
    throw new Error(`${what} is not JSON-serializable: ${errorMessage(err)}`);
  }
  if (json === undefined) throw new Error(`${what} is missing or not JSON-serializable`);
  return json;
}

function toAppendResult(request: AppendRequest, appended: Appended): AppendResult {
  const events = appended.replay
    ? appended.rows.map(fromRow)
    : request.events.map(
        (e, i): RecordedEvent => ({
          id: e.id,
          type: e.type,
          stream: request.stream,
          revision: appended.firstRevision + i,
          position: String(appended.positions[i]),
          data: JSON.parse(e.data),
          metadata: JSON.parse(e.metadata),
          recordedAt: appended.recordedAt,
        }),
      );
  const last = events[events.length - 1]!;
  return { nextRevision: last.revision, position: last.position, events };
}

function toError(failure: AppendFailure): Error {
  switch (failure.kind) {
    case 'wrong_expected_revision':
      return new WrongExpectedRevisionError(failure.stream, failure.expected, failure.actual);
    case 'invalid':
      return new Error(failure.message);
    case 'unavailable':
      return new EventStoreUnavailableError(`event store append failed: ${failure.message}`);
  }
}

function fromRow(row: Row): RecordedEvent {
  return {
    id: row.id,
    type: row.type,
    stream: row.stream,
    revision: row.revision,
    position: String(row.position),
    data: JSON.parse(row.data),
    metadata: JSON.parse(row.metadata),
    recordedAt: row.recordedAt,
  };
}

function compileFilter(filter: AllFilter): (event: RecordedEvent) => boolean {
  const streams = filter.streams && new Set(filter.streams);
  const types = filter.eventTypes && new Set(filter.eventTypes);
  const prefixes = filter.streamPrefixes;
  return (event) =>
    (!streams || streams.has(event.stream)) &&
    (!types || types.has(event.type)) &&
    (!prefixes || prefixes.some((p) => event.stream.startsWith(p)));
}

/**
 * The smallest string greater than every string starting with `prefix` (SQLite compares
 * TEXT as UTF-8 bytes, i.e. by code point): the last code point incremented. Null when
 * there is no such bound (empty prefix, or the last code point is U+10FFFF).
 */
function prefixSuccessor(prefix: string): string | null {
  const codePoints = [...prefix];
  const last = codePoints.pop();
  if (last === undefined) return null;
  let next = last.codePointAt(0)! + 1;
  if (next === 0xd800) next = 0xe000; // skip the surrogate range
  if (next > 0x10ffff) return null;
  return codePoints.join('') + String.fromCodePoint(next);
}

function parsePosition(position: string): number {
  if (typeof position !== 'string' || !POSITION.test(position)) throw new InvalidPositionError(String(position));
  return Number(position);
}

function maxCountOf(maxCount: number | undefined): number {
  if (maxCount === undefined) return -1; // SQLite: LIMIT -1 = no limit
  checkNonNegativeInteger('maxCount', maxCount);
  return maxCount;
}

function checkNonNegativeInteger(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got ${value}`);
}

/** An error's words; one thrown in the writer thread may arrive as a plain object (its `message` and `code` kept). */
function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  const e = err as { message?: unknown; code?: unknown } | null;
  if (e && typeof e === 'object' && typeof e.message === 'string') return typeof e.code === 'string' ? `${e.message} (${e.code})` : e.message;
  return String(err);
}
