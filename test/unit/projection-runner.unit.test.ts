import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { jest } from '@jest/globals';
import type { EventStore } from '../../infra/ports/event-store.js';
import type { Doc, ReadStore } from '../../infra/ports/read-store.js';
import { openSqliteReadStore } from '../../infra/sqlite/read-store.js';
import type { Projection } from '../../projections/projection.js';
import {
  createProjectionRunner,
  ProjectionFailedError,
  ProjectionLagError,
  type ProjectionRunner,
} from '../../projections/runner.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';
import { eventually } from '../support/eventually.js';

// --- Projections under test -------------------------------------------------------------

/** One doc per identity; `renames` counts applications, so a double apply shows. */
const identities: Projection = {
  name: 'identities:v1',
  collections: [{ name: 'identities', indexes: [['owner']] }],
  eventTypes: ['IdentityCreated', 'IdentityRenamed', 'IdentityDeleted'],
  apply(event) {
    const id = event.data.identityId as string;
    switch (event.type) {
      case 'IdentityCreated':
        return [{ collection: 'identities', id, evolve: () => ({ id, owner: event.data.owner, name: event.data.name, renames: 0 }) }];
      case 'IdentityRenamed':
        return [
          {
            collection: 'identities',
            id,
            evolve: (doc) => (doc ? { ...doc, name: event.data.name, renames: (doc.renames as number) + 1 } : doc),
          },
        ];
      default:
        return [{ collection: 'identities', id, evolve: () => null }];
    }
  },
};

/** Counts events per type: not idempotent by itself, so replays must be filtered out. */
const stats: Projection = {
  name: 'stats:v1',
  collections: [{ name: 'event_stats' }],
  eventTypes: ['IdentityCreated', 'IdentityRenamed', 'IdentityDeleted'],
  apply: (event) => [
    {
      collection: 'event_stats',
      id: event.type,
      evolve: (doc) => ({ id: event.type, count: ((doc?.count as number | undefined) ?? 0) + 1 }),
    },
  ],
};

/** Reads a type nobody ever appends: its checkpoint only moves by skipping. */
const idle: Projection = {
  name: 'idle:v1',
  collections: [{ name: 'idle_docs' }],
  eventTypes: ['NeverHappens'],
  apply: () => [],
};

/** Throws on `Boom`. */
const fragile: Projection = {
  name: 'fragile:v1',
  collections: [{ name: 'fragile_docs' }],
  eventTypes: ['IdentityCreated', 'Boom'],
  apply(event) {
    if (event.type === 'Boom') throw new Error('kaboom');
    return [{ collection: 'fragile_docs', id: event.data.identityId, evolve: () => ({ id: event.data.identityId }) }];
  },
};

// --- Harness ----------------------------------------------------------------------------

let dir: string;
let eventStore: ReturnType<typeof createMemoryEventStore>;
let readStore: ReadStore;
const runners: ProjectionRunner[] = [];
const logger = { info: jest.fn(), warn: jest.fn(), error: jest.fn() };

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'runner-'));
  eventStore = createMemoryEventStore();
  readStore = openSqliteReadStore({ file: path.join(dir, 'read.db') });
  logger.info.mockReset();
  logger.warn.mockReset();
  logger.error.mockReset();
});

