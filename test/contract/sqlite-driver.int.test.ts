/**
 * The SQLite driver seam (infra/sqlite/driver.js) behaves the same whichever driver the
 * running Node uses: node:sqlite on Node >= 24, better-sqlite3 before.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { driverName, limitSql, openDatabase, STATEMENTS_KEPT, type Database } from '../../infra/sqlite/driver.js';

let dir: string;
let db: Database;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sqlite-driver-'));
  db = openDatabase(path.join(dir, 'test.db'));
  db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, k TEXT UNIQUE, v INTEGER)');
});

afterEach(() => {
  db.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const count = () => (db.prepare('SELECT COUNT(*) AS n FROM t').get() as { n: number }).n;
const keys = () => (db.prepare('SELECT k FROM t ORDER BY id').all() as { k: string }[]).map((r) => r.k);

it('should pick node:sqlite from Node 24 on and better-sqlite3 before', () => {
  const major = Number(process.versions.node.split('.')[0]);
  expect(driverName).toBe(major >= 24 ? 'node:sqlite' : 'better-sqlite3');
});

it('should run statements with positional and bare named parameters', () => {
  const insert = db.prepare('INSERT INTO t (k, v) VALUES (?, ?)');
  expect(insert.run('a', 1)).toEqual({ changes: 1, lastInsertRowid: 1 });
  expect(insert.run('b', null)).toEqual({ changes: 1, lastInsertRowid: 2 });
  expect(db.prepare('INSERT INTO t (k, v) VALUES (@k, @v)').run({ k: 'c', v: 3 }).lastInsertRowid).toBe(3);
  expect({ ...(db.prepare('SELECT k, v FROM t WHERE id = ?').get(1) as object) }).toEqual({ k: 'a', v: 1 });
  expect(db.prepare('SELECT k FROM t WHERE id = ?').get(42)).toBeUndefined();
  expect(db.prepare('SELECT v FROM t ORDER BY id').all().map((r) => (r as { v: unknown }).v)).toEqual([1, null, 3]);
  expect([...db.prepare('SELECT k FROM t WHERE id > ? ORDER BY id').iterate(1)].map((r) => (r as { k: string }).k)).toEqual(['b', 'c']);
  expect(db.prepare('UPDATE t SET v = 0').run().changes).toBe(3);
});

it('should bind numbers as REAL and BigInts as INTEGER in both drivers', () => {
  const types = db.prepare('SELECT typeof(?) AS a, typeof(?) AS b, typeof(?) AS c').get(7, 2.5, 7n) as Record<string, string>;
  expect({ ...types }).toEqual({ a: 'real', b: 'real', c: 'integer' });
  // An INTEGER column still stores an integral number as an integer, read back as a number.
  db.prepare('INSERT INTO t (k, v) VALUES (?, ?)').run('a', 7);
  expect({ ...(db.prepare('SELECT typeof(v) AS type, v FROM t').get() as object) }).toEqual({ type: 'integer', v: 7 });
  expect(db.prepare('SELECT id FROM t WHERE v = ?').get(7)).toBeDefined();
});

it('should keep prepared statements by their SQL, the least recently used given up first', () => {
  const first = db.statement('SELECT 1 AS x');
  expect(db.statement('SELECT 1 AS x')).toBe(first);
  for (let i = 0; i < STATEMENTS_KEPT - 1; i++) db.statement(`SELECT ${i + 2} AS x`);
  expect(db.statement('SELECT 1 AS x')).toBe(first); // used again: now the most recent
  db.statement('SELECT -1 AS x'); // one over: the least recent (SELECT 2) goes
  expect(db.statement('SELECT 1 AS x')).toBe(first);
  const second = db.statement('SELECT 2 AS x');
  expect({ ...(second.get() as object) }).toEqual({ x: 2 });
});

it('should write a LIMIT count into the SQL, refusing anything but a safe integer', () => {
  for (const k of ['a', 'b', 'c']) db.prepare('INSERT INTO t (k) VALUES (?)').run(k);
  expect(db.statement(`SELECT k FROM t ORDER BY id${limitSql(2)}`).all().map((r) => (r as { k: string }).k)).toEqual(['a', 'b']);
  expect(db.statement(`SELECT k FROM t ORDER BY id${limitSql(-1)}`).all()).toHaveLength(3); // no limit
  for (const bad of [1.5, NaN, Infinity, 2 ** 53]) expect(() => limitSql(bad)).toThrow(/invalid LIMIT/);
});

it('should run pragmas and return the first value they yield', () => {
  expect(db.pragma('journal_mode = WAL')).toBe('wal');
  expect(db.pragma('synchronous = FULL')).toBeUndefined();
  expect(db.pragma('synchronous')).toBe(2);
});

it('should commit a transaction and roll it back when its function throws', () => {
  const insert = db.prepare('INSERT INTO t (k) VALUES (?)');
  const insertAll = db.transaction((ks: string[]) => {
    expect(db.inTransaction).toBe(true);
    for (const k of ks) insert.run(k);
    return ks.length;
  });
  expect(insertAll(['a', 'b'])).toBe(2);
  expect(db.inTransaction).toBe(false);
  expect(() => insertAll(['c', 'a'])).toThrow(/UNIQUE/); // 'c' is rolled back with the failing 'a'
  expect(db.inTransaction).toBe(false);
  expect(keys()).toEqual(['a', 'b']);
});

it('should roll back only the savepoint of a nested transaction that throws', () => {
  const insert = db.prepare('INSERT INTO t (k) VALUES (?)');
  const one = db.transaction((k: string) => {
    insert.run(`${k}-first`);
    insert.run(k);
  });
  const batch = db.transaction((ks: string[]) =>
    ks.map((k) => {
      try {
        one(k);
        return 'ok';
      } catch {
        return 'failed';
      }
    }),
  );
  expect(batch(['a', 'b', 'a', 'c'])).toEqual(['ok', 'ok', 'failed', 'ok']);
  // The failed one left nothing behind ('a-first' of the third call is rolled back), the others committed.
  expect(keys()).toEqual(['a-first', 'a', 'b-first', 'b', 'c-first', 'c']);

  // Nested twice, the inner failure still rolls back alone; an outer failure rolls back all.
  const outer = db.transaction(() => {
    insert.run('x');
    db.transaction(() => {
      insert.run('y');
      expect(() => db.transaction(() => insert.run('x'))()).toThrow(/UNIQUE/);
    })();
    throw new Error('boom');
  });
  expect(() => outer()).toThrow('boom');
  expect(db.inTransaction).toBe(false);
  expect(count()).toBe(6);
});

it('should refuse an async transaction function and roll back its writes', () => {
  const tx = db.transaction(async () => {
    db.prepare('INSERT INTO t (k) VALUES (?)').run('a');
  });
  expect(() => tx()).toThrow(/promise/);
  expect(db.inTransaction).toBe(false);
  expect(count()).toBe(0);
});

it('should open read-only connections that see committed data and cannot write', () => {
  db.pragma('journal_mode = WAL');
  db.prepare('INSERT INTO t (k) VALUES (?)').run('a');
  const reader = openDatabase(path.join(dir, 'test.db'), { readonly: true, fileMustExist: true });
  try {
    expect(reader.prepare('SELECT k FROM t').all()).toEqual([expect.objectContaining({ k: 'a' })]);
    expect(() => reader.prepare('INSERT INTO t (k) VALUES (?)').run('b')).toThrow(/readonly|read-only/i);
  } finally {
    reader.close();
  }
});

it('should not create a missing file when it must exist or is opened read-only', () => {
  const missing = path.join(dir, 'missing.db');
  expect(() => openDatabase(missing, { fileMustExist: true })).toThrow();
  expect(() => openDatabase(missing, { readonly: true })).toThrow();
  expect(fs.existsSync(missing)).toBe(false);
});

it('should close once and report it', () => {
  const other = openDatabase(path.join(dir, 'other.db'));
  expect(other.open).toBe(true);
  other.close();
  expect(other.open).toBe(false);
  expect(() => other.close()).not.toThrow();
  expect(() => other.prepare('SELECT 1')).toThrow();
});

it("should name SQLite's result in an error's code, as better-sqlite3 does (a full disk is told from a bug by it)", () => {
  db.prepare('INSERT INTO t (k) VALUES (?)').run('a');
  expect(() => db.prepare('INSERT INTO t (k) VALUES (?)').run('a')).toThrow(expect.objectContaining({ code: 'SQLITE_CONSTRAINT_UNIQUE' }));
  expect(() => db.exec('SELECT * FROM no_such_table')).toThrow(expect.objectContaining({ code: 'SQLITE_ERROR' }));
});
