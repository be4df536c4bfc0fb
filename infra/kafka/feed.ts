/**
 * The EventFeed port on Kafka (cluster mode): one kafkajs consumer per subscription, in the
 * consumer group `options.group`, on the relay's topic (see ./relay.ts: ONE partition by
 * default, so the topic's order is the log's order).
 *
 * - `eachMessage` with `autoCommit: false`: the handler is awaited (heartbeats are sent
 *   while it runs), then the message joins its partition's window. An offset is committed
 *   only once every message at or below it was handled AND its `settled` (if any) resolved
 *   — a watermark, so a crash or a rebalance never skips an event whose effects were not
 *   durable; the next owner resumes from the commit (at least once).
 * - Positions at or below `after`, or at or below the last one handled here (a redelivery
 *   after a rebalance, or a batch the relay published twice), skip the handler; such a
 *   message counts as settled when the first delivery of that position is.
 * - A handler that throws ends the subscription (`done` rejects); nothing after the last
 *   settled message is committed. So does a consumer kafkajs gave up on (CRASH without restart).
 * - The topic is the relay's to create (one partition, its config): consumers never
 *   auto-create it, and a subscription made before it exists waits for it.
 * - `fromLatest` starts at the messages produced shortly before `subscribe()`, see
 *   {@link FROM_LATEST_MARGIN_MS}.
 */
import type { Admin, Consumer } from 'kafkajs';
import { comparePositions, type RecordedEvent, type Subscription } from '../ports/event-store.js';
import { matchesFilter, type EventFeed, type FeedHandler, type FeedOptions, type Pending } from '../ports/event-feed.js';
import { checkTopic, fromMessage, offsetCommit, type IncomingMessage } from './messages.js';
import { kafkaClient } from './relay.js';
import { LowWaterMark } from '../low-water-mark.js';

/** What the feed uses of a kafkajs Consumer (the fake in the unit tests implements this). */
export type FeedConsumer = Pick<Consumer, 'connect' | 'subscribe' | 'run' | 'commitOffsets' | 'disconnect' | 'seek' | 'on' | 'events'>;

/** What a `fromLatest` subscription uses of a kafkajs Admin (the unit tests pass a fake). */
export type FeedAdmin = Pick<Admin, 'connect' | 'disconnect' | 'fetchOffsets' | 'fetchTopicOffsetsByTimestamp'>;

/**
 * How far before `subscribe()` a `fromLatest` subscription starts, in message timestamps.
 *
 * kafkajs resolves a new group's "latest" only at its first fetch after joining (3 s or more
 * with Kafka's default group.initial.rebalance.delay.ms): events relayed in between were
 * never delivered, though the caller (the SSE hub) had read the event store's head and told
 * its clients the stream starts right after it. So the subscription starts at the first
 * message produced since this margin before `subscribe()` was called (admin
 * fetchTopicOffsetsByTimestamp, read before the consumer runs). The margin covers the
 * caller's head read just before subscribing (an event after the head is relayed after that
 * read) and clock skew between hosts; the positions at or below `after` it re-reads are
 * skipped as usual. The consumer is moved there with `seek` on GROUP_JOIN, which kafkajs
 * emits after the assignment and before the first fetch; with autoCommit off a seek is not
 * committed, so it is repeated after a rebalance until this subscription has committed on
 * that partition. Partitions where the group already has an offset keep it: only a group
 * the log has never seen starts near the end.
 */
export const FROM_LATEST_MARGIN_MS = 10_000;

export interface FeedLogger {
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface KafkaFeedOptions {
  topic: string;
  /** Creates the consumer of a group (default: kafkajs on `brokers`). */
  consumer?: (group: string) => FeedConsumer;
  /** Creates the admin client `fromLatest` reads offsets with (default: kafkajs on `brokers`). */
  admin?: () => FeedAdmin;
  brokers?: string[];
  /** Heartbeat period while a handler runs. Default 3000 ms (kafkajs' heartbeat interval). */
  heartbeatMs?: number;
  /** First wait before subscribing again while the topic does not exist; doubles up to 10 s. Default 500 ms. */
  topicRetryMs?: number;
  logger?: FeedLogger;
}

/** kafkajs' error for a topic the cluster does not have (possibly wrapped by its retrier). */
function isUnknownTopic(err: unknown): boolean {
  let e = err as { type?: unknown; cause?: unknown } | null | undefined;
  for (let depth = 0; e && depth < 5; depth++, e = e.cause as typeof e) {
    if (e.type === 'UNKNOWN_TOPIC_OR_PARTITION') return true;
  }
  return false;
}

/**
 * The commit watermark of one partition: the committable offset is the one after the longest
 * settled prefix of the messages, in offset order (infra/low-water-mark.ts: bounded by the
 * unsettled ones). A message at or below one already seen (a redelivery from the committed
 * offset) restarts the window: the previous entries belong to deliveries that a rebalance
 * handed back.
 */
export class OffsetWindow {
  #marks = new LowWaterMark<bigint>();
  #last: bigint | null = null;

