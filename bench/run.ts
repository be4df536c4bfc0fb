/**
 * `npm run bench [section...]`: measures the service against baselines taken in the SAME
 * run on the same machine, and prints the ratios as a Markdown table (copied into
 * docs/PERFORMANCE.md). The service runs as a child process (as `npm start` runs it);
 * the load comes from this process. Sections (default: all, in this order):
 *   http        gateway req/s vs raw node:http (issues 2, 3)
 *   eventstore  group-commit appends vs one fsync per append (issue 2)
 *   login       logins/s vs argon2id cost, health p99 meanwhile (issue 2)
 *   smtp        inbound SMTP msg/s vs a no-op smtp-server + mailparser sink (issue 4)
 *   relay       compose → relay delivered msg/s vs nodemailer straight to the sink (issue 4)
 *   sse         idle SSE streams per process and RSS per stream vs a raw node:http holder (issue 5)
 *   fanout      SMS webhook → SSE frame latency at 1,000 subscribers vs a raw node:http fan-out (issue 5)
 *   pages       a walk through a 10,000-message list: deep pages vs the first ones
 * BENCH_SECONDS (default 5) sets the length of each timed load.
 */
import os from 'node:os';
import { DURATION, ROOT, rows } from './lib.js';
import { httpSection } from './http.js';
import { eventStoreSection } from './eventstore.js';
import { loginSection } from './login.js';
import { relaySection, smtpSection } from './smtp.js';
import { fanoutSection, sseSection } from './sse.js';
import { pagesSection } from './pages.js';

const sections: Record<string, () => Promise<void>> = {
  http: httpSection,
  eventstore: eventStoreSection,
  login: loginSection,
  smtp: smtpSection,
  relay: relaySection,
  sse: sseSection,
  fanout: fanoutSection,
  pages: pagesSection,
};
const chosen = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(sections);
for (const name of chosen) if (!sections[name]) throw new Error(`unknown section "${name}" (known: ${Object.keys(sections).join(', ')})`);

console.log(`node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, load average ${os.loadavg()[0].toFixed(2)}, ${DURATION}s per load, cwd ${ROOT}`);
for (const name of chosen) {
  console.log(`\n## ${name}`);
  await sections[name]();
}
console.log(`\nload average at the end ${os.loadavg()[0].toFixed(2)}`);
console.log('\n| measurement | rate | latency | ratio to baseline | goal |\n|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
// Sockets of the load generators may linger; the run is over.
process.exit(0);
