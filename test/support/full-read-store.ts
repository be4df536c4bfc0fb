/**
 * Child process of the projection runner's storage-fault test: a runner over an in-memory
 * event store and the SQLite read store in `dir`, run under `ulimit -f` so that the read
 * store's file cannot grow past the limit (its commits fail as on a full disk). Appends
 * events whose documents are large until a waiter times out, then prints what happened.
 *   node --import tsx test/support/full-read-store.ts <dir>
 */
import { openSqliteReadStore } from '../../infra/sqlite/read-store.js';
import { createProjectionRunner } from '../../projections/runner.js';
import type { Projection } from '../../projections/projection.js';
import { createMemoryEventStore } from './memory-event-store.js';

const docs: Projection = {
  name: 'docs',
  collections: [{ name: 'docs' }],
  eventTypes: ['Wrote'],
  apply: (e) => [{ collection: 'docs', id: e.data.id as string, evolve: () => ({ id: e.data.id as string, body: e.data.body as string }) }],
};
const warnings: string[] = [];
const quiet = { info: () => {}, warn: (_: object, msg?: string) => void warnings.push(String(msg)), error: () => {} };
const events = createMemoryEventStore();
const reads = openSqliteReadStore({ file: `${process.argv[2]}/read.db` });
const runner = createProjectionRunner({ eventStore: events, readStore: reads, projections: [docs], logger: quiet });
let failed = false;
runner.done.catch(() => (failed = true));
await runner.start();
let lag = '';
for (let i = 0; i < 200 && !lag; i++) {
  const { position } = await events.append(`doc-${i}`, [{ id: crypto.randomUUID(), type: 'Wrote', data: { id: `d${i}`, body: 'x'.repeat(20_000) } }]);
  await runner.waitFor(position, 1_000).catch((err: { code?: string }) => (lag = String(err.code)));
}
process.stdout.write(JSON.stringify({ lag, failed, warned: warnings.some((w) => w.includes('retrying')) }));
process.exit(0);
