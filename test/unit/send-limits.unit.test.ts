/** Send limits over the outbox stream: rolling windows, sends by other processes, bounded memory. */
import { createSendLimits } from '../../services/mail/send-limits.js';
import { countingReads, createMemoryEventStore } from '../support/memory-event-store.js';
import { WrongExpectedRevisionError, type EventStore } from '../../infra/ports/event-store.js';

const HOUR = 3600_000;
const DAY = 24 * HOUR;
const windows = [
  { limit: 2, ms: HOUR, label: 'hour' },
  { limit: 3, ms: DAY, label: 'day' },
];
const now = Date.parse('2026-11-22T12:00:00.000Z');
let n = 0;
const sent = (store: EventStore, stream: string, atMs: number) =>
  store.append(stream, [{ id: `00000000-0000-7000-8000-${String(++n).padStart(12, '0')}`, type: 'EmailQueued', data: { at: new Date(atMs).toISOString() }, metadata: {} }]);


describe('send limits', () => {
  it('counts each window over the sends inside it, and says when the oldest counted one leaves', async () => {
    const store = createMemoryEventStore();
    const limits = createSendLimits({ events: store, windows });
    expect(await limits.check('outbox-a', now)).toEqual({ revision: null, full: null });
    await sent(store, 'outbox-a', now - 2 * HOUR); // outside the hour, inside the day
    await sent(store, 'outbox-a', now - 30 * 60_000);
    expect((await limits.check('outbox-a', now)).full).toBeNull(); // hour 1/2, day 2/3
    await sent(store, 'outbox-a', now - 10 * 60_000);
    // Hour 2/2 (full first), day 3/3.
    expect(await limits.check('outbox-a', now)).toEqual({ revision: 2, full: { window: windows[0], freesAt: now - 30 * 60_000 + HOUR } });
    // An hour later the hour has room; the day is still full until the 2-hour-old send is a day old.
    expect((await limits.check('outbox-a', now + HOUR))?.full).toEqual({ window: windows[1], freesAt: now - 2 * HOUR + DAY });
    expect((await limits.check('outbox-a', now + DAY)).full).toBeNull();
  });

  it('sees sends appended by another process, reading only what is new', async () => {
    const base = createMemoryEventStore();
    const { store, read } = countingReads(base);
    const limits = createSendLimits({ events: store, windows: [{ limit: 100, ms: DAY, label: 'day' }] });
    for (let i = 0; i < 50; i++) await sent(base, 'outbox-b', now - i * 60_000);
    await limits.check('outbox-b', now); // first check: the newest (up to 100) sends
    expect(read()).toBe(50);
    await sent(base, 'outbox-b', now); // appended elsewhere
    const after = await limits.check('outbox-b', now);
    expect(read()).toBe(51); // only the new one
    expect(after.revision).toBe(50);
    for (let i = 0; i < 49; i++) await sent(base, 'outbox-b', now);
    expect((await limits.check('outbox-b', now)).full?.window.limit).toBe(100);
  });

  it('makes a concurrent send fail the append at the revision it read', async () => {
    const store = createMemoryEventStore();
    const limits = createSendLimits({ events: store, windows });
    await sent(store, 'outbox-c', now);
    const { revision } = await limits.check('outbox-c', now);
    await sent(store, 'outbox-c', now); // another compose won the race
    await expect(store.append('outbox-c', [{ id: '00000000-0000-7000-8000-ffffffffffff', type: 'EmailQueued', data: { at: new Date(now).toISOString() }, metadata: {} }], { expectedRevision: revision! })).rejects.toBeInstanceOf(WrongExpectedRevisionError);
    expect((await limits.check('outbox-c', now)).full?.window.label).toBe('hour');
  });

  it('holds a bounded number of streams and reads a dropped one back in full', async () => {
    const base = createMemoryEventStore();
    const { store, read } = countingReads(base);
    const limits = createSendLimits({ events: store, windows, held: 2 });
    for (const s of ['outbox-d', 'outbox-e', 'outbox-f']) {
      await sent(base, s, now);
      await limits.check(s, now);
    }
    expect(limits.held()).toBe(2);
    const before = read();
    await sent(base, 'outbox-d', now);
    expect((await limits.check('outbox-d', now)).full?.window.label).toBe('hour'); // both sends seen
    expect(read() - before).toBe(2); // outbox-d was dropped: read back (newest 3 at most)
  });
  it('keeps counting sends across clock steps: a clock briefly ahead drops nothing, a send recorded ahead of now never makes a wait longer than the window', async () => {
    const store = createMemoryEventStore();
    const limits = createSendLimits({ events: store, windows });
    await sent(store, 'outbox-c', now - 60_000);
    await sent(store, 'outbox-c', now - 30_000);
    // The clock runs a day ahead for one check (a bad NTP source): by it, both sends are old.
    expect((await limits.check('outbox-c', now + DAY)).full).toBeNull();
    // Corrected: they count again (they were not dropped from what is held).
    expect((await limits.check('outbox-c', now)).full).toMatchObject({ window: { label: 'hour' } });
    // Sends recorded while the clock was an hour ahead, now set back: full, for an hour at most.
    await sent(store, 'outbox-d', now + HOUR);
    await sent(store, 'outbox-d', now + HOUR + 1);
    const full = (await limits.check('outbox-d', now)).full!;
    expect(full.window.label).toBe('hour');
    expect(full.freesAt - now).toBeLessThanOrEqual(HOUR);
  });
});
