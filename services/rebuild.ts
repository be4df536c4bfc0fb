/**
 * `npm run rebuild [projection ...]`: drops read models and rebuilds them from position 0
 * of the event log. All projections when none is named. Stop the service first (the
 * embedded store has one writer per DATA_DIR; in the cluster deployment, stop the worker:
 * the rebuild takes the projections lease it holds and writes as the worker would).
 */
import path from 'node:path';
import { MongoClient } from 'mongodb';
import { loadConfig, ConfigError } from '../infra/config.js';
import { requireEventLog, setAsideUnreadable } from '../infra/data-dir.js';
import { startRuntime } from '../infra/runtime.js';
import { PROJECTIONS_LEASE, mongoDatabaseName, useWorkerRole } from '../infra/cluster.js';
import { acquireLease, type HeldLease } from '../infra/mongodb/lease.js';
import { newLeaseOwner } from '../infra/mongodb/read-store.js';

// What it writes (the read models: password hashes among them) is the service user's only,
// whatever the shell's umask, as `npm start` makes DATA_DIR (services/main.ts).
process.umask(0o077);

/** Longer than the lease's time to live: a worker stopped just before has let go of it by then. */
const LEASE_WAIT_MS = 30_000;

let mongo: MongoClient | null = null;
let lease: HeldLease | null = null;
try {
  const config = loadConfig(process.env);
  if (config.store === 'cluster' && config.cluster) {
    // Read models are written by the lease holder only (gateways follow): take its place.
    mongo = new MongoClient(config.cluster.mongoUrl, { writeConcern: { w: 'majority' } });
    await mongo.connect();
    const owner = newLeaseOwner('rebuild');
    const gaveUp = AbortSignal.timeout(LEASE_WAIT_MS);
    lease = await acquireLease(mongo.db(mongoDatabaseName(config.cluster.mongoUrl)), PROJECTIONS_LEASE, owner, { signal: gaveUp }).catch((err: unknown) => {
      throw gaveUp.aborted ? new Error('a worker holds the projections lease: stop `npm run worker` first, then rebuild') : err;
    });
    useWorkerRole({ name: PROJECTIONS_LEASE, owner });
  }
  // Embedded: a DATA_DIR without an event log is a mistyped one (rebuilding would make a new, empty service there).
  if (config.store !== 'cluster') requireEventLog(config.dataDir, 'rebuild from');
  // A read-model file SQLite cannot read (the start refuses it, pointing here) is set aside.
  const setAside = config.store !== 'cluster' ? setAsideUnreadable(path.join(config.dataDir, 'read-models.sqlite')) : null;
  const started = Date.now();
  const runtime = await startRuntime(config, { serve: false });
  const names = process.argv.slice(2);
  // The start made every read model anew in the new file already (no checkpoints in it).
  if (setAside) runtime.logger.warn({ file: setAside }, 'the read models could not be read: set aside (delete it once you no longer need it) and all made again from the event log');
  else await runtime.runner.rebuild(names.length ? names : undefined);
  runtime.logger.info({ projections: names.length && !setAside ? names : 'all', ms: Date.now() - started }, 'read models rebuilt');
  await runtime.close();
  await lease?.release();
  await mongo?.close();
} catch (err) {
  const busy = (err as NodeJS.ErrnoException).code === 'EBUSY' ? 'DATA_DIR: ' : ''; // the service runs on it
  process.stderr.write(`rebuild failed: ${busy}${err instanceof ConfigError ? err.problems.join('; ') : (err as Error).message}\n`);
  await lease?.release().catch(() => {});
  process.exit(1);
}
