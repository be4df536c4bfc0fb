// @ts-check
/**
 * The one SQLite driver seam: everything in this project that opens a SQLite file goes
 * through `openDatabase` (types in ./driver.d.ts), never through a driver directly.
 *
 * Why: better-sqlite3 12.x aborts the process on Node >= 24 (`Assertion failed: (env) !=
 * nullptr` in node::RemoveEnvironmentCleanupHook, from Statement::~Statement) when a
 * statement is garbage-collected while no Environment is current, because Node 24 changed
 * node::ObjectWrap; the only upstream fix is better-sqlite3 13, which needs Node >= 22.14
 * and crashes on Node 20. So on Node >= 24 we use the built-in `node:sqlite` (stable there,
 * no ExperimentalWarning), and on older Node we keep better-sqlite3 (node:sqlite is absent
 * on Node 20 and prints an ExperimentalWarning on Node 22).
 *
 * Both drivers are wrapped to behave the same for what this project uses:
 * - parameters: positional `?` (or one plain object for bare named parameters); both bind
 *   a JS number as REAL (an INTEGER column stores it as an integer) and a BigInt as INTEGER;
 * - rows: plain objects with number/string/null/Uint8Array values (node:sqlite's have a null
 *   prototype); no BigInt, no pluck/raw/safeIntegers modes;
 * - `transaction(fn)`: BEGIN IMMEDIATE … COMMIT (ROLLBACK on throw); called inside another
 *   transaction it runs in a SAVEPOINT that alone rolls back on throw;
 * - a 5 s busy timeout (better-sqlite3's default) on every connection;
 * - errors name SQLite's result in `code` (`SQLITE_FULL`, `SQLITE_CONSTRAINT_UNIQUE`, ...),
 *   as better-sqlite3's do; node:sqlite says `ERR_SQLITE_ERROR` with a number (`errcode`),
 *   and callers tell a full disk from a bug by the name (services/kernel/faults.ts).
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

/** Which driver this process uses: decided once, by the Node major version. */
export const driverName = Number(process.versions.node.split('.')[0]) >= 24 ? 'node:sqlite' : 'better-sqlite3';

/** Matches better-sqlite3's default busy timeout, in milliseconds. */
const BUSY_TIMEOUT_MS = 5000;

/**
 * @typedef {{ readonly?: boolean, fileMustExist?: boolean }} OpenOptions
 * @typedef {{ changes: number, lastInsertRowid: number }} RunResult
 * @typedef {{
 *   run(...params: unknown[]): RunResult,
 *   get(...params: unknown[]): unknown,
 *   all(...params: unknown[]): unknown[],
 *   iterate(...params: unknown[]): IterableIterator<unknown>,
 * }} Statement
 * @typedef {{ exec(sql: string): void, prepare(sql: string): Statement, close(): void,
 *   readonly isOpen: boolean, readonly inTransaction: boolean }} Connection  the driver-specific part
 */

/**
 * Opens (creating it unless `readonly` or `fileMustExist`) the database in `file`.
 * @param {string} file
 * @param {OpenOptions} [options]
 */
export function openDatabase(file, options = {}) {
  const conn = driverName === 'node:sqlite' ? openNodeSqlite(file, options) : openBetterSqlite3(file, options);
  return wrap(conn);
}

/** SQLite's primary result codes by number (https://sqlite.org/rescode.html). */
const PRIMARY = ['OK', 'ERROR', 'INTERNAL', 'PERM', 'ABORT', 'BUSY', 'LOCKED', 'NOMEM', 'READONLY', 'INTERRUPT', 'IOERR', 'CORRUPT', 'NOTFOUND', 'FULL', 'CANTOPEN', 'PROTOCOL', 'EMPTY', 'SCHEMA', 'TOOBIG', 'CONSTRAINT', 'MISMATCH', 'MISUSE', 'NOLFS', 'AUTH', 'FORMAT', 'RANGE', 'NOTADB', 'NOTICE', 'WARNING'];
/** The extended codes callers tell apart (the rest go by their primary code). */
const EXTENDED = { 778: 'IOERR_WRITE', 1034: 'IOERR_FSYNC', 1555: 'CONSTRAINT_PRIMARYKEY', 2067: 'CONSTRAINT_UNIQUE', 787: 'CONSTRAINT_FOREIGNKEY', 1299: 'CONSTRAINT_NOTNULL' };

