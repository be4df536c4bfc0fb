/**
 * The Kafka relay: publishes every event of the event store to one topic, keyed by stream
 * (see ./messages.ts), from a checkpoint kept in the read store (`kafka-relay`).
 *
 * - Idempotent producer (`idempotent: true`, one request in flight: no reordering and no
 *   duplicate on the producer's own retries), acks from all in-sync replicas (acks = -1).
 * - Batches: events are buffered while the previous send is in flight, then sent together;
 *   the checkpoint moves only after Kafka acknowledged the batch. A relay killed between
 *   the two republishes that batch on restart: delivery is AT LEAST ONCE, and consumers
 *   skip what they already handled (createRedeliveryFilter, or their own idempotency).
 * - Exactly one relay should run (the lease-holding worker); a second one would only add
 *   duplicates, never lose or reorder events of a stream.
 * - The topic is created with {@link RELAY_PARTITIONS} partition(s) and up to 3 replicas when
 *   it does not exist (an existing topic is used as it is; one with more partitions stops the
 *   relay with an error, one with fewer replicas than the cluster allows is warned about).
 */
import kafkajs, { Kafka, logLevel, type Admin, type ITopicConfig, type Producer, type ProducerConfig } from 'kafkajs';
import { comparePositions, type EventStore, type RecordedEvent, type Subscription } from '../ports/event-store.js';
import { checkTopic, toMessage, type OutgoingMessage } from './messages.js';

/**
 * Partitions of the relay's topic. ONE, so the topic's order is the log's order: projections
 * need the total order (one read-model document can combine events of several streams, and
 * each projection keeps one checkpoint, a global position), and the feed skips positions at
 * or below the last it handled. More partitions would need per-partition checkpoints in
 * every consumer. Messages stay keyed by stream (see ./messages.ts), so a later split keeps
 * the per-stream order.
 */
export const RELAY_PARTITIONS = 1;

/**
 * The largest event the topic takes: a JSON request body is at most 1 MiB, but an event may
 * carry more (a composed mail's HTML and its text alternative). Brokers default to ~1 MB.
 */
export const RELAY_MAX_MESSAGE_BYTES = 8 * 1024 * 1024;

/**
 * Bytes of one produce request: kafkajs puts a partition's messages in one record batch,
 * and the broker refuses a batch over the topic's limit as MESSAGE_TOO_LARGE (not retried),
 * so a backlog sent 500 at a time failed and failed again after every restart. Kept under a
 * broker's default limit, so even a topic made without our config takes the batches.
 */
export const RELAY_MAX_BATCH_BYTES = 900 * 1024;

/** Replicas of the relay's topic on a cluster of `brokers`: 3 (docs/DEPLOYMENT.md), or every broker of a smaller one. */
export function relayReplicationFactor(brokers: number): number {
  return Math.max(1, Math.min(3, brokers));
}

/**
 * The topic the relay creates when missing (kafkajs `admin.createTopics`), on a cluster of
 * `brokers`. Without a replication factor kafkajs asks for the broker's default (usually 1).
 * With acks=-1, min.insync.replicas one below the replicas lets a broker be down (or
 * restarting) while every acknowledged event is still on two.
 */
export function relayTopicSpec(topic: string, brokers: number): ITopicConfig & { numPartitions: number; replicationFactor: number } {
  const replicationFactor = relayReplicationFactor(brokers);
  return {
    topic: checkTopic(topic),
    numPartitions: RELAY_PARTITIONS,
    replicationFactor,
    configEntries: [
      { name: 'max.message.bytes', value: String(RELAY_MAX_MESSAGE_BYTES) },
      { name: 'min.insync.replicas', value: String(Math.max(1, replicationFactor - 1)) },
    ],
  };
}

/**
 * The relay's producer: idempotent, one request in flight, no topic auto-creation. Its own
 * retry: kafkajs warns that limiting an idempotent producer's retries (it would inherit the
 * client's 8) may invalidate its guarantees, and makes them unbounded when it picks them
 * itself; each wait stays capped by maxRetryTime (30 s). So a Kafka outage delays the relay
 * rather than failing it; a non-retriable error (MESSAGE_TOO_LARGE) still fails at once.
 */
export const RELAY_PRODUCER: ProducerConfig = {
  idempotent: true,
  maxInFlightRequests: 1,
  allowAutoTopicCreation: false,
  retry: { retries: Number.MAX_SAFE_INTEGER },
};

