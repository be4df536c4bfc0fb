/**
 * Types of ./driver.js, the one SQLite driver seam (node:sqlite on Node >= 24,
 * better-sqlite3 before): see the comment at the top of driver.js for why it exists.
 */

export interface OpenOptions {
  /** Open read-only (the file must then exist). */
  readonly?: boolean;
  /** Fail instead of creating a missing file. */
  fileMustExist?: boolean;
}

export interface RunResult {
  changes: number;
  lastInsertRowid: number;
}

/**
 * A prepared statement. Parameters are positional (`?`), or one plain object for bare named
 * parameters; values: null, number, bigint, string, Uint8Array.
 * Rows are plain objects keyed by column name (numbers, strings, null, Uint8Array).
 */
export interface Statement {
  run(...params: unknown[]): RunResult;
  /** The first row, or undefined when there is none. */
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
  iterate(...params: unknown[]): IterableIterator<unknown>;
}

export interface Database {
  /** Runs one or more SQL statements (no parameters, no results). */
  exec(sql: string): void;
  prepare(sql: string): Statement;
  /** The prepared statement for `sql`, prepared once and kept (at most STATEMENTS_KEPT, least recently used out first). */
  statement(sql: string): Statement;
  /** Runs `PRAGMA <text>`; returns the first column of its first row, or undefined. */
  pragma(text: string): unknown;
  /**
   * Wraps a synchronous `fn` so that each call runs in BEGIN IMMEDIATE … COMMIT (ROLLBACK when
   * it throws), or in a SAVEPOINT rolled back alone when called inside a transaction.
   */
  transaction<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R;
  readonly inTransaction: boolean;
  readonly open: boolean;
  /** Closes the connection; closing again does nothing. */
  close(): void;
}

/** The driver this process uses, decided by the Node major version. */
export const driverName: 'node:sqlite' | 'better-sqlite3';

export function openDatabase(file: string, options?: OpenOptions): Database;

/** How many prepared statements a connection keeps for `statement`. */
export const STATEMENTS_KEPT: number;

/** ` LIMIT <count>` with the count written in (a bound LIMIT re-prepares the statement on every run); negative: no limit. */
export function limitSql(count: number): string;
