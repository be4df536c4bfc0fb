/**
 * The EventStoreDB adapter's subscriptions when the server drops them (a restart, a leader
 * election, a transport error), against a fake server (test/support/fake-eventstoredb.ts):
 * they resume after the last delivered event, with no gap and no duplicate, and give up
 * only after attempts in a row that got nowhere.
 */
import { openEventStoreDb, type EventStoreDbLogger, type ResubscribePolicy } from '../../infra/eventstoredb/event-store.js';
import { EventStoreUnavailableError, type EventStore, type RecordedEvent } from '../../infra/ports/event-store.js';
import { eventually } from '../support/eventually.js';
import { startFakeEventStoreDb, type FakeEventStoreDb } from '../support/fake-eventstoredb.js';

const quiet = { warn: () => {}, error: () => {} };

let fake: FakeEventStoreDb;
let store: EventStore | undefined;

async function open(resubscribe: Partial<ResubscribePolicy> = { firstDelayMs: 5, maxDelayMs: 20 }, logger: EventStoreDbLogger = quiet): Promise<EventStore> {
  store = await openEventStoreDb({ url: fake.url, logger, resubscribe });
  return store;
}

beforeEach(async () => {
  fake = await startFakeEventStoreDb();
});

afterEach(async () => {
  await store?.close();
  store = undefined;
  fake.close();
});

const subscriptionStarts = () => fake.reads.filter((r) => r.kind === 'subscription').map((r) => r.from);

describe.each(['unavailable', 'end'] as const)('a subscription the server drops (%s)', (how) => {
  it('resumes after the last delivered event: no gap, no duplicate', async () => {
    const store = await open();
    const first = fake.seed('thing-1', 5);
    const seen: RecordedEvent[] = [];
    const sub = store.subscribeAll({ after: null, filter: { streamPrefixes: ['thing-'] } }, (e) => {
      seen.push(e);
    });
    await eventually(() => seen.length === 5, 5000);

    fake.dropSubscriptions(how);
    const second = fake.seed('thing-2', 5); // appended while it is down
    await eventually(() => seen.length >= 10, 5000);
    const third = fake.seed('thing-3', 5); // and live again
    await eventually(() => seen.length >= 15, 5000);
    await new Promise((resolve) => setTimeout(resolve, 50)); // a duplicate would show up now

    expect(seen.map((e) => e.id)).toEqual([...first, ...second, ...third].map((r) => r.id));
    expect(subscriptionStarts()).toEqual(['start', first.at(-1)!.position]);
    sub.close();
    await expect(sub.done).resolves.toBeUndefined();
  });
});

describe('resubscribing', () => {
  it('rejects done with EventStoreUnavailableError after maxFailures attempts in a row that got nowhere', async () => {
    const store = await open({ firstDelayMs: 1, maxDelayMs: 5, maxFailures: 4 });
    fake.refuseSubscriptions(1000);
    const sub = store.subscribeAll({ after: null }, () => {});
    await expect(sub.done).rejects.toBeInstanceOf(EventStoreUnavailableError);
    expect(subscriptionStarts()).toHaveLength(4);
  });

  it('counts only failures in a row: a subscription the server confirmed starts the count again', async () => {
    const store = await open({ firstDelayMs: 1, maxDelayMs: 5, maxFailures: 2 });
    const seen: string[] = [];
    const sub = store.subscribeAll({ after: null }, (e) => {
      seen.push(e.id);
    });
    for (let i = 1; i <= 4; i++) {
      await eventually(() => subscriptionStarts().length === i && fake.openReads === 1, 5000);
      fake.dropSubscriptions('unavailable');
    }
    const later = fake.seed('thing-1', 1);
    await eventually(() => seen.length === 1, 5000);
    expect(seen).toEqual([later[0]!.id]);
    sub.close();
    await expect(sub.done).resolves.toBeUndefined();
  });

  it('close() during the backoff ends it at once, and done resolves', async () => {
    const warned: string[] = [];
    const store = await open({ firstDelayMs: 60_000, maxDelayMs: 60_000 }, { warn: (_obj, msg) => void warned.push(msg ?? ''), error: () => {} });
    fake.refuseSubscriptions(1);
    const sub = store.subscribeAll({ after: null }, () => {});
    // Now waiting to resubscribe: the drop is logged as the wait starts (a fixed 50 ms could be
    // too short on a loaded machine, and a close before it tested no backoff).
    await eventually(() => subscriptionStarts().length === 1 && warned.includes('event store: subscription dropped; resubscribing'), 5000);
    const started = Date.now();
    sub.close();
    await expect(sub.done).resolves.toBeUndefined();
    expect(Date.now() - started).toBeLessThan(1000);
    expect(subscriptionStarts()).toHaveLength(1);
  });

  it('a handler error still ends the subscription: done rejects with it, nothing is resubscribed', async () => {
    const store = await open();
    fake.seed('thing-1', 3);
    const boom = new Error('handler failed');
    let calls = 0;
    const sub = store.subscribeAll({ after: null }, () => {
      if (++calls === 2) throw boom;
    });
    await expect(sub.done).rejects.toBe(boom);
    fake.seed('thing-1', 1);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(calls).toBe(2);
    expect(subscriptionStarts()).toHaveLength(1);
  });

  it('store.close() ends a subscription that is waiting to resubscribe', async () => {
    const opened = await open({ firstDelayMs: 60_000, maxDelayMs: 60_000 });
    fake.refuseSubscriptions(1);
    const sub = opened.subscribeAll({ after: null }, () => {});
    await eventually(() => subscriptionStarts().length === 1, 5000);
    await opened.close();
    store = undefined;
    await expect(sub.done).resolves.toBeUndefined();
  });
});