afterEach(async () => {
  for (const runner of runners.splice(0)) await runner.stop();
  await readStore.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function runner(options: { projections?: Projection[]; eventStore?: EventStore; readStore?: ReadStore } = {}) {
  const created = createProjectionRunner({
    eventStore: options.eventStore ?? eventStore,
    readStore: options.readStore ?? readStore,
    projections: options.projections ?? [identities, stats, idle],
    logger,
  });
  runners.push(created);
  return created;
}

async function append(type: string, data: Record<string, unknown> = {}, stream = `identity-${String(data.identityId ?? 'x')}`) {
  const result = await eventStore.append(stream, [{ id: randomUUID(), type, data }]);
  return result.position;
}

/** Creates `count` identities, renames every other one, deletes every fifth; returns the last position. */
async function givenHistory(count: number): Promise<string> {
  let last = '';
  for (let i = 0; i < count; i += 1) {
    const identityId = `id${i}`;
    last = await append('IdentityCreated', { identityId, owner: `owner${i % 3}`, name: `n${i}` });
    if (i % 2 === 0) last = await append('IdentityRenamed', { identityId, name: `renamed${i}` });
    if (i % 5 === 0) last = await append('IdentityDeleted', { identityId });
    if (i % 7 === 0) last = await append('SomethingElse', {}, 'noise-1');
  }
  return last;
}

async function snapshot(store: ReadStore = readStore) {
  return {
    identities: (await store.collection('identities').find()).items,
    stats: (await store.collection('event_stats').find()).items,
  };
}

// --- Tests ------------------------------------------------------------------------------

describe('projection runner', () => {
  it('should build documents from the history', async () => {
    // given
    const head = await givenHistory(20);
    // when
    const r = runner();
    await r.start();
    await r.waitFor(head);
    // then
    const state = await snapshot();
    expect(state.identities).toHaveLength(16); // 20 minus 4 deleted (0, 5, 10, 15)
    await expect(readStore.collection('identities').get('id2')).resolves.toEqual({ id: 'id2', owner: 'owner2', name: 'renamed2', renames: 1 });
    await expect(readStore.collection('identities').get('id5')).resolves.toBeNull();
    await expect(readStore.collection('identities').count({ owner: 'owner1' })).resolves.toBe(
      [1, 4, 7, 13, 16, 19].length, // i % 3 === 1, minus deleted 10
    );
    expect(state.stats).toEqual([
      { id: 'IdentityCreated', count: 20 },
      { id: 'IdentityDeleted', count: 4 },
      { id: 'IdentityRenamed', count: 10 },
    ]);
    expect(r.position()).toBe(head);
  });

  it('should make a write visible once waitFor resolves', async () => {
    // given
    const r = runner();
    await r.start();
    // when
    const position = await append('IdentityCreated', { identityId: 'live', owner: 'o', name: 'Live' });
    await r.waitFor(position);
    // then
    await expect(readStore.collection('identities').get('live')).resolves.toMatchObject({ name: 'Live' });
    // and the next write too
    const renamed = await append('IdentityRenamed', { identityId: 'live', name: 'Still live' });
    await r.waitFor(renamed);
    await expect(readStore.collection('identities').get('live')).resolves.toMatchObject({ name: 'Still live', renames: 1 });
  });

  it('should resolve waitFor for an already processed position at once', async () => {
    const head = await givenHistory(3);
    const r = runner();
    await r.start();
    await r.waitFor(head);
    await expect(r.waitFor('1', 0)).resolves.toBeUndefined();
  });

  it('should reject waitFor with ProjectionLagError when the position is not reached in time', async () => {
    // given
    const r = runner();
    await r.start();
    await r.waitFor(await append('IdentityCreated', { identityId: 'a', owner: 'o', name: 'A' }));
    // when
    const waiting = r.waitFor('999', 30);
    // then
    await expect(waiting).rejects.toBeInstanceOf(ProjectionLagError);
    await expect(r.waitFor('999', 1)).rejects.toMatchObject({ code: 'projection_lag', position: '999', processed: '1' });
  });

  it('should advance past events no projection handles', async () => {
    // given
    const r = runner();
    await r.start();
    // when
    const position = await append('SomethingElse', {}, 'noise-1');
    // then
    await expect(r.waitFor(position, 1000)).resolves.toBeUndefined();
    expect(r.position()).toBe(position);
  });

  it('should catch up with history and continue live without gap or duplicate', async () => {
    // given
    await givenHistory(10);
    const r = runner();
    // when: appends race with the catch-up
    const starting = r.start();
    const more = Promise.all([11, 12, 13].map((i) => append('IdentityCreated', { identityId: `id${i}`, owner: 'o', name: `n${i}` })));
    await starting;
    const positions = await more;
    await r.waitFor(positions[2]!);
    // then
    const state = await snapshot();
    expect(state.stats).toContainEqual({ id: 'IdentityCreated', count: 13 });
  });

  it('should be idempotent if run twice', async () => {
    // given: read models built by a first runner
    const head = await givenHistory(15);
    const first = runner();
    await first.start();
    await first.waitFor(head);
    await first.stop();
    const built = await snapshot();

    // when: a second runner over the same read store gets every event again from the start
    const fromScratch: EventStore = {
      ...eventStore,
      subscribeAll: (options, handler) => eventStore.subscribeAll({ ...options, after: null }, handler),
    };
    const second = runner({ eventStore: fromScratch });
    await second.start();
    await second.waitFor(head);

    // then
    expect(await snapshot()).toEqual(built);
  });

  it('should resume from the checkpoints after a restart', async () => {
    // given
    await givenHistory(5);
    const first = runner();
    await first.start();
    await first.waitFor(await eventStore.headPosition() as string);
    await first.stop();
    // when
    const head = await givenHistory(3); // ids 0..2 again: created again, counted again
    const second = runner();
    await second.start();
    await second.waitFor(head);
    // then
    const state = await snapshot();
    expect(state.stats).toContainEqual({ id: 'IdentityCreated', count: 8 });
  });

  it('should commit in batches rather than once per event', async () => {
    // given
    const head = await givenHistory(300); // 553 events
    const commits: string[] = [];
    const counting: ReadStore = {
      ...readStore,
      collection: readStore.collection.bind(readStore),
      commit: async (projection, position, changes) => {
        commits.push(projection);
        return readStore.commit(projection, position, changes);
      },
    };
    // when
    const r = runner({ readStore: counting });
    await r.start();
    await r.waitFor(head);
    // then
    expect(eventStore.events.length).toBeGreaterThan(500);
    expect(commits.length).toBeLessThanOrEqual(3 * 3); // ≤ 2 batches of 500 + the idle flush, per projection
  });

  it('should read the documents a batch touches at once, one read per collection, none one by one', async () => {
    // given: a history delivered as batches (catch-up pages of up to 500 events)
    const head = await givenHistory(300);
    const reads: { collection: string; ids: number }[] = [];
    let singleGets = 0;
    const counting: ReadStore = {
      ...readStore,
      collection: <T extends Doc = Doc>(name: string) => {
        const c = readStore.collection<T>(name);
        return {
          ...c,
          get: async (id) => {
            singleGets += 1;
            return c.get(id);
          },
          getMany: async (ids) => {
            reads.push({ collection: name, ids: ids.length });
            return c.getMany(ids);
          },
        } as typeof c;
      },
    };
    // when
    const r = runner({ readStore: counting });
    await r.start();
    await r.waitFor(head);
    // then: per batch, each collection once, and the live models are those of event-by-event reads
    expect(singleGets).toBe(0);
    expect(reads.filter((x) => x.collection === 'identities').length).toBeLessThanOrEqual(2);
    expect(reads.find((x) => x.collection === 'identities')!.ids).toBeGreaterThan(100);
    const state = await snapshot();
    expect(state.identities).toHaveLength(240); // 300 created, every fifth deleted
    expect(state.identities.find((d) => d.id === 'id2')).toMatchObject({ name: 'renamed2', renames: 1 });
    expect(state.stats).toContainEqual({ id: 'IdentityCreated', count: 300 });
  });

  it('should commit changes at the event that made them, not at the batch end, so processes batching differently name the same position', async () => {
    // given: a change for `identities`, then events it does not handle, in one batch
    const changed = await append('IdentityCreated', { identityId: 'same-pos', owner: 'o', name: 'n' });
    await append('SomethingElse', {}, 'noise-1');
    const head = await append('SomethingElse', {}, 'noise-2');
    const commits: { projection: string; position: string; changes: number }[] = [];
    const recording: ReadStore = {
      ...readStore,
      collection: readStore.collection.bind(readStore),
      commit: async (projection, position, changes) => {
        commits.push({ projection, position, changes: changes.length });
        return readStore.commit(projection, position, changes);
      },
    };
    // when
    const r = runner({ readStore: recording });
    await r.start();
    await r.waitFor(head);
    await r.stop();
    // then: the cluster's gateways wait for the worker to hold exactly this position
    expect(commits.filter((c) => c.projection === 'identities:v1' && c.changes > 0).map((c) => c.position)).toEqual([changed]);
    await expect(readStore.getCheckpoint('identities:v1')).resolves.toBe(head); // moved to the end on stop, without changes
  });

  it('should persist the checkpoint of a projection that had nothing to write on stop', async () => {
    // given
    const head = await givenHistory(2);
    const r = runner();
    await r.start();
    await r.waitFor(head);
    // when
    await r.stop();
    // then
    await expect(readStore.getCheckpoint('idle:v1')).resolves.toBe(head);
    await expect(readStore.getCheckpoint('stats:v1')).resolves.toBe(head);
  });

  it('should rebuild read models equal to those built live', async () => {
    // given: models built live, event after event
    const r = runner();
    await r.start();
    const head = await givenHistory(25);
    await r.waitFor(head);
    const live = await snapshot();
    // and a corrupted read model
    await readStore.commit('identities:v1', '100000', [{ collection: 'identities', id: 'bogus', doc: { id: 'bogus' } }]);

    // when
    await r.rebuild();

    // then
    expect(await snapshot()).toEqual(live);
    expect(r.position()).toBe(head);
    // and it keeps running live
    const next = await append('IdentityCreated', { identityId: 'after', owner: 'o', name: 'After' });
    await r.waitFor(next);
    await expect(readStore.collection('identities').get('after')).resolves.not.toBeNull();
  });

  it('should build a new version of a projection (`:vN` bumped) from the first event, not on top of the old one', async () => {
    // given: the read models built by version 1, and a version 2 that keeps owner0's identities only
    const first = runner();
    await first.start();
    const head = await givenHistory(10);
    await first.waitFor(head);
    await first.stop();
    const v2: Projection = {
      ...identities,
      name: 'identities:v2',
      apply: (event) => (event.type === 'IdentityCreated' && event.data.owner !== 'owner0' ? [] : identities.apply(event)),
    };

    // when
    const second = runner({ projections: [v2, stats, idle] });
    await second.start();
    await second.waitFor(head);

    // then: every document is version 2's, none left over from version 1
    const docs = (await readStore.collection('identities').find()).items;
    expect(docs.length).toBeGreaterThan(0);
    expect(docs.map((d) => d.owner)).toEqual(docs.map(() => 'owner0'));
    // and the projections that kept their names were not rebuilt (counts not doubled)
    await expect(readStore.collection('event_stats').get('IdentityCreated')).resolves.toMatchObject({ count: 10 });
  });

  it('should not reset anything when its read store is a follower (a cluster gateway: the worker builds)', async () => {
    // given: a follower store refusing resets, as the MongoDB one does for gateways
    const reset = jest.fn(() => Promise.reject(new Error('read models are rebuilt by a worker')));
    const follower: ReadStore = { ...readStore, follower: true, reset };
    const head = await givenHistory(3);

    // when
    const r = runner({ readStore: follower });
    await r.start();
    await r.waitFor(head);

    // then
    expect(reset).not.toHaveBeenCalled();
  });

  it('should rebuild only the named projections', async () => {
    // given
    const head = await givenHistory(10);
    const r = runner();
    await r.start();
    await r.waitFor(head);
    const live = await snapshot();
    // when
    await r.rebuild(['stats:v1']);
    // then: the others were not replayed (that would double-count nothing here, but would re-apply renames)
    expect(await snapshot()).toEqual(live);
    await r.rebuild(['stats']); // named without its version too
    expect(await snapshot()).toEqual(live);
    await expect(r.rebuild(['nope'])).rejects.toThrow(/unknown projections: nope \(there are: identities:v1, stats:v1, idle:v1\)/);
  });

  it('should stop and reject waiters when a projection throws', async () => {
    // given
    const r = runner({ projections: [identities, fragile] });
    await r.start();
    await r.waitFor(await append('IdentityCreated', { identityId: 'a', owner: 'o', name: 'A' }));
    const before = r.position();
    // when
    const boom = await append('Boom', {}, 'boom-1');
    const after = await append('IdentityCreated', { identityId: 'b', owner: 'o', name: 'B' });
    // then
    await expect(r.waitFor(after)).rejects.toBeInstanceOf(ProjectionFailedError);
    await expect(r.waitFor(after)).rejects.toMatchObject({
      code: 'projection_failed',
      projection: 'fragile:v1',
      event: { type: 'Boom', position: boom },
    });
    await expect(r.done).rejects.toBeInstanceOf(ProjectionFailedError);
    expect(logger.error).toHaveBeenCalledWith(expect.objectContaining({ eventType: 'Boom', position: boom, projection: 'fragile:v1' }), expect.any(String));
    // nothing is skipped: no event at or after the failing one was committed
    expect(r.position()).toBe(before);
    await expect(readStore.collection('identities').get('b')).resolves.toBeNull();
    await expect(readStore.getCheckpoint('fragile:v1')).resolves.toBe(before);
  });

  it('should reject a waiter that was already waiting when a projection throws', async () => {
    // given
    const r = runner({ projections: [fragile] });
    await r.start();
    const waiting = r.waitFor('2', 5000);
    // when
    await append('Boom', {}, 'boom-1');
    await append('IdentityCreated', { identityId: 'b' });
    // then
    await expect(waiting).rejects.toBeInstanceOf(ProjectionFailedError);
  });
});

describe('projection runner on a full disk', () => {
  const full = () => Object.assign(new Error('read store commit failed: database or disk is full'), { code: 'SQLITE_FULL' });

  it('waits the full disk out: writes become visible once commits succeed again, and the runner never fails', async () => {
    // given: a read store whose commits fail as on a full disk until `space` is set
    let space = false;
    let refused = 0;
    const filling: ReadStore = {
      ...readStore,
      collection: readStore.collection.bind(readStore),
      commit: async (projection, position, changes) => {
        if (!space) {
          refused++;
          throw full();
        }
        return readStore.commit(projection, position, changes);
      },
    };
    const r = runner({ readStore: filling });
    await r.start();
    let failed = false;
    r.done.catch(() => (failed = true));
    // when
    const position = await append('IdentityCreated', { identityId: 'a', owner: 'o', name: 'A' });
    // then: meanwhile a waiter is told the write is not readable yet (503 projection_lag)
    await expect(r.waitFor(position, 300)).rejects.toBeInstanceOf(ProjectionLagError);
    expect(await eventually(() => refused > 1, 10_000)).toBe(true); // retried, not given up
    expect(failed).toBe(false);
    expect(logger.warn).toHaveBeenCalledWith(expect.objectContaining({ projection: 'identities:v1' }), expect.stringContaining('retrying'));
    space = true;
    await r.waitFor(position, 5_000);
    await expect(readStore.collection('identities').get('a')).resolves.toMatchObject({ name: 'A' });
    expect(failed).toBe(false);
  });

  it('a stop while waiting for space ends the wait; a restart replays what was not committed', async () => {
    const filling: ReadStore = { ...readStore, collection: readStore.collection.bind(readStore), commit: async () => Promise.reject(full()) };
    const r = runner({ readStore: filling });
    await r.start();
    const position = await append('IdentityCreated', { identityId: 'a', owner: 'o', name: 'A' });
    await new Promise((resolve) => setTimeout(resolve, 200)); // its commit is being retried
    await r.stop(); // returns: neither hangs nor throws
    const again = runner();
    await again.start();
    await again.waitFor(position, 5_000);
    await expect(readStore.collection('identities').get('a')).resolves.toMatchObject({ name: 'A' });
  });

  it('the SQLite read store under a file size limit (a write refused as on a full disk) stalls the runner instead of failing it', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'runner-full-'));
    try {
      const root = fileURLToPath(new URL('../..', import.meta.url));
      const child = spawnSync('bash', ['-c', 'ulimit -f 512 && exec node --import tsx test/support/full-read-store.ts "$1"', 'full-read-store', dir], { cwd: root, encoding: 'utf8' });
      expect(JSON.parse(child.stdout)).toEqual({ lag: 'projection_lag', failed: false, warned: true });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
