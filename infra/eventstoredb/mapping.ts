/**
 * Pure translations between the EventStore port and EventStoreDB (@eventstore/db-client v6),
 * kept apart from the adapter so they are unit-tested without a server.
 *
 * Positions: EventStoreDB orders $all by (commit, prepare). Events written by one append
 * share their commit position and differ by prepare position, so the commit position alone
 * would not be strictly increasing within a multi-event append (the port requires it). The
 * port position is therefore the single integer `commit * 2^64 + prepare`, as a decimal
 * string: numeric order equals (commit, prepare) order, and comparePositions works on it.
 */
import {
  EventStoreUnavailableError,
  InvalidPositionError,
  WrongExpectedRevisionError,
  type AllFilter,
  type ExpectedRevision,
  type RecordedEvent,
} from '../ports/event-store.js';

/** EventStoreDB's expected revision: the constants of the client, or a bigint revision. */
export type EsdbExpectedRevision = 'any' | 'no_stream' | 'stream_exists' | bigint;

/** A (commit, prepare) position of the transaction log, as the client gives it. */
export interface EsdbPosition {
  commit: bigint;
  prepare: bigint;
}

const TWO_64 = 1n << 64n;
const MASK_64 = TWO_64 - 1n;
const POSITION = /^(0|[1-9][0-9]*)$/;

/** Our expected revision → the client's (0-based revisions are the same numbers). */
export function toEsdbExpectedRevision(expected: ExpectedRevision): EsdbExpectedRevision {
  if (expected === 'any' || expected === 'no_stream' || expected === 'stream_exists') return expected;
  if (typeof expected === 'number' && Number.isSafeInteger(expected) && expected >= 0) return BigInt(expected);
  throw new Error(`invalid expectedRevision ${String(expected)}`);
}

/** The client's "actual version" of a stream → our last revision, -1 when it does not exist. */
export function fromEsdbActualRevision(actual: unknown): number {
  if (typeof actual === 'bigint') return bigintToNumber(actual, 'actual revision');
  if (typeof actual === 'number' && Number.isSafeInteger(actual)) return actual;
  return -1; // 'no_stream' (or anything we cannot read: the stream is treated as absent)
}

export function encodePosition(position: EsdbPosition): string {
  if (position.commit < 0n || position.prepare < 0n || position.prepare > MASK_64) {
    throw new Error(`position out of range: ${position.commit}/${position.prepare}`);
  }
  return (position.commit * TWO_64 + position.prepare).toString();
}

export function decodePosition(position: string): EsdbPosition {
  if (typeof position !== 'string' || !POSITION.test(position)) throw new InvalidPositionError(String(position));
  const n = BigInt(position);
  return { commit: n >> 64n, prepare: n & MASK_64 };
}

/**
 * A position a caller hands back (`after`, e.g. an SSE Last-Event-ID) → the server's. No
 * record has its prepare after its commit (the server gives an event of an append commit =
 * prepare, and a legacy transaction commits after its prepares), so such a value was never
 * handed out: it is refused like a malformed one, with the same error.
 */
export function decodeRecordPosition(position: string): EsdbPosition {
  const decoded = decodePosition(position);
  if (decoded.prepare > decoded.commit) throw new InvalidPositionError(position, 'not the position of a record');
  return decoded;
}

/**
 * The connection string for a second client with a connection of its own. grpc-js pools
 * connections by target and channel options, so a client from the same string would share
 * the first one's HTTP/2 connection (and its limit of concurrent calls); the keepalive
 * timeout is the one channel option the string sets, and 1 ms more makes the options differ.
 */
export function ownConnectionUrl(connectionString: string): string {
  const url = connectionString.trim();
  const query = url.includes('?') ? url.slice(url.indexOf('?') + 1) : '';
  let timeout = 10_000; // the client's default
  for (const pair of query.split('&')) {
    const [key = '', value = ''] = pair.split('=');
    // The client's own key matching: case, '-' and '_' ignored; the last one wins.
    if (key.trim().toLowerCase().replace(/[_-]/g, '') === 'keepalivetimeout') timeout = parseInt(value, 10);
  }
  const distinct = timeout > 0 ? timeout + 1 : 10_001; // -1 (off) or junk: any other value differs
  return `${url}${url.includes('?') ? '&' : '?'}keepAliveTimeout=${distinct}`;
}

/** The server-side part of a filter: EventStoreDB accepts ONE filter, on stream names or on types. */
export type ServerFilter =
  | { on: 'streamName'; regex: string }
  | { on: 'streamName'; prefixes: string[] }
  | { on: 'eventType'; regex: string }
  | { on: 'eventType'; prefixes: string[] };