/**
 * Runs a node:sqlite call, naming SQLite's result in a failure's `code` as better-sqlite3 does.
 * @template T @param {() => T} call @returns {T}
 */
function named(call) {
  try {
    return call();
  } catch (err) {
    const e = /** @type {{ code?: string, errcode?: number }} */ (err);
    if (e && e.code === 'ERR_SQLITE_ERROR' && typeof e.errcode === 'number') {
      const name = /** @type {Record<number, string>} */ (EXTENDED)[e.errcode] ?? PRIMARY[e.errcode & 0xff];
      if (name) e.code = `SQLITE_${name}`;
    }
    throw err;
  }
}

/** @param {string} file @param {OpenOptions} options @returns {Connection} */
function openNodeSqlite(file, options) {
  /** @type {typeof import('node:sqlite')} */
  const { DatabaseSync } = require('node:sqlite');
  if (options.fileMustExist && !options.readonly && file !== ':memory:' && !fs.existsSync(file)) {
    // What better-sqlite3 does; read-only opens fail on a missing file by themselves.
    throw Object.assign(new Error(`unable to open database file: ${file} does not exist`), { code: 'SQLITE_CANTOPEN' });
  }
  const db = new DatabaseSync(file, { readOnly: Boolean(options.readonly), timeout: BUSY_TIMEOUT_MS });
  return {
    exec: (sql) => named(() => db.exec(sql)),
    prepare(sql) {
      const stmt = named(() => db.prepare(sql));
      return {
        run: (...params) => {
          const { changes, lastInsertRowid } = named(() => stmt.run(...params));
          return { changes: Number(changes), lastInsertRowid: Number(lastInsertRowid) };
        },
        get: (...params) => named(() => stmt.get(...params)),
        all: (...params) => named(() => stmt.all(...params)),
        iterate: (...params) => stmt.iterate(...params),
      };
    },
    close: () => db.close(),
    get isOpen() {
      return db.isOpen;
    },
    get inTransaction() {
      return db.isTransaction;
    },
  };
}

/** @param {string} file @param {OpenOptions} options @returns {Connection} */
function openBetterSqlite3(file, options) {
  /** @type {typeof import('better-sqlite3')} */
  let Database;
  try {
    Database = require('better-sqlite3');
  } catch (err) {
    // An optional dependency (unused on Node >= 24): its native build may have been skipped.
    throw new Error(`better-sqlite3 is required on Node ${process.versions.node} (< 24) but could not be loaded; run npm ci with a C++ toolchain (python3, make, g++) available: ${/** @type {Error} */ (err).message}`);
  }
  const db = new Database(file, {
    readonly: Boolean(options.readonly),
    fileMustExist: Boolean(options.fileMustExist),
    timeout: BUSY_TIMEOUT_MS,
  });
  return {
    exec: (sql) => void db.exec(sql),
    prepare(sql) {
      const stmt = db.prepare(sql);
      return {
        run: (...params) => {
          const { changes, lastInsertRowid } = stmt.run(...params);
          return { changes, lastInsertRowid: Number(lastInsertRowid) };
        },
        // Statements that return no rows (e.g. `PRAGMA x = y`) only support run() here.
        get: (...params) => (stmt.reader ? stmt.get(...params) : void stmt.run(...params)),
        all: (...params) => (stmt.reader ? stmt.all(...params) : (stmt.run(...params), [])),
        iterate: (...params) => stmt.iterate(...params),
      };
    },
    close: () => db.close(),
    get isOpen() {
      return db.open;
    },
    get inTransaction() {
      return db.inTransaction;
    },
  };
}

/**
 * Prepared statements a connection keeps for reuse ({@link wrap}'s `statement`), least recently
 * used out first: SQL texts differ by their query shape and by the literal LIMITs written into
 * them (a client's page size), so they must not pile up.
 */
export const STATEMENTS_KEPT = 500;

