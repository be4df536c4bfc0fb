/** `available` (services/kernel/reservations.ts): the look that refuses early says what `hold` would do, and takes nothing. */
import { available, hold, release, reserve, type Reclaim } from '../../services/kernel/reservations.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';

const gone: Reclaim = { check: async () => 'gone', settled: () => true };
const inFlight: Reclaim = { check: async () => 'unknown', settled: () => false };

test('a value nobody holds, or its own holder, is available; another holder makes it not, unless reclaimable', async () => {
  const store = createMemoryEventStore();
  expect(await available(store, 'inbox', 'a@x', 'identity-1')).toBe(true);
  expect(store.events).toHaveLength(0); // a look: nothing appended
  expect(await reserve(store, 'inbox', 'a@x', 'identity-1', true)).toBe(true);
  expect(await available(store, 'inbox', 'a@x', 'identity-1')).toBe(true);
  expect(await available(store, 'inbox', 'a@x', 'identity-2')).toBe(false);
  expect(await available(store, 'inbox', 'a@x', 'identity-2', inFlight)).toBe(false);
  expect(await available(store, 'inbox', 'a@x', 'identity-2', gone)).toBe(true);
  // and hold agrees: an in-flight holder keeps it, a gone one gives it up
  expect((await hold(store, 'inbox', 'a@x', 'identity-2', true, inFlight)).outcome).toBe('taken');
  expect((await hold(store, 'inbox', 'a@x', 'identity-2', true, gone)).outcome).toBe('acquired');
});

test('a released value is available again', async () => {
  const store = createMemoryEventStore();
  await reserve(store, 'name', 'bot', 'identity-1');
  await release(store, 'name', 'bot', 'identity-1');
  expect(await available(store, 'name', 'bot', 'identity-2')).toBe(true);
});