export interface FilterPlan {
  /** What the server filters on (it only narrows; the client re-checks). */
  server: ServerFilter;
  /** The exact check applied to what the server returns (AND of every condition, system events excluded). */
  matches(event: { stream: string; type: string }): boolean;
  /** True when the filter can match nothing (an empty list); no read is needed. */
  empty: boolean;
}

/** Escapes a literal for a .NET / JS regular expression. */
export function escapeRegex(literal: string): string {
  return literal.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}

/**
 * Plans a port filter on EventStoreDB: exact streams become an anchored regex on stream
 * names (exact on the server), else prefixes on stream names, else exact types as an
 * anchored regex on event types; without any, system events (`$...`) are excluded by type.
 * Every condition is re-checked on the client, so the server filter only has to narrow.
 */
export function planFilter(filter: AllFilter = {}): FilterPlan {
  const streams = filter.streams && new Set(filter.streams);
  const types = filter.eventTypes && new Set(filter.eventTypes);
  const prefixes = filter.streamPrefixes;
  const empty = (streams?.size === 0) || (types?.size === 0) || (prefixes !== undefined && prefixes.length === 0);
  const matches = (event: { stream: string; type: string }) =>
    !event.stream.startsWith('$') &&
    !event.type.startsWith('$') &&
    (!streams || streams.has(event.stream)) &&
    (!types || types.has(event.type)) &&
    (!prefixes || prefixes.some((p) => event.stream.startsWith(p)));
  let server: ServerFilter;
  if (streams && streams.size > 0) {
    server = { on: 'streamName', regex: `^(?:${[...streams].map(escapeRegex).join('|')})$` };
  } else if (prefixes && prefixes.length > 0 && !prefixes.includes('')) {
    server = { on: 'streamName', prefixes: [...new Set(prefixes)] };
  } else if (types && types.size > 0) {
    server = { on: 'eventType', regex: `^(?:${[...types].map(escapeRegex).join('|')})$` };
  } else {
    server = { on: 'eventType', regex: '^[^$]' }; // excludes system events
  }
  return { server, matches, empty };
}

/** The subset of a client RecordedEvent the adapter reads (what `$all` reads return). */
export interface EsdbRecorded {
  streamId: string;
  id: string;
  revision: bigint;
  type: string;
  created: Date;
  data: unknown;
  metadata?: unknown;
  isJson?: boolean;
  position?: EsdbPosition;
}

/**
 * The commit position servers before 22.10 put on events of stream reads (2^64-1: "none").
 * The client always fills `position` (protobuf defaults), so this is the only sign of it.
 */
const NO_POSITION = MASK_64;

/** A client event → the port's RecordedEvent; null for events the port never shows (system, non-JSON). */
export function toRecordedEvent(event: EsdbRecorded | undefined, fallbackPosition?: EsdbPosition): RecordedEvent | null {
  if (!event || event.streamId.startsWith('$') || event.type.startsWith('$')) return null;
  const position = event.position ?? fallbackPosition;
  if (!position || position.commit === NO_POSITION) {
    throw new Error(
      `event ${event.id} of ${event.streamId} has no log position (servers before 22.10 give none on stream reads): EventStoreDB 23.10 or later is required`,
    );
  }
  if (event.isJson === false) return null; // never written by this adapter
  const metadata = event.metadata;
  return {
    id: event.id,
    type: event.type,
    stream: event.streamId,
    revision: bigintToNumber(event.revision, 'revision'),
    position: encodePosition(position),
    data: event.data,
    metadata: metadata && typeof metadata === 'object' && !Array.isArray(metadata) ? (metadata as Record<string, unknown>) : {},
    recordedAt: new Date(event.created).toISOString(),
  };
}

/** Error kinds of the client (its ErrorType enum values), read by duck typing on `type`. */
const UNAVAILABLE_TYPES = new Set(['unavailable', 'timeout', 'deadline-exceeded', 'not-leader', 'cancelled']);

/**
 * An append bigger than the server takes in one write (its MaxAppendSize, 1 MiB by default).
 * Not transient: the same append fails again. The port has no error for it (the embedded
 * store has no such limit), hence the stable `code` callers can map (an HTTP 413, say).
 */
