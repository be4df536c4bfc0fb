/** The EventStoreDB adapter's pure parts: revisions, positions, filters, events, errors. */
import {
  comparePositions,
  EventStoreUnavailableError,
  InvalidPositionError,
  WrongExpectedRevisionError,
} from '../../infra/ports/event-store.js';
import {
  decodePosition,
  encodePosition,
  escapeRegex,
  fromEsdbActualRevision,
  isStreamNotFound,
  locateIds,
  planFilter,
  toEsdbExpectedRevision,
  toRecordedEvent,
  translateError,
  type EsdbRecorded,
} from '../../infra/eventstoredb/mapping.js';
import * as esdb from '@eventstore/db-client';

describe('expected revision mapping', () => {
  it('maps the named expectations to the client constants', () => {
    expect(toEsdbExpectedRevision('any')).toBe(esdb.ANY);
    expect(toEsdbExpectedRevision('no_stream')).toBe(esdb.NO_STREAM);
    expect(toEsdbExpectedRevision('stream_exists')).toBe(esdb.STREAM_EXISTS);
  });

  it('maps a 0-based revision to the same bigint revision', () => {
    expect(toEsdbExpectedRevision(0)).toBe(0n);
    expect(toEsdbExpectedRevision(41)).toBe(41n);
  });

  it('rejects invalid revisions', () => {
    for (const bad of [-1, 1.5, Number.NaN, 'latest' as never]) expect(() => toEsdbExpectedRevision(bad)).toThrow(/invalid expectedRevision/);
  });

  it('reads the actual revision: bigint as number, no stream as -1', () => {
    expect(fromEsdbActualRevision(4n)).toBe(4);
    expect(fromEsdbActualRevision(0n)).toBe(0);
    expect(fromEsdbActualRevision(esdb.NO_STREAM)).toBe(-1);
    expect(fromEsdbActualRevision(undefined)).toBe(-1);
  });
});

describe('positions', () => {
  it('round-trips (commit, prepare) through a decimal string', () => {
    for (const p of [
      { commit: 0n, prepare: 0n },
      { commit: 1234n, prepare: 1200n },
      { commit: (1n << 62n) + 7n, prepare: (1n << 63n) - 1n },
    ]) {
      const encoded = encodePosition(p);
      expect(encoded).toMatch(/^(0|[1-9][0-9]*)$/);
      expect(decodePosition(encoded)).toEqual(p);
    }
  });

  it('orders like (commit, prepare): events of one append (same commit) still increase', () => {
    const positions = [
      { commit: 100n, prepare: 90n },
      { commit: 100n, prepare: 95n },
      { commit: 100n, prepare: 99n },
      { commit: 101n, prepare: 0n },
      { commit: 5000n, prepare: 4000n },
    ].map(encodePosition);
    for (let i = 1; i < positions.length; i++) expect(comparePositions(positions[i - 1], positions[i])).toBeLessThan(0);
  });

  it('rejects malformed positions', () => {
    for (const bad of ['', '-1', '01', '1e9', 'abc']) expect(() => decodePosition(bad)).toThrow(/invalid event position/);
    expect(() => encodePosition({ commit: 1n, prepare: 1n << 64n })).toThrow(/out of range/);
  });
});

