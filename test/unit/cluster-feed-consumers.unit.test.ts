/**
 * The consumers of the EventFeed in cluster mode, without a broker: the projection runner
 * reports an event settled only once its read-model batch is committed (so the Kafka offset
 * never passes an uncommitted write), and uses the group `ais-projections`.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import type { RecordedEvent, Subscription } from '../../infra/ports/event-store.js';
import type { EventFeed, FeedHandler, FeedOptions, Pending } from '../../infra/ports/event-feed.js';
import { openSqliteReadStore } from '../../infra/sqlite/read-store.js';
import type { Projection } from '../../projections/projection.js';
import { createProjectionRunner, PROJECTIONS_GROUP } from '../../projections/runner.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';

const names: Projection = {
  name: 'names:v1',
  collections: [{ name: 'names' }],
  eventTypes: ['Named'],
  apply: (e) => [{ collection: 'names', id: String(e.data.id), evolve: () => ({ id: String(e.data.id), name: e.data.name }) }],
};

/** A feed the test drives by hand. */
function manualFeed() {
  const calls: { options: FeedOptions; handler: FeedHandler }[] = [];
  const feed: EventFeed = {
    subscribe(options, handler): Subscription {
      calls.push({ options, handler });
      return { close() {}, done: new Promise<void>(() => {}) };
    },
  };
  return { feed, calls };
}

const named = (position: number, id: string, name: string): RecordedEvent => ({
  id: randomUUID(),
  type: 'Named',
  stream: `thing-${id}`,
  revision: 0,
  position: String(position),
  data: { id, name },
  metadata: {},
  recordedAt: new Date().toISOString(),
});

describe('projection runner on a feed', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'runner-feed-'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('subscribes in group ais-projections from its checkpoint and settles events once committed', async () => {
    const reads = openSqliteReadStore({ file: path.join(dir, 'reads.sqlite') });
    const { feed, calls } = manualFeed();
    const runner = createProjectionRunner({ eventStore: createMemoryEventStore(), readStore: reads, projections: [names], feed, logger: { info() {}, warn() {}, error() {} } });
    await runner.start();
    expect(calls).toHaveLength(1);
    expect(calls[0]!.options).toEqual({ after: null, group: PROJECTIONS_GROUP });

    const result = (await calls[0]!.handler(named(1, 'a', 'Ada'))) as Pending;
    expect(result?.settled).toBeInstanceOf(Promise);
    let settled = false;
    void result.settled.then(() => (settled = true));
    // Handled, but the batch is committed on the next macrotask: not settled before.
    expect(settled).toBe(false);
    expect(await reads.getCheckpoint(names.name)).toBeNull();
    await result.settled;
    expect(await reads.getCheckpoint(names.name)).toBe('1');
    expect(await reads.collection('names').get('a')).toMatchObject({ name: 'Ada' });

    // A redelivered event is settled without being applied twice.
    const again = (await calls[0]!.handler(named(1, 'a', 'Changed'))) as Pending;
    await again.settled;
    expect(await reads.collection('names').get('a')).toMatchObject({ name: 'Ada' });
    await runner.stop();
    await reads.close();
  });

  it('reads the event store up to its head before following the feed: a projection whose first catch-up a stop cut short misses nothing the group has moved past', async () => {
    // given: a log of four events; `names` has them all, `partial` (new in this release, whose
    // first catch-up a stop cut short) only the first
    const events = createMemoryEventStore();
    const reads = openSqliteReadStore({ file: path.join(dir, 'reads.sqlite') });
    const positions: string[] = [];
    for (const [id, name] of [['a', 'Ada'], ['b', 'Bob'], ['c', 'Cy'], ['d', 'Di']]) {
      positions.push((await events.append(`thing-${id}`, [{ id: randomUUID(), type: 'Named', data: { id, name } }])).position);
    }
    const upper = (name: string): Projection => ({ ...names, name, collections: [{ name: 'partial' }], apply: (e) => [{ collection: 'partial', id: String(e.data.id), evolve: () => ({ id: String(e.data.id), upper: String(e.data.name).toUpperCase() }) }] });
    const partial = upper('partial:v1');
    await reads.ensureCollections([...names.collections, ...partial.collections]);
    await reads.commit(names.name, positions[3]!, []);
    await reads.commit(partial.name, positions[0]!, [{ collection: 'partial', id: 'a', doc: { id: 'a', upper: 'ADA' } }]);
    const { feed, calls } = manualFeed();

    // when: the worker starts (its feed group's offset is at the fourth event)
    const runner = createProjectionRunner({ eventStore: events, readStore: reads, projections: [names, partial], feed, logger: { info() {}, warn() {}, error() {} } });
    await runner.start();

    // then: it was filled in from the event store, and the runner follows the feed from there
    expect((await reads.collection('partial').find()).items.map((d) => d.upper)).toEqual(['ADA', 'BOB', 'CY', 'DI']);
    expect(calls.map((c) => c.options.group)).toEqual([PROJECTIONS_GROUP]);
    const next = (await calls[0]!.handler(named(Number(positions[3]) + 1, 'e', 'Eve'))) as Pending;
    await next.settled;
    expect(await reads.collection('partial').get('e')).toMatchObject({ upper: 'EVE' });
    await runner.stop();
    await reads.close();
  });

  it('a stop during the catch-up from the event store opens no feed afterwards', async () => {
    const events = createMemoryEventStore();
    await events.append('thing-a', [{ id: randomUUID(), type: 'Named', data: { id: 'a', name: 'Ada' } }]);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const slowHead = { ...events, headPosition: async () => (await held, events.headPosition()) };
    const reads = openSqliteReadStore({ file: path.join(dir, 'reads.sqlite') });
    const { feed, calls } = manualFeed();
    const runner = createProjectionRunner({ eventStore: slowHead, readStore: reads, projections: [names], feed, logger: { info() {}, warn() {}, error() {} } });
    const started = runner.start().then(
      () => 'resolved',
      () => 'rejected',
    );
    while (runner.position() === null) await new Promise((r) => setTimeout(r, 5)); // caught up, head not known yet
    await runner.stop();
    release();
    await started;
    expect(calls).toHaveLength(0);
    await reads.close();
  });

  it('leaves an event unsettled when the runner fails on it', async () => {
    const reads = openSqliteReadStore({ file: path.join(dir, 'reads.sqlite') });
    const { feed, calls } = manualFeed();
    const broken: Projection = { ...names, name: 'broken:v1', collections: [{ name: 'broken' }], apply: () => { throw new Error('kaboom'); } };
    const runner = createProjectionRunner({ eventStore: createMemoryEventStore(), readStore: reads, projections: [broken], feed, logger: { info() {}, warn() {}, error() {} } });
    await runner.start();
    const result = (await calls[0]!.handler(named(1, 'a', 'Ada'))) as Pending;
    await expect(result.settled).rejects.toThrow(/kaboom/);
    await expect(runner.done).rejects.toThrow(/kaboom/);
    await reads.close();
  });
});