/** How many of `sizes` (bytes per message, in order) the next send takes: at least one, at most `maxCount`, within `maxBytes`. */
export function nextBatchSize(sizes: readonly number[], maxCount: number, maxBytes: number): number {
  let n = 0;
  let bytes = 0;
  while (n < sizes.length && n < maxCount && (n === 0 || bytes + sizes[n]! <= maxBytes)) bytes += sizes[n++]!;
  return n;
}

/** Bytes a message adds to a record batch (payload, key and headers; framing is small). */
const messageBytes = (m: OutgoingMessage) =>
  Buffer.byteLength(m.value) + Buffer.byteLength(m.key) + Object.entries(m.headers).reduce((n, [k, v]) => n + k.length + Buffer.byteLength(v) + 8, 0) + 64;

export interface RelayCheckpoints {
  get(): Promise<string | null>;
  set(position: string): Promise<void>;
}

export interface RelayLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface KafkaRelayOptions {
  brokers: string[];
  topic: string;
  events: EventStore;
  checkpoints: RelayCheckpoints;
  clientId?: string;
  /** Most events per send. Default 500. */
  maxBatch?: number;
  logger?: RelayLogger;
  /** How long stop() waits for the last sends (default STOP_FLUSH_MS). */
  stopFlushMs?: number;
  /** The client (default: one for `brokers`; the unit tests pass a fake). */
  kafka?: { admin(): RelayAdmin; producer(config: ProducerConfig): Pick<Producer, 'connect' | 'send' | 'disconnect'> };
}

/**
 * What stop() waits at most for the events buffered to be published: with Kafka away, sends
 * are retried without end and would hold a SIGTERM for good. Nothing is lost: the checkpoint
 * is only what Kafka acknowledged, and the next start publishes the rest from it.
 */
export const STOP_FLUSH_MS = 5_000;

export interface KafkaRelay {
  /** Position of the last event Kafka acknowledged, or null. */
  position(): string | null;
  /** Resolves once every event up to `position` is acknowledged by Kafka. */
  waitFor(position: string, timeoutMs?: number): Promise<void>;
  /** Settles when the relay stops: rejects when it failed (restart to resume from the checkpoint). */
  readonly done: Promise<void>;
  stop(): Promise<void>;
}

export function kafkaClient(brokers: string[], clientId = 'agent-identity'): Kafka {
  if (brokers.length === 0) throw new Error('KAFKA_BROKERS is empty');
  return new Kafka({ clientId, brokers, logLevel: logLevel.WARN, retry: { retries: 8 } });
}

/** What {@link ensureTopic} uses of a kafkajs Admin (the unit tests pass a fake). */
export type RelayAdmin = Pick<Admin, 'connect' | 'disconnect' | 'describeCluster' | 'createTopics' | 'fetchTopicMetadata' | 'describeConfigs'>;

/** Creates the topic ({@link relayTopicSpec}) unless it exists; checks an existing one. */
export async function ensureTopic(admin: RelayAdmin, topic: string, logger?: RelayLogger): Promise<void> {
  await admin.connect();
  try {
    const { brokers } = await admin.describeCluster();
    const created = await admin.createTopics({ topics: [relayTopicSpec(topic, brokers.length)], waitForLeaders: true });
    if (!created) {
      const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
      const metadata = topics[0]?.partitions ?? [];
      const partitions = metadata.length;
      if (partitions > RELAY_PARTITIONS) {
        // Projections need the log's total order; on more partitions they would skip events.
        logger?.error({ topic, partitions }, 'the relay topic has more than one partition');
        throw new Error(`Kafka topic "${topic}" has ${partitions} partitions; the relay needs ${RELAY_PARTITIONS} (total order for projections): recreate it (docs/DEPLOYMENT.md)`);
      }
      const replicas = Math.min(...metadata.map((p) => p.replicas.length));
      const wanted = relayReplicationFactor(brokers.length);
      if (replicas < wanted) {
        // Said, not changed (as below): reassigning replicas is the operator's call.
        logger?.warn(
          { topic, replicationFactor: replicas, wanted, brokers: brokers.length },
          'the relay topic has fewer replicas than the cluster allows: losing a broker may lose or stop events (docs/DEPLOYMENT.md)',
        );
      }
      // Made by someone else (a consumer's auto-creation, an operator): its message size
      // limit may be the broker's ~1 MB, which a large event would exceed. Said, not
      // changed: altering a topic's configuration is the operator's call.
      const described = await admin
        // kafkajs is CommonJS: its ConfigResourceTypes is no named ESM export.
        .describeConfigs({ resources: [{ type: kafkajs.ConfigResourceTypes.TOPIC, name: topic, configNames: ['max.message.bytes'] }], includeSynonyms: false })
        .catch(() => null);
      const limit = Number(described?.resources[0]?.configEntries.find((c) => c.configName === 'max.message.bytes')?.configValue ?? NaN);
      if (limit < RELAY_MAX_MESSAGE_BYTES) {
        logger?.error(
          { topic, maxMessageBytes: limit, wanted: RELAY_MAX_MESSAGE_BYTES },
          'the relay topic takes smaller messages than an event may be: set its max.message.bytes (docs/DEPLOYMENT.md)',
        );
      }
    }
  } finally {
    await admin.disconnect();
  }
}

