/**
 * A plain consumer-group reader of the relay's topic, for the relay's contract test (the
 * service itself reads the topic through infra/kafka/feed.ts, the EventFeed port): events of
 * one stream arrive in order (one partition per key), the handler is awaited, and offsets
 * are committed after the handler, every `commitEvery` messages and at the end of each batch;
 * redeliveries this process already handled are skipped.
 */
import type { Consumer } from 'kafkajs';
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import { checkTopic, createRedeliveryFilter, fromMessage, offsetCommit } from '../../infra/kafka/messages.js';
import { kafkaClient } from '../../infra/kafka/relay.js';

export interface ConsumerLogger {
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface EventConsumerOptions {
  brokers: string[];
  topic: string;
  /** One group per projection/reactor: copies in the same group share the partitions. */
  groupId: string;
  handler: (event: RecordedEvent) => Promise<void>;
  /** Commit after this many handled messages within a batch. Default 100. */
  commitEvery?: number;
  logger?: ConsumerLogger;
}

export interface EventConsumer {
  readonly consumer: Consumer;
  stop(): Promise<void>;
}

export async function startEventConsumer(options: EventConsumerOptions): Promise<EventConsumer> {
  const topic = checkTopic(options.topic);
  const commitEvery = options.commitEvery ?? 100;
  // The relay creates the topic (one partition, its config); a broker's defaults would not do.
  const consumer = kafkaClient(options.brokers, `agent-identity-${options.groupId}`).consumer({ groupId: options.groupId, allowAutoTopicCreation: false });
  const redelivery = createRedeliveryFilter();
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      let handled: string | null = null;
      let sinceCommit = 0;
      const commit = async () => {
        if (handled === null || sinceCommit === 0) return;
        await consumer.commitOffsets([offsetCommit(batch.topic, batch.partition, handled)]);
        sinceCommit = 0;
      };
      for (const message of batch.messages) {
        // A rebalance took the partition away: stop; the new owner resumes from the commit.
        if (!isRunning() || isStale()) break;
        const event = fromMessage(message);
        if (redelivery.isNew(event)) {
          await options.handler(event);
          redelivery.remember(event);
        }
        resolveOffset(message.offset);
        handled = message.offset;
        sinceCommit++;
        if (sinceCommit >= commitEvery) await commit();
        await heartbeat();
      }
      await commit();
    },
  });
  options.logger?.info({ topic, groupId: options.groupId }, 'Kafka consumer started');
  return {
    consumer,
    async stop() {
      await consumer.disconnect();
    },
  };
}
