/**
 * Section `eventstore` (issue 2): appends from many concurrent writers through the
 * embedded store (group commit) against one durable SQLite transaction per append.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openDatabase } from '../infra/sqlite/driver.js';
import { openSqliteEventStore } from '../infra/sqlite/event-store.js';
import { event } from '../services/kernel/command.js';
import { fmt, pct, row } from './lib.js';

export async function eventStoreSection(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ais-bench-es-'));
  try {
    // Baseline: one durable transaction (one fsync) per append, as a naive store would do.
    const db = openDatabase(path.join(dir, 'baseline.sqlite'));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.exec('CREATE TABLE e (position INTEGER PRIMARY KEY, stream TEXT, data TEXT)');
    const insert = db.prepare('INSERT INTO e (stream, data) VALUES (?, ?)');
    const n = 2000;
    let t = performance.now();
    for (let i = 0; i < n; i++) db.transaction(() => insert.run(`s-${i}`, '{"x":1}'))();
    const baseline = n / ((performance.now() - t) / 1000);
    db.close();
    row('single-commit fsync appends (baseline)', fmt(baseline), '', '100%', '');

    const store = await openSqliteEventStore({ file: path.join(dir, 'events.sqlite'), logger: { warn() {}, error() {} } });
    const writers = 200;
    const total = 20_000;
    let next = 0;
    t = performance.now();
    await Promise.all(
      Array.from({ length: writers }, async () => {
        while (next < total) {
          const i = next++;
          await store.append(`bench-${i}`, [event('BenchHappened', { i })], { expectedRevision: 'no_stream' });
        }
      }),
    );
    const grouped = total / ((performance.now() - t) / 1000);
    await store.close();
    row(`event store appends, ${writers} concurrent writers`, fmt(grouped), '', pct(grouped, baseline), 'goal ≥ 300%');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
