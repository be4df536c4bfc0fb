// @ts-check
/**
 * The single writer of the embedded read store, run in a worker thread: projection commits
 * (documents + checkpoint, one transaction) and resets happen here, so their SQLite work —
 * B-tree and expression-index upkeep, WAL writes, and the fsyncs of automatic WAL
 * checkpoints — never holds up the main event loop (see ./read-store.ts). Plain JavaScript
 * for the reason given in ./event-store-writer.js.
 *
 * Protocol: requests are handled in arrival order and each gets one reply, in that order:
 *   main → worker  { type: 'commit', projection, position, changes: Write[] }  → { ok: true } | { ok: false, message }
 *                  { type: 'reset', projection, tables: string[] }            → the same
 *                  { type: 'close' }                                          → the worker closes the file and exits
 * Table and checkpoint names arrive already validated and quoted by the main thread.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { openDatabase } from './driver.js';

/**
 * @typedef {{ table: string, id: string, json: string | null }} Write  json null: delete
 * @typedef {{ type: 'commit', projection: string, position: string, changes: Write[] }
 *         | { type: 'reset', projection: string, tables: string[] }
 *         | { type: 'close' }} Request
 */

if (!parentPort) throw new Error('read-store-writer.js must run in a worker thread');
const port = parentPort;

/** @type {{ file: string }} */
const { file } = workerData;

const db = openDatabase(file);
db.pragma('journal_mode = WAL');
// Read models are rebuildable and the checkpoint rolls back with the documents: a power
// loss may drop the last commits, never tear them apart.
db.pragma('synchronous = NORMAL');

/** @param {string | null} a @param {string | null} b  (same order as comparePositions in ports/event-store.ts) */
function comparePositions(a, b) {
  if (a == null) return b == null ? 0 : -1;
  if (b == null) return 1;
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** @param {string} sql */
const prepare = (sql) => db.statement(sql);

const created = new Set();
/** @param {string} table quoted name */
function ensureTable(table) {
  if (created.has(table)) return;
  db.exec(`CREATE TABLE IF NOT EXISTS ${table} (id TEXT PRIMARY KEY, doc TEXT NOT NULL)`);
  created.add(table);
}

const commit = db.transaction(
  /** @param {string} projection @param {string} position @param {Write[]} changes */
  (projection, position, changes) => {
    const row = /** @type {{ position: string } | undefined} */ (
      prepare('SELECT position FROM _checkpoints WHERE projection = ?').get(projection)
    );
    // At or below the checkpoint means a replay: the documents already include it.
    if (comparePositions(row?.position ?? null, position) >= 0) return;
    for (const change of changes) {
      if (change.json !== null) {
        prepare(`INSERT INTO ${change.table} (id, doc) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET doc = excluded.doc`).run(change.id, change.json);
      } else {
        prepare(`DELETE FROM ${change.table} WHERE id = ?`).run(change.id);
      }
    }
    prepare(
      'INSERT INTO _checkpoints (projection, position) VALUES (?, ?) ON CONFLICT (projection) DO UPDATE SET position = excluded.position',
    ).run(projection, position);
  },
);

const reset = db.transaction(
  /** @param {string} projection @param {string[]} tables */
  (projection, tables) => {
    for (const table of tables) prepare(`DELETE FROM ${table}`).run();
    prepare('DELETE FROM _checkpoints WHERE projection = ?').run(projection);
  },
);

port.on('message', (/** @type {Request} */ msg) => {
  if (msg.type === 'close') {
    db.close();
    port.close(); // nothing else keeps the worker alive: it exits
    return;
  }
  try {
    if (msg.type === 'commit') {
      // DDL outside the transaction (the main thread also creates tables it reads first).
      for (const change of msg.changes) ensureTable(change.table);
      commit(msg.projection, msg.position, msg.changes);
    } else {
      msg.tables.forEach(ensureTable);
      reset(msg.projection, msg.tables);
    }
  } catch (err) {
    // The SQLite code (SQLITE_FULL: a full disk) tells the runner whether waiting may help.
    port.postMessage({ ok: false, message: err instanceof Error ? err.message : String(err), code: /** @type {{ code?: unknown }} */ (err)?.code });
    return;
  }
  port.postMessage({ ok: true });
});
