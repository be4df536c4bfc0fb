/**
 * The contract every EventFeed adapter must pass (see infra/ports/event-feed.ts): position
 * order, the handler awaited, `after` and filters honoured, a consumer restarted from its
 * own checkpoint seeing only later events, a throwing handler ending the subscription.
 *
 * Every test appends to its own streams (random category) and uses its own group, so the
 * suite also runs against a shared broker.
 */
import { randomUUID } from 'node:crypto';
import { comparePositions, type EventStore, type RecordedEvent, type Subscription } from '../../infra/ports/event-store.js';
import type { EventFeed } from '../../infra/ports/event-feed.js';

export interface FeedFixture {
  feed: EventFeed;
  /** Appends go here; the feed delivers them (through the relay for Kafka). */
  store: EventStore;
  cleanup(): Promise<void>;
}

export function eventFeedContract(adapterName: string, open: () => Promise<FeedFixture>, timeoutMs = 10_000): void {
  const testTimeout = timeoutMs * 2 + 10_000;
  describe(`EventFeed contract: ${adapterName}`, () => {
    let fixture: FeedFixture;
    beforeAll(async () => {
      fixture = await open();
    }, 60_000);
    afterAll(async () => {
      await fixture?.cleanup();
    }, testTimeout);

    const category = () => `fc${randomUUID().replace(/-/g, '').slice(0, 12)}`;
    const group = () => `contract-${randomUUID().slice(0, 8)}`;
    const append = (stream: string, n: number, type = 'Counted') =>
      fixture.store.append(stream, Array.from({ length: n }, (_, i) => ({ id: randomUUID(), type, data: { i } })));

    async function collect(sub: () => Subscription, seen: RecordedEvent[], count: number): Promise<Subscription> {
      const s = sub();
      const deadline = Date.now() + timeoutMs;
      while (seen.length < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      return s;
    }

    it('delivers every matching event after `after`, in position order, one at a time', async () => {
      const c = category();
      const before = await fixture.store.headPosition();
      for (let i = 0; i < 6; i++) await append(`${c}-${i % 3}`, 2);
      await append(`other${c}-1`, 2); // filtered out by prefix
      const seen: RecordedEvent[] = [];
      let inFlight = 0;
      let overlapped = false;
      const sub = await collect(
        () =>
          fixture.feed.subscribe({ after: before, group: group(), filter: { streamPrefixes: [`${c}-`] } }, async (e) => {
            inFlight += 1;
            if (inFlight > 1) overlapped = true;
            await new Promise((r) => setTimeout(r, 2));
            seen.push(e);
            inFlight -= 1;
          }),
        seen,
        12,
      );
      await new Promise((r) => setTimeout(r, 100)); // nothing more arrives
      sub.close();
      await sub.done;
      expect(seen).toHaveLength(12);
      expect(overlapped).toBe(false);
      expect(seen.every((e) => e.stream.startsWith(`${c}-`))).toBe(true);
      for (let i = 1; i < seen.length; i++) expect(comparePositions(seen[i - 1]!.position, seen[i]!.position)).toBeLessThan(0);
      expect(new Set(seen.map((e) => e.id)).size).toBe(12);
    }, testTimeout);

    it('skips events at or below `after` and delivers live events too', async () => {
      const c = category();
      const first = await append(`${c}-a`, 3);
      const seen: RecordedEvent[] = [];
      const sub = fixture.feed.subscribe({ after: first.position, group: group(), filter: { streams: [`${c}-a`] } }, async (e) => void seen.push(e));
      const live = await append(`${c}-a`, 2);
      const deadline = Date.now() + timeoutMs;
      while (seen.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      sub.close();
      await sub.done;
      expect(seen.map((e) => e.id)).toEqual(live.events.map((e) => e.id));
    }, testTimeout);

    it('filters by event type', async () => {
      const c = category();
      const before = await fixture.store.headPosition();
      await append(`${c}-1`, 2, 'Kept');
      await append(`${c}-1`, 2, 'Dropped');
      await append(`${c}-1`, 1, 'Kept');
      const seen: RecordedEvent[] = [];
      const sub = await collect(
        () => fixture.feed.subscribe({ after: before, group: group(), filter: { streams: [`${c}-1`], eventTypes: ['Kept'] } }, async (e) => void seen.push(e)),
        seen,
        3,
      );
      sub.close();
      await sub.done;
      expect(seen.map((e) => e.type)).toEqual(['Kept', 'Kept', 'Kept']);
      expect(seen.map((e) => e.revision)).toEqual([0, 1, 4]);
    }, testTimeout);

    it('a consumer restarted from its own checkpoint sees only later events', async () => {
      const c = category();
      const g = group();
      const before = await fixture.store.headPosition();
      await append(`${c}-1`, 3);
      const seen: RecordedEvent[] = [];
      const sub = await collect(() => fixture.feed.subscribe({ after: before, group: g, filter: { streams: [`${c}-1`] } }, async (e) => void seen.push(e)), seen, 3);
      sub.close();
      await sub.done;
      expect(seen).toHaveLength(3);
      const checkpoint = seen[seen.length - 1]!.position;

      const later = await append(`${c}-1`, 2);
      const again: RecordedEvent[] = [];
      const sub2 = await collect(() => fixture.feed.subscribe({ after: checkpoint, group: g, filter: { streams: [`${c}-1`] } }, async (e) => void again.push(e)), again, 2);
      await new Promise((r) => setTimeout(r, 100));
      sub2.close();
      await sub2.done;
      expect(again.map((e) => e.id)).toEqual(later.events.map((e) => e.id));
    }, testTimeout);

    it('ends the subscription when the handler throws', async () => {
      const c = category();
      const before = await fixture.store.headPosition();
      await append(`${c}-1`, 3);
      let calls = 0;
      const sub = fixture.feed.subscribe({ after: before, group: group(), filter: { streams: [`${c}-1`] } }, async () => {
        calls += 1;
        throw new Error('handler broke');
      });
      await expect(sub.done).rejects.toThrow(/handler broke/);
      expect(calls).toBe(1);
      sub.close(); // safe after failure
    }, testTimeout);
  });
}
