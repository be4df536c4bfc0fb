/**
 * The read-store port: documents built by projections, served by the listing endpoints.
 *
 * Writes go through {@link ReadStore.commit} only: the projection runner's documents, and
 * the checkpoints of the reactors and the Kafka relay (docs/ARCHITECTURE.md); everything
 * else reads. Every adapter (embedded SQLite, MongoDB) must pass
 * `test/contract/read-store.contract.ts`.
 */

export type Scalar = string | number | boolean | null;

export interface Doc {
  id: string;
  [field: string]: unknown;
}

/** A collection and the fields its queries filter and sort on (adapters index them). */
export interface CollectionSpec {
  name: string;
  /** Each entry is one compound index: equality fields first, then the sort field. */
  indexes?: string[][];
}

export interface Query {
  /** Equality on top-level fields (all must hold). */
  where?: Record<string, Scalar>;
  /** Range conditions on top-level fields. */
  range?: Record<string, { gt?: Scalar; gte?: Scalar; lt?: Scalar; lte?: Scalar }>;
  /** Sort on one top-level field; ties broken by `id` in the same direction. */
  orderBy?: { field: string; direction: 'asc' | 'desc' };
  /** Page size. */
  limit?: number;
  /** Opaque cursor from a previous page's `next`. */
  cursor?: string | null;
}

export interface Page<T> {
  items: T[];
  /** Cursor of the next page, when more remain. */
  next: string | null;
}

/** A document write: `doc` null deletes. */
export interface Change {
  collection: string;
  id: string;
  doc: Doc | null;
}

export interface Collection<T extends Doc = Doc> {
  get(id: string): Promise<T | null>;
  /**
   * Documents by id in one read, in the order of `ids` (null where there is none; an id
   * named twice is answered twice): what a projection batch touches, read at once.
   */
  getMany(ids: string[]): Promise<(T | null)[]>;
  findOne(where: Record<string, Scalar>): Promise<T | null>;
  find(query?: Query): Promise<Page<T>>;
  count(where?: Record<string, Scalar>): Promise<number>;
}

export interface ReadStore {
  /**
   * True when another process writes this store and this one only observes it (a cluster
   * gateway): its commits wait for the writer's checkpoints and it never resets.
   */
  readonly follower?: boolean;
  /** Creates collections and indexes (idempotent); a writer also drops indexes no longer declared. */
  ensureCollections(specs: CollectionSpec[]): Promise<void>;
  collection<T extends Doc = Doc>(name: string): Collection<T>;
  /** Position up to which the projection has been applied, or null. */
  getCheckpoint(projection: string): Promise<string | null>;
  /**
   * Applies the changes and moves the projection's checkpoint to `position`, atomically.
   * A commit at or below the stored checkpoint is ignored: that keeps replays idempotent.
   */
  commit(projection: string, position: string, changes: Change[]): Promise<void>;
  /** Drops the collections' documents and the projection's checkpoint (for a rebuild). */
  reset(projection: string, collections: string[]): Promise<void>;
  close(): Promise<void>;
}
