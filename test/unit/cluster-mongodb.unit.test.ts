/**
 * The MongoDB adapter's pure parts. The query translation is checked two ways: the filters'
 * shape, and their MEANING, by evaluating them with a small model of MongoDB's matching and
 * sorting rules (type bracketing, null = missing, BSON type order) on the read-store
 * contract's own data: every page walk must return each document once, in order.
 */
import { jest } from '@jest/globals';
import type { Doc, Query } from '../../infra/ports/read-store.js';
import {
  collectionName,
  decodeCursor,
  encodeCursor,
  fieldPath,
  fromStored,
  indexesOf,
  keysetFilter,
  paddedPosition,
  sortSpec,
  sortValueOf,
  toMongoFilter,
  toMongoFind,
  toStored,
} from '../../infra/mongodb/query.js';
import { hitPipeline } from '../../infra/mongodb/rate-limiter.js';
import { evaluateWindow } from '../../infra/ports/rate-limiter.js';
import { takeableFilter } from '../../infra/mongodb/lease.js';
import { mongoDatabaseName } from '../../infra/cluster.js';
import { createMemoryRateLimiter } from '../../infra/memory/rate-limiter.js';
import { comparePositions } from '../../infra/ports/event-store.js';

// ---- a model of MongoDB matching and sorting, for the operators the adapter emits ----------

type Stored = Record<string, unknown>;
const bracket = (v: unknown): number =>
  v === null || v === undefined ? 1 : typeof v === 'number' ? 2 : typeof v === 'string' ? 3 : typeof v === 'boolean' ? 8 : 99;
function compare(a: unknown, b: unknown): number {
  const ta = bracket(a);
  const tb = bracket(b);
  if (ta !== tb) return ta - tb;
  if (ta === 1) return 0;
  return (a as number) < (b as number) ? -1 : (a as number) > (b as number) ? 1 : 0;
}
function matchValue(value: unknown, cond: unknown): boolean {
  if (cond !== null && typeof cond === 'object') {
    return Object.entries(cond).every(([op, arg]) => {
      switch (op) {
        case '$ne':
          return arg === null ? value !== null && value !== undefined : !matchValue(value, arg);
        case '$exists':
          return (value !== undefined) === arg;
        case '$gt':
        case '$gte':
        case '$lt':
        case '$lte': {
          if (bracket(value) !== bracket(arg)) return false; // type bracketing
          const c = compare(value, arg);
          return op === '$gt' ? c > 0 : op === '$gte' ? c >= 0 : op === '$lt' ? c < 0 : c <= 0;
        }
        default:
          throw new Error(`model does not know ${op}`);
      }
    });
  }
  if (cond === null) return value === null || value === undefined;
  return bracket(value) === bracket(cond) && value === cond;
}
function matches(doc: Stored, filter: Record<string, unknown>): boolean {
  return Object.entries(filter).every(([key, cond]) => {
    if (key === '$and') return (cond as Record<string, unknown>[]).every((f) => matches(doc, f));
    if (key === '$or') return (cond as Record<string, unknown>[]).some((f) => matches(doc, f));
    return matchValue(doc[key], cond);
  });
}
function run(docs: Doc[], query: Query): { items: Doc[]; next: string | null } {
  const { filter, sort, limit } = toMongoFind(query);
  const rows = docs
    .map((d) => toStored(d))
    .filter((d) => matches(d, filter))
    .sort((a, b) => {
      for (const [field, dir] of Object.entries(sort)) {
        const c = compare(a[field], b[field]);
        if (c !== 0) return c * dir;
      }
      return 0;
    });
  const page = limit === undefined ? rows : rows.slice(0, limit);
  const more = limit !== undefined && page.length >= limit;
  const items = more ? page.slice(0, limit! - 1) : page;
  const last = items[items.length - 1];
  return { items: items.map((r) => fromStored(r) as Doc), next: more && last ? encodeCursor(sortValueOf(last, query.orderBy), String(last._id)) : null };
}
const ids = (docs: Doc[]) => docs.map((d) => d.id);

// The contract's data sets.
const people: Doc[] = [
  { id: 'a', name: 'Ada', age: 36, admin: true, team: 'x', nick: null },
  { id: 'b', name: 'Bob', age: 25, admin: false, team: 'y', nick: 'bobby' },
  { id: 'c', name: 'Cy', age: 36, admin: false, team: 'x', nick: null },
  { id: 'd', name: 'Di', age: 1, admin: true, team: 'y', nick: 'd' },
  { id: 'e', name: 'Ed', age: 0, admin: false, team: 'x' },
];
const scores: Doc[] = [
  { id: 'k3', score: 2, group: 'g' },
  { id: 'k1', score: 1, group: 'g' },
  { id: 'k5', score: 2, group: 'h' },
  { id: 'k2', score: 3, group: 'g' },
  { id: 'k4', score: 2, group: 'g' },
  { id: 'k6', score: 1, group: 'h' },
  { id: 'k7', score: 3, group: 'g' },
  { id: 'n1', score: null, group: 'g' },
  { id: 'n0', group: 'g' },
  { id: 'n2', score: null, group: 'g' },
];

