/**
 * Event store on EventStoreDB (@eventstore/db-client v6), for the cluster mode.
 *
 * Same port and same contract suite as the embedded SQLite store
 * (test/contract/event-store.contract.ts; run it with EVENTSTORE_URL set). How the port's
 * promises are kept on EventStoreDB:
 * - Expected revisions map one to one (our 0-based revision = the server's revision).
 * - Idempotency by event id: the server dedupes a retried append whose expected revision
 *   still holds; when it does not (the stream moved on), the adapter reads back where an
 *   earlier attempt of the same append can be (after its expected revision; the last
 *   RECENT_WINDOW events for 'any'/'stream_exists') on WrongExpectedVersion and returns the
 *   original result if every id is recorded there, in order. The append result is read back
 *   from the stream, so it always carries the recorded revisions, positions and times (one
 *   extra read per append). Ids are compared lowercase: the server records UUIDs so.
 * - Positions: `commit * 2^64 + prepare` as a decimal string (see ./mapping.ts).
 * - Filters: server-side (one stream-name or event-type filter, see planFilter), re-checked
 *   on the client. Filtered reads of $all use a filtered catch-up subscription up to the
 *   head taken at the start (the v6 client's readAll has no filter); they stop at the
 *   server's "caught up" signal or at a checkpoint past that head.
 * - Connections: subscriptions run on a second client with a connection of its own. The
 *   server serves ~100 concurrent calls per connection (Kestrel's MaxStreamsPerConnection)
 *   and the client queues the rest without error: a subscription holds a call for as long
 *   as it runs, so sharing would let them starve appends and reads. Every read that stops
 *   early cancels its call (see cancelOnExit), or it would hold one for good.
 * - A subscription the server drops (restart, leader election, transport error) is resumed
 *   after its last delivered event, with backoff; it fails only after RESUBSCRIBE.maxFailures
 *   attempts in a row that got nowhere.
 * - Requires EventStoreDB 23.10 or later: filtered reads end at the server's caught-up
 *   signal (new in 23.10), and events of stream reads carry their log position (22.10).
 *
 * Known differences, also in docs/DEPLOYMENT.md: an id reused in ANOTHER stream is not
 * detected (EventStoreDB has no index by event id); 'any' appends rely on the server's
 * recent-id cache for deduplication, exactly as EventStoreDB documents.
 */
