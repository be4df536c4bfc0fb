/**
 * Embedded read store: one SQLite table per collection, documents stored as JSON text and
 * queried through `json_extract`, with expression indexes for the declared index specs.
 *
 * The projection checkpoints live in the same database as the documents, so a commit
 * (documents + checkpoint) is a single transaction and they can never disagree.
 *
 * Writes (projection commits, resets) run in a worker thread (./read-store-writer.js) on its
 * own connection, so their SQLite work never holds up the event loop; this thread reads on
 * another connection (WAL: readers and the writer do not block each other).
 *
 * Read cache. Results of `get`, `findOne`, `find` and `count` are kept in memory (bounded,
 * roughly least recently used out first) and answered from there until a write touches their
 * collection. This is exact, never stale, because of how the embedded store is used:
 * - one writer: the database file belongs to one process (one DATA_DIR, one service, and
 *   `npm run rebuild` only while it is stopped), and in that process only this adapter's
 *   `commit` and `reset` write, through the writer thread;
 * - invalidation: when the writer answers a commit (after its COMMIT), the cached `get` of
 *   every id it wrote and every cached query of every collection it touched are dropped,
 *   before the commit's promise settles; a reset drops everything of its collections. A
 *   read filled while the commit was in flight may hold either state and is dropped too;
 *   one filled after the answer sees the commit (reads are synchronous, each on a fresh
 *   snapshot). So nobody who awaited a commit can be answered from before it.
 * Cached documents (and pages) are deep-frozen and shared between callers: a caller that
 * modifies one fails loudly (ESM is strict mode) instead of corrupting the cache, so copy
 * before changing (`{ ...doc, field }`).
 * The MongoDB adapter (cluster mode: many gateways, one projection worker writing) does not
 * cache: its writes happen in another process, which no local counter can see.
 */
import { Worker } from 'node:worker_threads';
import { limitSql, openDatabase, type Statement } from './driver.js';
import type {
  Collection,
  CollectionSpec,
  Doc,
  Page,
  Query,
  ReadStore,
  Scalar,
} from '../ports/read-store.js';

// Names are interpolated into SQL, so they are checked against a strict alphabet.
const COLLECTION_NAME = /^[a-z][a-z0-9_]*$/;
const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const POSITION = /^(0|[1-9][0-9]*)$/;

type Row = { id: string; doc: string; s: unknown };

function collectionName(name: string): string {
  // `sqlite_` tables are reserved by SQLite itself.
  if (!COLLECTION_NAME.test(name) || name.startsWith('sqlite_')) {
    throw new Error(`invalid collection name: ${JSON.stringify(name)}`);
  }
  return name;
}

/** The SQL expression reading a top-level field (the `id` column for `id`). */
function fieldSql(field: string): string {
  if (!FIELD_NAME.test(field)) throw new Error(`invalid field name: ${JSON.stringify(field)}`);
  return field === 'id' ? 'id' : `json_extract(doc, '$.${field}')`;
}

/**
 * `json_extract` maps JSON true/false to 1/0 and compares numbers below text, so without a
 * type check `{ flag: 1 }` would match `true` and `{ gt: 5 }` would match every string.
 * The check keeps comparisons within one JSON type (as MongoDB does).
 */
function typeGuardSql(field: string, value: Exclude<Scalar, null>): string {
  if (field === 'id') return '';
  const types =
    typeof value === 'string' ? `'text'` : typeof value === 'number' ? `'integer', 'real'` : `'true', 'false'`;
  return ` AND json_type(doc, '$.${field}') IN (${types})`;
}

/** SQLite has no boolean type (better-sqlite3 refuses to bind one); JSON booleans read back as 1/0. */
function bindable(value: Exclude<Scalar, null>): string | number {
  return typeof value === 'boolean' ? (value ? 1 : 0) : value;
}

const RANGE_OPS = { gt: '>', gte: '>=', lt: '<', lte: '<=' } as const;

function encodeCursor(sortValue: unknown, id: string): string {
  return Buffer.from(JSON.stringify([sortValue, id])).toString('base64url');
}

