/**
 * Read store on MongoDB (driver v6), for the cluster mode. Same port and same contract
 * suite as the SQLite read store (run it with MONGO_URL set).
 *
 * - One MongoDB collection per read model; documents stored as `{ _id: id, ...doc }`.
 * - Checkpoints in the `checkpoints` collection. A commit is ONE transaction: it re-reads
 *   the checkpoint, ignores the commit when it is at or below it (position-guarded, so a
 *   replay is idempotent), writes the documents and moves the checkpoint. Transactions
 *   need a replica set (a single-node one is enough); majority write and read concern, so
 *   an acknowledged commit survives a primary change.
 * - Indexes from each CollectionSpec (`{fields..., _id}`: the id breaks sort ties).
 *
 * Two modes, because in cluster mode the projections run in several processes:
 * - `writer` (the worker holding the `projections` lease): commits for real. Each commit
 *   also bumps the lease in the same transaction, matched on this owner and an unexpired
 *   lease: a worker that lost its lease can never write again (fencing). These transactions
 *   run one at a time in the process (they all write the lease document).
 * - `follower` (the gateways): never writes. A commit with changes waits until the writer's
 *   checkpoint has reached its position, so the gateway's `progress.waitFor(position)` (the
 *   read-your-writes of every command) resolves only once MongoDB shows the write. A commit
 *   without changes returns at once. `reset` (rebuild) is refused: rebuilds run on a worker.
 */
import { randomUUID } from 'node:crypto';
import { MongoClient, MongoServerError, type ClientSession, type Db, type AnyBulkWriteOperation, type Document } from 'mongodb';
import { comparePositions } from '../ports/event-store.js';
import type { Change, Collection, CollectionSpec, Doc, ReadStore, Scalar } from '../ports/read-store.js';
import {
  bsonString,
  collectionName,
  encodeCursor,
  fromStored,
  indexesOf,
  paddedPosition,
  sortValueOf,
  toMongoFilter,
  toMongoFind,
  toStored,
} from './query.js';

const POSITION = /^(0|[1-9][0-9]*)$/;

/** Documents a reset deletes per transaction: a whole read model in one would outlive transactionLifetimeLimitSeconds (60 s). */
export const RESET_CHUNK = 1_000;

const TRANSACTION = { writeConcern: { w: 'majority' }, readConcern: { level: 'snapshot' } } as const;

export interface ReadStoreLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

export interface MongoReadStoreOptions {
  /** `mongodb://host:27017/db?replicaSet=rs0`; the database is the URL's, else `database`. */
  url: string;
  database?: string;
  mode: 'writer' | 'follower';
  /** Writer only: the lease this writer must hold for every commit (see ./lease.ts). */
  lease?: { name: string; owner: string };
  /** Follower only: how often a waiting commit polls the checkpoints. Default 25 ms. */
  pollMs?: number;
  logger?: ReadStoreLogger;
}

export interface MongoReadStore extends ReadStore {
  readonly db: Db;
  readonly client: MongoClient;
}

/** The writer's lease was taken by another worker (or expired): it must stop writing. */
export class LeaseLostError extends Error {
  readonly code = 'lease_lost' as const;
  constructor(readonly lease: string, readonly owner: string) {
    super(`lease ${lease} is no longer held by ${owner}; this process must stop writing read models`);
    this.name = 'LeaseLostError';
  }
}

interface CheckpointDoc {
  _id: string;
  position: string;
  padded: string;
  at: Date;
}

export async function openMongoReadStore(options: MongoReadStoreOptions): Promise<MongoReadStore> {
  const client = new MongoClient(options.url, {
    writeConcern: { w: 'majority' },
    readConcern: { level: 'majority' },
    serverSelectionTimeoutMS: 10_000,
    // An `undefined` member is absent, as in the SQLite store's JSON (the driver's default writes null).
    ignoreUndefined: true,
  });
  await client.connect();
  const db = options.database ? client.db(options.database) : client.db();
  const store = mongoReadStore(client, db, options);
  await db.collection('checkpoints').createIndex({ padded: 1 }).catch(() => {});
  return store;
}

/** The store on a connected client (the unit tests pass a fake one). */
export function mongoReadStore(client: MongoClient, db: Db, options: MongoReadStoreOptions): MongoReadStore {
  return new MongoStore(client, db, options);
}

class MongoStore implements MongoReadStore {
  private closed = false;
  /** The tail of this process's fenced transactions (see {@link fenced}). */
  private transactions: Promise<unknown> = Promise.resolve();
  readonly follower: boolean;
  private readonly pollMs: number;
  private readonly logger: ReadStoreLogger;

