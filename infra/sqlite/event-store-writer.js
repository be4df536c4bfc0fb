// @ts-check
/**
 * The single writer of the embedded event store, run in a worker thread so that the
 * fsync of every commit never blocks the main event loop (see ./event-store.ts).
 *
 * Plain JavaScript on purpose: a worker starts a fresh module graph, and a .js file loads
 * the same under `node --import tsx`, Jest and plain node, with no TypeScript loader.
 *
 * Protocol, one batch in flight at a time:
 *   main → worker  { type: 'batch', appends: AppendRequest[] }   → { type: 'batch', results: Outcome[] }
 *                                                                 | { type: 'batch_failed', message }
 *                  { type: 'close' }                              → the worker closes the file and exits
 *   worker → main  { type: 'ready' } once the schema exists.
 * A batch is one transaction (one fsync); each append runs in its own savepoint, so a failing
 * append rolls back alone and later appends of the batch see the effects of earlier ones.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { openDatabase } from './driver.js';

/**
 * @typedef {'any' | 'no_stream' | 'stream_exists' | number} ExpectedRevision
 * @typedef {{ id: string, type: string, data: string, metadata: string }} SerializedEvent  data/metadata: JSON text
 * @typedef {{ stream: string, expected: ExpectedRevision, events: SerializedEvent[] }} AppendRequest
 * @typedef {{ position: number, id: string, stream: string, revision: number, type: string,
 *             data: string, metadata: string, recordedAt: string }} Row
 * @typedef {{ replay: false, firstRevision: number, positions: number[], recordedAt: string }
 *         | { replay: true, rows: Row[] }} Appended
 * @typedef {{ kind: 'wrong_expected_revision', stream: string, expected: ExpectedRevision, actual: number }
 *         | { kind: 'invalid', message: string }
 *         | { kind: 'unavailable', message: string }} AppendFailure
 * @typedef {{ ok: true, value: Appended } | { ok: false, error: AppendFailure }} Outcome
 */

if (!parentPort) throw new Error('event-store-writer.js must run in a worker thread');
const port = parentPort;

/** @type {{ file: string }} */
const { file } = workerData;

const db = (() => {
  try {
    const d = openDatabase(file);
    // WAL lets the main thread's reader run while we write; FULL syncs the WAL on every commit,
    // so an acknowledged batch survives kill -9 and power loss.
    const journalMode = d.pragma('journal_mode = WAL');
    if (String(journalMode).toLowerCase() !== 'wal') {
      throw new Error(`${file}: cannot enable WAL journal mode (got ${journalMode}); is it on a network file system?`);
    }
    d.pragma('synchronous = FULL');

    // AUTOINCREMENT: positions are never reused, even if the tail were ever deleted by hand.
    d.exec(`
      CREATE TABLE IF NOT EXISTS events (
        position    INTEGER PRIMARY KEY AUTOINCREMENT,
        id          TEXT    NOT NULL UNIQUE,
        stream      TEXT    NOT NULL,
        revision    INTEGER NOT NULL,
        type        TEXT    NOT NULL,
        data        TEXT    NOT NULL,
        metadata    TEXT    NOT NULL,
        recorded_at TEXT    NOT NULL,
        UNIQUE (stream, revision)
      );
      -- readAll filtered by streams or stream prefixes, in position order.
      CREATE INDEX IF NOT EXISTS events_stream_position ON events (stream, position);
      -- readAll filtered by event types, in position order.
      CREATE INDEX IF NOT EXISTS events_type_position ON events (type, position);
    `);
    return d;
  } catch (err) {
    // A SqliteError reaches the main thread without its message (structured cloning keeps only
    // its `code`): a plain Error keeps the reason ("file is not a database") for the start-up error.
    const e = /** @type {{ message?: string, code?: string }} */ (err);
    throw new Error(`${e?.message ?? String(err)}${e?.code ? ` (${e.code})` : ''}`);
  }
})();

const selectById = db.prepare(
  'SELECT position, id, stream, revision, type, data, metadata, recorded_at AS recordedAt FROM events WHERE id = ?',
);
const selectLastRevision = db.prepare('SELECT MAX(revision) AS last FROM events WHERE stream = ?');
const insert = db.prepare(
  'INSERT INTO events (id, stream, revision, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
);