function decodeCursor(cursor: string): [Scalar, string] {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    // The sort value is bound as a statement parameter: only a JSON scalar may get there
    // (an object or array would be read as several parameters).
    const scalar = (v: unknown) => v === null || typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v));
    if (Array.isArray(value) && value.length === 2 && typeof value[1] === 'string' && scalar(value[0])) {
      return value as [Scalar, string];
    }
  } catch {
    // fall through
  }
  throw Object.assign(new Error('invalid cursor'), { code: 'invalid_cursor' });
}

/** Bounds of the read cache (see the header); `false` turns it off. */
export interface ReadCacheOptions {
  /** Cached results (documents by id, query answers), all collections together. */
  maxEntries: number;
  /** Approximate memory: the JSON text length of the cached documents, in characters. */
  maxChars: number;
}

export const DEFAULT_READ_CACHE: ReadCacheOptions = { maxEntries: 20_000, maxChars: 16 * 1024 * 1024 };

/** Freezes a parsed JSON value and everything in it (JSON has no cycles). */
function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

/** A value JSON would drop or merge with another one (undefined, NaN, ±Infinity). */
const unkeyable = (value: unknown) => value === undefined || (typeof value === 'number' && !Number.isFinite(value));

/**
 * Cache key of a query: its JSON (plain `JSON.stringify`, the fast native path), or null
 * (not cached) when a condition holds a value JSON cannot tell apart. Ill-formed queries
 * throw before their answer is stored, so they keep throwing.
 */
function queryKey(kind: string, where: Query['where'], query?: Query): string | null {
  for (const field in where) if (unkeyable(where[field])) return null;
  if (query?.range) {
    for (const field in query.range) {
      const bounds = query.range[field] as Record<string, unknown>;
      for (const op in bounds) if (unkeyable(bounds[op])) return null;
    }
  }
  return kind + JSON.stringify(query ?? where);
}

interface CacheEntry {
  /** The map holding it (a collection's `docs` or `queries`). */
  map: Map<string, CacheEntry>;
  key: string;
  value: unknown;
  chars: number;
  /** Read since it last reached the old end of the LRU order (second chance). */
  used: boolean;
}

interface CollectionCache {
  /** `get` answers by id (null included: absent documents are cached too). */
  docs: Map<string, CacheEntry>;
  /** `find` / `findOne` / `count` answers by {@link queryKey}. */
  queries: Map<string, CacheEntry>;
}

/**
 * A bounded cache over every collection's cached answers, evicting in "second chance"
 * order (an approximation of least recently used): entries sit in insertion order, a hit
 * only marks its entry, and eviction moves a marked entry to the back (unmarked) instead of
 * dropping it. A hit is thus one map lookup and one write, with no reordering.
 */
function createReadCache(options: ReadCacheOptions | false) {
  const byCollection = new Map<string, CollectionCache>();
  const lru = new Map<CacheEntry, true>();
  let chars = 0;

  function of(name: string): CollectionCache {
    let c = byCollection.get(name);
    if (!c) {
      c = { docs: new Map(), queries: new Map() };
      byCollection.set(name, c);
    }
    return c;
  }

  function drop(entry: CacheEntry): void {
    entry.map.delete(entry.key);
    lru.delete(entry);
    chars -= entry.chars;
  }

  function lookup(map: Map<string, CacheEntry>, key: string): { value: unknown } | undefined {
    const entry = map.get(key);
    if (entry) entry.used = true;
    return entry;
  }

  function store(map: Map<string, CacheEntry>, key: string, value: unknown, size: number): void {
    if (!options) return;
    const entryChars = size + key.length;
    if (entryChars > options.maxChars / 8) return; // one huge answer must not flush everything else
    const old = map.get(key);
    if (old) drop(old);
    const entry: CacheEntry = { map, key, value, chars: entryChars, used: false };
    map.set(key, entry);
    lru.set(entry, true);
    chars += entryChars;
    // Terminates: a moved entry is unmarked, so the next pass over it drops it.
    while (lru.size > options.maxEntries || chars > options.maxChars) {
      const oldest = lru.keys().next().value!;
      if (oldest.used) {
        oldest.used = false;
        lru.delete(oldest);
        lru.set(oldest, true);
      } else {
        drop(oldest);
      }
    }
  }

  return {
    enabled: options !== false,
    getDoc: (name: string, id: string) => (options ? lookup(of(name).docs, id) : undefined),
    putDoc: (name: string, id: string, doc: Doc | null, size: number) => store(of(name).docs, id, doc, size),
    getQuery: (name: string, key: string) => (options ? lookup(of(name).queries, key) : undefined),
    putQuery: (name: string, key: string, value: unknown, size: number) => store(of(name).queries, key, value, size),
    /** After a commit: the written ids and every query of the collection. */
    written(name: string, id: string) {
      const c = byCollection.get(name);
      if (!c) return;
      const doc = c.docs.get(id);
      if (doc) drop(doc);
      for (const entry of c.queries.values()) drop(entry);
    },
    /** After a reset: everything of the collection. */
    clear(name: string) {
      const c = byCollection.get(name);
      if (!c) return;
      for (const entry of c.docs.values()) drop(entry);
      for (const entry of c.queries.values()) drop(entry);
    },
    clearAll() {
      byCollection.clear();
      lru.clear();
      chars = 0;
    },
  };
}

