/**
 * The MongoDB read store's writer and the lease without a server: a fake client that answers
 * the driver calls the adapter makes (sessions and transactions, findOne/find, updateOne,
 * bulkWrite, deleteOne/deleteMany) and keeps documents as BSON gives them back (the real
 * serializer), so lone surrogates change as they do on a server. A transaction that deletes
 * more than `maxDeletesPerTransaction` documents aborts, standing in for the server's
 * transaction time and cache limits. No rollback: the tests fail transactions only at their
 * first statement (the lease check).
 */
import { jest } from '@jest/globals';
import { BSON, type Db, type MongoClient } from 'mongodb';
import { LeaseLostError, mongoReadStore, RESET_CHUNK } from '../../infra/mongodb/read-store.js';
import { bsonString } from '../../infra/mongodb/query.js';
import { acquireLease, LEASE_TTL_MS } from '../../infra/mongodb/lease.js';

type Stored = Record<string, unknown>;
type Filter = Record<string, unknown>;
interface FakeSession {
  deletes: number;
  withTransaction(fn: (session: FakeSession) => Promise<void>): Promise<void>;
  endSession(): Promise<void>;
}

/** A value as the server gets it (and gives it back). */
const bson = <T>(value: T): T => BSON.deserialize(BSON.serialize({ value })).value as T;

/** The filters the adapter sends: equality, `$in`, `$gt`, `$lte`, `$or`. */
function matches(doc: Stored, filter: Filter): boolean {
  return Object.entries(filter).every(([key, cond]) => {
    if (key === '$or') return (cond as Filter[]).some((f) => matches(doc, f));
    const value = doc[key];
    if (cond !== null && typeof cond === 'object' && !(cond instanceof Date)) {
      return Object.entries(cond).every(([op, arg]) => {
        if (op === '$in') return (arg as unknown[]).some((a) => bson(a) === value);
        if (op === '$gt') return value !== undefined && (value as number) > (arg as number);
        if (op === '$lte') return value !== undefined && (value as number) <= (arg as number);
        throw new Error(`the fake does not know ${op}`);
      });
    }
    return cond instanceof Date ? value instanceof Date && +value === +cond : bson(cond) === value;
  });
}

class FakeCollection {
  readonly docs = new Map<unknown, Stored>();
  constructor(
    private readonly mongo: FakeMongo,
    private readonly name: string,
  ) {}

  private async op(what: string, session?: FakeSession): Promise<void> {
    await this.mongo.op(`${this.name}.${what}`, session);
  }
  private matching(filter: Filter): Stored[] {
    // By `_id` (equality or `$in`) straight from the map, as an index would.
    const { _id: id, ...rest } = filter;
    if (id === undefined) return [...this.docs.values()].filter((d) => matches(d, filter));
    const ids = id !== null && typeof id === 'object' && '$in' in id ? (id.$in as unknown[]) : [id];
    const found: Stored[] = [];
    for (const key of new Set(ids.map(bson))) {
      const doc = this.docs.get(key);
      if (doc && matches(doc, rest)) found.push(doc);
    }
    return found;
  }

  async findOne(filter: Filter, options?: { session?: FakeSession }) {
    await this.op('findOne', options?.session);
    return this.matching(filter)[0] ?? null;
  }
  find(filter: Filter, options?: { limit?: number }) {
    let limit = options?.limit;
    const cursor = {
      limit: (n: number) => ((limit = n), cursor),
      toArray: async () => {
        await this.op('find');
        const rows = this.matching(filter);
        return limit === undefined ? rows : rows.slice(0, limit);
      },
    };
    return cursor;
  }
  async countDocuments(filter: Filter) {
    await this.op('countDocuments');
    return this.matching(filter).length;
  }
  async updateOne(filter: Filter, update: { $set: Stored }, options?: { upsert?: boolean; session?: FakeSession }) {
    await this.op('updateOne', options?.session);
    const found = this.matching(filter)[0];
    if (found) {
      Object.assign(found, bson(update.$set));
      return { matchedCount: 1, upsertedCount: 0 };
    }
    if (!options?.upsert) return { matchedCount: 0, upsertedCount: 0 };
    const doc = bson({ _id: filter._id, ...update.$set });
    this.docs.set(doc._id, doc);
    return { matchedCount: 0, upsertedCount: 1 };
  }
  async bulkWrite(ops: Array<{ replaceOne?: { replacement: Stored }; deleteOne?: { filter: Filter } }>, options: { session?: FakeSession }) {
    await this.op('bulkWrite', options.session);
    for (const op of ops) {
      if (op.replaceOne) {
        const doc = bson(op.replaceOne.replacement);
        this.docs.set(doc._id, doc);
      } else if (op.deleteOne) this.docs.delete(bson(op.deleteOne.filter._id));
    }
  }
  async deleteOne(filter: Filter, options?: { session?: FakeSession }) {
    await this.op('deleteOne', options?.session);
    const found = this.matching(filter)[0];
    if (found) this.docs.delete(found._id);
  }
  async deleteMany(filter: Filter, options?: { session?: FakeSession }) {
    await this.op('deleteMany', options?.session);
    const found = this.matching(filter);
    if (options?.session) {
      options.session.deletes += found.length;
      if (options.session.deletes > this.mongo.maxDeletesPerTransaction) throw new Error('TransactionExceededLifetimeLimitSeconds');
    }
    for (const doc of found) this.docs.delete(doc._id);
  }
}

