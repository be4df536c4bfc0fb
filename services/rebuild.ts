/**
 * `npm run rebuild [projection ...]`: drops read models and rebuilds them from position 0
 * of the event log. All projections when none is named. Stop the service first (the
 * embedded store has one writer per DATA_DIR).
 */
import { loadConfig, ConfigError } from '../infra/config.js';
import { startRuntime } from '../infra/runtime.js';

try {
  const config = loadConfig(process.env);
  const runtime = await startRuntime(config, { serve: false });
  const names = process.argv.slice(2);
  const started = Date.now();
  await runtime.runner.rebuild(names.length ? names : undefined);
  runtime.logger.info({ projections: names.length ? names : 'all', ms: Date.now() - started }, 'read models rebuilt');
  await runtime.close();
} catch (err) {
  const busy = (err as NodeJS.ErrnoException).code === 'EBUSY' ? 'DATA_DIR: ' : ''; // the service runs on it
  process.stderr.write(`rebuild failed: ${busy}${err instanceof ConfigError ? err.problems.join('; ') : (err as Error).message}\n`);
  process.exit(1);
}
