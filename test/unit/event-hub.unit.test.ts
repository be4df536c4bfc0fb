/**
 * The SSE hub's one subscription: when it fails (a cluster's server away), the open streams
 * are ended (their clients resume from the log with Last-Event-ID), the hub says it is not
 * live (new streams are refused, not opened dead) and it starts again by itself.
 */
import { jest } from '@jest/globals';
import { EventHub, type Listener } from '../../services/events/hub.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';
import type { EventStore, Subscription } from '../../infra/ports/event-store.js';

const received = (identityId: string, subject: string) => ({ id: crypto.randomUUID(), type: 'EmailReceived', data: { identityId, subject } });

/** The subject in an `email` frame's data line. */
const subjectOf = (frame: string) => String(JSON.parse(/^data: (.*)$/m.exec(frame)![1]!).subject);

function listener(identityId: string) {
  const delivered: string[] = [];
  const revoked: string[] = [];
  const l: Listener = { identityId, deliver: (frame) => delivered.push(subjectOf(frame.text)), revoke: (reason) => revoked.push(reason) };
  return { l, delivered, revoked };
}

afterEach(() => jest.useRealTimers());

it('a failed subscription ends the open streams, is not live meanwhile, and starts again from the head then', async () => {
  const memory = createMemoryEventStore();
  let fail: ((error: Error) => void) | null = null;
  let subscriptions = 0;
  // The first subscription fails on demand, as one to a server that went away does.
  const store: EventStore = {
    ...memory,
    subscribeAll(options, handler): Subscription {
      subscriptions += 1;
      const inner = memory.subscribeAll(options, handler);
      if (subscriptions > 1) return inner;
      const failed = new Promise<void>((_, reject) => (fail = reject));
      failed.catch(() => {});
      return { done: Promise.race([inner.done, failed]), close: () => inner.close() };
    },
  };
  const failures: unknown[] = [];
  const hub = new EventHub(store, (error) => {
    failures.push(error);
    for (const l of hub.all()) l.revoke('subscription failed');
  });
  jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
  await hub.start();
  const first = listener('id-1');
  hub.add(first.l);
  await memory.append('mailbox-id-1', [received('id-1', 'before the failure')]);
  for (let i = 0; i < 10 && first.delivered.length === 0; i++) await new Promise((r) => setImmediate(r));
  expect(first.delivered).toEqual(['before the failure']);

  fail!(new Error('server went away'));
  for (let i = 0; i < 10 && failures.length === 0; i++) await new Promise((r) => setImmediate(r));
  expect([failures.length, first.revoked, hub.live]).toEqual([1, ['subscription failed'], false]);
  await memory.append('mailbox-id-1', [received('id-1', 'while it was down')]);

  await jest.advanceTimersByTimeAsync(1_000); // the first pause
  expect([hub.live, subscriptions]).toEqual([true, 2]);
  expect(hub.position).toBe('2'); // a stream opened now starts after the head then
  const second = listener('id-1');
  hub.add(second.l);
  await memory.append('mailbox-id-1', [received('id-1', 'after the restart')]);
  for (let i = 0; i < 10 && second.delivered.length === 0; i++) await new Promise((r) => setImmediate(r));
  expect(second.delivered).toEqual(['after the restart']);
  hub.stop();
  expect(hub.live).toBe(false);
});

it('stopped, it does not start again', async () => {
  const memory = createMemoryEventStore();
  let subscriptions = 0;
  const store: EventStore = {
    ...memory,
    subscribeAll(): Subscription {
      subscriptions += 1;
      return { done: Promise.reject(new Error('down')), close: () => {} };
    },
  };
  jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
  const hub = new EventHub(store, () => {});
  await hub.start();
  await new Promise((r) => setImmediate(r));
  hub.stop();
  await jest.advanceTimersByTimeAsync(60_000);
  expect(subscriptions).toBe(1);
});

it('message events reach the streams once the read models hold them, one after the other in log order', async () => {
  const memory = createMemoryEventStore();
  // Read models that hold a position only when the test says so.
  const held = new Map<string, () => void>();
  const readModels = { waitFor: (position: string) => new Promise<void>((resolve) => held.set(position, resolve)) };
  const hub = new EventHub(memory, () => {}, undefined, readModels);
  await hub.start();
  const stream = listener('id-1');
  hub.add(stream.l);
  await memory.append('mailbox-id-1', [received('id-1', 'first')]);
  await memory.append('mailbox-id-1', [received('id-1', 'second')]);
  for (let i = 0; i < 20 && held.size < 1; i++) await new Promise((r) => setImmediate(r));
  expect([stream.delivered, [...held.keys()]]).toEqual([[], ['1']]); // not before the read models have it; the second waits its turn
  held.get('1')!();
  for (let i = 0; i < 20 && stream.delivered.length < 1; i++) await new Promise((r) => setImmediate(r));
  expect(stream.delivered).toEqual(['first']);
  held.get('2')!();
  for (let i = 0; i < 20 && stream.delivered.length < 2; i++) await new Promise((r) => setImmediate(r));
  expect(stream.delivered).toEqual(['first', 'second']);
  hub.stop();
});

it('read models that do not catch up (or failed) delay message events by the wait at most, counted from each one\'s arrival', async () => {
  const memory = createMemoryEventStore();
  jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
  const readModels = { waitFor: (_: string, timeoutMs?: number) => new Promise<void>((_resolve, reject) => setTimeout(() => reject(new Error('lag')), timeoutMs)) };
  const hub = new EventHub(memory, () => {}, undefined, readModels);
  await hub.start();
  const stream = listener('id-1');
  hub.add(stream.l);
  for (const subject of ['late 1', 'late 2', 'late 3']) await memory.append('mailbox-id-1', [received('id-1', subject)]);
  for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
  expect(stream.delivered).toEqual([]);
  // All three at the end of their own waits, which began together: not one wait after another.
  await jest.advanceTimersByTimeAsync(5_000);
  expect(stream.delivered).toEqual(['late 1', 'late 2', 'late 3']);
  hub.stop();
});

it('a stream whose delivery throws is ended alone (with the error); the others get the frame, and later ones too', async () => {
  const memory = createMemoryEventStore();
  const failures: unknown[] = [];
  const hub = new EventHub(memory, (error) => failures.push(error), undefined, { waitFor: async () => {} });
  await hub.start();
  const broken = listener('id-1');
  const errors: unknown[] = [];
  broken.l.deliver = () => {
    if (broken.revoked.length) return; // ended (as a closed stream takes nothing): 'two' was dispatched to it before
    throw new Error('socket gone wrong');
  };
  broken.l.revoke = (reason, error) => {
    broken.revoked.push(reason);
    errors.push(error);
    hub.remove(broken.l);
  };
  const [before, after] = [listener('id-1'), listener('id-1')];
  hub.add(before.l);
  hub.add(broken.l);
  hub.add(after.l);
  await memory.append('mailbox-id-1', [received('id-1', 'one')]);
  await memory.append('mailbox-id-1', [received('id-1', 'two')]);
  for (let i = 0; i < 20 && after.delivered.length < 2; i++) await new Promise((r) => setImmediate(r));
  expect([before.delivered, after.delivered, broken.revoked]).toEqual([['one', 'two'], ['one', 'two'], ['delivery failed']]);
  expect(String(errors[0])).toContain('socket gone wrong');
  expect([failures, hub.live, before.revoked, after.revoked]).toEqual([[], true, [], []]);
  hub.stop();
});