  /** Adds a delivered message; returns the function that marks it settled. */
  add(offset: string): () => string | null {
    const value = BigInt(offset);
    if (this.#last !== null && value <= this.#last) this.#marks = new LowWaterMark();
    this.#last = value;
    const marks = this.#marks;
    const settle = marks.add(value);
    return () => {
      settle();
      return marks === this.#marks ? this.advance() : null;
    };
  }

  /** Drops the settled prefix; the last handled offset of it (to commit after), or null. */
  advance(): string | null {
    return this.#marks.advance()?.toString() ?? null;
  }

  get pending(): number {
    return this.#marks.size;
  }
}

export function createKafkaFeed(options: KafkaFeedOptions): EventFeed {
  const topic = checkTopic(options.topic);
  const heartbeatMs = options.heartbeatMs ?? 3_000;
  const topicRetryMs = options.topicRetryMs ?? 500;
  const makeConsumer =
    options.consumer ??
    ((group: string) => {
      if (!options.brokers) throw new Error('createKafkaFeed needs brokers or a consumer factory');
      // The relay creates the topic (one partition, its config); a broker's defaults would not do.
      return kafkaClient(options.brokers, `agent-identity-${group}`).consumer({ groupId: group, allowAutoTopicCreation: false });
    });
  const makeAdmin =
    options.admin ??
    (() => {
      if (!options.brokers) throw new Error('createKafkaFeed needs brokers or an admin factory for fromLatest');
      return kafkaClient(options.brokers, 'agent-identity-feed').admin();
    });

  /** Where a `fromLatest` subscription of `group` starts, by partition: those the group has no offset for. */
  async function startOffsets(group: string, since: number): Promise<Map<number, string>> {
    const admin = makeAdmin();
    await admin.connect();
    try {
      const [groupOffsets] = await admin.fetchOffsets({ groupId: group, topics: [topic] });
      const known = new Set((groupOffsets?.partitions ?? []).filter((p) => Number(p.offset) >= 0).map((p) => p.partition));
      const offsets = await admin.fetchTopicOffsetsByTimestamp(topic, since);
      return new Map(offsets.filter((o) => !known.has(o.partition)).map((o) => [o.partition, o.offset]));
    } finally {
      await admin.disconnect().catch(() => {});
    }
  }

  return {
    subscribe(feedOptions: FeedOptions, handler: FeedHandler): Subscription {
      const since = Date.now() - FROM_LATEST_MARGIN_MS;
      const group = feedOptions.group;
      const consumer = makeConsumer(group);
      const windows = new Map<number, OffsetWindow>();
      /** Positions handled here whose effects are not settled yet. */
      const unsettled = new Map<string, Promise<unknown>>();
      /** fromLatest: where each partition starts until this subscription commits on it. */
      let startAt = new Map<number, string>();
      const committed = new Set<number>();
      let last: string | null = feedOptions.after;
      let closed = false;
      let failed = false;
      /** The latest offset to commit per partition, not sent yet; one commit is in flight at a time and takes them all. */
      const toCommit = new Map<number, string>();
      let committing: Promise<void> | null = null;
      let starting: Promise<void> = Promise.resolve();
      let onClosing!: () => void;
      const closing = new Promise<void>((resolve) => (onClosing = resolve));
      let resolveDone!: () => void;
      let rejectDone!: (e: Error) => void;
      const done = new Promise<void>((resolve, reject) => ((resolveDone = resolve), (rejectDone = reject)));
      done.catch(() => {});

      const stop = async (error?: unknown) => {
        if (closed) return;
        closed = true;
        onClosing();
        // Still connecting or subscribing: disconnecting now would leave run() to start a live consumer.
        await starting;
        await committing;
        await consumer.disconnect().catch((err: unknown) => options.logger?.error({ err, group }, 'Kafka feed disconnect failed'));
        if (error !== undefined) rejectDone(error instanceof Error ? error : new Error(String(error)));
        else resolveDone();
      };

      /**
       * Commits after `lastOffset` on `partition`. Offsets settled while a commit is in flight
       * are coalesced: the next commit sends only the latest per partition (one round trip per
       * batch, not per event; a backlog of commits would grow without bound under load). The
       * latest, not the greatest: after a rebalance the window starts again lower.
       */
      const commit = (partition: number, lastOffset: string | null) => {
        if (lastOffset === null || closed) return;
        toCommit.set(partition, lastOffset);
        committing ??= Promise.resolve().then(sendCommits); // from the next tick: the offsets settled in this one go together
      };
      async function sendCommits(): Promise<void> {
        while (toCommit.size > 0) {
          const batch = [...toCommit];
          toCommit.clear();
          try {
            await consumer.commitOffsets(batch.map(([partition, offset]) => offsetCommit(topic, partition, offset)));
            for (const [partition] of batch) committed.add(partition);
          } catch (err) {
            // A commit refused during a rebalance is harmless: a later one (or the next owner) covers it.
            options.logger?.error({ err, group, partitions: batch.map(([partition]) => partition) }, 'Kafka offset commit failed');
          }
        }
        committing = null;
      }

      async function eachMessage(payload: { topic: string; partition: number; message: IncomingMessage; heartbeat(): Promise<void> }): Promise<void> {
        if (closed || failed) return;
        const { partition, message } = payload;
        let window = windows.get(partition);
        if (!window) windows.set(partition, (window = new OffsetWindow()));
        const settle = window.add(message.offset);
        const settleWith = (effects: Promise<unknown> | null) => {
          if (!effects) return commit(partition, settle());
          effects.then(
            () => commit(partition, settle()),
            () => {}, // held: the consumer reported it; a restart redelivers from the commit
          );
        };

        let event: RecordedEvent;
        try {
          event = fromMessage(message);
        } catch (err) {
          failed = true;
          void stop(err);
          return;
        }
        if (comparePositions(event.position, last) <= 0) {
          // Already handled here (or below the consumer's checkpoint): durable once its first delivery is.
          settleWith(unsettled.get(event.position) ?? null);
          return;
        }
        if (!matchesFilter(event, feedOptions.filter)) {
          last = event.position;
          settleWith(null);
          return;
        }
        const beat = setInterval(() => void payload.heartbeat().catch(() => {}), heartbeatMs);
        let result: void | Pending;
        try {
          result = await handler(event);
        } catch (err) {
          failed = true;
          void stop(err);
          return;
        } finally {
          clearInterval(beat);
        }
        last = event.position;
        if (result && result.settled) {
          const position = event.position;
          const effects = result.settled;
          unsettled.set(position, effects);
          // Kept when they fail: a redelivery (after a rebalance) must not count as settled and be committed past.
          effects.then(
            () => void unsettled.delete(position),
            () => {},
          );
          settleWith(effects);
        } else settleWith(null);
      }

      /** True when the subscription was closed within `ms`. */
      const closedWithin = (ms: number) =>
        new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(closed), ms);
          void closing.then(() => {
            clearTimeout(timer);
            resolve(true);
          });
        });

