/**
 * Shared helpers of the benchmark sections: the result table, autocannon load, the
 * spawned service (killed on any exit of the bench, so a crash leaves no orphan), a tiny
 * API client, percentiles and the RSS of a process.
 */
import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnService, freePort, ROOT, type ServiceProcess } from '../test/support/spawn.js';

export { freePort, ROOT };

export const DURATION = Number(process.env.BENCH_SECONDS ?? 5);

export const rows: string[][] = [];
/** One result line: measurement | rate | latency | ratio to baseline | goal. */
export const row = (...cells: (string | number)[]) => {
  rows.push(cells.map(String));
  console.log(cells.join(' | '));
};
export const fmt = (n: number) => (n >= 100 ? Math.round(n).toLocaleString('en') : n.toFixed(2));
export const pct = (a: number, b: number) => `${Math.round((a / b) * 100)}%`;
export const ms = (n: number) => `${n.toFixed(n < 10 ? 1 : 0)} ms`;
export const sleep = (t: number) => new Promise<void>((r) => setTimeout(r, t));

/** The q-quantile (0..1) of the samples (nearest rank). */
export function quantile(samples: number[], q: number): number {
  if (!samples.length) return NaN;
  const sorted = Float64Array.from(samples).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

/** Children of this bench: SIGKILLed when the bench exits for any reason. */
const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
});
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => process.exit(130));

export function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

export interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
}

export async function load(
  url: string,
  opts: { headers?: Record<string, string>; connections?: number; method?: 'GET' | 'POST'; body?: string } = {},
): Promise<LoadResult> {
  const result = await autocannon({
    url,
    connections: opts.connections ?? 50,
    duration: DURATION,
    method: opts.method ?? 'GET',
    ...(opts.headers ? { headers: opts.headers } : {}),
    ...(opts.body !== undefined ? { body: opts.body } : {}),
  });
  if (result.non2xx > 0) throw new Error(`${url}: ${result.non2xx} non-2xx answers`);
  if (result.errors > 0) throw new Error(`${url}: ${result.errors} connection errors`);
  return { rps: result.requests.average, p99: result.latency.p99, p50: result.latency.p50 };
}

/** A Node child process running `code` (CommonJS, cwd = repo root); resolves once it prints a line. */
export async function nodeChild(code: string): Promise<{ child: ChildProcess; firstLine: string; stop: () => Promise<void> }> {
  const child = track(spawn(process.execPath, ['-e', code], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] }));
  const firstLine = await new Promise<string>((resolve, reject) => {
    child.once('exit', (c) => reject(new Error(`baseline process exited with ${c}`)));
    child.stdout!.once('data', (d) => resolve(String(d).trim()));
  });
  const stop = async () => {
    if (child.exitCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  };
  return { child, firstLine, stop };
}

/** Baseline: a raw node:http hello server in its own process. */
export async function rawHello(): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const code = `require('http').createServer((q,s)=>{s.setHeader('content-type','application/json');s.end('{"status":"ok"}')}).listen(${port},'127.0.0.1',()=>console.log('up'))`;
  const { stop } = await nodeChild(code);
  return { url: `http://127.0.0.1:${port}/`, stop };
}

export interface Service extends ServiceProcess {
  pid: number;
  dataDir: string;
  stop(): Promise<void>;
}

/** The service as `npm start` runs it, on a fresh DATA_DIR, logging warnings only. */
export async function startService(env: Record<string, string> = {}): Promise<Service> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-bench-'));
  // BENCH_PROFILE=<dir>: the service writes a V8 CPU profile there when it exits.
  const script = process.env.BENCH_PROFILE ? 'bench/profiled-main.ts' : 'services/main.ts';
  const svc = await spawnService({ DATA_DIR: dataDir, LOG_LEVEL: 'warn', ...env }, script);
  track(svc.child);
  return {
    ...svc,
    pid: svc.child.pid!,
    dataDir,
    async stop() {
      if (svc.child.exitCode === null) {
        svc.child.kill('SIGTERM');
        const timer = setTimeout(() => svc.child.kill('SIGKILL'), 15_000);
        await svc.exited;
        clearTimeout(timer);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** JSON call to the service; throws on an unexpected status. */
export async function api<T = any>(
  base: string,
  method: string,
  pathname: string,
  opts: { token?: string; body?: unknown; expect?: number; headers?: Record<string, string> } = {},
): Promise<T> {
  const res = await fetch(`${base}${pathname}`, {
    method,
    headers: {
      ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
      ...opts.headers,
    },
    body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
  });
  const text = await res.text();
  const expected = opts.expect ?? (method === 'POST' ? 201 : 200);
  if (res.status !== expected) throw new Error(`${method} ${pathname}: ${res.status} ${text}`);
  return (text ? JSON.parse(text) : null) as T;
}

/** A fresh account with a management key: { access, pk, key }. */
export async function account(base: string, name = 'bench'): Promise<{ access: string; pk: number; key: string }> {
  const reg = await api<{ access: string; user: { pk: number } }>(base, 'POST', '/api/auth/social/', {
    body: { username: name, email: `${name}@example.com`, password1: 'bench-pw-123', password2: 'bench-pw-123' },
  });
  const mk = await api<{ key: string }>(base, 'POST', '/api/auth/keys/management/', { token: reg.access, body: { label: 'bench' } });
  return { access: reg.access, pk: reg.user.pk, key: mk.key };
}

/** Resident set size of a process, in bytes (Linux /proc). */
export function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

/**
 * CPU time (user + system) a process has used so far, all its threads together, in
 * microseconds (Linux /proc; clock ticks of 10 ms, so measure loads of seconds).
 */
export function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000; // utime + stime, USER_HZ = 100
}

/** CPU time (µs) of each thread of process `pid`, by thread id (the main thread's id is `pid`). */
export function threadCpuMicros(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const fields = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1].split(' ');
      out.set(Number(tid), (Number(fields[11]) + Number(fields[12])) * 10_000);
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

/** The soft limit on open files of this process (children inherit it). */
export function openFileLimit(): number {
  const m = /Max open files\s+(\d+|unlimited)/.exec(readFileSync('/proc/self/limits', 'utf8'));
  return !m || m[1] === 'unlimited' ? Infinity : Number(m[1]);
}
