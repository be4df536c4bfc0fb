/**
 * The EventStoreDB adapter's reads against a fake server (test/support/fake-eventstoredb.ts)
 * that allows 100 concurrent calls per connection, as EventStoreDB does: a read the adapter
 * leaves without cancelling its call holds one of them for good, and past 100 every call
 * on the connection (appends too) waits without error.
 */
import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { finished } from 'node:stream/promises';
import { cancelOnExit, openEventStoreDb } from '../../infra/eventstoredb/event-store.js';
import { encodePosition, ownConnectionUrl } from '../../infra/eventstoredb/mapping.js';
import type { EventStore } from '../../infra/ports/event-store.js';
import { eventually } from '../support/eventually.js';
import { startFakeEventStoreDb, type FakeEventStoreDb } from '../support/fake-eventstoredb.js';

const quiet = { warn: () => {}, error: () => {} };
/** More than the 100 calls a connection allows. */
const CALLS = 130;

let fake: FakeEventStoreDb;
let store: EventStore;

beforeEach(async () => {
  fake = await startFakeEventStoreDb();
  fake.seed('thing-1', 200);
  store = await openEventStoreDb({ url: fake.url, logger: quiet });
});

afterEach(async () => {
  // close() waits for the client's calls to end; one that never does must not hang the suite.
  await within(store.close(), 'store.close()').catch(() => {});
  fake.close();
});

/** `promise`, or a failure naming `what` if it takes longer than `ms` (a call queued behind a full connection never answers). */
async function within<T>(promise: Promise<T>, what: string, ms = 3000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not answer in ${ms} ms`)), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function expectNoCallLeft(): Promise<void> {
  await eventually(() => fake.openReads <= 1, 3000).catch(() => {});
  expect(fake.openReads).toBeLessThanOrEqual(1);
}

describe('reads that stop early cancel their call', () => {
  it(`headPosition(), ${CALLS} times`, async () => {
    const head = fake.log.at(-1)!.position;
    for (let i = 1; i <= CALLS; i++) {
      expect(await within(store.headPosition(), `headPosition() #${i}`)).toBe(encodePosition({ commit: head, prepare: head }));
    }
    await expectNoCallLeft();
  });

  it(`readAll with maxCount, ${CALLS} times`, async () => {
    for (let i = 1; i <= CALLS; i++) {
      expect(await within(store.readAll({ maxCount: 1 }), `readAll #${i}`)).toHaveLength(1);
    }
    await expectNoCallLeft();
  });

  it(`filtered readAll with maxCount, ${CALLS} times`, async () => {
    for (let i = 1; i <= CALLS; i++) {
      expect(await within(store.readAll({ maxCount: 1, filter: { eventTypes: ['Counted'] } }), `filtered readAll #${i}`)).toHaveLength(1);
    }
    await expectNoCallLeft();
  });

  it(`a stream read that fails midway (a server before 22.10), ${CALLS} times`, async () => {
    fake.streamReadPositions = 'none';
    for (let i = 1; i <= CALLS; i++) {
      await expect(within(store.readStream('thing-1'), `readStream #${i}`)).rejects.toThrow(/no log position .*: EventStoreDB 23\.10 or later is required/);
    }
    fake.streamReadPositions = 'log';
    expect(await within(store.readStream('thing-1', { maxCount: 2 }), 'a read after them')).toHaveLength(2);
    await expectNoCallLeft();
  });
});

describe('cancelOnExit', () => {
  it('drains a read it leaves, so a call that had already ended still reaches its end', async () => {
    // The client's gRPC call, piped into the read it hands out (as @eventstore/db-client does):
    // all of it in, ended, more than the read buffers. Left alone, it never ends, and the
    // client keeps waiting for it (dispose() too).
    const call = new PassThrough({ objectMode: true });
    let cancelled = 0;
    const read = Object.assign(new PassThrough({ objectMode: true }), { cancel: async () => void cancelled++ });
    call.pipe(read);
    for (let i = 0; i < 100; i++) call.write(i);
    call.end();
    for await (const item of cancelOnExit(read as never)) {
      expect(item).toBe(0);
      break;
    }
    await within(finished(call), 'the end of the call');
    expect(cancelled).toBe(1);
  });
});

describe('subscriptions run on a connection of their own', () => {
  it('100 open subscriptions leave reads and appends their calls', async () => {
    const subs = Array.from({ length: 100 }, () => store.subscribeAll({ after: null }, () => {}));
    await eventually(() => fake.openReads >= 100, 5000);
    expect(await within(store.headPosition(), 'headPosition() beside 100 subscriptions')).not.toBeNull();
    expect(await within(store.readAll({ maxCount: 1 }), 'readAll beside 100 subscriptions')).toHaveLength(1);
    const appended = await within(store.append('other-1', [{ id: randomUUID(), type: 'Noted', data: {} }]), 'an append beside 100 subscriptions');
    expect(appended.nextRevision).toBe(0);
    for (const sub of subs) sub.close();
    await within(Promise.all(subs.map((s) => s.done)), 'closing the subscriptions');
  });

  it("gets it from a connection string whose keepalive timeout differs (grpc-js shares a connection between equal ones)", () => {
    expect(ownConnectionUrl('esdb://h:2113?tls=false')).toBe('esdb://h:2113?tls=false&keepAliveTimeout=10001');
    expect(ownConnectionUrl(' esdb://h:2113 ')).toBe('esdb://h:2113?keepAliveTimeout=10001');
    expect(ownConnectionUrl('esdb://h:2113?keep_alive_timeout=5000&tls=false')).toBe('esdb://h:2113?keep_alive_timeout=5000&tls=false&keepAliveTimeout=5001');
    expect(ownConnectionUrl('esdb+discover://a:2113,b:2113?keepAliveTimeout=-1')).toBe('esdb+discover://a:2113,b:2113?keepAliveTimeout=-1&keepAliveTimeout=10001');
  });
});

describe('positions handed back by callers', () => {
  // commit 1, prepare 2: no record has its prepare after its commit.
  const notARecord = encodePosition({ commit: 1n, prepare: 2n });

  it('refuses a position whose prepare part is past its commit part, as it refuses a malformed one', async () => {
    const before = fake.reads.length;
    await expect(store.readAll({ after: notARecord })).rejects.toThrow(/^invalid event position: /);
    await expect(store.readAll({ after: notARecord, filter: { eventTypes: ['Counted'] } })).rejects.toThrow(/^invalid event position: /);
    await expect(store.readAll({ after: '12x' })).rejects.toThrow(/^invalid event position: /);
    expect(() => store.subscribeAll({ after: notARecord }, () => {})).toThrow(/^invalid event position: /);
    expect(fake.reads.length).toBe(before); // refused before asking the server
  });

  it('takes the positions it gave', async () => {
    const all = await store.readAll();
    expect(all).toHaveLength(200);
    const rest = await store.readAll({ after: all[99]!.position });
    expect(rest.map((e) => e.id)).toEqual(all.slice(100).map((e) => e.id));
    expect(await store.readAll({ after: '0', maxCount: 1 })).toHaveLength(1);
  });
});