class FakeMongo {
  /** Every operation, `begin`/`commit`/`abort` around transactions; `(outside)` when sessionless. */
  readonly log: string[] = [];
  active = 0;
  maxActive = 0;
  maxDeletesPerTransaction = 2_000;
  /** Set: every operation fails (an election, an outage). */
  down = false;
  /** Called after each operation is logged. */
  after: (op: string) => void = () => {};
  private readonly collections = new Map<string, FakeCollection>();

  collection(name: string): FakeCollection {
    let coll = this.collections.get(name);
    if (!coll) this.collections.set(name, (coll = new FakeCollection(this, name)));
    return coll;
  }
  startSession(): FakeSession {
    const session: FakeSession = {
      deletes: 0,
      withTransaction: async (fn) => {
        this.active += 1;
        this.maxActive = Math.max(this.maxActive, this.active);
        this.log.push('begin');
        try {
          await fn(session);
          this.log.push('commit');
        } catch (err) {
          this.log.push('abort');
          throw err;
        } finally {
          this.active -= 1;
        }
      },
      endSession: async () => {},
    };
    return session;
  }
  async op(op: string, session?: FakeSession): Promise<void> {
    await Promise.resolve(); // a round trip: others run meanwhile
    if (this.down) throw new Error('not primary');
    this.log.push(session ? op : `${op} (outside)`);
    this.after(op);
  }
  /** The statements of each transaction, in order. */
  transactions(): string[][] {
    const all: string[][] = [];
    for (const entry of this.log) {
      if (entry === 'begin') all.push([]);
      else if (!['commit', 'abort'].includes(entry) && !entry.endsWith('(outside)')) all.at(-1)!.push(entry);
    }
    return all;
  }
}

function writer() {
  const mongo = new FakeMongo();
  mongo.collection('leases').docs.set('projections', { _id: 'projections', owner: 'w1', expiresAt: new Date(Date.now() + 60_000) });
  const store = mongoReadStore(mongo as unknown as MongoClient, mongo as unknown as Db, { url: 'mongodb://fake', mode: 'writer', lease: { name: 'projections', owner: 'w1' } });
  const loseLease = () => (mongo.collection('leases').docs.get('projections')!.owner = 'w2');
  const regainLease = () => (mongo.collection('leases').docs.get('projections')!.owner = 'w1');
  return { mongo, store, loseLease, regainLease };
}

const docs = (n: number) => Array.from({ length: n }, (_, i) => ({ collection: 'things', id: `t${i}`, doc: { id: `t${i}`, i } }));