describe('MongoDB query translation: shape', () => {
  it('maps equality, null and id', () => {
    expect(toMongoFilter({ where: { team: 'x' } })).toEqual({ team: 'x' });
    expect(toMongoFilter({ where: { id: 'c', nick: null } })).toEqual({ $and: [{ _id: 'c' }, { nick: null }] });
    expect(toMongoFilter({})).toEqual({});
  });

  it('maps ranges; a null bound matches nothing', () => {
    expect(toMongoFilter({ range: { age: { gt: 1, lte: 30 } } })).toEqual({ $and: [{ age: { $gt: 1 } }, { age: { $lte: 30 } }] });
    expect(toMongoFilter({ range: { age: { gt: null } } })).toEqual({ _id: { $exists: false } });
    expect(() => toMongoFilter({ range: { age: { between: 1 } as never } })).toThrow(/invalid range operator/);
  });

  it('sorts by the field then _id in the same direction', () => {
    expect(sortSpec({ field: 'score', direction: 'desc' })).toEqual({ score: -1, _id: -1 });
    expect(sortSpec({ field: 'id', direction: 'asc' })).toEqual({ _id: 1 });
    expect(sortSpec(undefined)).toEqual({ _id: 1 });
  });

  it('builds keyset conditions for each direction and null cursor values', () => {
    const c = encodeCursor(2, 'k4');
    expect(keysetFilter({ field: 'score', direction: 'asc' }, c)).toEqual({ $or: [{ score: { $gt: 2 } }, { score: 2, _id: { $gt: 'k4' } }] });
    expect(keysetFilter({ field: 'score', direction: 'desc' }, c)).toEqual({
      $or: [{ score: { $lt: 2 } }, { score: 2, _id: { $lt: 'k4' } }, { score: null }],
    });
    expect(keysetFilter({ field: 'score', direction: 'desc' }, encodeCursor(null, 'n1'))).toEqual({ score: null, _id: { $lt: 'n1' } });
    expect(keysetFilter(undefined, encodeCursor('k1', 'k1'))).toEqual({ _id: { $gt: 'k1' } });
  });

  it('asks for limit + 1 documents and validates the limit', () => {
    expect(toMongoFind({ limit: 10 }).limit).toBe(11);
    expect(toMongoFind({}).limit).toBeUndefined();
    expect(() => toMongoFind({ limit: 0 })).toThrow(/invalid limit/);
  });

  it('rejects unsafe names and malformed cursors', () => {
    for (const bad of ['a.b', '$where', '_id', 'x y', '']) expect(() => fieldPath(bad)).toThrow(/invalid field name/);
    for (const bad of ['Upper', 'x"y', 'checkpoints', 'leases', 'rate_limits']) expect(() => collectionName(bad)).toThrow(/invalid collection name/);
    expect(collectionName('identities')).toBe('identities');
    for (const bad of ['', 'not-base64!', Buffer.from('[1]').toString('base64url'), Buffer.from('[{"$gt":1},"a"]').toString('base64url')]) {
      expect(() => decodeCursor(bad)).toThrow(/invalid cursor/);
    }
    expect(() => toMongoFilter({ where: { a: { $gt: 1 } as never } })).toThrow(/must be a string/);
  });

  it('stores documents under _id and reads them back unchanged', () => {
    const doc = { id: 'u-ключ-🔑', nested: { list: [1, 'two'] }, text: 'nul \u0000 end' };
    expect(toStored(doc)).toEqual({ _id: 'u-ключ-🔑', ...doc });
    expect(fromStored(toStored(doc))).toEqual(doc);
  });

  it('derives one index per spec entry, with _id last for tie-breaks', () => {
    expect(indexesOf({ name: 'identities', indexes: [['ownerPk', 'createdAt'], ['inbox'], []] })).toEqual([
      { key: { ownerPk: 1, createdAt: 1, _id: 1 }, name: 'ix_ownerPk_createdAt' },
      { key: { inbox: 1, _id: 1 }, name: 'ix_inbox' },
    ]);
    expect(indexesOf({ name: 'x' })).toEqual([]);
  });

  it('pads positions so they compare as strings like comparePositions', () => {
    const list = ['9', '10', '123456789012345678901234567890', '0'];
    const byPadded = [...list].sort((a, b) => (paddedPosition(a) < paddedPosition(b) ? -1 : 1));
    expect(byPadded).toEqual([...list].sort(comparePositions));
    expect(() => paddedPosition('01')).toThrow();
  });
});

