/**
 * `node --import tsx bench/profile-summary.ts <file.cpuprofile> [top] [windowSeconds]`:
 * self time by function and by file/package, over the busiest `windowSeconds` of the
 * profile (default 5, i.e. the timed load, not start-up and idle time).
 */
import { readFileSync } from 'node:fs';

interface Profile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

const [file, topArg, windowArg] = process.argv.slice(2);
if (!file) throw new Error('usage: profile-summary.ts <file.cpuprofile> [top] [windowSeconds]');
const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const top = Number(topArg ?? 30);
const windowUs = Number(windowArg ?? 5) * 1e6;
const nodes = new Map(p.nodes.map((n) => [n.id, n]));
const idle = new Set(p.nodes.filter((n) => n.callFrame.functionName === '(idle)').map((n) => n.id));

// Sample times, then the window with the least idle time.
const times: number[] = [];
let t = p.startTime;
for (const d of p.timeDeltas) times.push((t += d));
let best = { from: 0, to: 0, busy: -1 };
let busy = 0;
for (let lo = 0, hi = 0; hi < times.length; hi++) {
  if (!idle.has(p.samples[hi])) busy += p.timeDeltas[hi];
  while (times[hi] - times[lo] > windowUs) {
    if (!idle.has(p.samples[lo])) busy -= p.timeDeltas[lo];
    lo++;
  }
  if (busy > best.busy) best = { from: lo, to: hi, busy };
}
const byFn = new Map<string, number>();
const byFile = new Map<string, number>();
let total = 0;
for (let i = best.from; i <= best.to; i++) {
  const n = nodes.get(p.samples[i])!;
  const d = p.timeDeltas[i];
  total += d;
  const cf = n.callFrame;
  const url = cf.url.replace(/^.*node_modules\//, 'nm/').replace(/^file:\/\/.*?\/(services|infra|projections|bench)\//, '$1/');
  const fn = `${cf.functionName || '(anonymous)'} ${url}${url ? `:${cf.lineNumber + 1}` : ''}`;
  byFn.set(fn, (byFn.get(fn) ?? 0) + d);
  const parts = url.split('/');
  const group = !url ? cf.functionName : url.startsWith('nm/') ? parts.slice(0, parts[1].startsWith('@') ? 3 : 2).join('/') : url.startsWith('node:') ? url : parts.slice(0, 2).join('/');
  byFile.set(group, (byFile.get(group) ?? 0) + d);
}
const list = (m: Map<string, number>, n: number) =>
  [...m]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([k, v]) => `${((100 * v) / total).toFixed(1).padStart(5)}%  ${k}`)
    .join('\n');
console.log(`window ${(total / 1e6).toFixed(1)} s, busy ${((100 * best.busy) / total).toFixed(0)}%\n\nself time by function\n${list(byFn, top)}\n\nself time by file / package\n${list(byFile, 25)}`);