/** A request to the writer thread (./read-store-writer.js documents the protocol). */
type WriterRequest =
  | { type: 'commit'; projection: string; position: string; changes: { table: string; id: string; json: string | null }[] }
  | { type: 'reset'; projection: string; tables: string[] };

/**
 * Starts the writer thread. Requests are answered in order, so the unanswered ones are a
 * FIFO. A writer that dies fails every pending and later request, which stops the
 * projection runner (the read models freeze; main exits), as a failed commit did before.
 */
function openWriter(file: string) {
  const worker = new Worker(new URL('./read-store-writer.js', import.meta.url), {
    workerData: { file },
    execArgv: [], // plain JS: no TypeScript loader in the thread
  });
  const pending: { resolve: () => void; reject: (err: Error) => void }[] = [];
  let failure: Error | null = null;
  let closing: Promise<void> | null = null;
  let exitExpected = false;

  function die(err: Error): void {
    failure ??= new Error(`read store writer thread failed: ${err.message}`, { cause: err });
    for (const p of pending.splice(0)) p.reject(failure);
  }
  worker.on('message', (msg: { ok: true } | { ok: false; message: string; code?: string }) => {
    const p = pending.shift();
    if (pending.length === 0) worker.unref();
    if (msg.ok) p?.resolve();
    else p?.reject(Object.assign(new Error(`read store commit failed: ${msg.message}`), { code: msg.code }));
  });
  worker.on('error', die);
  worker.on('exit', (code) => {
    if (!exitExpected || pending.length) die(new Error(`exited with code ${code}`));
  });
  // An idle store must not keep the process alive; one with unanswered requests must.
  worker.unref();

  return {
    request(msg: WriterRequest): Promise<void> {
      if (failure) return Promise.reject(failure);
      if (closing) return Promise.reject(new Error('read store is closed'));
      return new Promise<void>((resolve, reject) => {
        pending.push({ resolve, reject });
        worker.ref();
        worker.postMessage(msg);
      });
    },
    /** Test hook: kills the thread as a crash would. */
    crash: () => worker.terminate().then(() => {}),
    /** Lets the requests already sent finish (they come first), then ends the thread. */
    close(): Promise<void> {
      closing ??= (async () => {
        if (failure) {
          await worker.terminate();
          return;
        }
        exitExpected = true;
        const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
        worker.ref();
        worker.postMessage({ type: 'close' });
        await exited;
      })();
      return closing;
    },
  };
}

/** The port plus what only this adapter offers. */
export interface SqliteReadStore extends ReadStore {
  /** Test hook: kills the writer thread as a crash would. */
  crashWriterForTesting(): Promise<void>;
}

/** SQLite's answers for a file that is no database, or a damaged one. */
export const UNREADABLE_DATABASE = /^(SQLITE_NOTADB|SQLITE_CORRUPT)/;

/**
 * Opens (creating if needed) a SQLite read store.
 *
 * WAL with `synchronous = NORMAL`: a power loss may drop the last commits, which is fine
 * because read models are rebuildable and the checkpoint rolls back with the documents.
 */