export async function startKafkaRelay(options: KafkaRelayOptions): Promise<KafkaRelay> {
  const topic = checkTopic(options.topic);
  const maxBatch = options.maxBatch ?? 500;
  const kafka = options.kafka ?? kafkaClient(options.brokers, options.clientId ?? 'agent-identity-relay');
  await ensureTopic(kafka.admin(), topic, options.logger);
  const producer = kafka.producer(RELAY_PRODUCER);
  await producer.connect();

  let acknowledged = await options.checkpoints.get();
  let buffer: Array<{ message: OutgoingMessage; position: string; bytes: number }> = [];
  let sending: Promise<void> | null = null;
  let failure: Error | null = null;
  let stopped = false;
  const waiters = new Set<{ position: string; resolve(): void; reject(e: Error): void; timer?: NodeJS.Timeout }>();
  let resolveDone!: () => void;
  let rejectDone!: (e: Error) => void;
  const done = new Promise<void>((resolve, reject) => ((resolveDone = resolve), (rejectDone = reject)));
  done.catch(() => {});

  function fail(err: unknown): void {
    if (failure || stopped) return; // a send cut short by stop() is published after the restart
    failure = err instanceof Error ? err : new Error(String(err));
    options.logger?.error({ err: failure }, 'Kafka relay stopped; restart resumes from its checkpoint');
    subscription.close();
    for (const w of waiters) w.reject(failure);
    waiters.clear();
    rejectDone(failure);
  }

  async function sendLoop(): Promise<void> {
    while (buffer.length > 0 && !failure) {
      const batch = buffer.splice(0, nextBatchSize(buffer.map((b) => b.bytes), maxBatch, RELAY_MAX_BATCH_BYTES));
      await producer.send({ topic, acks: -1, messages: batch.map((b) => b.message) });
      const last = batch[batch.length - 1]!.position;
      await options.checkpoints.set(last);
      acknowledged = last;
      for (const w of waiters) {
        if (comparePositions(acknowledged, w.position) >= 0) {
          if (w.timer) clearTimeout(w.timer);
          waiters.delete(w);
          w.resolve();
        }
      }
    }
  }

  function kick(): Promise<void> {
    sending ??= sendLoop()
      .catch((err) => fail(err))
      .finally(() => {
        sending = null;
      });
    return sending;
  }

  const subscription: Subscription = options.events.subscribeAll({ after: acknowledged }, async (event: RecordedEvent) => {
    if (failure) throw failure;
    const message = toMessage(event);
    buffer.push({ message, position: event.position, bytes: messageBytes(message) });
    // Backpressure: the subscription waits while a full batch is pending.
    if (buffer.length >= maxBatch) await kick();
    else void kick();
  });
  subscription.done.catch((err) => fail(err));
  options.logger?.info({ topic, from: acknowledged }, 'Kafka relay started');

  return {
    position: () => acknowledged,
    done,
    waitFor(position, timeoutMs = 10_000) {
      if (failure) return Promise.reject(failure);
      if (comparePositions(acknowledged, position) >= 0) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const w: { position: string; resolve(): void; reject(e: Error): void; timer?: NodeJS.Timeout } = { position, resolve, reject };
        w.timer = setTimeout(() => {
          waiters.delete(w);
          reject(new Error(`Kafka relay did not reach ${position} within ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(w);
      });
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      subscription.close();
      // Publish what was buffered, for a while (see STOP_FLUSH_MS). The subscription's end is
      // inside the same bound: its handler may be waiting for a full batch to go out (Kafka
      // away: the producer retries without end), and a stop must not hang on it.
      let timer: NodeJS.Timeout | undefined;
      const flush = subscription.done.catch(() => {}).then(() => kick());
      const flushed = await Promise.race([flush.then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), options.stopFlushMs ?? STOP_FLUSH_MS)))]);
      clearTimeout(timer);
      if (!flushed) options.logger?.warn({ topic, acknowledged }, 'Kafka relay stopped before Kafka took its last events; the next start publishes them from its checkpoint');
      await producer.disconnect();
      if (!failure) resolveDone();
    },
  };
}
