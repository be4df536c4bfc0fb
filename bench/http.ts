/**
 * Section `http` (issues 2 and 3): request throughput of the gateway against a raw
 * node:http hello server measured in the same run, 50 connections each.
 */
import autocannon from 'autocannon';
import { account, api, fmt, load, pct, rawHello, row, startService } from './lib.js';

/**
 * An unmeasured second of the same load first, for every target (baseline included): the
 * service is measured right after it started, and without this the first section measured
 * V8 compiling the request path (GET /api/health/ read 34% cold, 50% warm in one run).
 */
const warmUp = (url: string, headers?: Record<string, string>) =>
  autocannon({ url, connections: 50, duration: 1, ...(headers ? { headers } : {}) });

export async function httpSection(): Promise<void> {
  const raw = await rawHello();
  await warmUp(raw.url);
  const baseline = await load(raw.url);
  await raw.stop();
  row('raw node:http hello (baseline)', fmt(baseline.rps), `${baseline.p99} ms`, '100%', '');

  const svc = await startService();
  try {
    await warmUp(`${svc.url}/api/health/`);
    const health = await load(`${svc.url}/api/health/`);
    row('GET /api/health/', fmt(health.rps), `${health.p99} ms`, pct(health.rps, baseline.rps), 'goal ≥ 45%');

    const { access, key } = await account(svc.url);
    await warmUp(`${svc.url}/api/auth/user/`, { authorization: `Bearer ${access}` });
    const user = await load(`${svc.url}/api/auth/user/`, { headers: { authorization: `Bearer ${access}` } });
    row('GET /api/auth/user/ (JWT)', fmt(user.rps), `${user.p99} ms`, pct(user.rps, baseline.rps), 'goal ≥ 30%, p99 ≤ 25 ms');

    for (let i = 0; i < 20; i++) await api(svc.url, 'POST', '/api/identities/', { token: key, body: { name: `bench ${i}` } });
    await warmUp(`${svc.url}/api/identities/`, { authorization: `Bearer ${key}` });
    const ids = await load(`${svc.url}/api/identities/`, { headers: { authorization: `Bearer ${key}` } });
    row('GET /api/identities/ (management key, 20 identities)', fmt(ids.rps), `${ids.p99} ms`, pct(ids.rps, baseline.rps), 'goal ≥ 40%, p99 ≤ 20 ms');
  } finally {
    await svc.stop();
  }
}
