/**
 * The cluster mode's ports (STORE=cluster): events on EventStoreDB, read models and shared
 * rate-limit windows on MongoDB, the event stream relayed to Kafka. infra/runtime.ts calls openClusterPorts instead of
 * opening the SQLite files; everything above the ports is the same code as embedded.
 *
 * Processes (docs/DEPLOYMENT.md):
 * - gateway (`npm start`, any number): read store in FOLLOWER mode: its projection runner
 *   never writes; its commits wait for the worker's checkpoints, so read-your-writes holds
 *   across processes.
 * - worker (`npm run worker`, services/worker.ts; one active, others on standby): holds the
 *   `projections` lease in MongoDB, writes the read models (WRITER mode, fenced by the lease)
 *   and runs the Kafka relay. It declares itself with {@link useWorkerRole} before starting.
 *
 * Every process gets the Kafka EventFeed (infra/kafka/feed.ts) on the relay's topic: the
 * worker's projections and mail delivery consume it in their consumer groups, each
 * gateway's SSE hub in a group of its own.
 */
import type { Logger } from 'pino';
import type { Config } from './config.js';
import type { EventStore } from './ports/event-store.js';
import type { ReadStore } from './ports/read-store.js';
import type { RateLimiter } from './ports/rate-limiter.js';
import type { EventFeed } from './ports/event-feed.js';
// The drivers load only in cluster mode (embedded start-up does not pay for them).
import type { KafkaRelay } from './kafka/relay.js';

export type ClusterRole = { kind: 'gateway' } | { kind: 'worker'; lease: { name: string; owner: string } };

let role: ClusterRole = { kind: 'gateway' };

/** Called by services/worker.ts once it holds the lease, before it starts the runtime. */
export function useWorkerRole(lease: { name: string; owner: string }): void {
  role = { kind: 'worker', lease };
}

export function clusterRole(): ClusterRole {
  return role;
}

let openedRelay: KafkaRelay | null = null;

/** The Kafka relay this process runs (the worker's), or null. */
export function clusterRelay(): KafkaRelay | null {
  return openedRelay;
}

/** The lease that makes one worker the writer of read models and the Kafka relay. */
export const PROJECTIONS_LEASE = 'projections';
/** Read-store checkpoint of the Kafka relay. */
export const RELAY_CHECKPOINT = 'kafka-relay';

export interface ClusterPorts {
  events: EventStore;
  reads: ReadStore;
  /** Rate-limit windows shared by every gateway (MongoDB collection `rate_limits`). */
  limiter: RateLimiter;
  /** The Kafka relay (worker only). */
  relay: KafkaRelay | null;
  /** The log as Kafka consumer groups (every process). */
  feed: EventFeed;
  /** Closes everything (the runtime closes `events` and `reads` itself; either is fine). */
  close(): Promise<void>;
}

/** The MongoDB database named in the URL's path, else `agent_identity`. */
export function mongoDatabaseName(url: string): string {
  const match = /^mongodb(?:\+srv)?:\/\/[^/?]+\/([^?]*)/.exec(url);
  const name = match?.[1] ? decodeURIComponent(match[1]) : '';
  return name || 'agent_identity';
}

export async function openClusterPorts(config: Config, logger: Logger): Promise<ClusterPorts> {
  const cluster = config.cluster;
  if (!cluster) throw new Error('STORE=cluster needs EVENTSTORE_URL, MONGO_URL and KAFKA_BROKERS');
  const current = role;
  const [{ openEventStoreDb }, { openMongoReadStore }, { createMongoRateLimiter }, { startKafkaRelay }, { DEFAULT_TOPIC }, { createKafkaFeed }] = await Promise.all([
    import('./eventstoredb/event-store.js'),
    import('./mongodb/read-store.js'),
    import('./mongodb/rate-limiter.js'),
    import('./kafka/relay.js'),
    import('./kafka/messages.js'),
    import('./kafka/feed.js'),
  ]);
  const events = await openEventStoreDb({ url: cluster.eventStoreUrl, logger });
  let reads: ReadStore;
  let limiter: RateLimiter;
  try {
    const mongo = await openMongoReadStore({
      url: cluster.mongoUrl,
      database: mongoDatabaseName(cluster.mongoUrl),
      mode: current.kind === 'worker' ? 'writer' : 'follower',
      ...(current.kind === 'worker' ? { lease: current.lease } : {}),
      logger,
    });
    reads = mongo;
    // Same client and database as the read models (its own reserved collection).
    limiter = await createMongoRateLimiter(mongo.db).catch(async (err: unknown) => {
      await mongo.close();
      throw err;
    });
  } catch (err) {
    await events.close();
    throw err;
  }

  let relay: KafkaRelay | null = null;
  if (current.kind === 'worker') {
    try {
      relay = await startKafkaRelay({
        brokers: cluster.kafkaBrokers,
        topic: DEFAULT_TOPIC,
        events,
        checkpoints: { get: () => reads.getCheckpoint(RELAY_CHECKPOINT), set: (p) => reads.commit(RELAY_CHECKPOINT, p, []) },
        logger,
      });
      relay.done.catch(() => {}); // logged by the relay; the worker watches it
      openedRelay = relay;
    } catch (err) {
      await Promise.allSettled([events.close(), reads.close()]);
      throw err;
    }
  }
  logger.info({ role: current.kind, database: mongoDatabaseName(cluster.mongoUrl) }, 'cluster ports open');

  // The relay reads the event store and checkpoints in the read store: it stops first.
  let relayStopped: Promise<void> | null = null;
  const stopRelay = () => (relayStopped ??= relay ? relay.stop().catch((err) => logger.error({ err }, 'Kafka relay stop failed')) : Promise.resolve());
  const wrappedEvents: EventStore = {
    append: (s, e, o) => events.append(s, e, o),
    readStream: (s, o) => events.readStream(s, o),
    readAll: (o) => events.readAll(o),
    subscribeAll: (o, h) => events.subscribeAll(o, h),
    headPosition: () => events.headPosition(),
    close: async () => {
      await stopRelay();
      await events.close();
    },
  };
  const originalReadsClose = reads.close.bind(reads);
  reads.close = async () => {
    await stopRelay();
    await originalReadsClose();
  };
  return {
    events: wrappedEvents,
    reads,
    limiter,
    relay,
    feed: createKafkaFeed({ brokers: cluster.kafkaBrokers, topic: DEFAULT_TOPIC, logger }),
    async close() {
      await stopRelay();
      await Promise.allSettled([events.close(), originalReadsClose()]);
    },
  };
}
