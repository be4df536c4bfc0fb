/**
 * The composition root: the only place that picks adapters. It opens the ports (embedded
 * SQLite under DATA_DIR by default), builds every bounded context on them, starts the
 * projections, the HTTP gateway and the context's background workers (SMTP listener,
 * mail delivery, ...), and stops them in reverse order.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { chmodSync, existsSync, lstatSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { openDatabase, type Database } from './sqlite/driver.js';
import pino, { type Logger } from 'pino';
import type { Config } from './config.js';
import type { EventStore } from './ports/event-store.js';
import { eventStoreFeed, type EventFeed } from './ports/event-feed.js';
import type { ReadStore } from './ports/read-store.js';
import { loadKeyRing, recordIssuer, type KeyRing } from './keyring.js';
import { createDirectory, refusePartialDataDir, requireWritable, SERVICE_DIRS } from './data-dir.js';
import { openSqliteEventStore } from './sqlite/event-store.js';
import { openSqliteReadStore } from './sqlite/read-store.js';
import type { RateLimiter } from './ports/rate-limiter.js';
import { clusterRole, openClusterPorts } from './cluster.js';
import { createMemoryRateLimiter } from './memory/rate-limiter.js';
import { createMailer } from './mail/mailer.js';
import { createProjectionRunner, type ProjectionRunner } from '../projections/runner.js';
import type { Projection } from '../projections/projection.js';
import { createApp, type HttpModule, type RouteTable } from '../services/gateway/app.js';
import { createAuthenticator, type CredentialResolvers, type Authenticator } from '../services/gateway/auth.js';
import { systemRoutes } from '../services/gateway/system.js';
import { hasUnfinishedAnswers, serveHttpProtocol, refuseMalformedRequest, unfinishedAnswers } from '../services/gateway/protocol.js';
import { settledFor, type Platform } from '../services/kernel/platform.js';
import { createMetrics, type Metrics } from '../services/kernel/metrics.js';
import { createTokenService, type TokenService } from '../services/accounts/tokens.js';
import { createAccounts, type Accounts } from '../services/accounts/service.js';
import { accountRoutes } from '../services/accounts/routes.js';
import { usersProjection } from '../projections/users/index.js';
import { sessionsProjection } from '../projections/sessions/index.js';
import { accountMailContext } from '../services/accounts/mail.js';
import { identitiesContext } from '../services/identities/index.js';
import { keysContext } from '../services/keys/index.js';
import { billingContext } from '../services/billing/index.js';
import { mailContext } from '../services/mail/index.js';
import { smsContext } from '../services/sms/index.js';
import { eventsContext } from '../services/events/index.js';
import { vaultContext } from '../services/vault/index.js';
import { deviceContext } from '../services/device/index.js';
import { dashboardContext } from '../services/dashboard/index.js';

/**
 * What a process is for, passed to every context's `start(role)`:
 * - `all`: the one embedded process (STORE=embedded): everything runs, as always.
 * - `gateway`: a cluster gateway (any number of copies): per-process work only, i.e. what
 *   serves this process's clients (SMTP listener, SSE fan-out hub, device long-poll waiters).
 * - `worker`: the cluster worker holding the `projections` lease (one active copy):
 *   reactors whose effects must happen once (outbound mail delivery), no listeners.
 * A context starts a reactor with `role !== 'gateway'` and a listener with `role !== 'worker'`.
 */
export type ProcessRole = 'all' | 'gateway' | 'worker';

/** The role of this process for `config`: embedded → all; cluster → gateway or worker. */
export function processRole(config: Pick<Config, 'store'>): ProcessRole {
  if (config.store !== 'cluster') return 'all';
  return clusterRole().kind === 'worker' ? 'worker' : 'gateway';
}

/** What a bounded context hands to the composition root. */
export interface ContextParts {
  name: string;
  projections?: Projection[];
  module?: HttpModule;
  /** Credential resolvers this context owns (keys, identities, sessions). */
  resolvers?: Partial<CredentialResolvers>;
  /**
   * Background work started after the projections caught up (listeners, reactors), for
   * this process's {@link ProcessRole}. Contexts that ignore the role run it everywhere.
   */
  start?(role: ProcessRole): Promise<void>;
  stop?(): Promise<void>;
  /**
   * On close, once no request is in flight any more and before the stores close: work that
   * requests still in flight during {@link ContextParts.stop} could add to (the keys' uses).
   */
  drained?(): Promise<void>;
}