describe('filters', () => {
  const ev = (stream: string, type = 'Opened') => ({ stream, type });

  it('turns exact streams into an anchored stream-name regex, checked again on the client', () => {
    const plan = planFilter({ streams: ['user-1', 'a.b-2'] });
    expect(plan.server).toEqual({ on: 'streamName', regex: '^(?:user\\-1|a\\.b\\-2)$' });
    const regex = new RegExp((plan.server as { regex: string }).regex);
    expect(regex.test('user-1')).toBe(true);
    expect(regex.test('user-10')).toBe(false);
    expect(regex.test('axb-2')).toBe(false);
    expect(plan.matches(ev('user-1'))).toBe(true);
    expect(plan.matches(ev('user-10'))).toBe(false);
  });

  it('uses stream-name prefixes on the server and ANDs the other conditions on the client', () => {
    const plan = planFilter({ streamPrefixes: ['mailbox-', 'smsbox-'], eventTypes: ['EmailReceived'] });
    expect(plan.server).toEqual({ on: 'streamName', prefixes: ['mailbox-', 'smsbox-'] });
    expect(plan.matches(ev('mailbox-1', 'EmailReceived'))).toBe(true);
    expect(plan.matches(ev('mailbox-1', 'EmailSent'))).toBe(false);
    expect(plan.matches(ev('user-1', 'EmailReceived'))).toBe(false);
  });

  it('filters by exact event types when no stream condition is given (a type prefix is not enough)', () => {
    const plan = planFilter({ eventTypes: ['Opened', 'Closed'] });
    expect(plan.server).toEqual({ on: 'eventType', regex: '^(?:Opened|Closed)$' });
    expect(plan.matches(ev('x-1', 'Opened'))).toBe(true);
    expect(plan.matches(ev('x-1', 'OpenedTwice'))).toBe(false);
  });

  it('excludes system events, with or without a filter', () => {
    const plan = planFilter();
    expect(plan.server).toEqual({ on: 'eventType', regex: '^[^$]' });
    expect(plan.matches(ev('$stats-1', 'x'))).toBe(false);
    expect(plan.matches(ev('user-1', '$metadata'))).toBe(false);
    expect(plan.matches(ev('user-1'))).toBe(true);
    expect(planFilter({ streamPrefixes: ['$'] }).matches(ev('$all', 'x'))).toBe(false);
  });

  it('marks filters that can match nothing', () => {
    expect(planFilter({ streams: [] }).empty).toBe(true);
    expect(planFilter({ eventTypes: [] }).empty).toBe(true);
    expect(planFilter({ streamPrefixes: [] }).empty).toBe(true);
    expect(planFilter({ streams: ['a-1'] }).empty).toBe(false);
  });

  it('escapes every regex metacharacter', () => {
    const nasty = 'a.b*c+d?e^f$g{h}i(j)k|l[m]n\\o/p-q';
    expect(new RegExp(`^${escapeRegex(nasty)}$`).test(nasty)).toBe(true);
    expect(new RegExp(`^${escapeRegex('a.b')}$`).test('axb')).toBe(false);
  });
});

describe('recorded events', () => {
  const raw = (over: Partial<EsdbRecorded> = {}): EsdbRecorded => ({
    streamId: 'user-1',
    id: '0190a1b2-0000-7000-8000-000000000001',
    revision: 3n,
    type: 'UserRegistered',
    created: new Date('2024-05-01T10:00:00.123Z'),
    data: { username: 'ada' },
    metadata: { actor: 'x' },
    isJson: true,
    position: { commit: 10n, prepare: 8n },
    ...over,
  });

  it('maps to the port shape', () => {
    expect(toRecordedEvent(raw())).toEqual({
      id: '0190a1b2-0000-7000-8000-000000000001',
      type: 'UserRegistered',
      stream: 'user-1',
      revision: 3,
      position: encodePosition({ commit: 10n, prepare: 8n }),
      data: { username: 'ada' },
      metadata: { actor: 'x' },
      recordedAt: '2024-05-01T10:00:00.123Z',
    });
  });

  it('defaults missing metadata to {} and hides system and binary events', () => {
    expect(toRecordedEvent(raw({ metadata: undefined }))!.metadata).toEqual({});
    expect(toRecordedEvent(raw({ streamId: '$settings' }))).toBeNull();
    expect(toRecordedEvent(raw({ type: '$metadata' }))).toBeNull();
    expect(toRecordedEvent(raw({ isJson: false }))).toBeNull();
    expect(toRecordedEvent(undefined)).toBeNull();
  });

  it('refuses an event without a log position (servers before 22.10)', () => {
    expect(() => toRecordedEvent(raw({ position: undefined }))).toThrow(/22\.10/);
  });
});

