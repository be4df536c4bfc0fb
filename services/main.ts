/**
 * `npm start`: the whole service in one process (gateway, SMTP listener, projections,
 * mailer) on the embedded store. SIGTERM/SIGINT: stop accepting, drain, flush, exit 0.
 */
import path from 'node:path';
import { loadConfig, ConfigError, type Config } from '../infra/config.js';
import type { Runtime } from '../infra/runtime.js';

// Everything under DATA_DIR is the service's own: the event log, read models and keys are not
// for other local users (files 0600, directories 0700); the mailer opens up outbox/ itself.
process.umask(0o077);

let config;
try {
  config = loadConfig(process.env);
  // Any free port (0) serves tests that start the runtime in-process and read the port it
  // took; a service started here would name port 0 in every link (PUBLIC_URL's default).
  if (config.port === 0) throw new ConfigError(['PORT must be 1 to 65535 for npm start (0, any free port, leaves the links it makes naming no reachable port)']);
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`configuration error: ${err.problems.join('; ')}\n`);
    process.exit(1);
  }
  throw err;
}

/** The variable behind a start failure, when the error says which (one line names it). */
function culprit(err: NodeJS.ErrnoException & { port?: number; address?: string; hostname?: string }, c: Config): string | null {
  const listener = (host: string, port: number) =>
    (err.code === 'EADDRINUSE' || err.code === 'EACCES') && err.port === port ? 'port' : (err.hostname ?? err.address) === host ? 'host' : null;
  const http = listener(c.host, c.port);
  const smtp = c.smtpPort === 0 ? null : listener(c.smtpHost, c.smtpPort);
  // Ports are told apart first: PORT and SMTP_PORT may share a host.
  if (http === 'port') return 'PORT';
  if (smtp === 'port') return 'SMTP_PORT';
  if (http === 'host') return 'HOST';
  if (smtp === 'host') return 'SMTP_HOST';
  // A file under DATA_DIR, or a directory on the way to it (creating /proc/x/data fails on /proc/x).
  const dataDir = path.resolve(c.dataDir);
  if (err.path && (path.resolve(err.path).startsWith(dataDir) || dataDir.startsWith(`${path.resolve(err.path)}${path.sep}`))) return 'DATA_DIR';
  // SQLite names no path ("unable to open database file"): its files are DATA_DIR's.
  if (typeof err.code === 'string' && /^(SQLITE_|ERR_SQLITE)/.test(err.code)) return 'DATA_DIR';
  return null;
}

// Installed before the start, which can take minutes (catching up a large log, waiting for a
// cluster's servers), and before the service's code is loaded (seconds: imported below, not
// statically, which would load it before this runs): a signal meanwhile stops it at once.
// Nothing is lost: every acknowledgement (HTTP or SMTP) follows a durable append, and the
// kernel drops the DATA_DIR lock with the process.
let runtime: Runtime | null = null;
let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    if (!runtime) {
      process.stderr.write(`stopped during start-up (${signal})\n`);
      process.exit(0);
    }
    const { logger } = runtime;
    logger.info({ signal }, 'shutting down');
    runtime
      .close()
      .then(() => {
        logger.info('stopped: drained and flushed');
        process.exit(0);
      })
      .catch((err) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      });
  });
}

const { startRuntime } = await import('../infra/runtime.js');
runtime = await startRuntime(config).catch((err: NodeJS.ErrnoException) => {
  const variable = culprit(err, config);
  const hint = err.code === 'EADDRINUSE' ? ' (in use)' : err.code === 'ENOTFOUND' ? ' (no such host)' : '';
  process.stderr.write(`failed to start: ${variable ? `${variable}: ` : ''}${err.message}${hint}\n`);
  process.exit(1);
});
const { logger } = runtime;
runtime.runner.done?.catch((err: unknown) => {
  logger.fatal({ err }, 'projection failed; stopping so a restart can resume from the checkpoint');
  process.exit(1);
});
