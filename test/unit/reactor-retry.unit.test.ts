/**
 * A reactor (services/kernel/reactor.ts) runs a job that threw again after a wait, for as
 * long as it runs; a stop ends that wait at once, leaves the event unfinished (the checkpoint
 * holds it for the next start), and a job that throws while stopping is still logged.
 */
import pino from 'pino';
import { createReactor, JOB_RETRY_FIRST_MS } from '../../services/kernel/reactor.js';
import { eventStoreFeed } from '../../infra/ports/event-feed.js';
import type { JobRun } from '../../services/kernel/reactor.js';
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';
import { eventually } from '../support/eventually.js';

function harness(job: (e: RecordedEvent, run: JobRun) => Promise<boolean>) {
  const store = createMemoryEventStore();
  const checkpoints = new Map<string, string>();
  const logged: { level: number; msg: string }[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  const reads = { getCheckpoint: async (name: string) => checkpoints.get(name) ?? null, commit: async (name: string, position: string) => void checkpoints.set(name, position) };
  const reactor = createReactor({ events: store, reads: reads as never, feed: eventStoreFeed(store), log }, { checkpoint: 'reactor:test', group: 'test', filter: {}, concurrency: 1, job });
  return { store, checkpoints, logged, reactor };
}

test('a job that throws runs again after a wait, and the checkpoint then moves past its event', async () => {
  let runs = 0;
  const h = harness(async () => {
    if (++runs === 1) throw new Error('disk full');
    return true;
  });
  await h.reactor.start();
  try {
    const started = Date.now();
    const { position } = await h.store.append('thing-1', [{ id: 'e-1', type: 'Happened', data: {} }]);
    await eventually(() => h.checkpoints.get('reactor:test') === position);
    expect(runs).toBe(2);
    expect(Date.now() - started).toBeGreaterThanOrEqual(JOB_RETRY_FIRST_MS - 50);
    expect(h.logged.filter((l) => l.msg === 'reactor job failed; it runs again')).toHaveLength(1);
  } finally {
    await h.reactor.stop();
  }
}, 30_000);

test('a stop during the wait ends it at once; the event stays unfinished', async () => {
  let runs = 0;
  const h = harness(async () => {
    runs += 1;
    throw new Error('store away');
  });
  await h.reactor.start();
  await h.store.append('thing-1', [{ id: 'e-1', type: 'Happened', data: {} }]);
  // Waiting out the first retry (1 s): its failure is logged as the wait starts. (A fixed
  // 50 ms more only brought the retry nearer on a loaded machine.)
  await eventually(() => runs === 1 && h.logged.some((l) => l.msg === 'reactor job failed; it runs again'));
  const stopping = Date.now();
  await h.reactor.stop();
  expect(Date.now() - stopping).toBeLessThan(JOB_RETRY_FIRST_MS / 2);
  expect(runs).toBe(1);
  expect(h.checkpoints.get('reactor:test')).toBeUndefined();
}, 30_000);

test('a job that throws while the reactor stops is logged', async () => {
  let release!: () => void;
  const h = harness(async (_e, run) => {
    await new Promise<void>((r) => (release = r));
    if (run.stopped) throw new Error('cut short by the stop');
    return true;
  });
  await h.reactor.start();
  await h.store.append('thing-1', [{ id: 'e-1', type: 'Happened', data: {} }]);
  await eventually(() => release !== undefined);
  const stopped = h.reactor.stop();
  release();
  await stopped;
  expect(h.logged.some((l) => l.level === 40 && /failed while stopping/.test(l.msg))).toBe(true);
  expect(h.checkpoints.get('reactor:test')).toBeUndefined();
}, 30_000);
