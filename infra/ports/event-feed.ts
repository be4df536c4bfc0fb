/**
 * The EventFeed port: how projections and reactors FOLLOW the log (docs/DEPLOYMENT.md).
 *
 * - At least once, in position order, one event at a time (the handler is awaited).
 * - Events at or below `after` are skipped, and so is a redelivered event at or below the
 *   last one handled: consumers keep their own checkpoints and stay idempotent with them.
 * - A handler whose effects are still running when it returns (a reactor running jobs
 *   concurrently, a projection batching its commits) hands back `{ settled }`: the feed
 *   then treats the event as consumed only once `settled` resolved, and never past an
 *   unsettled one (a watermark). A `settled` that rejects holds the feed's durable position
 *   where it is (a restart redelivers from there).
 *
 * Adapters: {@link eventStoreFeed} (embedded: the event store's catch-up subscription; the
 * group is ignored, the consumer's own checkpoint is the durable position) and
 * infra/kafka/feed.ts (cluster: a Kafka consumer group whose offsets follow the effects).
 */
import type { AllFilter, EventStore, RecordedEvent, Subscription } from './event-store.js';

export interface FeedOptions {
  /** Skip events at or below this position (the consumer's own checkpoint). */
  after: string | null;
  /** The consumer group: copies in one group share the work and one durable position. */
  group: string;
  filter?: AllFilter;
  /**
   * A group the log has never seen starts at the log's end instead of its beginning (for
   * live-only consumers such as the SSE hub). The event store adapter ignores it (`after`
   * already says where to start).
   */
  fromLatest?: boolean;
}

/** Effects still running after the handler returned (see the file comment). */
export interface Pending {
  settled: Promise<unknown>;
}

export type FeedHandler = (event: RecordedEvent) => Promise<void | Pending>;

export interface EventFeed {
  subscribe(options: FeedOptions, handler: FeedHandler): Subscription;
}

/** True when `event` passes `filter` (same rules as the event store's AllFilter). */
export function matchesFilter(event: Pick<RecordedEvent, 'stream' | 'type'>, filter: AllFilter | undefined): boolean {
  if (!filter) return true;
  if (filter.streams && !filter.streams.includes(event.stream)) return false;
  if (filter.streamPrefixes && !filter.streamPrefixes.some((p) => event.stream.startsWith(p))) return false;
  if (filter.eventTypes && !filter.eventTypes.includes(event.type)) return false;
  return true;
}

/**
 * The embedded feed: the event store's catch-up subscription, unchanged (the group is
 * ignored; `settled` is not waited for, since the consumer's checkpoint in the read store
 * is the durable position).
 */
export function eventStoreFeed(store: EventStore): EventFeed {
  return {
    subscribe(options, handler) {
      const pending = async (event: RecordedEvent): Promise<void> => {
        const result = await handler(event);
        result?.settled.catch(() => {}); // the consumer reports its own failures
      };
      return store.subscribeAll({ after: options.after, ...(options.filter ? { filter: options.filter } : {}) }, pending);
    },
  };
}
