/**
 * `npm run worker` (STORE=cluster only): the process that WRITES the read models.
 *
 * It waits for the `projections` lease in MongoDB (so any number of copies can run: one is
 * active, the others stand by and take over within the lease ttl), then starts the runtime
 * without the HTTP gateway: the projection runner with the MongoDB read store in writer mode
 * (every commit fenced by the lease) fed from Kafka in consumer group `ais-projections`
 * (runtime role 'worker': platform.feed, offsets committed after the read-model commits),
 * the Kafka relay, and the contexts' background work
 * started with role 'worker' (`start('worker')`): the reactors whose effects must happen
 * once (outbound mail delivery runs ONLY here), never the listeners (inbound SMTP is the
 * gateways' job; SMTP_PORT is forced to 0 as well).
 *
 * It exits with status 1 when it loses the lease, when a projection fails or when the relay
 * fails: its supervisor (compose `restart: unless-stopped`) restarts it, and it resumes from
 * the checkpoints. SIGTERM/SIGINT: stop, flush, release the lease, exit 0.
 */
import type { MongoClient } from 'mongodb';
import pino from 'pino';
import { loadConfig, ConfigError, type Config } from '../infra/config.js';
import type { Runtime } from '../infra/runtime.js';
import type { HeldLease } from '../infra/mongodb/lease.js';

// Everything under DATA_DIR is the service's own: the event log, read models and keys are not
// for other local users (files 0600, directories 0700); the mailer opens up outbox/ itself.
process.umask(0o077);

let config: Config;
try {
  config = loadConfig(process.env);
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`configuration error: ${err.problems.join('; ')}\n`);
    process.exit(1);
  }
  throw err;
}
if (config.store !== 'cluster' || !config.cluster) {
  process.stderr.write('npm run worker needs STORE=cluster (embedded mode runs everything in `npm start`)\n');
  process.exit(1);
}
const cluster = config.cluster;
// No inbound SMTP here: the gateways listen.
config = { ...config, smtpPort: 0 };
const logger = pino({ level: config.logLevel, base: { role: 'worker' } });

// Set as the start gets them: a signal can come at any step (loading the code takes seconds;
// a standby waits for the lease as long as the active worker lives), and stops what there is.
let mongo: MongoClient | null = null;
let lease: HeldLease | null = null;
let runtime: Runtime | null = null;
let stopping = false;

async function shutdown(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    if (runtime) {
      for (const part of [...runtime.parts].reverse()) {
        await part.stop?.().catch((err: unknown) => logger.error({ err, context: part.name }, 'stop failed'));
      }
      await runtime.close().catch((err: unknown) => logger.error({ err }, 'shutdown failed'));
    }
    // Released at once, so a standby takes over without waiting for the ttl.
    await lease?.release();
    await mongo?.close().catch(() => {});
    if (code === 0) logger.info(runtime ? 'stopped: flushed' : 'stopped before running');
  }
  process.exit(code);
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    logger.info({ signal }, 'shutting down');
    void shutdown(0);
  });
}

// Loaded once the signals are handled (imported statically, they would load before).
const [{ MongoClient: Mongo }, { startRuntime }, { mongoDatabaseName, PROJECTIONS_LEASE, useWorkerRole, clusterRelay }, { acquireLease }, { newLeaseOwner }] = await Promise.all([
  import('mongodb'),
  import('../infra/runtime.js'),
  import('../infra/cluster.js'),
  import('../infra/mongodb/lease.js'),
  import('../infra/mongodb/read-store.js'),
]);
mongo = new Mongo(cluster.mongoUrl, { writeConcern: { w: 'majority' } });
const owner = newLeaseOwner('worker');

/** Once stopping, the start goes no further: shutdown() exits. */
const stopped = () => new Promise<never>(() => {});
// A step cut short by a stop (its client closed under it) is no failure.
const unlessStopping = (err: unknown): Promise<never> => (stopping ? stopped() : Promise.reject(err));
await mongo.connect().catch(async (err: unknown) => {
  if (stopping) return stopped();
  // One line naming the variable, as a start's configuration errors (not the driver's stack).
  logger.fatal({ err: { message: (err as Error)?.message } }, `MONGO_URL: cannot connect to MongoDB (${(err as Error)?.message ?? String(err)})`);
  process.exit(1);
});
const held = await acquireLease(mongo.db(mongoDatabaseName(cluster.mongoUrl)), PROJECTIONS_LEASE, owner, { logger }).catch(unlessStopping);
if (stopping) {
  await held.release().catch(() => {}); // taken while stopping: handed back at once
  await stopped();
}
lease = held;
useWorkerRole({ name: PROJECTIONS_LEASE, owner });

try {
  runtime = await startRuntime(config, { logger, serve: false });
  // runtime.role is 'worker' here (useWorkerRole above): reactors that must run once start.
  for (const part of runtime.parts) await part.start?.(runtime.role);
} catch (err) {
  if (stopping) await stopped();
  logger.fatal({ err }, 'worker failed to start');
  await lease.release();
  process.exit(1);
}
logger.info({ owner }, 'worker running: projections, reactors and the Kafka relay');

void lease.lost.then(() => {
  // Another worker took over (or MongoDB was unreachable past the ttl): our commits are
  // already fenced; exit without flushing so nothing more is attempted.
  logger.fatal({ owner }, 'lost the projections lease; exiting');
  process.exit(1);
});
runtime.runner.done.catch((err: unknown) => {
  logger.fatal({ err }, 'projection failed; exiting so a restart resumes from the checkpoint');
  process.exit(1);
});
clusterRelay()?.done.catch((err: unknown) => {
  logger.fatal({ err }, 'Kafka relay failed; exiting so a restart resumes from its checkpoint');
  process.exit(1);
});
