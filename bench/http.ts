/**
 * Section `http` (issues 2 and 3): request throughput of the gateway against a raw
 * node:http hello server measured in the same run, 50 connections each.
 */
import { account, api, fmt, load, pct, rawHello, row, startService } from './lib.js';

export async function httpSection(): Promise<void> {
  const raw = await rawHello();
  const baseline = await load(raw.url);
  await raw.stop();
  row('raw node:http hello (baseline)', fmt(baseline.rps), `${baseline.p99} ms`, '100%', '');

  const svc = await startService();
  try {
    const health = await load(`${svc.url}/api/health/`);
    row('GET /api/health/', fmt(health.rps), `${health.p99} ms`, pct(health.rps, baseline.rps), 'goal ≥ 45%');

    const { access, key } = await account(svc.url);
    const user = await load(`${svc.url}/api/auth/user/`, { headers: { authorization: `Bearer ${access}` } });
    row('GET /api/auth/user/ (JWT)', fmt(user.rps), `${user.p99} ms`, pct(user.rps, baseline.rps), 'goal ≥ 30%, p99 ≤ 25 ms');

    for (let i = 0; i < 20; i++) await api(svc.url, 'POST', '/api/identities/', { token: key, body: { name: `bench ${i}` } });
    const ids = await load(`${svc.url}/api/identities/`, { headers: { authorization: `Bearer ${key}` } });
    row('GET /api/identities/ (management key, 20 identities)', fmt(ids.rps), `${ids.p99} ms`, pct(ids.rps, baseline.rps), 'goal ≥ 40%, p99 ≤ 20 ms');
  } finally {
    await svc.stop();
  }
}