/** Shared services a context may use besides the ports. */
export interface Shared {
  platform: Platform;
  keys: KeyRing;
  tokens: TokenService;
  accounts: Accounts;
  /** Filled in before any request is served. */
  auth: Authenticator;
}

export type ContextFactory = (shared: Shared) => ContextParts | Promise<ContextParts>;

/** The contexts of the service, in dependency order. Each folder under services/ adds one line. */
async function contextFactories(): Promise<ContextFactory[]> {
  return [
    accountMailContext,
    identitiesContext,
    keysContext,
    billingContext,
    mailContext,
    smsContext,
    eventsContext,
    vaultContext,
    deviceContext,
    dashboardContext,
  ];
}

export interface Runtime {
  config: Config;
  logger: Logger;
  events: EventStore;
  reads: ReadStore;
  runner: ProjectionRunner;
  server: http.Server;
  /** Base URL the HTTP server listens on. */
  url: string;
  shared: Shared;
  parts: ContextParts[];
  /** What this process runs (the role its contexts were, or will be, started with). */
  role: ProcessRole;
  /** Every route the gateway serves. */
  routes: RouteTable;
  close(): Promise<void>;
}

export interface StartOptions {
  logger?: Logger;
  /** Extra contexts (tests use it to add probes). */
  extraContexts?: ContextFactory[];
  /**
   * false: no HTTP server and no background work (maintenance commands such as rebuild; the
   * cluster worker, which then calls `part.start(runtime.role)` itself).
   */
  serve?: boolean;
}

/**
 * Files under DATA_DIR are the service user's only (umask 077 in services/main.ts), but a
 * DATA_DIR written by an older version (or restored from a backup) may have databases
 * readable by others: the event log holds password hashes and SMS texts, the outbox reset links. Tightened at start.
 */
function tightenDataDir(dir: string, logger: Logger): void {
  const tightened: string[] = [];
  for (const name of readdirSync(dir)) {
    const wanted = /\.sqlite(-wal|-shm|-journal)?$/.test(name) || name === 'service.lock' ? 0o600 : SERVICE_DIRS.includes(name) ? 0o700 : null;
    if (wanted === null) continue;
    const file = path.join(dir, name);
    try {
      const info = lstatSync(file); // a symlink is not followed (nor changed): it is not ours
      if (!(info.isFile() || info.isDirectory()) || (info.mode & 0o077) === 0) continue;
      chmodSync(file, wanted);
      tightened.push(name);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err; // gone meanwhile (a journal): nothing to tighten
    }
  }
  if (tightened.length) logger.warn({ dataDir: dir, files: tightened }, 'DATA_DIR files were readable by other users: made private');
}

/** How long a shutdown waits for the read models to take its final writes (then the next start does). */
const SHUTDOWN_CATCH_UP_MS = 5_000;

/** This process's DATA_DIR locks (a runtime dropped without close, as a test's simulated crash, hands its lock over). */
const dataDirLocks = new Map<string, Database>();

/**
 * One embedded process per DATA_DIR: two would both run the projections over the same read
 * models (counters applied twice). `DATA_DIR/service.lock` is a SQLite file held in
 * EXCLUSIVE locking mode: the kernel lets go of it when the process ends however it ends
 * (kill -9 included, even while the dead process waits to be reaped), so nothing is ever
 * stale. A start while another process holds it waits up to the 5 s busy timeout (a killed
 * one may still be exiting), then fails. Returns the release.
 */
function lockDataDir(dir: string): () => void {
  const file = path.join(dir, 'service.lock');
  dataDirLocks.get(file)?.close();
  dataDirLocks.delete(file);
  for (let attempt = 0; ; attempt++) {
    const db = openDatabase(file);
    try {
      db.exec('PRAGMA locking_mode = EXCLUSIVE');
      db.exec(`BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS holder (pid INTEGER); DELETE FROM holder; INSERT INTO holder VALUES (${process.pid}); COMMIT`);
      dataDirLocks.set(file, db);
      return () => {
        if (dataDirLocks.get(file) !== db) return;
        dataDirLocks.delete(file);
        db.close();
      };
    } catch (err) {
      db.close();
      const text = `${(err as { code?: string }).code ?? ''} ${(err as Error).message}`;
      // A lock file from an older version (a pid in plain text): replaced once, unless
      // that process is still running (it still uses this DATA_DIR).
      if (attempt === 0 && /NOTADB|not a database/i.test(text)) {
        const pid = Number(readFileSync(file, 'utf8').trim());
        if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && processAlive(pid)) {
          throw Object.assign(new Error(`${path.resolve(dir)} is in use by another process (pid ${pid}, an older version); stop it first`), { path: dir, code: 'EBUSY' });
        }
        rmSync(file, { force: true });
        continue;
      }
      if (/BUSY|locked/i.test(text)) throw Object.assign(new Error(`${path.resolve(dir)} is in use by another process; stop it first`), { path: dir, code: 'EBUSY' });
      throw err;
    }
  }
}