  constructor(
    readonly client: MongoClient,
    readonly db: Db,
    private readonly options: MongoReadStoreOptions,
  ) {
    this.follower = options.mode === 'follower';
    this.pollMs = options.pollMs ?? 25;
    this.logger = options.logger ?? { info: () => {}, warn: (o, m) => console.warn(m, o) };
    if (options.mode === 'writer' && !options.lease) {
      this.logger.warn({}, 'MongoDB read store: writer without a lease (only safe when a single writer runs)');
    }
  }

  async ensureCollections(specs: CollectionSpec[]): Promise<void> {
    const existing = new Set((await this.db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name));
    for (const spec of specs) {
      const name = collectionName(spec.name);
      if (!existing.has(name)) {
        await this.db.createCollection(name).catch((err: unknown) => {
          if (!(err instanceof MongoServerError && err.codeName === 'NamespaceExists')) throw err;
        });
        existing.add(name);
      }
      for (const index of indexesOf(spec)) {
        await this.db.collection(name).createIndex(index.key, { name: index.name });
      }
    }
    // An index a collection no longer declares (a projection that now sorts by another
    // field) would only slow every write down: the writer drops it (not a gateway, which may
    // be of the previous release during a rolling upgrade).
    if (this.follower) return;
    const declared = new Map<string, Set<string>>();
    for (const spec of specs) {
      const names = declared.get(collectionName(spec.name)) ?? new Set<string>();
      for (const index of indexesOf(spec)) names.add(index.name);
      declared.set(collectionName(spec.name), names);
    }
    for (const [name, names] of declared) {
      for (const index of await this.db.collection(name).listIndexes().toArray()) {
        if (typeof index.name === 'string' && index.name.startsWith('ix_') && !names.has(index.name)) {
          await this.db
            .collection(name)
            .dropIndex(index.name)
            .catch((err: unknown) => {
              if (!(err instanceof MongoServerError && err.codeName === 'IndexNotFound')) throw err;
            });
        }
      }
    }
  }

  collection<T extends Doc = Doc>(name: string): Collection<T> {
    const coll = this.db.collection<Document>(collectionName(name));
    return {
      // Answered under the id asked for: one with a lone surrogate is stored (and matched) as
      // its U+FFFD form, see bsonString; the SQLite store's documents keep it as asked.
      get: async (id) => {
        const found = await coll.findOne({ _id: id as never });
        return found ? ({ ...fromStored(found), id } as T) : null;
      },
      getMany: async (ids) => {
        if (!ids.length) return [];
        const rows = await coll.find({ _id: { $in: [...new Set(ids)] as never[] } }).toArray();
        const byId = new Map(rows.map((r) => [String(r._id), r]));
        return ids.map((id) => {
          const found = byId.get(bsonString(id));
          return found ? ({ ...fromStored(found), id } as T) : null;
        });
      },
      findOne: async (where) => {
        const found = await coll.findOne(toMongoFilter({ where }), { sort: { _id: 1 } });
        return found ? (fromStored(found) as T) : null;
      },
      find: async (query = {}) => {
        const { filter, sort, limit } = toMongoFind(query);
        let cursor = coll.find(filter, { sort });
        if (limit !== undefined) cursor = cursor.limit(limit);
        const rows = await cursor.toArray();
        const more = limit !== undefined && rows.length >= limit;
        const page = more ? rows.slice(0, limit - 1) : rows;
        const last = page[page.length - 1];
        return {
          items: page.map((r) => fromStored(r) as T),
          next: more && last ? encodeCursor(sortValueOf(last, query.orderBy), String(last._id)) : null,
        };
      },
      count: async (where: Record<string, Scalar> = {}) => coll.countDocuments(toMongoFilter({ where })),
    };
  }

  async getCheckpoint(projection: string): Promise<string | null> {
    const found = await this.db.collection<CheckpointDoc>('checkpoints').findOne({ _id: projection });
    return found?.position ?? null;
  }