/**
 * A LIMIT clause with its count written in: SQLite (3.47 and later) reads a LIMIT that is a bound
 * parameter while planning and marks the statement expired whenever that parameter is bound
 * again, so `LIMIT ?` re-prepared the whole statement on every run (about half of a point
 * query's cost). Negative: no limit. Only safe integers are written.
 * @param {number} count
 */
export function limitSql(count) {
  if (!Number.isSafeInteger(count)) throw new Error(`invalid LIMIT: ${count}`);
  return ` LIMIT ${count}`;
}

/** The driver-independent part: transactions, pragmas, idempotent close. @param {Connection} conn */
function wrap(conn) {
  let depth = 0; // savepoints currently open inside the outer transaction
  /** @type {Map<string, Statement>} the kept statements, least recently used first */
  const kept = new Map();
  /** @type {Map<string, Statement>} */
  const control = new Map();
  /** Transaction control statements, prepared once each. @param {string} sql */
  const run = (sql) => {
    let stmt = control.get(sql);
    if (!stmt) control.set(sql, (stmt = conn.prepare(sql)));
    stmt.run();
  };

  return {
    /** Runs one or more SQL statements (no parameters, no results). @param {string} sql */
    exec(sql) {
      conn.exec(sql);
    },
    /** @param {string} sql @returns {Statement} */
    prepare(sql) {
      return conn.prepare(sql);
    },
    /**
     * The prepared statement for `sql`, prepared once and kept (at most {@link STATEMENTS_KEPT}
     * per connection, least recently used out first).
     * @param {string} sql @returns {Statement}
     */
    statement(sql) {
      let stmt = kept.get(sql);
      if (stmt) {
        kept.delete(sql); // to the recent end
      } else {
        stmt = conn.prepare(sql);
        if (kept.size >= STATEMENTS_KEPT) kept.delete(/** @type {string} */ (kept.keys().next().value));
      }
      kept.set(sql, stmt);
      return stmt;
    },
    /**
     * Runs `PRAGMA <text>` and returns the first column of the first row it yields
     * (e.g. 'wal' for `journal_mode = WAL`), or undefined when it yields none.
     * @param {string} text
     */
    pragma(text) {
      const row = /** @type {Record<string, unknown> | undefined} */ (conn.prepare(`PRAGMA ${text}`).get());
      return row === undefined ? undefined : Object.values(row)[0];
    },
    /**
     * Wraps `fn` so that each call runs in a transaction: BEGIN IMMEDIATE … COMMIT, or a
     * SAVEPOINT when a transaction is already open. If `fn` throws, its writes are rolled
     * back (only the savepoint's, when nested) and the error is rethrown. `fn` must be
     * synchronous.
     * @template {unknown[]} A
     * @template R
     * @param {(...args: A) => R} fn
     * @returns {(...args: A) => R}
     */
    transaction(fn) {
      return (...args) => {
        const nested = conn.inTransaction;
        const savepoint = `"_sp${depth + 1}"`;
        if (nested) {
          run(`SAVEPOINT ${savepoint}`);
          depth += 1;
        } else {
          run('BEGIN IMMEDIATE');
        }
        try {
          const result = fn(...args);
          if (result !== null && typeof (/** @type {any} */ (result)?.then) === 'function') {
            throw new TypeError('a transaction function must not return a promise (it must be synchronous)');
          }
          run(nested ? `RELEASE ${savepoint}` : 'COMMIT');
          return result;
        } catch (err) {
          // SQLite may already have rolled the whole transaction back (SQLITE_FULL, I/O error).
          if (conn.inTransaction) {
            if (nested) {
              run(`ROLLBACK TO ${savepoint}`);
              run(`RELEASE ${savepoint}`);
            } else {
              run('ROLLBACK');
            }
          }
          throw err;
        } finally {
          if (nested) depth -= 1;
        }
      };
    },
    /** True while a transaction is open (SQLite may end one by itself after some errors). */
    get inTransaction() {
      return conn.inTransaction;
    },
    get open() {
      return conn.isOpen;
    },
    /** Closes the connection; closing again does nothing. */
    close() {
      if (conn.isOpen) conn.close();
    },
  };
}