describe('MongoDB read store (writer, fake client)', () => {
  it('runs one fenced transaction at a time: concurrent commits would abort each other on the lease document', async () => {
    const { mongo, store } = writer();
    await Promise.all([
      store.commit('names', '3', docs(2)),
      store.commit('reactor:mail-delivery', '5', []),
      store.commit('kafka-relay', '7', []),
      store.commit('names', '9', docs(3)),
    ]);
    expect(mongo.maxActive).toBe(1);
    const transactions = mongo.transactions();
    expect(transactions).toHaveLength(4);
    for (const tx of transactions) expect(tx[0]).toBe('leases.updateOne'); // each one still fenced
    await expect(store.getCheckpoint('names')).resolves.toBe('9');
    await expect(store.getCheckpoint('kafka-relay')).resolves.toBe('7');
    await expect(store.collection('things').count()).resolves.toBe(3);
  });

  it('a commit that fails does not hold up the next one', async () => {
    const { store, loseLease, regainLease } = writer();
    loseLease();
    await expect(store.commit('names', '1', docs(1))).rejects.toBeInstanceOf(LeaseLostError);
    regainLease();
    await store.commit('names', '2', docs(1));
    await expect(store.getCheckpoint('names')).resolves.toBe('2');
  });

  it('resets a read model too large for one transaction: the checkpoint first, then fenced chunks', async () => {
    const { mongo, store } = writer();
    const n = 2 * mongo.maxDeletesPerTransaction + 1;
    for (let at = 0; at < n; at += 1_000) await store.commit('names', String(at + 1), docs(n).slice(at, at + 1_000));
    mongo.log.length = 0;

    await store.reset('names', ['things']);

    await expect(store.getCheckpoint('names')).resolves.toBeNull();
    await expect(store.collection('things').count()).resolves.toBe(0);
    const [first, ...chunks] = mongo.transactions();
    expect(first).toEqual(['leases.updateOne', 'checkpoints.deleteOne']);
    expect(chunks).toHaveLength(Math.ceil(n / RESET_CHUNK));
    for (const tx of chunks) expect(tx).toEqual(['leases.updateOne', 'things.deleteMany']);
    expect(mongo.maxActive).toBe(1);
  });

  it('a reset cut short by a lost lease deletes nothing more and leaves no checkpoint (the next start resets again)', async () => {
    const { mongo, store, loseLease, regainLease } = writer();
    await store.commit('names', '1', docs(1_500)); // within one transaction's limit
    mongo.after = (op) => {
      if (op === 'things.deleteMany') loseLease();
    };

    await expect(store.reset('names', ['things'])).rejects.toBeInstanceOf(LeaseLostError);

    await expect(store.getCheckpoint('names')).resolves.toBeNull();
    await expect(store.collection('things').count()).resolves.toBe(1_500 - RESET_CHUNK);
    mongo.after = () => {};
    regainLease();
    await store.reset('names', ['things']);
    await expect(store.collection('things').count()).resolves.toBe(0);
  });

  it('answers get and getMany under the ids asked for, lone surrogates included (BSON stores them as U+FFFD)', async () => {
    const { store } = writer();
    const odd = ['k\ud800', 'ü\u0301', 'a\u0000b', '01', '1e3', '😀'];
    await store.commit('odd', '1', odd.map((id, n) => ({ collection: 'odd', id, doc: { id, n } })));
    const coll = store.collection('odd');
    await expect(coll.getMany(odd)).resolves.toEqual(odd.map((id, n) => ({ id, n })));
    await expect(Promise.all(odd.map((id) => coll.get(id)))).resolves.toEqual(odd.map((id, n) => ({ id, n })));
    await expect(coll.getMany(['nope', 'k\ud800'])).resolves.toEqual([null, { id: 'k\ud800', n: 0 }]);
  });

  it('knows which strings BSON changes', () => {
    for (const s of ['k\ud800', '\udc00\ud800', 'a😀b', '\ud83d', 'x\udfff\ud800\udc00y', 'plain']) expect(bsonString(s)).toBe(bson(s));
    expect(bsonString('k\ud800')).toBe('k\uFFFD');
  });
});

describe('MongoDB lease', () => {
  afterEach(() => {
    jest.useRealTimers();
  });

  it('survives renewals failing through a primary election (12 s)', async () => {
    jest.useFakeTimers({ now: 1_000_000 });
    const mongo = new FakeMongo();
    const held = await acquireLease(mongo as unknown as Db, 'projections', 'w1');
    let lost = false;
    void held.lost.then(() => (lost = true));
    const lease = () => mongo.collection('leases').docs.get('projections')!;
    expect(+(lease().expiresAt as Date) - Date.now()).toBe(LEASE_TTL_MS);

    await jest.advanceTimersByTimeAsync(1_000);
    mongo.down = true; // election: every renewal fails
    await jest.advanceTimersByTimeAsync(12_000);
    mongo.down = false;
    await jest.advanceTimersByTimeAsync(30_000);

    expect(lost).toBe(false);
    expect(lease().owner).toBe('w1');
    expect(+(lease().expiresAt as Date)).toBeGreaterThan(Date.now());
    await held.release();
  });
});