  async commit(projection: string, position: string, changes: Change[]): Promise<void> {
    if (!POSITION.test(position)) throw new Error(`invalid position: ${JSON.stringify(position)}`);
    for (const change of changes) {
      collectionName(change.collection);
      if (change.doc && change.doc.id !== change.id) {
        throw new Error(`change for ${change.collection}/${change.id} carries a document with id ${String(change.doc.id)}`);
      }
    }
    if (this.options.mode === 'follower') return this.awaitWriter(projection, position, changes.length > 0);
    await this.fenced(async (session) => {
      const checkpoints = this.db.collection<CheckpointDoc>('checkpoints');
      const current = await checkpoints.findOne({ _id: projection }, { session });
      if (comparePositions(current?.position ?? null, position) >= 0) return; // a replay
      const byCollection = new Map<string, AnyBulkWriteOperation<Document>[]>();
      for (const change of changes) {
        let ops = byCollection.get(change.collection);
        if (!ops) byCollection.set(change.collection, (ops = []));
        ops.push(
          change.doc
            ? { replaceOne: { filter: { _id: change.id as never }, replacement: toStored(change.doc), upsert: true } }
            : { deleteOne: { filter: { _id: change.id as never } } },
        );
      }
      for (const [name, ops] of byCollection) {
        await this.db.collection(name).bulkWrite(ops, { session, ordered: true });
      }
      await checkpoints.updateOne(
        { _id: projection },
        { $set: { position, padded: paddedPosition(position), at: new Date() } },
        { upsert: true, session },
      );
    });
  }

  /**
   * The checkpoint goes first: a reset cut short (a crash, a lost lease) leaves none, so the
   * next start resets again. Then the documents, {@link RESET_CHUNK} per transaction (a read
   * model of millions in one would outlive the transaction limits and crash-loop the worker
   * at every upgrade), each one fenced: a worker that lost the lease cannot delete what the
   * new holder writes, as one long deleteMany outside a transaction could.
   */
  async reset(projection: string, collections: string[]): Promise<void> {
    if (this.options.mode === 'follower') {
      throw new Error('read models are rebuilt by a worker (npm run rebuild with the worker stopped), not by a gateway');
    }
    const names = collections.map(collectionName);
    await this.fenced(async (session) => {
      await this.db.collection<CheckpointDoc>('checkpoints').deleteOne({ _id: projection }, { session });
    });
    for (const name of names) {
      const coll = this.db.collection(name);
      for (;;) {
        const ids = (await coll.find({}, { projection: { _id: 1 }, limit: RESET_CHUNK }).toArray()).map((d) => d._id);
        if (ids.length === 0) break;
        await this.fenced(async (session) => {
          await coll.deleteMany({ _id: { $in: ids } }, { session });
        });
      }
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.client.close();
  }

  /**
   * Runs `work` in a transaction that first bumps our lease (fencing), one such transaction at
   * a time in this process: they all write the lease document, so concurrent ones (the
   * projection runner, the relay's and the reactors' checkpoints) would abort each other with
   * WriteConflict, which withTransaction retries at once, without backoff.
   */
  private fenced(work: (session: ClientSession) => Promise<void>): Promise<void> {
    const run = this.transactions.then(async () => {
      const session = this.client.startSession();
      try {
        await session.withTransaction(async () => {
          await this.checkLease(session);
          await work(session);
        }, TRANSACTION);
      } finally {
        await session.endSession();
      }
    });
    this.transactions = run.catch(() => {}); // a failed one is its caller's; the next still runs
    return run;
  }

  /** Fencing: bump our lease inside the transaction; no match = we lost it. */
  private async checkLease(session: ClientSession): Promise<void> {
    const lease = this.options.lease;
    if (!lease) return;
    const now = new Date();
    const result = await this.db
      .collection<{ _id: string; owner: string; expiresAt: Date; fencedAt?: Date }>('leases')
      .updateOne({ _id: lease.name, owner: lease.owner, expiresAt: { $gt: now } }, { $set: { fencedAt: now } }, { session });
    if (result.matchedCount !== 1) throw new LeaseLostError(lease.name, lease.owner);
  }

  /** Follower: wait for the writer to commit at least `position` for this projection. */
  private async awaitWriter(projection: string, position: string, hasChanges: boolean): Promise<void> {
    if (!hasChanges) return;
    const started = Date.now();
    let warned = started;
    while (!this.closed) {
      if (comparePositions(await this.getCheckpoint(projection), position) >= 0) return;
      if (Date.now() - warned > 30_000) {
        warned = Date.now();
        this.logger.warn(
          { projection, position, waitingMs: Date.now() - started },
          'waiting for a worker to project this position: is `npm run worker` running?',
        );
      }
      await new Promise((resolve) => setTimeout(resolve, this.pollMs));
    }
    throw new Error('read store is closed');
  }
}

/** A unique owner id for this process's lease. */
export function newLeaseOwner(label: string): string {
  return `${label}:${process.pid}:${randomUUID()}`;
}
