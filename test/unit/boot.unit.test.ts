/** infra/boot.cjs: the thread pool size `npm start` sets before libuv's pool starts. */
import { spawnSync } from 'node:child_process';
import os from 'node:os';
import { ROOT } from '../support/spawn.js';

/** UV_THREADPOOL_SIZE as a process preloading boot.cjs sees it, given `value` (undefined: unset). */
function poolSize(value: string | undefined): string {
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (value === undefined) delete env.UV_THREADPOOL_SIZE;
  else env.UV_THREADPOOL_SIZE = value;
  const run = spawnSync(process.execPath, ['--require', './infra/boot.cjs', '-e', 'process.stdout.write(process.env.UV_THREADPOOL_SIZE ?? "")'], { cwd: ROOT, env, encoding: 'utf8' });
  return run.stdout;
}

it('sets max(8, 4 × cores) unless a whole number from 1 to 1024 is given; empty or invalid is the default, not libuv\'s reading of it (1 thread, or 1024)', () => {
  const fallback = String(Math.max(8, 4 * os.availableParallelism()));
  expect(poolSize(undefined)).toBe(fallback);
  expect(poolSize('16')).toBe('16');
  expect(poolSize('1024')).toBe('1024');
  for (const bad of ['', 'abc', '0', '-4', '99999', '2.5']) expect([bad, poolSize(bad)]).toEqual([bad, fallback]);
});
