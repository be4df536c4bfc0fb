/**
 * Section `http` (issues 2 and 3): request throughput of the gateway against a raw
 * node:http hello server measured in the same run, 50 connections each.
 */
import autocannon from 'autocannon';
import { account, api, fmt, load, pct, rawHello, row, startService, type LoadResult } from './lib.js';

/** Baseline/target pairs per target (BENCH_HTTP_ROUNDS, default 3); the median ratio is reported. */
const ROUNDS = Math.max(1, Number(process.env.BENCH_HTTP_ROUNDS ?? 3));

/**
 * An unmeasured second of the same load first, for every target (baseline included): the
 * service is measured right after it started, and without this the first section measured
 * V8 compiling the request path (GET /api/health/ read 34% cold, 50% warm in one run).
 */
const warmUp = (url: string, headers?: Record<string, string>) =>
  autocannon({ url, connections: 50, duration: 1, ...(headers ? { headers } : {}) });

/**
 * Each target is measured right after its own baseline load (the raw server stays up, idle,
 * while the service is measured and the other way round), ROUNDS times, and the pair with
 * the median ratio is reported: the VM's speed drifts by 10–20% within a minute, and one
 * baseline at the start compared targets measured in other minutes.
 */
export async function httpSection(): Promise<void> {
  const raw = await rawHello();
  const svc = await startService();
  try {
    const { access, key } = await account(svc.url);
    for (let i = 0; i < 20; i++) await api(svc.url, 'POST', '/api/identities/', { token: key, body: { name: `bench ${i}` } });
    const targets = [
      { name: 'GET /api/health/', path: '/api/health/', headers: undefined, goal: 'goal ≥ 45%' },
      { name: 'GET /api/auth/user/ (JWT)', path: '/api/auth/user/', headers: { authorization: `Bearer ${access}` }, goal: 'goal ≥ 30%, p99 ≤ 25 ms' },
      { name: 'GET /api/identities/ (management key, 20 identities)', path: '/api/identities/', headers: { authorization: `Bearer ${key}` }, goal: 'goal ≥ 40%, p99 ≤ 20 ms' },
      // Username and password on every request: argon2id once, then the remembered credential.
      { name: 'GET /api/auth/user/ (HTTP basic)', path: '/api/auth/user/', headers: { authorization: `Basic ${Buffer.from('bench:bench-pw-123').toString('base64')}` }, goal: 'measured (no goal)' },
    ];
    for (const t of targets) {
      const pairs: { baseline: LoadResult; target: LoadResult }[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        await warmUp(raw.url);
        const baseline = await load(raw.url);
        await warmUp(`${svc.url}${t.path}`, t.headers);
        const target = await load(`${svc.url}${t.path}`, t.headers ? { headers: t.headers } : {});
        pairs.push({ baseline, target });
      }
      // The pair with the median ratio (the rows show one real pair, not a blend).
      pairs.sort((a, b) => a.target.rps / a.baseline.rps - b.target.rps / b.baseline.rps);
      const { baseline, target } = pairs[Math.floor(pairs.length / 2)];
      const all = pairs.map((p) => pct(p.target.rps, p.baseline.rps)).join(', ');
      row(`raw node:http hello (baseline of the next row)`, fmt(baseline.rps), `${baseline.p99} ms`, '100%', '');
      row(t.name, fmt(target.rps), `${target.p99} ms`, ROUNDS > 1 ? `${pct(target.rps, baseline.rps)} (median of ${all})` : pct(target.rps, baseline.rps), t.goal);
    }
  } finally {
    await svc.stop();
    await raw.stop();
  }
}