      /** Subscribes once the topic exists (a gateway may start before the worker's relay made it); false when closed meanwhile. */
      async function subscribeWhenTopicExists(): Promise<boolean> {
        let waitMs = topicRetryMs;
        for (let logged = false; ; logged = true) {
          try {
            await consumer.subscribe({ topics: [topic], fromBeginning: !feedOptions.fromLatest });
            return true;
          } catch (err) {
            if (!isUnknownTopic(err)) throw err;
            if (!logged) options.logger?.info({ topic, group }, 'Kafka topic not created yet (by the worker\'s relay): waiting for it');
            if (await closedWithin(waitMs)) return false;
            waitMs = Math.min(waitMs * 2, 10_000);
          }
        }
      }

      // kafkajs gave up on the consumer (a non-retriable error) and disconnected it: without
      // this, `done` would never settle and the process would go on without its events.
      consumer.on(consumer.events.CRASH, ({ payload }) => {
        if (payload.restart) return; // kafkajs restarts it (and logged the crash)
        failed = true;
        void stop(payload.error);
      });
      if (feedOptions.fromLatest) {
        consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
          for (const partition of payload.memberAssignment[topic] ?? []) {
            const offset = startAt.get(partition);
            if (offset !== undefined && !committed.has(partition)) consumer.seek({ topic, partition, offset });
          }
        });
      }

      starting = (async () => {
        await consumer.connect();
        if (closed || !(await subscribeWhenTopicExists())) return;
        if (feedOptions.fromLatest) startAt = await startOffsets(group, since);
        if (closed) return;
        await consumer.run({ autoCommit: false, eachMessage: (payload) => eachMessage(payload) });
        if (!closed) options.logger?.info({ topic, group, after: feedOptions.after }, 'Kafka feed started');
      })().catch((err: unknown) => {
        failed = true;
        void stop(err);
      });

      return {
        done,
        close() {
          void stop();
        },
      };
    },
  };
}