/** Whether `pid` is a running Node process (after a reboot the old pid may be anything else). */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false; // EPERM: exists, another user's
  }
  try {
    return /node/i.test(readFileSync(`/proc/${pid}/cmdline`, 'utf8'));
  } catch {
    return true; // no /proc here: trust kill()
  }
}

/** The event store as the contexts see it: what they append is counted (ais_events_appended_total). */
function countingAppends(store: EventStore, metrics: Metrics): EventStore {
  return {
    append: (stream, list, options) =>
      store.append(stream, list, options).then((result) => {
        metrics.eventsAppended(list);
        return result;
      }),
    readStream: (stream, options) => store.readStream(stream, options),
    readAll: (options) => store.readAll(options),
    subscribeAll: (options, handler) => store.subscribeAll(options, handler),
    headPosition: () => store.headPosition(),
    close: () => store.close(),
  };
}

/**
 * How far the log and each read model are (positions, read at scrape time): a projection
 * whose position stays behind the head is lagging, one that stops moving while the head
 * moves has failed. The runner's processed positions, not the stored checkpoints (a
 * projection with nothing to write saves its checkpoint only every thousand events).
 */
function readModelGauges(metrics: Metrics, events: EventStore, runner: ProjectionRunner): void {
  const num = (position: string | null) => (position === null ? 0 : Number(position));
  metrics.gauge('event_store_head_position', "The event log's last position (0: empty).", [], async () => num(await events.headPosition()));
  metrics.gauge('projection_position', 'The last position each read model has processed.', ['projection'], () =>
    runner.positions().map((p) => ({ labels: { projection: p.projection }, value: num(p.position) })),
  );
}