export class AppendTooLargeError extends Error {
  readonly code = 'append_too_large' as const;
  constructor(
    readonly stream: string,
    /** The server's limit in bytes, when it said. */
    readonly maxAppendSize: number | undefined,
    options?: { cause?: unknown },
  ) {
    const limit = maxAppendSize !== undefined ? `${maxAppendSize} bytes` : 'its MaxAppendSize';
    super(`append to ${stream}: larger than EventStoreDB takes in one append (${limit})`, options);
    this.name = 'AppendTooLargeError';
  }
}

/**
 * gRPC status codes the client leaves as `unknown` errors (it names only a few): INTERNAL (a
 * call reset by a restarting node or a proxy: "Received RST_STREAM with code 2") and
 * RESOURCE_EXHAUSTED are the connection's, not the request's; INVALID_ARGUMENT is the server
 * refusing a `fromPosition` that is no record's ("Trying to read from an invalid position").
 */
const GRPC_INVALID_ARGUMENT = 3;
const GRPC_RESOURCE_EXHAUSTED = 8;
const GRPC_INTERNAL = 13;

/**
 * A client error → the port's error: WrongExpectedVersion becomes WrongExpectedRevisionError
 * with the actual revision; an append over the server's size limit AppendTooLargeError; a
 * read of $all from a position the server says is no record's InvalidPositionError (with
 * `position`, the one read from); connection-level failures (unavailable, deadline, not
 * leader, a call reset) become EventStoreUnavailableError; anything else is returned unchanged.
 */
export function translateError(err: unknown, context: { stream?: string; expected?: ExpectedRevision; operation: string; position?: string | null }): Error {
  const type = (err as { type?: unknown } | null)?.type;
  const code = (err as { code?: unknown } | null)?.code; // a gRPC status (a number), or a Node error's code
  if (type === 'unknown' && code === GRPC_INVALID_ARGUMENT && context.position && /invalid position/i.test(messageOf(err))) {
    return new InvalidPositionError(context.position, 'EventStoreDB has no record there');
  }
  // RESOURCE_EXHAUSTED also says a message exceeded gRPC's size cap ("Received message larger
  // than max"): that one is the request's and fails again, so it is not the connection's.
  if (type === 'unknown' && (code === GRPC_INTERNAL || (code === GRPC_RESOURCE_EXHAUSTED && !/larger than max/i.test(messageOf(err))))) {
    return new EventStoreUnavailableError(`EventStoreDB ${context.operation} failed (gRPC status ${code}): ${messageOf(err)}`, { cause: err });
  }
  if (type === 'wrong-expected-version' && context.stream !== undefined) {
    const actual = fromEsdbActualRevision((err as { actualVersion?: unknown }).actualVersion);
    return new WrongExpectedRevisionError(context.stream, context.expected ?? 'any', actual);
  }
  if (type === 'maximum-append-size-exceeded') {
    const max = (err as { maxAppendSize?: unknown }).maxAppendSize;
    return new AppendTooLargeError(context.stream ?? '(unknown stream)', Number.isSafeInteger(max) ? (max as number) : undefined, { cause: err });
  }
  if (typeof type === 'string' && UNAVAILABLE_TYPES.has(type)) {
    return new EventStoreUnavailableError(`EventStoreDB ${context.operation} failed (${type}): ${messageOf(err)}`, { cause: err });
  }
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'ECONNRESET') {
    return new EventStoreUnavailableError(`EventStoreDB ${context.operation} failed: ${messageOf(err)}`, { cause: err });
  }
  return err instanceof Error ? err : new Error(messageOf(err));
}

export function isStreamNotFound(err: unknown): boolean {
  const type = (err as { type?: unknown } | null)?.type;
  return type === 'stream-not-found' || type === 'no-stream';
}

/**
 * Where already-recorded ids sit in a stream: 'none' (a fresh append), 'all' (a retry: the
 * recorded events, in order and consecutive), or 'partial' (a programming error: refused).
 */
export function locateIds(
  ids: string[],
  recorded: RecordedEvent[],
): { kind: 'none' } | { kind: 'all'; events: RecordedEvent[] } | { kind: 'partial'; found: string[] } {
  const byId = new Map(recorded.map((e, i) => [e.id, i]));
  const found = ids.filter((id) => byId.has(id));
  if (found.length === 0) return { kind: 'none' };
  if (found.length === ids.length) {
    const start = byId.get(ids[0]!)!;
    const consecutive = ids.every((id, i) => byId.get(id) === start + i);
    if (consecutive) return { kind: 'all', events: recorded.slice(start, start + ids.length) };
  }
  return { kind: 'partial', found };
}

export function bigintToNumber(value: bigint, what: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
    throw new Error(`${what} ${value} exceeds the safe integer range`);
  }
  return Number(value);
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
