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
 *   settled message is committed.
 */
import type { Consumer } from 'kafkajs';
import { comparePositions, type RecordedEvent, type Subscription } from '../ports/event-store.js';
import { matchesFilter, type EventFeed, type FeedHandler, type FeedOptions, type Pending } from '../ports/event-feed.js';
import { checkTopic, fromMessage, offsetCommit, type IncomingMessage } from './messages.js';
import { kafkaClient } from './relay.js';
import { LowWaterMark } from '../low-water-mark.js';

/** What the feed uses of a kafkajs Consumer (the fake in the unit tests implements this). */
export type FeedConsumer = Pick<Consumer, 'connect' | 'subscribe' | 'run' | 'commitOffsets' | 'disconnect'>;

export interface FeedLogger {
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface KafkaFeedOptions {
  topic: string;
  /** Creates the consumer of a group (default: kafkajs on `brokers`). */
  consumer?: (group: string) => FeedConsumer;
  brokers?: string[];
  /** Heartbeat period while a handler runs. Default 3000 ms (kafkajs' heartbeat interval). */
  heartbeatMs?: number;
  logger?: FeedLogger;
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
  const makeConsumer =
    options.consumer ??
    ((group: string) => {
      if (!options.brokers) throw new Error('createKafkaFeed needs brokers or a consumer factory');
      return kafkaClient(options.brokers, `agent-identity-${group}`).consumer({ groupId: group });
    });

  return {
    subscribe(feedOptions: FeedOptions, handler: FeedHandler): Subscription {
      const consumer = makeConsumer(feedOptions.group);
      const windows = new Map<number, OffsetWindow>();
      /** Positions handled here whose effects are not settled yet. */
      const unsettled = new Map<string, Promise<unknown>>();
      let last: string | null = feedOptions.after;
      let closed = false;
      let failed = false;
      let commits: Promise<void> = Promise.resolve();
      let resolveDone!: () => void;
      let rejectDone!: (e: Error) => void;
      const done = new Promise<void>((resolve, reject) => ((resolveDone = resolve), (rejectDone = reject)));
      done.catch(() => {});

      const stop = async (error?: unknown) => {
        if (closed) return;
        closed = true;
        await commits;
        await consumer.disconnect().catch((err: unknown) => options.logger?.error({ err, group: feedOptions.group }, 'Kafka feed disconnect failed'));
        if (error !== undefined) rejectDone(error instanceof Error ? error : new Error(String(error)));
        else resolveDone();
      };

      const commit = (partition: number, lastOffset: string | null) => {
        if (lastOffset === null || closed) return;
        commits = commits
          .then(() => consumer.commitOffsets([offsetCommit(topic, partition, lastOffset)]))
          // A commit refused during a rebalance is harmless: a later one (or the next owner) covers it.
          .catch((err: unknown) => options.logger?.error({ err, group: feedOptions.group, partition }, 'Kafka offset commit failed'));
      };

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
          const forget = () => void unsettled.delete(position);
          effects.then(forget, forget);
          settleWith(effects);
        } else settleWith(null);
      }

      void (async () => {
        await consumer.connect();
        await consumer.subscribe({ topics: [topic], fromBeginning: !feedOptions.fromLatest });
        await consumer.run({ autoCommit: false, eachMessage: (payload) => eachMessage(payload) });
        options.logger?.info({ topic, group: feedOptions.group, after: feedOptions.after }, 'Kafka feed started');
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