class WrongExpectedRevision extends Error {
  /** @param {string} stream @param {ExpectedRevision} expected @param {number} actual */
  constructor(stream, expected, actual) {
    super(`stream ${stream}: expected revision ${String(expected)}, actual ${actual}`);
    this.stream = stream;
    this.expected = expected;
    this.actual = actual;
  }
}

/** A caller mistake (e.g. reusing event ids); retrying will not help. */
class InvalidAppend extends Error {}

/** @param {ExpectedRevision} expected @param {number} actual -1 when the stream does not exist */
function holds(expected, actual) {
  if (expected === 'any') return true;
  if (expected === 'no_stream') return actual === -1;
  if (expected === 'stream_exists') return actual >= 0;
  return actual === expected;
}

/**
 * Idempotency by event id: the rows of an earlier identical append, or null when none of
 * the ids is known. Anything in between is a caller bug, reported as such.
 * @param {AppendRequest} req
 * @returns {Row[] | null}
 */
function findEarlierAppend(req) {
  const rows = req.events.map((e) => /** @type {Row | undefined} */ (selectById.get(e.id)));
  const known = rows.filter((r) => r !== undefined);
  if (known.length === 0) return null;
  const elsewhere = known.find((r) => r.stream !== req.stream);
  if (elsewhere) {
    throw new InvalidAppend(
      `cannot append to ${req.stream}: event id ${elsewhere.id} is already recorded in stream ${elsewhere.stream}`,
    );
  }
  const first = rows[0];
  const sameAppend =
    known.length === rows.length && first !== undefined && rows.every((r, i) => r?.revision === first.revision + i);
  if (!sameAppend) {
    const ids = known.map((r) => r.id).join(', ');
    throw new InvalidAppend(
      `cannot append to ${req.stream}: event ids ${ids} are already recorded, but not as exactly this append ` +
        '(an idempotent retry must resend the same events in the same order)',
    );
  }
  return /** @type {Row[]} */ (rows);
}

/**
 * @param {AppendRequest} req
 * @param {string} recordedAt
 * @returns {Appended}
 */
function appendOne(req, recordedAt) {
  const earlier = findEarlierAppend(req);
  if (earlier) return { replay: true, rows: earlier };
  const last = /** @type {{ last: number | null }} */ (selectLastRevision.get(req.stream)).last ?? -1;
  if (!holds(req.expected, last)) throw new WrongExpectedRevision(req.stream, req.expected, last);
  const positions = req.events.map(
    (e, i) => Number(insert.run(e.id, req.stream, last + 1 + i, e.type, e.data, e.metadata, recordedAt).lastInsertRowid),
  );
  return { replay: false, firstRevision: last + 1, positions, recordedAt };
}

/** @param {unknown} err @returns {AppendFailure} */
function describe(err) {
  if (err instanceof WrongExpectedRevision) {
    return { kind: 'wrong_expected_revision', stream: err.stream, expected: err.expected, actual: err.actual };
  }
  if (err instanceof InvalidAppend) return { kind: 'invalid', message: err.message };
  return { kind: 'unavailable', message: err instanceof Error ? err.message : String(err) };
}

// Called inside the batch transaction, the driver runs this one in a savepoint.
const appendInSavepoint = db.transaction(appendOne);

const runBatch = db.transaction(
  /** @param {AppendRequest[]} appends @param {string} recordedAt @returns {Outcome[]} */
  (appends, recordedAt) =>
    appends.map((req) => {
      // Some errors (SQLITE_FULL, I/O) make SQLite roll back the whole transaction. Going on
      // would autocommit the rest one by one while reporting the batch as failed: stop instead.
      if (!db.inTransaction) throw new Error('the batch transaction was rolled back by SQLite');
      try {
        return { ok: true, value: appendInSavepoint(req, recordedAt) };
      } catch (err) {
        return { ok: false, error: describe(err) };
      }
    }),
);

port.on('message', (/** @type {{ type: 'batch', appends: AppendRequest[] } | { type: 'close' }} */ msg) => {
  if (msg.type === 'close') {
    db.close();
    port.close(); // nothing else keeps the worker alive: it exits
    return;
  }
  /** @type {Outcome[]} */
  let results;
  try {
    results = runBatch(msg.appends, new Date().toISOString()); // BEGIN IMMEDIATE
  } catch (err) {
    // The commit (or the transaction) failed: nothing of this batch is durable.
    port.postMessage({ type: 'batch_failed', message: err instanceof Error ? err.message : String(err) });
    return;
  }
  port.postMessage({ type: 'batch', results });
});

port.postMessage({ type: 'ready' });