export function openSqliteReadStore(options: { file: string; cache?: ReadCacheOptions | false }): SqliteReadStore {
  const db = openDatabase(options.file);
  const cache = createReadCache(options.cache ?? DEFAULT_READ_CACHE);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    // The leading underscore keeps it out of the collection namespace.
    db.exec('CREATE TABLE IF NOT EXISTS _checkpoints (projection TEXT PRIMARY KEY, position TEXT NOT NULL)');
  } catch (err) {
    db.close();
    const { code, message } = err as { code?: string; message: string };
    // Named, with the way out: SQLite's own words ("file is not a database") name no file.
    if (code && UNREADABLE_DATABASE.test(code)) {
      throw Object.assign(new Error(`read models ${options.file}: ${message}; they hold nothing the event log does not: \`npm run rebuild\` sets this file aside and makes them again`, { cause: err }), { code, path: options.file });
    }
    throw err;
  }

  // One prepared statement per distinct SQL text: a query shape and its page size.
  const prepare = (sql: string): Statement => db.statement(sql);

  const tables = new Set<string>();
  /** Quoted table name; the table is created on first use so reads never hit a missing table. */
  function table(name: string): string {
    if (!tables.has(name)) {
      db.exec(`CREATE TABLE IF NOT EXISTS "${collectionName(name)}" (id TEXT PRIMARY KEY, doc TEXT NOT NULL)`);
      tables.add(name);
    }
    return `"${name}"`;
  }

  function whereSql(query: Pick<Query, 'where' | 'range'>, params: unknown[]): string[] {
    const clauses: string[] = [];
    for (const [field, value] of Object.entries(query.where ?? {})) {
      if (value === null) {
        clauses.push(`${fieldSql(field)} IS NULL`); // `= NULL` is never true
      } else {
        clauses.push(`${fieldSql(field)} = ?${typeGuardSql(field, value)}`);
        params.push(bindable(value));
      }
    }
    for (const [field, bounds] of Object.entries(query.range ?? {})) {
      for (const [op, value] of Object.entries(bounds)) {
        const sqlOp = RANGE_OPS[op as keyof typeof RANGE_OPS];
        if (!sqlOp) throw new Error(`invalid range operator: ${op}`);
        if (value === undefined) continue;
        if (value === null) {
          clauses.push('0'); // nothing is ordered against null
          continue;
        }
        clauses.push(`${fieldSql(field)} ${sqlOp} ?${typeGuardSql(field, value)}`);
        params.push(bindable(value));
      }
    }
    return clauses;
  }

  /** The answer of `find`, from the cache or from SQLite (then frozen and cached). */
  function find(name: string, query: Query): Page<Doc> {
    const key = cache.enabled ? queryKey('f', query.where, query) : null;
    const hit = key === null ? undefined : cache.getQuery(name, key);
    if (hit) return hit.value as Page<Doc>;
    const { page, chars } = findUncached(name, query);
    if (key !== null) {
      deepFreeze(page);
      cache.putQuery(name, key, page, chars);
    }
    return page;
  }

  /** The answer of `find` from SQLite, and the length of its documents' JSON text. */
  function findUncached(name: string, query: Query): { page: Page<Doc>; chars: number } {
    const { field, direction } = query.orderBy ?? { field: 'id', direction: 'asc' as const };
    if (direction !== 'asc' && direction !== 'desc') throw new Error(`invalid direction: ${String(direction)}`);
    const sort = fieldSql(field);
    const dir = direction.toUpperCase();
    const params: unknown[] = [];
    const clauses = whereSql(query, params);

    /** Rows after the NULL sort values of a descending walk (they come last): read on their own. */
    let nullsAfter = false;
    if (query.cursor) {
      // Keyset pagination on (sort value, id). SQLite puts NULLs first ascending and last
      // descending, and a row-value comparison with NULL is never true, hence the cases. A
      // plain bound on the sort value comes with the row value: it is what lets SQLite seek
      // in the index (an `OR ... IS NULL` here made every deeper page scan from the start).
      const [after, afterId] = decodeCursor(query.cursor);
      const cmp = direction === 'asc' ? '>' : '<';
      if (field === 'id') {
        clauses.push(`id ${cmp} ?`);
        params.push(afterId);
      } else if (after === null) {
        clauses.push(direction === 'asc' ? `(${sort} IS NOT NULL OR id > ?)` : `(${sort} IS NULL AND id < ?)`);
        params.push(afterId);
      } else {
        clauses.push(`${sort} ${cmp}= ? AND (${sort}, id) ${cmp} (?, ?)`);
        params.push(bindable(after), bindable(after), afterId);
        nullsAfter = direction === 'desc';
      }
    }

    let limit: number | undefined;
    if (query.limit !== undefined) {
      limit = query.limit;
      if (!Number.isInteger(limit) || limit < 1) throw new Error(`invalid limit: ${limit}`);
    }
    const where = (extra: string[]) => (extra.length ? ` WHERE ${extra.join(' AND ')}` : '');
    const order = ` ORDER BY ${sort} ${dir}${field === 'id' ? '' : `, id ${dir}`}`;
    // One extra row tells whether more remain.
    const sql = `SELECT id, doc, ${sort} AS s FROM ${table(name)}${where(clauses)}${order}${limit === undefined ? '' : limitSql(limit + 1)}`;
    const baseParams = params.slice(0, params.length - (nullsAfter ? 3 : 0));

    const rows = prepare(sql).all(...params) as Row[];
    if (nullsAfter && (limit === undefined || rows.length <= limit)) {
      // The walk went past the last sort value: the rows without one follow, by id.
      const nullClauses = [...clauses.slice(0, -1), `${sort} IS NULL`];
      const rest = limit === undefined ? '' : limitSql(limit + 1 - rows.length);
      rows.push(...(prepare(`SELECT id, doc, ${sort} AS s FROM ${table(name)}${where(nullClauses)}${order}${rest}`).all(...baseParams) as Row[]));
    }
    const more = limit !== undefined && rows.length > limit;
    const pageRows = more ? rows.slice(0, limit) : rows;
    const last = pageRows[pageRows.length - 1];
    let chars = 0;
    const items = pageRows.map((row) => {
      chars += row.doc.length;
      return JSON.parse(row.doc) as Doc;
    });
    return { page: { items, next: more && last ? encodeCursor(last.s, last.id) : null }, chars };
  }

  function getDoc(name: string, id: string): Doc | null {
    const hit = typeof id === 'string' ? cache.getDoc(name, id) : undefined;
    if (hit) return hit.value as Doc | null;
    const row = prepare(`SELECT doc FROM ${table(name)} WHERE id = ?`).get(id) as { doc: string } | undefined;
    const doc = row ? (JSON.parse(row.doc) as Doc) : null;
    if (cache.enabled && typeof id === 'string') cache.putDoc(name, id, deepFreeze(doc), row?.doc.length ?? 0);
    return doc;
  }

  /** Whether a string holds no lone surrogate (SQLite stores such a one as U+FFFD's bytes). */
  const isWellFormed = (id: string) => !/\p{Cs}/u.test(id);

  /** `get` for many ids: cached ones from the cache, the others in one statement (then cached). */
  function getDocs(name: string, ids: string[]): (Doc | null)[] {
    const found = new Map<string, Doc | null>();
    const missing = new Set<string>();
    for (const id of ids) {
      if (found.has(id) || missing.has(id)) continue;
      // An id with a lone surrogate comes back from SQLite changed and would match no row below.
      if (!isWellFormed(id)) {
        found.set(id, getDoc(name, id));
        continue;
      }
      const hit = cache.getDoc(name, id);
      if (hit) found.set(id, hit.value as Doc | null);
      else missing.add(id);
    }
    if (missing.size) {
      // json_each keeps one statement whatever the number of ids (and no parameter limit).
      const rows = prepare(`SELECT id, doc FROM ${table(name)} WHERE id IN (SELECT value FROM json_each(?))`).all(JSON.stringify([...missing])) as Row[];
      const texts = new Map(rows.map((row) => [row.id, row.doc]));
      for (const id of missing) {
        const text = texts.get(id);
        const doc = text === undefined ? null : (JSON.parse(text) as Doc);
        if (cache.enabled) cache.putDoc(name, id, deepFreeze(doc), text?.length ?? 0);
        found.set(id, doc);
      }
    }
    return ids.map((id) => found.get(id) ?? null);
  }

  function count(name: string, where: Record<string, Scalar>): number {
    const key = cache.enabled ? queryKey('c', where) : null;
    const hit = key === null ? undefined : cache.getQuery(name, key);
    if (hit) return hit.value as number;
    const params: unknown[] = [];
    const clauses = whereSql({ where }, params);
    const sql = `SELECT COUNT(*) AS n FROM ${table(name)}` + (clauses.length ? ` WHERE ${clauses.join(' AND ')}` : '');
    const n = (prepare(sql).get(...params) as { n: number }).n;
    if (key !== null) cache.putQuery(name, key, n, 0);
    return n;
  }

  const collections = new Map<string, Collection>();
  function collection(name: string): Collection {
    collectionName(name);
    let found = collections.get(name);
    if (!found) {
      found = {
        async get(id) {
          return getDoc(name, id);
        },
        async getMany(ids) {
          return getDocs(name, ids);
        },
        async findOne(where) {
          return find(name, { where, limit: 1 }).items[0] ?? null;
        },
        async find(query = {}) {
          return find(name, query);
        },
        async count(where = {}) {
          return count(name, where);
        },
      };
      collections.set(name, found);
    }
    return found;
  }

  function readCheckpoint(projection: string): string | null {
    const row = prepare('SELECT position FROM _checkpoints WHERE projection = ?').get(projection) as
      | { position: string }
      | undefined;
    return row?.position ?? null;
  }

  const writer = openWriter(options.file);

  return {
    async ensureCollections(specs: CollectionSpec[]) {
      const declared = new Map<string, Set<string>>();
      for (const spec of specs) {
        const quoted = table(spec.name);
        const names = declared.get(spec.name) ?? new Set<string>();
        declared.set(spec.name, names);
        for (const fields of spec.indexes ?? []) {
          if (fields.length === 0) continue;
          const columns = fields.map(fieldSql).join(', ');
          // Commas cannot occur in names, so distinct specs never share an index name.
          const name = `ix_${spec.name}(${fields.join(',')})`;
          names.add(name);
          db.exec(`CREATE INDEX IF NOT EXISTS "${name}" ON ${quoted} (${columns})`);
        }
      }
      // An index a collection no longer declares (a projection that now sorts by another
      // field) would only slow every write down: drop it.
      const ours = prepare("SELECT name, tbl_name AS tbl FROM sqlite_master WHERE type = 'index' AND substr(name, 1, 3) = 'ix_'");
      for (const { name, tbl } of ours.all() as { name: string; tbl: string }[]) {
        if (declared.get(tbl)?.has(name) === false) db.exec(`DROP INDEX IF EXISTS "${name}"`);
      }
    },
    collection<T extends Doc = Doc>(name: string) {
      return collection(name) as unknown as Collection<T>;
    },
    async getCheckpoint(projection) {
      return readCheckpoint(projection);
    },
    async commit(projection, position, changes) {
      if (!POSITION.test(position)) throw new Error(`invalid position: ${JSON.stringify(position)}`);
      for (const change of changes) {
        table(change.collection); // DDL outside the transaction
        if (change.doc && change.doc.id !== change.id) {
          throw new Error(`change for ${change.collection}/${change.id} carries a document with id ${String(change.doc.id)}`);
        }
      }
      // Serialised here: JSON text crosses to the writer thread as a plain string copy.
      const writes = changes.map((change) => ({ table: table(change.collection), id: change.id, json: change.doc ? JSON.stringify(change.doc) : null }));
      try {
        await writer.request({ type: 'commit', projection, position, changes: writes });
      } finally {
        // Once the writer answered, also after a failed (rolled back) commit: dropping
        // answers is always safe. Until then readers see the state before the commit.
        for (const change of changes) cache.written(change.collection, change.id);
      }
    },
    async reset(projection, names) {
      const tables = names.map(table);
      try {
        await writer.request({ type: 'reset', projection, tables });
      } finally {
        names.forEach(cache.clear);
      }
    },
    crashWriterForTesting: () => writer.crash(),
    async close() {
      await writer.close();
      cache.clearAll();
      db.close();
    },
  };
}