describe('MongoDB query translation: meaning (model of MongoDB rules, contract data)', () => {
  it('keeps equality within one JSON type and matches null against missing', () => {
    expect(ids(run(people, { where: { admin: true } }).items)).toEqual(['a', 'd']);
    expect(ids(run(people, { where: { admin: 1 } }).items)).toEqual([]);
    expect(ids(run(people, { where: { age: 0 } }).items)).toEqual(['e']);
    expect(ids(run(people, { where: { nick: null } }).items)).toEqual(['a', 'c', 'e']);
  });

  it('applies ranges within one type', () => {
    const mixed: Doc[] = [{ id: '1', v: 5 }, { id: '2', v: 'five' }, { id: '3', v: true }, { id: '4', v: null }];
    expect(ids(run(mixed, { range: { v: { gt: 0 } } }).items)).toEqual(['1']);
    expect(ids(run(mixed, { range: { v: { gte: 'a' } } }).items)).toEqual(['2']);
    expect(ids(run(people, { where: { team: 'x' }, range: { name: { gte: 'B', lt: 'E' } } }).items)).toEqual(['c']);
  });

  it.each(['asc', 'desc'] as const)('walks every document exactly once, in order, nulls included (%s)', (direction) => {
    const query: Query = { orderBy: { field: 'score', direction } };
    const all = ids(run(scores, query).items);
    expect(all).toEqual(
      direction === 'asc'
        ? ['n0', 'n1', 'n2', 'k1', 'k6', 'k3', 'k4', 'k5', 'k2', 'k7']
        : ['k7', 'k2', 'k5', 'k4', 'k3', 'k6', 'k1', 'n2', 'n1', 'n0'],
    );
    for (const limit of [1, 2, 3, 10]) {
      const walked: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page: { items: Doc[]; next: string | null } = run(scores, { ...query, limit, cursor });
        walked.push(...ids(page.items));
        cursor = page.next;
        if (++pages > 50) throw new Error('does not terminate');
      } while (cursor);
      expect(walked).toEqual(all);
    }
  });

  it('paginates on booleans and by id', () => {
    const query: Query = { orderBy: { field: 'admin', direction: 'asc' }, limit: 2 };
    const first = run(people, query);
    const second = run(people, { ...query, cursor: first.next });
    const third = run(people, { ...query, cursor: second.next });
    expect([...ids(first.items), ...ids(second.items), ...ids(third.items)]).toEqual(['b', 'c', 'e', 'a', 'd']);
    expect(third.next).toBeNull();
    const byId = run(scores.slice(0, 7), { limit: 4 });
    expect(ids(run(scores.slice(0, 7), { limit: 3, cursor: byId.next }).items)).toEqual(['k5', 'k6', 'k7']);
  });
});

describe('MongoDB rate limiter decisions', () => {
  it('decides exactly like the in-memory sliding window', async () => {
    let t = 1_000_000;
    const memory = createMemoryRateLimiter(() => t);
    let log: number[] = [];
    const steps = [0, 100, 200, 300, 59_000, 60_050, 60_150, 61_000, 200_000];
    for (const at of steps) {
      t = 1_000_000 + at;
      const expected = await memory.hit('k', 3, 60);
      const got = evaluateWindow(log, t, 3, 60, true);
      expect(got).toEqual(expected);
      log = log.filter((h) => t - h < 60_000);
      if (got.allowed) log.push(t);
      expect(evaluateWindow(log, t, 3, 60, false)).toEqual(await memory.peek('k', 3, 60));
    }
    memory.close();
  });

  it('a wall clock set back never makes a lockout longer than its window (the memory limiter counts on a monotonic clock)', async () => {
    const memory = createMemoryRateLimiter();
    for (let i = 0; i < 3; i++) await memory.hit('login', 3, 900);
    const real = Date.now();
    const wall = jest.spyOn(Date, 'now');
    try {
      for (const step of [-86_400_000, -3_600_000, 86_400_000]) {
        wall.mockReturnValue(real + step);
        const locked = await memory.peek('login', 3, 900);
        expect([step, locked.allowed, locked.retryAfter <= 900, locked.retryAfter >= 899]).toEqual([step, false, true, true]);
      }
    } finally {
      wall.mockRestore();
      memory.close();
    }
    // Shared (wall-clock) logs: a hit recorded ahead of now counts, for at most the window.
    expect(evaluateWindow([1_000_000 + 86_400_000], 1_000_000, 1, 60, false)).toEqual({ allowed: false, retryAfter: 60, remaining: 0 });
  });

  it('bounds the stored log with a pipeline that appends only under the limit', () => {
    const pipeline = JSON.stringify(hitPipeline(5000, 3, 60));
    expect(pipeline).toContain('"$lt":[{"$size":"$hits"},3]');
    expect(pipeline).toContain('60000');
  });
});

describe('leases and database names', () => {
  it('lets an owner take its own or an expired lease only', () => {
    const now = new Date('2024-01-01T00:00:00Z');
    expect(takeableFilter('projections', 'me', now)).toEqual({ _id: 'projections', $or: [{ owner: 'me' }, { expiresAt: { $lte: now } }] });
  });

  it('reads the database from the MongoDB URL, with a default', () => {
    expect(mongoDatabaseName('mongodb://mongo:27017/agentid?replicaSet=rs0')).toBe('agentid');
    expect(mongoDatabaseName('mongodb://a:1,b:2/prod')).toBe('prod');
    expect(mongoDatabaseName('mongodb://mongo:27017/?replicaSet=rs0')).toBe('agent_identity');
    expect(mongoDatabaseName('mongodb://mongo:27017')).toBe('agent_identity');
  });
});
