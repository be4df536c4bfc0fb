/**
 * The EventStoreDB adapter's appends against a fake server (test/support/fake-eventstoredb.ts):
 * a retry is recognised by reading only where an earlier attempt can be (never the whole
 * stream), ids in capitals survive the server's lowercase UUIDs, and an append over the
 * server's size limit fails with its own error.
 */
import { randomUUID } from 'node:crypto';
import { AppendTooLargeError, openEventStoreDb } from '../../infra/eventstoredb/event-store.js';
import type { EventData, EventStore } from '../../infra/ports/event-store.js';
import { startFakeEventStoreDb, type FakeEventStoreDb } from '../support/fake-eventstoredb.js';

const quiet = { warn: () => {}, error: () => {} };

let fake: FakeEventStoreDb;
let store: EventStore;

beforeEach(async () => {
  fake = await startFakeEventStoreDb();
  store = await openEventStoreDb({ url: fake.url, logger: quiet });
});

afterEach(async () => {
  await store.close();
  fake.close();
});

const event = (id: string = randomUUID()): EventData => ({ id, type: 'Noted', data: { n: 1 } });
/** Stream reads made by `action`. */
async function readsOf(action: () => Promise<unknown>) {
  const before = fake.reads.length;
  await action();
  return fake.reads.slice(before).filter((r) => r.kind === 'stream');
}

describe('a retry after the stream moved on reads only where the first attempt can be', () => {
  it('a revision: right after it', async () => {
    fake.seed('hot-1', 3000);
    const batch = [event(), event()];
    const first = await store.append('hot-1', batch, { expectedRevision: 2999 });
    fake.seed('hot-1', 5);
    let retry: Awaited<ReturnType<EventStore['append']>> | undefined;
    const reads = await readsOf(async () => (retry = await store.append('hot-1', batch, { expectedRevision: 2999 })));
    expect(retry).toEqual(first);
    expect(reads).toEqual([{ kind: 'stream', stream: 'hot-1', direction: 'forwards', from: 3000n, count: 2n }]);
  });

  it("'no_stream': from revision 0", async () => {
    const batch = [event(), event()];
    const first = await store.append('hot-2', batch, { expectedRevision: 'no_stream' });
    fake.seed('hot-2', 3000);
    let retry: Awaited<ReturnType<EventStore['append']>> | undefined;
    const reads = await readsOf(async () => (retry = await store.append('hot-2', batch, { expectedRevision: 'no_stream' })));
    expect(retry).toEqual(first);
    expect(reads).toEqual([{ kind: 'stream', stream: 'hot-2', direction: 'forwards', from: 0n, count: 2n }]);
  });

  it("'any': the last 1000 events, backwards", async () => {
    fake.seed('hot-3', 3000);
    const batch = [event()];
    const first = await store.append('hot-3', batch);
    fake.seed('hot-3', 10);
    let retry: Awaited<ReturnType<EventStore['append']>> | undefined;
    const reads = await readsOf(async () => (retry = await store.append('hot-3', batch)));
    expect(retry).toEqual(first);
    // The read-back of what the server answered (its current revision), then the window.
    expect(reads).toEqual([
      { kind: 'stream', stream: 'hot-3', direction: 'forwards', from: 3010n, count: 1n },
      { kind: 'stream', stream: 'hot-3', direction: 'backwards', from: 'end', count: 1000n },
    ]);
  });

  it('still refuses ids that are only partly recorded, and a conflict that is not a retry', async () => {
    const e1 = event();
    await store.append('hot-4', [e1]);
    await expect(store.append('hot-4', [e1, event()])).rejects.toThrow(/already recorded, but not as this exact append/);
    await expect(store.append('hot-4', [event()], { expectedRevision: 'no_stream' })).rejects.toMatchObject({ code: 'wrong_expected_revision', actual: 0 });
    const conflicting = await readsOf(() => store.append('hot-4', [e1, event()], { expectedRevision: 'no_stream' }).catch(() => {}));
    expect(conflicting).toEqual([{ kind: 'stream', stream: 'hot-4', direction: 'forwards', from: 0n, count: 2n }]);
    expect((await store.readStream('hot-4')).map((e) => e.id)).toEqual([e1.id]);
  });
});

describe('event ids in capitals (the server records UUIDs lowercase)', () => {
  it('are appended, read back and recognised on a retry', async () => {
    const id = randomUUID().toUpperCase();
    const first = await store.append('caps-1', [event(id)], { expectedRevision: 'no_stream' });
    expect(first.events.map((e) => e.id)).toEqual([id.toLowerCase()]);
    const retry = await store.append('caps-1', [event(id)], { expectedRevision: 'no_stream' });
    expect(retry).toEqual(first);
    expect(await store.readStream('caps-1')).toHaveLength(1);
  });

  it('count as the same id in either case within one append', async () => {
    const id = randomUUID();
    await expect(store.append('caps-2', [event(id), event(id.toUpperCase())])).rejects.toThrow(/repeats event id/);
  });
});

describe('an append over the server size limit', () => {
  it('fails with AppendTooLargeError, saying the limit', async () => {
    fake.maxAppendSize = 1024;
    const big: EventData = { id: randomUUID(), type: 'Noted', data: { text: 'x'.repeat(2000) } };
    const err = await store.append('big-1', [big]).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(AppendTooLargeError);
    expect(err).toMatchObject({ code: 'append_too_large', stream: 'big-1', maxAppendSize: 1024 });
    expect(await store.readStream('big-1')).toEqual([]);
  });
});
