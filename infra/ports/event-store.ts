/**
 * The event store port: the single source of truth of the service.
 *
 * Every adapter (embedded SQLite, EventStoreDB) must pass `test/contract/event-store.contract.ts`.
 * Rules every adapter follows, so no adapter difference leaks to callers:
 * - Streams are named `<category>-<id>`; the category never contains a dash.
 * - Revisions are 0-based: the first event of a stream has revision 0.
 * - Positions are global and strictly increasing across all streams. They are opaque
 *   decimal-integer strings; compare them only with {@link comparePositions}.
 * - Appends are atomic per call, durable when the promise resolves, and idempotent by
 *   event id: appending events whose ids are already in the stream returns the original
 *   result instead of writing them twice.
 */

/** What an append expects the stream's last revision to be. */
export type ExpectedRevision =
  | 'any' // no check
  | 'no_stream' // the stream must not exist yet (reservations rely on this)
  | 'stream_exists'
  | number; // the 0-based revision of the stream's last event

export interface EventData<T = unknown> {
  /** UUID; the idempotency key of the append. */
  id: string;
  /** Past-tense fact, e.g. `IdentityCreated`. */
  type: string;
  data: T;
  metadata?: Record<string, unknown>;
}

export interface RecordedEvent<T = any> {
  id: string;
  type: string;
  stream: string;
  /** 0-based revision within its stream. */
  revision: number;
  /** Global position (decimal-integer string). */
  position: string;
  data: T;
  metadata: Record<string, unknown>;
  /** ISO 8601 UTC time at which the store recorded the event. */
  recordedAt: string;
}

export interface AppendResult {
  /** Revision of the last event now in the stream. */
  nextRevision: number;
  /** Position of the last appended event. */
  position: string;
  /** The events as recorded (or as previously recorded, for an idempotent retry). */
  events: RecordedEvent[];
}

export interface ReadStreamOptions {
  /** First revision to return (inclusive). Default 0. */
  fromRevision?: number;
  maxCount?: number;
  direction?: 'forwards' | 'backwards';
}

export interface AllFilter {
  /** Only events of these exact streams. */
  streams?: string[];
  /** Only events of streams starting with one of these prefixes (e.g. `user-`). */
  streamPrefixes?: string[];
  /** Only events of these types. */
  eventTypes?: string[];
}

export interface ReadAllOptions {
  /** Return only events after this position (exclusive). `null`/absent = from the start. */
  after?: string | null;
  maxCount?: number;
  filter?: AllFilter;
}

export interface SubscribeOptions {
  after?: string | null;
  filter?: AllFilter;
}

/** A catch-up subscription: delivers history after `after`, then live events, in order. */
export interface Subscription {
  /** Stop delivery. Safe to call twice. */
  close(): void;
  /** Resolves when closed; rejects when the subscription failed (e.g. the handler threw). */
  readonly done: Promise<void>;
}

export type EventHandler = (event: RecordedEvent) => void | Promise<void>;

export interface EventStore {
  append(stream: string, events: EventData[], options?: { expectedRevision?: ExpectedRevision }): Promise<AppendResult>;
  /** Events of one stream; an empty array when the stream does not exist. */
  readStream(stream: string, options?: ReadStreamOptions): Promise<RecordedEvent[]>;
  /** Events of all streams in global order. */
  readAll(options?: ReadAllOptions): Promise<RecordedEvent[]>;
  /**
   * Catch-up then live, with no gap and no duplicate. The handler is awaited: the next
   * event is delivered only after the previous handler call settled.
   */
  subscribeAll(options: SubscribeOptions, handler: EventHandler): Subscription;
  /** Position of the last event in the store, or null when it is empty. */
  headPosition(): Promise<string | null>;
  close(): Promise<void>;
}

/** Thrown when `expectedRevision` does not hold. */
export class WrongExpectedRevisionError extends Error {
  readonly code = 'wrong_expected_revision' as const;
  constructor(
    readonly stream: string,
    readonly expected: ExpectedRevision,
    /** Actual last revision, or -1 when the stream does not exist. */
    readonly actual: number,
  ) {
    super(`stream ${stream}: expected revision ${String(expected)}, actual ${actual}`);
    this.name = 'WrongExpectedRevisionError';
  }
}

/** Thrown when the store itself fails (I/O, connection); the append may not have happened. */
export class EventStoreUnavailableError extends Error {
  readonly code = 'event_store_unavailable' as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'EventStoreUnavailableError';
  }
}

/**
 * Thrown for a position this store never handed out (malformed, or, on EventStoreDB, no
 * record's): one a client gave back (an SSE Last-Event-ID) is then refused, not followed.
 */
export class InvalidPositionError extends Error {
  readonly code = 'invalid_position' as const;
  constructor(
    readonly position: string,
    why = '',
  ) {
    super(`invalid event position: ${position}${why ? ` (${why})` : ''}`);
    this.name = 'InvalidPositionError';
  }
}

/** Total order of positions: negative when a < b. `null` sorts before everything. */
export function comparePositions(a: string | null | undefined, b: string | null | undefined): number {
  if (a == null) return b == null ? 0 : -1;
  if (b == null) return 1;
  if (a.length !== b.length) return a.length - b.length; // decimal strings without leading zeros
  return a < b ? -1 : a > b ? 1 : 0;
}

const CATEGORY = /^[a-z][a-z0-9]*$/;

/**
 * Builds `<category>-<id>`; rejects a category with a dash (EventStoreDB splits there).
 * The one way stream names are made: each context's events module names its streams with it.
 */
export function streamName(category: string, id: string | number): string {
  return `${streamPrefix(category)}${id}`;
}

/** `<category>-`: what every stream of the category starts with (subscription filters). */
export function streamPrefix(category: string): string {
  if (!CATEGORY.test(category)) throw new Error(`invalid stream category: ${category}`);
  return `${category}-`;
}

/** The category of `<category>-<id>`: what precedes the first dash. */
export function streamCategory(stream: string): string {
  const dash = stream.indexOf('-');
  return dash < 0 ? stream : stream.slice(0, dash);
}

/** The id of `<category>-<id>`: what follows the first dash (the inverse of streamName). */
export function streamId(stream: string): string {
  return stream.slice(stream.indexOf('-') + 1);
}