export async function startRuntime(config: Config, options: StartOptions = {}): Promise<Runtime> {
  const logger = options.logger ?? pino({ level: config.logLevel, redact: ['req.headers.authorization', 'req.headers.cookie', '*.password', '*.key', '*.token'] });
  createDirectory(config.dataDir);
  requireWritable(config.dataDir);
  refusePartialDataDir(config.dataDir, config.store !== 'cluster');
  // Cluster processes share DATA_DIR (key ring, blobs) by design; the embedded store is one process's.
  const unlock = config.store === 'cluster' ? () => {} : lockDataDir(config.dataDir);
  tightenDataDir(config.dataDir, logger);
  const keys = loadKeyRing(config.dataDir);

  const role = processRole(config);
  // Embedded: in-memory windows (one process). Cluster: windows shared in MongoDB.
  const { events, reads, limiter, closeLimiter, feed: clusterFeed }: { events: EventStore; reads: ReadStore; limiter: RateLimiter; closeLimiter: () => void; feed?: EventFeed } =
    config.store === 'cluster'
      ? { ...(await openClusterPorts(config, logger)), closeLimiter: () => {} }
      : await (async () => {
          const memory = createMemoryRateLimiter();
          return {
            events: await openSqliteEventStore({ file: path.join(config.dataDir, 'events.sqlite'), logger }),
            reads: openSqliteReadStore({ file: path.join(config.dataDir, 'read-models.sqlite') }),
            limiter: memory,
            closeLimiter: () => memory.close(),
          };
        })();
  const mailer = createMailer({ relayUrl: config.smtpRelayUrl, outboxDir: path.join(config.dataDir, 'outbox'), domain: config.mailDomain, dkim: config.dkim ?? undefined });
  // Told at start, not at the first mail: mail still waits and is retried while the relay is away.
  if (config.smtpRelayUrl && role !== 'gateway') {
    const relay = new URL(config.smtpRelayUrl);
    void mailer.verify().catch((err: Error) => logger.warn({ relay: `${relay.protocol}//${relay.host}`, err: err.message }, 'SMTP_RELAY_URL cannot be used now; outbound mail waits and is retried'));
  }
  for (const warning of config.warnings) logger.warn(warning);

  // The runner is created after the projections are known; progress forwards to it.
  let runner: ProjectionRunner | null = null;
  // Embedded: the event store's subscriptions. Cluster: Kafka consumer groups.
  const feed = clusterFeed ?? eventStoreFeed(events);
  // Counted only when someone can read them (METRICS_TOKEN): otherwise no-ops on the hot paths.
  const metrics = createMetrics({ enabled: config.metricsToken !== null });
  const platform: Platform = {
    config,
    logger,
    events: config.metricsToken !== null ? countingAppends(events, metrics) : events,
    feed,
    reads,
    mailer,
    limiter,
    metrics,
    progress: { waitFor: (position, timeoutMs) => runner!.waitFor(position, timeoutMs) },
    // Taken before this process serves anything: every event up to here is an earlier process's.
    settled: settledFor(config.store, await events.headPosition()),
  };

  const tokens = createTokenService({ keys, issuer: config.publicUrl, accessTtl: config.accessTokenTtl, refreshTtl: config.refreshTokenTtl, events: platform.events });
  const accounts = createAccounts(platform, tokens, keys.hmacKey);
  const shared: Shared = { platform, keys, tokens, accounts, auth: undefined as unknown as Authenticator };

  const parts: ContextParts[] = [];
  for (const factory of [...(await contextFactories()), ...(options.extraContexts ?? [])]) parts.push(await factory(shared));

  const resolvers: CredentialResolvers = {
    verifyAccessToken: async (token) => {
      const c = await tokens.verify(token, 'access');
      return { userPk: c.userPk, identity: c.identity, sessionId: c.sessionId, expiresAt: c.exp * 1000 };
    },
    // The keys and identities contexts replace these two; alone, no key or identity exists.
    findKey: async () => null,
    findIdentity: async () => null,
    verifyPassword: async (login, password, ip) => (await accounts.checkBasic(login, password, ip))?.pk ?? null,
    findSession: async (cookie) => {
      const claims = await tokens.verify(cookie, 'refresh').catch(() => null);
      if (!claims) return null;
      const s = await accounts.liveSession(claims.sessionId);
      return s && s.kind === 'cookie' && s.tokenId === claims.jti ? { userPk: s.userPk, sessionId: s.id } : null;
    },
    userExists: async (pk) => (await accounts.findUser(pk)) !== null,
  };
  for (const p of parts) Object.assign(resolvers, p.resolvers ?? {});
  shared.auth = createAuthenticator(resolvers, { publicUrl: config.publicUrl });

  const projections = [usersProjection, sessionsProjection, ...parts.flatMap((p) => p.projections ?? [])];
  // The cluster worker (the only writer) follows Kafka in group ais-projections; gateways
  // (followers) and the embedded process follow the event store.
  runner = createProjectionRunner({ eventStore: events, readStore: reads, projections, logger, ...(role === 'worker' ? { feed } : {}) });
  await runner.start();
  readModelGauges(metrics, events, runner);
  /** Resolves once the read models hold every event appended so far. */
  const caughtUp = async (timeoutMs: number) => {
    const head = await events.headPosition();
    if (head) await runner!.waitFor(head, timeoutMs);
  };
  await caughtUp(600_000);

  const findIdentity = (id: string) => resolvers.findIdentity(id);
  const modules: HttpModule[] = [
    systemRoutes({ metrics, metricsToken: config.metricsToken, limiter, principal: (ctx) => shared.auth.principal(ctx) }),
    accountRoutes({ accounts, tokens, auth: shared.auth, findIdentity, jwks: keys.jwks, publicUrl: config.publicUrl }),
    ...parts.flatMap((p) => (p.module ? [p.module] : [])),
  ];
  const app = createApp({ logger, modules, trustProxy: config.trustProxy, metrics });

  const handle = app.callback();
  // Node's own Host check answers an empty 400; this one answers in the error shape. The
  // request and header timeouts below are checked every 2 s (Node's default, 30 s, let a
  // 20 s header timeout run to 50 s).
  const server = http.createServer({ requireHostHeader: false, connectionsCheckingInterval: 2_000 }, (req, res) => (refuseMalformedRequest(req, res) ? undefined : handle(req, res)));
  serveHttpProtocol(server);
  // Once draining, every answer not sent yet says `Connection: close` (those under way, from
  // protocol.ts's count, and each new one), so a client sends its next request on a new
  // connection (refused: it retries elsewhere or later) instead of on this one, where it could
  // be cut unanswered.
  let draining = false;
  const closeAfter = (res: http.ServerResponse) => {
    if (!res.headersSent) res.setHeader('Connection', 'close');
  };
  // A request refused below Koa (refuseMalformedRequest) was answered before this listener runs.
  server.on('request', (_req: http.IncomingMessage, res: http.ServerResponse) => draining && closeAfter(res));
  const connections = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    connections.add(socket);
    socket.once('close', () => connections.delete(socket));
  });
  const drain = () => {
    draining = true;
    for (const socket of connections) for (const res of unfinishedAnswers(socket)) closeAfter(res);
  };
  // Idle: no request in progress (so a shutdown closes every other connection at once: Node's
  // closeIdleConnections leaves one that has not sent a request yet), and the last answer
  // handed to the kernel (a large answer to a slow reader may still sit in the socket's buffer
  // after its request is over; the kernel delivers what it holds after the close).
  const closeIdle = () => {
    for (const socket of connections) if (!hasUnfinishedAnswers(socket) && socket.writableLength === 0) socket.destroy();
  };
  if (options.serve === false) {
    return { config, logger, events, reads, runner, server, url: '', shared, parts, role, routes: app.routeTable, close: async () => {
      await runner!.stop();
      await events.close();
      await reads.close();
      await mailer.close();
      closeLimiter();
      unlock();
    } };
  }
  for (const p of parts) await p.start?.(role);

  server.requestTimeout = 120_000; // receiving a request; long-lived responses (SSE) are not limited by it
  server.headersTimeout = 20_000;
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, config.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const url = `http://${address.address.includes(':') ? `[${address.address}]` : address.address}:${address.port}`;
  // Only a process that signs tokens says which address it signs them for (a rebuild or a
  // worker started without the gateway's PUBLIC_URL rewrote it, and warned twice of a change),
  // and only once it serves: a start that fails (a port in use) leaves the record as it was.
  const formerIssuer = recordIssuer(config.dataDir, config.publicUrl);
  if (formerIssuer) logger.warn({ was: formerIssuer, now: config.publicUrl }, 'PUBLIC_URL changed: tokens signed for the old address are refused, so every client signs in again');
  logger.info({ url, publicUrl: config.publicUrl, dataDir: config.dataDir, role }, 'gateway listening');

  let closing: Promise<void> | null = null;
  async function close(): Promise<void> {
    closing ??= (async () => {
      // Stop accepting; end the long-lived responses (the parts end SSE streams and answer
      // long polls); let every request in flight finish with its normal answer, closing
      // keep-alive connections as they fall idle; cut what is still open after 5 s.
      // Node's close() also destroys the connections it deems idle, among them one whose last
      // answer is written but still buffered for a slow reader: closeIdle below decides instead.
      server.closeIdleConnections = () => undefined;
      const drained = new Promise<void>((resolve) => server.close(() => resolve()));
      drain();
      closeIdle();
      for (const p of [...parts].reverse()) await p.stop?.().catch((err) => logger.error({ err, context: p.name }, 'stop failed'));
      const idle = setInterval(closeIdle, 20);
      const force = setTimeout(() => server.closeAllConnections(), 5_000);
      await drained;
      clearInterval(idle);
      clearTimeout(force);
      for (const p of parts) await p.drained?.().catch((err) => logger.error({ err, context: p.name }, 'final writes failed'));
      // The final writes reach the read models too (held key uses): a stopped service's read
      // models are those of its whole log, not behind it until the next start catches up.
      // (A cluster gateway projects nothing: the worker takes them whenever it runs.)
      if (role !== 'gateway') await caughtUp(SHUTDOWN_CATCH_UP_MS).catch((err) => logger.warn({ err }, 'read models not caught up with the log at shutdown: the next start does it'));
      await runner!.stop();
      await events.close();
      await reads.close();
      await mailer.close();
      closeLimiter();
      unlock();
    })();
    return closing;
  }

  return { config, logger, events, reads, runner, server, url, shared, parts, role, routes: app.routeTable, close };
}
