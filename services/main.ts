/**
 * `npm start`: the whole service in one process (gateway, SMTP listener, projections,
 * mailer) on the embedded store. SIGTERM/SIGINT: stop accepting, drain, flush, exit 0.
 */
import { loadConfig, ConfigError } from '../infra/config.js';
import { startRuntime } from '../infra/runtime.js';

let config;
try {
  config = loadConfig(process.env);
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`configuration error: ${err.problems.join('; ')}\n`);
    process.exit(1);
  }
  throw err;
}

const runtime = await startRuntime(config).catch((err: NodeJS.ErrnoException) => {
  const hint = err.code === 'EADDRINUSE' ? ` (port in use: set PORT or SMTP_PORT)` : '';
  process.stderr.write(`failed to start: ${err.message}${hint}\n`);
  process.exit(1);
});

let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    runtime.logger.info({ signal }, 'shutting down');
    runtime
      .close()
      .then(() => process.exit(0))
      .catch((err) => {
        runtime.logger.error({ err }, 'shutdown failed');
        process.exit(1);
      });
  });
}
runtime.runner.done?.catch((err: unknown) => {
  runtime.logger.fatal({ err }, 'projection failed; stopping so a restart can resume from the checkpoint');
  process.exit(1);
});
