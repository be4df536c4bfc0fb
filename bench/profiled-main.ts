/**
 * `npm start` with a V8 CPU profile (node --cpu-prof is refused in NODE_OPTIONS, and
 * the bench spawns the service through test/support/spawn.ts): used by the bench when
 * BENCH_PROFILE=<dir> is set. The profile is written to <dir> when the service exits;
 * open it in Chrome DevTools or summarise it with bench/profile-summary.ts.
 */
import { Session } from 'node:inspector';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const dir = path.resolve(process.env.BENCH_PROFILE ?? '.');
mkdirSync(dir, { recursive: true });
const session = new Session();
session.connect();
session.post('Profiler.enable');
session.post('Profiler.setSamplingInterval', { interval: 500 });
session.post('Profiler.start');
process.on('exit', () => {
  // Same-thread inspector sessions answer synchronously, so this runs before the exit.
  session.post('Profiler.stop', (err, result) => {
    if (!err) writeFileSync(path.join(dir, `service-${process.pid}-${Date.now()}.cpuprofile`), JSON.stringify(result.profile));
  });
});

await import('../services/main.js');
