/**
 * The EventFeed contract against Kafka, when KAFKA_BROKERS is set: events appended to an
 * in-memory event store reach a fresh topic through the relay, and the Kafka feed consumes
 * them in consumer groups. Without KAFKA_BROKERS, one test says so and passes.
 */
import { randomUUID } from 'node:crypto';
import { startKafkaRelay } from '../../infra/kafka/relay.js';
import { createKafkaFeed } from '../../infra/kafka/feed.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';
import { eventFeedContract } from './event-feed.contract.js';

const brokers = process.env.KAFKA_BROKERS?.split(',').map((b) => b.trim()).filter(Boolean);

if (brokers && brokers.length > 0) {
  eventFeedContract(
    'Kafka (KAFKA_BROKERS)',
    async () => {
      const topic = `feed-test-${randomUUID().slice(0, 8)}`;
      const store = createMemoryEventStore();
      let checkpoint: string | null = null;
      const relay = await startKafkaRelay({
        brokers,
        topic,
        events: store,
        checkpoints: { get: async () => checkpoint, set: async (p) => void (checkpoint = p) },
        maxBatch: 10,
      });
      return {
        feed: createKafkaFeed({ brokers, topic }),
        store,
        cleanup: async () => {
          await relay.stop();
          await store.close();
        },
      };
    },
    60_000,
  );
} else {
  describe('EventFeed contract: Kafka', () => {
    it('is skipped without KAFKA_BROKERS', () => {
      console.log('SKIPPED: Kafka event feed (set KAFKA_BROKERS to run)');
      expect(brokers?.length ?? 0).toBe(0);
    });
  });
}
