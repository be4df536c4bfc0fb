/**
 * The Idempotency-Key lookup of sends (services/mail/idempotency.ts): read cold (a process
 * that never saw the outbox: back from the end, page by page, until past the 24 hours), then
 * warm (only what was appended since, by anyone); a key older than the window names nothing.
 */
import { createIdempotentSends, IDEMPOTENCY_WINDOW_MS } from '../../services/mail/idempotency.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';

const HOUR = 3600_000;
const start = Date.parse('2026-11-01T00:00:00.000Z');

function queued(i: number, atMs: number) {
  return { id: crypto.randomUUID(), type: 'EmailQueued', data: { messageId: `m${i}`, at: new Date(atMs).toISOString(), idempotency: { key: `k${i}`, fingerprint: `f${i}` } } };
}

it('finds the keys of the last 24 hours across pages, not older ones, and then what others append', async () => {
  const store = createMemoryEventStore();
  // 600 sends, one a minute for 10 hours, after 5 older ones two days before.
  for (let i = 0; i < 5; i++) await store.append('outbox-x', [queued(i, start + i * 60_000)]);
  const recent = start + 48 * HOUR;
  for (let i = 5; i < 605; i++) await store.append('outbox-x', [queued(i, recent + (i - 5) * 60_000)]);
  const now = recent + 10 * HOUR;
  const sends = createIdempotentSends({ events: store });
  const cold = { earlier: async (stream: string, key: string, nowMs: number) => (await sends.lookup(stream, key, nowMs)).earlier };
  expect(await cold.earlier('outbox-x', 'k5', now)).toEqual({ messageId: 'm5', fingerprint: 'f5' }); // the oldest of the window, three pages back
  expect(await cold.earlier('outbox-x', 'k604', now)).toEqual({ messageId: 'm604', fingerprint: 'f604' });
  expect(await cold.earlier('outbox-x', 'k4', now)).toBeNull(); // two days old
  expect(await cold.earlier('outbox-none', 'k1', now)).toBeNull();

  await store.append('outbox-x', [queued(605, now)]); // by another process
  expect(await cold.earlier('outbox-x', 'k605', now)).toEqual({ messageId: 'm605', fingerprint: 'f605' });
  // A day later the early ones have left the window.
  expect(await cold.earlier('outbox-x', 'k5', recent + IDEMPOTENCY_WINDOW_MS + 60_000)).toBeNull();
  expect(await cold.earlier('outbox-x', 'k605', recent + IDEMPOTENCY_WINDOW_MS + 60_000)).not.toBeNull();
  // The revision read comes with the answer (the send checks its limits at the same one).
  expect((await sends.lookup('outbox-x', 'k605', now)).revision).toBe(605);
  expect(await sends.lookup('outbox-none', 'k1', now)).toEqual({ earlier: null, revision: null });
});

it('a key used again after its 24 hours keeps its latest send, and does not keep older keys alive', async () => {
  const store = createMemoryEventStore();
  const send = (i: number, key: string, atMs: number) => store.append('outbox-y', [{ id: crypto.randomUUID(), type: 'EmailQueued', data: { messageId: `m${i}`, at: new Date(atMs).toISOString(), idempotency: { key, fingerprint: `f${i}` } } }]);
  await send(1, 'K', start);
  await send(2, 'J', start + 60_000);
  await send(3, 'K', start + 24 * HOUR + 2 * 60_000);
  const now = start + 24 * HOUR + 3 * 60_000;
  const warm = createIdempotentSends({ events: store });
  expect((await warm.lookup('outbox-y', 'J', start + 2 * 60_000)).earlier).toEqual({ messageId: 'm2', fingerprint: 'f2' }); // kept from when J was young
  for (const sends of [warm, createIdempotentSends({ events: store })]) {
    expect((await sends.lookup('outbox-y', 'J', now)).earlier).toBeNull();
    expect((await sends.lookup('outbox-y', 'K', now)).earlier).toEqual({ messageId: 'm3', fingerprint: 'f3' });
  }
});

it('holds at most its key budget in all, dropping whole outboxes least recently used first', async () => {
  const store = createMemoryEventStore();
  for (const box of ['a', 'b', 'c']) for (let i = 0; i < 4; i++) await store.append(`outbox-${box}`, [queued(i, start)]);
  const sends = createIdempotentSends({ events: store, maxKeys: 8 });
  for (const box of ['a', 'b', 'c']) await sends.lookup(`outbox-${box}`, 'k0', start + 1);
  expect(sends.keys()).toBe(8); // a dropped for c
  expect((await sends.lookup('outbox-a', 'k3', start + 1)).earlier).toEqual({ messageId: 'm3', fingerprint: 'f3' }); // read back from the log
  expect(sends.keys()).toBe(8);
});
