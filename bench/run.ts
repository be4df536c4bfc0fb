/**
 * `npm run bench [section...]`: measures the service against baselines taken in the SAME
 * run on the same machine, and prints the ratios as a Markdown table (copied into
 * docs/PERFORMANCE.md). Sections: http, eventstore, login. The service runs as a child
 * process (as `npm start` runs it); autocannon drives it from this process.
 */
import autocannon from 'autocannon';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import argon2 from 'argon2';
import Database from 'better-sqlite3';
import { spawnService, freePort, ROOT } from '../test/support/spawn.js';
import { openSqliteEventStore } from '../infra/sqlite/event-store.js';
import { event } from '../services/kernel/command.js';

const DURATION = Number(process.env.BENCH_SECONDS ?? 5);
const rows: string[][] = [];
const row = (...cells: (string | number)[]) => {
  rows.push(cells.map(String));
  console.log(cells.join(' | '));
};
const fmt = (n: number) => (n >= 100 ? Math.round(n).toLocaleString('en') : n.toFixed(2));
const pct = (a: number, b: number) => `${Math.round((a / b) * 100)}%`;

async function load(url: string, opts: { headers?: Record<string, string>; connections?: number; method?: 'GET' | 'POST'; body?: string } = {}) {
  const result = await autocannon({ url, connections: opts.connections ?? 50, duration: DURATION, headers: opts.headers, method: opts.method, body: opts.body });
  if (result.non2xx > 0) throw new Error(`${url}: ${result.non2xx} non-2xx answers`);
  return { rps: result.requests.average, p99: result.latency.p99, p50: result.latency.p50 };
}

async function rawBaseline(): Promise<{ url: string; stop: () => void }> {
  const port = await freePort();
  const code = `require('http').createServer((q,s)=>{s.setHeader('content-type','application/json');s.end('{"status":"ok"}')}).listen(${port},'127.0.0.1',()=>console.log('up'))`;
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((r) => child.stdout!.once('data', r));
  return { url: `http://127.0.0.1:${port}/`, stop: () => child.kill('SIGKILL') };
}

async function httpSection() {
  const raw = await rawBaseline();
  const baseline = await load(raw.url);
  raw.stop();
  row('raw node:http hello (baseline)', fmt(baseline.rps), `${baseline.p99} ms`, '100%', '');

  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-bench-'));
  const svc = await spawnService({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
  try {
    const health = await load(`${svc.url}/api/health/`);
    row('GET /api/health/', fmt(health.rps), `${health.p99} ms`, pct(health.rps, baseline.rps), 'goal ≥ 45%');

    const res = await fetch(`${svc.url}/api/auth/social/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'bench', email: 'bench@example.com', password1: 'bench-pw', password2: 'bench-pw' }),
    });
    const { access } = (await res.json()) as { access: string };
    const user = await load(`${svc.url}/api/auth/user/`, { headers: { authorization: `Bearer ${access}` } });
    row('GET /api/auth/user/ (JWT)', fmt(user.rps), `${user.p99} ms`, pct(user.rps, baseline.rps), 'goal ≥ 30%, p99 ≤ 25 ms');

    const mk = await fetch(`${svc.url}/api/auth/keys/management/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${access}` },
      body: JSON.stringify({ label: 'bench' }),
    });
    if (mk.status === 201) {
      const { key } = (await mk.json()) as { key: string };
      for (let i = 0; i < 20; i++) {
        await fetch(`${svc.url}/api/identities/`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
          body: JSON.stringify({ name: `bench ${i}` }),
        });
      }
      const ids = await load(`${svc.url}/api/identities/`, { headers: { authorization: `Bearer ${key}` } });
      row('GET /api/identities/ (management key, 20 identities)', fmt(ids.rps), `${ids.p99} ms`, pct(ids.rps, baseline.rps), 'goal ≥ 40%, p99 ≤ 20 ms');
    }
  } finally {
    svc.child.kill('SIGTERM');
    await svc.exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function eventStoreSection() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ais-bench-es-'));
  try {
    // Baseline: one durable transaction (one fsync) per append, as a naive store would do.
    const db = new Database(path.join(dir, 'baseline.sqlite'));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.exec('CREATE TABLE e (position INTEGER PRIMARY KEY, stream TEXT, data TEXT)');
    const insert = db.prepare('INSERT INTO e (stream, data) VALUES (?, ?)');
    const n = 2000;
    let t = performance.now();
    for (let i = 0; i < n; i++) db.transaction(() => insert.run(`s-${i}`, '{"x":1}'))();
    const baseline = n / ((performance.now() - t) / 1000);
    db.close();
    row('single-commit fsync appends (baseline)', fmt(baseline), '', '100%', '');

    const store = await openSqliteEventStore({ file: path.join(dir, 'events.sqlite'), logger: { warn() {}, error() {} } });
    const writers = 200;
    const total = 20_000;
    let next = 0;
    t = performance.now();
    await Promise.all(
      Array.from({ length: writers }, async () => {
        while (next < total) {
          const i = next++;
          await store.append(`bench-${i}`, [event('BenchHappened', { i })], { expectedRevision: 'no_stream' });
        }
      }),
    );
    const grouped = total / ((performance.now() - t) / 1000);
    await store.close();
    row(`event store appends, ${writers} concurrent writers`, fmt(grouped), '', pct(grouped, baseline), 'goal ≥ 300%');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function loginSection() {
  // Baseline: the time of one argon2id hash with the service's parameters, on this machine.
  const opts = { type: argon2.argon2id, memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;
  const hash = await argon2.hash('bench-pw', opts);
  const t = performance.now();
  for (let i = 0; i < 10; i++) await argon2.verify(hash, 'bench-pw');
  const hashMs = (performance.now() - t) / 10;
  const ideal = 2 / (hashMs / 1000);
  row('2 / one argon2id verify (baseline)', fmt(ideal), `${hashMs.toFixed(1)} ms per hash`, '100%', '');

  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-bench-login-'));
  const svc = await spawnService({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
  try {
    await fetch(`${svc.url}/api/auth/social/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'bench', email: 'bench@example.com', password1: 'bench-pw', password2: 'bench-pw' }),
    });
    const [login, health] = await Promise.all([
      load(`${svc.url}/api/auth/login/`, { method: 'POST', body: JSON.stringify({ username: 'bench', password: 'bench-pw' }), headers: { 'content-type': 'application/json' }, connections: 8 }),
      load(`${svc.url}/api/health/`, { connections: 4 }),
    ]);
    row('POST /api/auth/login/ (8 connections)', fmt(login.rps), `${login.p99} ms`, pct(login.rps, ideal), 'goal ≥ 80%');
    row('  concurrent GET /api/health/ p99', '', `${health.p99} ms`, '', 'goal ≤ 25 ms');
  } finally {
    svc.child.kill('SIGTERM');
    await svc.exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const sections: Record<string, () => Promise<void>> = { http: httpSection, eventstore: eventStoreSection, login: loginSection };
const chosen = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(sections);
console.log(`node ${process.version}, ${os.cpus().length} cores, ${DURATION}s per load, cwd ${ROOT}`);
for (const name of chosen) {
  if (!sections[name]) throw new Error(`unknown section ${name}`);
  await sections[name]();
}
console.log('\n| measurement | req/s or ops/s | latency | ratio to baseline | goal |\n|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