import * as esdb from '@eventstore/db-client';
import {
  comparePositions,
  EventStoreUnavailableError,
  WrongExpectedRevisionError,
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
import {
  decodePosition,
  decodeRecordPosition,
  encodePosition,
  isStreamNotFound,
  locateIds,
  ownConnectionUrl,
  planFilter,
  toEsdbExpectedRevision,
  toRecordedEvent,
  translateError,
  type EsdbPosition,
  type EsdbRecorded,
  type FilterPlan,
  type ServerFilter,
} from './mapping.js';

export { AppendTooLargeError } from './mapping.js';

const { EventStoreDBClient, jsonEvent, streamNameFilter, eventTypeFilter, START, END, FORWARDS, BACKWARDS } = esdb;
type Client = InstanceType<typeof EventStoreDBClient>;

export interface EventStoreDbLogger {
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** How a dropped subscription is resumed: backoff from firstDelayMs doubling up to maxDelayMs. */
export interface ResubscribePolicy {
  firstDelayMs: number;
  maxDelayMs: number;
  /** Attempts in a row that got nowhere (no confirmation, no event) before `done` rejects. */
  maxFailures: number;
}

export interface EventStoreDbOptions {
  /** `esdb://host:2113?tls=false` (single node) or a cluster connection string. */
  url: string;
  logger?: EventStoreDbLogger;
  /** Defaults to RESUBSCRIBE (tests shorten it). */
  resubscribe?: Partial<ResubscribePolicy>;
}

const PAGE = 500;
/** How far back an earlier attempt of an 'any' or 'stream_exists' append is looked for. */
const RECENT_WINDOW = 1000;
/** Concurrent calls EventStoreDB serves per connection by default; the client queues the rest silently. */
const CALLS_PER_CONNECTION = 100;
/** Sized for a leader election or a restart: some 6½ minutes of retries before giving up. */
const RESUBSCRIBE: ResubscribePolicy = { firstDelayMs: 250, maxDelayMs: 30_000, maxFailures: 20 };

/** Connects (lazily: the clients connect on first use) and checks the server answers. */
export async function openEventStoreDb(options: EventStoreDbOptions): Promise<EventStore> {
  const client = EventStoreDBClient.connectionString(options.url);
  const subscriptionClient = EventStoreDBClient.connectionString(ownConnectionUrl(options.url));
  const policy = { ...RESUBSCRIBE, ...options.resubscribe };
  const store = new EventStoreDbStore(client, subscriptionClient, options.logger ?? console, policy);
  try {
    await store.headPosition();
  } catch (err) {
    await Promise.allSettled([client.dispose(), subscriptionClient.dispose()]);
    throw err instanceof EventStoreUnavailableError
      ? err
      : new EventStoreUnavailableError(`cannot reach EventStoreDB: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
  return store;
}

class EventStoreDbStore implements EventStore {
  private closed = false;
  private readonly subscriptions = new Set<EsdbSubscription>();

  constructor(
    private readonly client: Client,
    /** Subscriptions only: their long-lived calls never use up the ones appends and reads need. */
    private readonly subscriptionClient: Client,
    private readonly logger: EventStoreDbLogger,
    private readonly resubscribe: ResubscribePolicy,
  ) {}

  async append(stream: string, events: EventData[], options: { expectedRevision?: ExpectedRevision } = {}): Promise<AppendResult> {
    this.checkOpen();
    validateAppend(stream, events);
    const expected = options.expectedRevision ?? 'any';
    const expectedRevision = toEsdbExpectedRevision(expected);
    const ids = events.map((e) => eventId(e.id));
    let nextRevision: number;
    try {
      const result = await this.client.appendToStream(
        stream,
        events.map((e, i) => jsonEvent({ id: ids[i]!, type: e.type, data: e.data as never, metadata: (e.metadata ?? {}) as never })),
        { expectedRevision },
      );
      nextRevision = Number(result.nextExpectedRevision);
    } catch (err) {
      const translated = translateError(err, { stream, expected, operation: 'append' });
      if (translated instanceof WrongExpectedRevisionError) {
        // A retry of an append that went through (the stream moved on since)?
        const located = locateIds(ids, await this.earlierAttempt(stream, expected, ids.length));
        if (located.kind === 'all') return resultOf(located.events);
        if (located.kind === 'partial') throw partlyRecorded(stream, located.found);
      }
      throw translated;
    }
    const first = nextRevision - events.length + 1;
    const written = first >= 0 ? await this.readStream(stream, { fromRevision: first, maxCount: events.length }) : [];
    if (written.length === ids.length && written.every((e, i) => e.id === ids[i])) return resultOf(written);
    // The server deduplicated the append onto an earlier write of the same ids.
    const located = locateIds(ids, await this.earlierAttempt(stream, expected, ids.length));
    if (located.kind === 'all') return resultOf(located.events);
    if (located.kind === 'partial') throw partlyRecorded(stream, located.found);
    throw new EventStoreUnavailableError(`append to ${stream}: acknowledged, but the events are not in the stream`);
  }

  async readStream(stream: string, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    this.checkOpen();
    const backwards = options.direction === 'backwards';
    if (options.fromRevision !== undefined) checkNonNegativeInteger('fromRevision', options.fromRevision);
    if (options.maxCount !== undefined) checkNonNegativeInteger('maxCount', options.maxCount);
    if (options.maxCount === 0) return [];
    const out: RecordedEvent[] = [];
    try {
      const read = this.client.readStream(stream, {
        direction: backwards ? BACKWARDS : FORWARDS,
        fromRevision: options.fromRevision !== undefined ? BigInt(options.fromRevision) : backwards ? END : START,
        ...(options.maxCount !== undefined ? { maxCount: options.maxCount } : {}),
      });
      for await (const resolved of cancelOnExit(read)) {
        const event = toRecordedEvent(resolved.event as EsdbRecorded | undefined);
        if (event) out.push(event);
      }
    } catch (err) {
      if (isStreamNotFound(err)) return [];
      throw translateError(err, { operation: `read of ${stream}` });
    }
    return out;
  }

  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    this.checkOpen();
    if (options.after != null) decodeRecordPosition(options.after);
    if (options.maxCount !== undefined) checkNonNegativeInteger('maxCount', options.maxCount);
    const maxCount = options.maxCount ?? Number.MAX_SAFE_INTEGER;
    if (maxCount === 0) return [];
    const plan = planFilter(options.filter);
    if (plan.empty) return [];
    if (options.filter && Object.keys(options.filter).length > 0) {
      return this.filteredRead(options.after ?? null, plan.server, plan.matches, maxCount);
    }
    // Unfiltered: page through $all, skipping system events.
    const out: RecordedEvent[] = [];
    let from: EsdbPosition | null = options.after != null ? decodePosition(options.after) : null;
    let last = options.after ?? null;
    for (;;) {
      let count = 0;
      try {
        for await (const resolved of cancelOnExit(this.client.readAll({ fromPosition: from ?? START, maxCount: PAGE }))) {
          count++;
          const raw = resolved.event as EsdbRecorded | undefined;
          if (raw?.position) from = raw.position;
          const event = toRecordedEvent(raw);
          if (!event || comparePositions(event.position, last) <= 0 || !plan.matches(event)) continue;
          out.push(event);
          last = event.position;
          if (out.length >= maxCount) return out;
        }
      } catch (err) {
        throw translateError(err, { operation: 'read of $all', position: options.after });
      }
      // fromPosition is inclusive: a full page re-reads its last event, skipped above.
      if (count < PAGE) return out;
    }
  }

  /** A filtered read of $all, served by a server-side filtered catch-up up to the current end. */
  private async filteredRead(
    after: string | null,
    server: ServerFilter,
    matches: (e: { stream: string; type: string }) => boolean,
    maxCount: number,
  ): Promise<RecordedEvent[]> {
    const end = await this.logEnd();
    if (!end || (after !== null && comparePositions(after, encodePosition(end)) >= 0)) return [];
    const endPosition = encodePosition(end);
    const out: RecordedEvent[] = [];
    let finished = false;
    const subscription = this.client.subscribeToAll({
      fromPosition: after !== null ? decodePosition(after) : START,
      filter: toClientFilter(server, (position) => {
        if (comparePositions(encodePosition(position), endPosition) >= 0) finish();
      }),
    });
    const finish = () => {
      if (finished) return;
      finished = true;
      void subscription.unsubscribe().catch(() => {});
    };
    subscription.on('caughtUp', finish);
    try {
      // No break on `finished`: the client emits caughtUp while the last events of the
      // catch-up are still buffered; unsubscribing ends the stream after them, so the loop
      // drains them and then ends.
      for await (const resolved of subscription) {
        const event = toRecordedEvent(resolved.event as EsdbRecorded | undefined);
        if (!event) continue;
        if (comparePositions(event.position, endPosition) > 0) break;
        if (comparePositions(event.position, after) <= 0 || !matches(event)) continue;
        out.push(event);
        if (out.length >= maxCount || event.position === endPosition) break;
      }
    } catch (err) {
      if (!finished) throw translateError(err, { operation: 'filtered read of $all', position: after });
    } finally {
      finish();
    }
    return out;
  }

  /** Position of the last record of $all (system events included), or null when empty. */
  private async logEnd(): Promise<EsdbPosition | null> {
    try {
      for await (const resolved of cancelOnExit(this.client.readAll({ direction: BACKWARDS, fromPosition: END, maxCount: 1 }))) {
        const position = (resolved.event as EsdbRecorded | undefined)?.position;
        if (position) return position;
      }
    } catch (err) {
      throw translateError(err, { operation: 'read of $all' });
    }
    return null;
  }

  async headPosition(): Promise<string | null> {
    this.checkOpen();
    // The last event the port shows: system events at the end are skipped, so waiting for
    // the head (as the runtime does at start) never waits for an event nobody delivers.
    let from: EsdbPosition | typeof END = END;
    for (;;) {
      let count = 0;
      try {
        const page = this.client.readAll({ direction: BACKWARDS, fromPosition: from, maxCount: PAGE });
        for await (const resolved of cancelOnExit(page)) {
          count++;
          const raw = resolved.event as EsdbRecorded | undefined;
          const event = toRecordedEvent(raw);
          if (event) return event.position;
          if (raw?.position) from = raw.position;
        }
      } catch (err) {
        throw translateError(err, { operation: 'read of $all' });
      }
      if (count < PAGE) return null;
    }
  }

  subscribeAll(options: SubscribeOptions, handler: EventHandler): Subscription {
    this.checkOpen();
    if (options.after != null) decodeRecordPosition(options.after);
    const sub = new EsdbSubscription(this.subscriptionClient, options, handler, this.logger, this.resubscribe, () =>
      this.subscriptions.delete(sub),
    );
    this.subscriptions.add(sub);
    if (this.subscriptions.size === CALLS_PER_CONNECTION) {
      this.logger.warn(
        { subscriptions: this.subscriptions.size },
        'event store: subscriptions past this number wait without error unless the EventStoreDB server allows more calls per connection (MaxStreamsPerConnection)',
      );
    }
    return sub;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const sub of this.subscriptions) sub.close();
    await Promise.allSettled([...this.subscriptions].map((s) => s.done));
    await Promise.all([this.client.dispose(), this.subscriptionClient.dispose()]);
  }

  /**
   * Where an earlier attempt of this same append can be: right after the revision it
   * expected (revision 0 for 'no_stream'), else ('any', 'stream_exists') among the stream's
   * last RECENT_WINDOW events. Never the whole stream: hot streams grow without bound.
   */
  private async earlierAttempt(stream: string, expected: ExpectedRevision, count: number): Promise<RecordedEvent[]> {
    if (expected === 'no_stream') return this.readStream(stream, { fromRevision: 0, maxCount: count });
    if (typeof expected === 'number') return this.readStream(stream, { fromRevision: expected + 1, maxCount: count });
    return (await this.readStream(stream, { direction: 'backwards', maxCount: RECENT_WINDOW })).reverse();
  }

  private checkOpen(): void {
    if (this.closed) throw new EventStoreUnavailableError('event store is closed');
  }
}

/**
 * A catch-up subscription on $all: the client's own, made gap- and duplicate-free by position,
 * and resumed after the last delivered event when the server drops it.
 */
class EsdbSubscription implements Subscription {
  readonly done: Promise<void>;
  private closed = false;
  private wakeOnClose: (() => void) | null = null;
  private subscription: ReturnType<Client['subscribeToAll']> | null = null;
  /** Position of the last event delivered (else `after`): a resumed subscription goes on from here. */
  private last: string | null;

  constructor(
    private readonly client: Client,
    private readonly options: SubscribeOptions,
    private readonly handler: EventHandler,
    private readonly logger: EventStoreDbLogger,
    private readonly policy: ResubscribePolicy,
    private readonly onEnd: () => void,
  ) {
    this.last = options.after ?? null;
    this.done = this.run().finally(() => this.onEnd());
    this.done.catch((err) => logger.warn({ err }, 'event store: a subscription stopped with an error'));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.wakeOnClose?.();
    void this.subscription?.unsubscribe().catch(() => {});
  }

  private async run(): Promise<void> {
    await null; // let subscribeAll() return before the first handler call
    if (this.closed) return;
    const plan = planFilter(this.options.filter);
    if (plan.empty) {
      await this.pause(); // nothing can match: idle until closed
      return;
    }
    for (let failures = 0; ; ) {
      const drop = await this.follow(plan);
      if (!drop || this.closed) return;
      failures = drop.progressed ? 1 : failures + 1;
      if (failures >= this.policy.maxFailures) {
        this.closed = true;
        throw drop.error;
      }
      const delayMs = Math.min(this.policy.firstDelayMs * 2 ** (failures - 1), this.policy.maxDelayMs);
      this.logger.warn({ err: drop.error, failures, delayMs, after: this.last }, 'event store: subscription dropped; resubscribing');
      await this.pause(delayMs);
      if (this.closed) return;
    }
  }

  /**
   * One server subscription from `last`, until closed (null) or dropped: why, and whether it
   * got anywhere (confirmed by the server or delivered an event), which resets the backoff.
   * A handler error or a non-transient one ends the subscription (thrown).
   */
  private async follow(plan: FilterPlan): Promise<{ error: EventStoreUnavailableError; progressed: boolean } | null> {
    const subscription = this.client.subscribeToAll({
      fromPosition: this.last !== null ? decodePosition(this.last) : START,
      filter: toClientFilter(plan.server),
    });
    this.subscription = subscription;
    let progressed = false;
    subscription.once('confirmation', () => (progressed = true));
    let handlerFailed = false;
    let handlerError: unknown;
    try {
      for await (const resolved of subscription) {
        if (this.closed) break;
        const event = toRecordedEvent(resolved.event as EsdbRecorded | undefined);
        if (!event || !plan.matches(event) || comparePositions(event.position, this.last) <= 0) continue;
        try {
          await this.handler(event);
        } catch (err) {
          handlerFailed = true;
          handlerError = err;
          break;
        }
        this.last = event.position;
        progressed = true;
      }
    } catch (err) {
      if (this.closed) return null;
      const translated = translateError(err, { operation: 'subscription to $all', position: this.last });
      if (translated instanceof EventStoreUnavailableError) return { error: translated, progressed };
      this.closed = true;
      throw translated;
    } finally {
      this.subscription = null;
      void subscription.unsubscribe().catch(() => {});
    }
    if (handlerFailed) {
      this.closed = true;
      throw handlerError; // as is: the caller sees its own error
    }
    if (this.closed) return null;
    return { error: new EventStoreUnavailableError('EventStoreDB ended the subscription'), progressed };
  }

  /** Waits `ms` (forever without it), or until closed. */
  private pause(ms?: number): Promise<void> {
    return new Promise<void>((resolve) => {
      if (this.closed) return resolve();
      const timer = ms === undefined ? undefined : setTimeout(() => this.wakeOnClose?.(), ms);
      this.wakeOnClose = () => {
        clearTimeout(timer);
        this.wakeOnClose = null;
        resolve();
      };
    });
  }
}

/**
 * Iterates a read and ends its gRPC call however the loop ends. Leaving `for await` early
 * (return, break, throw) only destroys the client's stream: the call stays open on the
 * connection, holding one of the ~100 concurrent calls the server allows per connection, and
 * past them every call (appends too) waits without error. So the call is cancelled, and the
 * stream is drained rather than destroyed: a call that had ended by itself (its last events
 * and status already in) must still reach its end, or the client keeps it for good and
 * dispose() waits for it forever. Exported for its test.
 */
export async function* cancelOnExit<E>(read: esdb.StreamingRead<E>): AsyncGenerator<E> {
  try {
    for await (const item of read.iterator({ destroyOnReturn: false })) yield item as E;
  } finally {
    void read.cancel().catch(() => {});
    read.on('error', () => {}).resume(); // nobody reads on: errors from here on have no one to tell
  }
}

function toClientFilter(server: ServerFilter, checkpoint?: (position: EsdbPosition) => void) {
  const common = checkpoint
    ? { checkpointInterval: 1, checkpointReached: (_: unknown, position: EsdbPosition) => checkpoint(position) }
    : {};
  const make = server.on === 'streamName' ? streamNameFilter : eventTypeFilter;
  return 'regex' in server ? make({ regex: server.regex, ...common }) : make({ prefixes: server.prefixes, ...common });
}

function resultOf(events: RecordedEvent[]): AppendResult {
  const last = events[events.length - 1]!;
  return { nextRevision: last.revision, position: last.position, events };
}

function partlyRecorded(stream: string, found: string[]): Error {
  return new Error(`append to ${stream}: event ids ${found.join(', ')} are already recorded, but not as this exact append`);
}

/** An event id as EventStoreDB records it (a lowercase UUID): compared so, an id in capitals is found again. */
function eventId(id: string): string {
  return id.toLowerCase();
}

function validateAppend(stream: string, events: EventData[]): void {
  if (typeof stream !== 'string' || stream === '') throw new Error('append: stream name must be a non-empty string');
  if (stream.startsWith('$')) throw new Error(`append to ${stream}: system streams are not writable`);
  if (!Array.isArray(events) || events.length === 0) throw new Error(`append to ${stream}: no events to append`);
  const ids = new Set<string>();
  events.forEach((event, i) => {
    const where = `append to ${stream}: event #${i}`;
    if (typeof event?.id !== 'string' || event.id === '') throw new Error(`${where} has no id`);
    if (ids.has(eventId(event.id))) throw new Error(`${where} repeats event id ${event.id}`);
    ids.add(eventId(event.id));
    if (typeof event.type !== 'string' || event.type === '' || event.type.startsWith('$')) {
      throw new Error(`${where} (${event.id}) has no valid type`);
    }
    if (JSON.stringify(event.data) === undefined) throw new Error(`${where} (${event.id}) data is not JSON-serializable`);
  });
}

function checkNonNegativeInteger(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got ${value}`);
}