describe('error translation', () => {
  it('turns WrongExpectedVersion into WrongExpectedRevisionError with the actual revision', () => {
    const err = translateError(
      { type: esdb.ErrorType.WRONG_EXPECTED_VERSION, actualVersion: 4n, message: 'wev' },
      { stream: 'user-1', expected: 2, operation: 'append' },
    );
    expect(err).toBeInstanceOf(WrongExpectedRevisionError);
    expect(err).toMatchObject({ stream: 'user-1', expected: 2, actual: 4, code: 'wrong_expected_revision' });
    const missing = translateError(
      { type: esdb.ErrorType.WRONG_EXPECTED_VERSION, actualVersion: esdb.NO_STREAM },
      { stream: 'user-2', expected: 'stream_exists', operation: 'append' },
    );
    expect(missing).toMatchObject({ actual: -1, expected: 'stream_exists' });
  });

  it('turns connection-level failures into EventStoreUnavailableError, keeping the cause', () => {
    for (const type of [esdb.ErrorType.UNAVAILABLE, esdb.ErrorType.DEADLINE_EXCEEDED, esdb.ErrorType.NOT_LEADER, esdb.ErrorType.TIMEOUT]) {
      const cause = { type, message: 'down' };
      const err = translateError(cause, { operation: 'append' });
      expect(err).toBeInstanceOf(EventStoreUnavailableError);
      expect(err.cause).toBe(cause);
    }
    expect(translateError(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }), { operation: 'read' })).toBeInstanceOf(
      EventStoreUnavailableError,
    );
  });

  it('turns a call reset (gRPC INTERNAL, RESOURCE_EXHAUSTED: the client\'s `unknown` errors) into EventStoreUnavailableError', () => {
    for (const code of [13, 8]) {
      const cause = Object.assign(new esdb.UnknownError(undefined, 'Received RST_STREAM with code 2'), { code });
      const err = translateError(cause, { operation: 'subscription to $all' });
      expect([code, err instanceof EventStoreUnavailableError, err.cause]).toEqual([code, true, cause]);
    }
    // A message over gRPC's size cap is the request's own failure (it would fail again): as it came.
    const tooLarge = Object.assign(new esdb.UnknownError(undefined, 'Received message larger than max (18874368 vs 17825792)'), { code: 8 });
    expect(translateError(tooLarge, { operation: 'read of $all' })).toBe(tooLarge);
  });

  it("turns the server's refusal of a read position into InvalidPositionError (a forged Last-Event-ID is a 400, not a 500)", () => {
    const cause = Object.assign(new esdb.UnknownError(undefined, 'Trying to read from an invalid position.'), { code: 3 });
    const err = translateError(cause, { operation: 'read of $all', position: '18446744073709551617' });
    expect(err).toBeInstanceOf(InvalidPositionError);
    expect(err).toMatchObject({ position: '18446744073709551617', code: 'invalid_position' });
    // Without a position read from, or for another invalid argument: as it came.
    expect(translateError(cause, { operation: 'read of $all' })).toBe(cause);
    const other = Object.assign(new esdb.UnknownError(undefined, 'bad filter'), { code: 3 });
    expect(translateError(other, { operation: 'read of $all', position: '5' })).toBe(other);
  });

  it('returns other errors unchanged', () => {
    const other = new Error('access denied');
    expect(translateError(other, { operation: 'read' })).toBe(other);
    expect(translateError('text', { operation: 'read' })).toBeInstanceOf(Error);
  });

  it('recognises a missing stream', () => {
    expect(isStreamNotFound({ type: esdb.ErrorType.STREAM_NOT_FOUND })).toBe(true);
    expect(isStreamNotFound({ type: esdb.ErrorType.UNAVAILABLE })).toBe(false);
    expect(isStreamNotFound(null)).toBe(false);
  });
});

describe('idempotent retries: locating ids in a stream', () => {
  const recorded = ['a', 'b', 'c', 'd'].map((id, revision) => ({
    id,
    type: 'T',
    stream: 's-1',
    revision,
    position: String(revision + 1),
    data: {},
    metadata: {},
    recordedAt: '2024-01-01T00:00:00.000Z',
  }));

  it('finds a full, consecutive, ordered match: the original result', () => {
    const found = locateIds(['b', 'c'], recorded);
    expect(found.kind).toBe('all');
    expect(found.kind === 'all' && found.events.map((e) => e.revision)).toEqual([1, 2]);
  });

  it('reports none when no id is recorded', () => {
    expect(locateIds(['x', 'y'], recorded)).toEqual({ kind: 'none' });
  });

  it('reports partial for some ids, a different order, or a gap', () => {
    expect(locateIds(['d', 'x'], recorded)).toEqual({ kind: 'partial', found: ['d'] });
    expect(locateIds(['c', 'b'], recorded).kind).toBe('partial');
    expect(locateIds(['a', 'c'], recorded).kind).toBe('partial');
  });
});

describe('adapter without a server', () => {
  it('fails to open with EventStoreUnavailableError when nothing listens', async () => {
    const { openEventStoreDb } = await import('../../infra/eventstoredb/event-store.js');
    // Port 1 on loopback: connection refused at once.
    await expect(
      openEventStoreDb({ url: 'esdb://127.0.0.1:1?tls=false&defaultDeadline=2000', logger: { warn() {}, error() {} } }),
    ).rejects.toBeInstanceOf(EventStoreUnavailableError);
  });
});
