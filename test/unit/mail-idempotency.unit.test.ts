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
  const cold = createIdempotentSends({ events: store });
  expect(await cold.earlier('outbox-x', 'k5', now)).toEqual({ messageId: 'm5', fingerprint: 'f5' }); // the oldest of the window, three pages back
  expect(await cold.earlier('outbox-x', 'k604', now)).toEqual({ messageId: 'm604', fingerprint: 'f604' });
  expect(await cold.earlier('outbox-x', 'k4', now)).toBeNull(); // two days old
  expect(await cold.earlier('outbox-none', 'k1', now)).toBeNull();

  await store.append('outbox-x', [queued(605, now)]); // by another process
  expect(await cold.earlier('outbox-x', 'k605', now)).toEqual({ messageId: 'm605', fingerprint: 'f605' });
  // A day later the early ones have left the window.
  expect(await cold.earlier('outbox-x', 'k5', recent + IDEMPOTENCY_WINDOW_MS + 60_000)).toBeNull();
  expect(await cold.earlier('outbox-x', 'k605', recent + IDEMPOTENCY_WINDOW_MS + 60_000)).not.toBeNull();
});
