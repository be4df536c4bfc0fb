/**
 * Section `login` (issue 2): password logins per second against the ideal of two argon2id
 * verifications at a time (the work pool) measured in the same run, while a concurrent
 * /api/health/ load shows the event loop stays responsive.
 */
import argon2 from 'argon2';
import { api, fmt, load, pct, row, startService } from './lib.js';

export async function loginSection(): Promise<void> {
  // Baseline: the time of one argon2id hash with the service's parameters, on this machine.
  const opts = { type: argon2.argon2id, memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;
  const hash = await argon2.hash('bench-pw', opts);
  const t = performance.now();
  for (let i = 0; i < 10; i++) await argon2.verify(hash, 'bench-pw');
  const hashMs = (performance.now() - t) / 10;
  const ideal = 2 / (hashMs / 1000);
  row('2 / one argon2id verify (baseline)', fmt(ideal), `${hashMs.toFixed(1)} ms per hash`, '100%', '');

  const svc = await startService();
  try {
    await api(svc.url, 'POST', '/api/auth/social/', {
      body: { username: 'bench', email: 'bench@example.com', password1: 'bench-pw-123', password2: 'bench-pw-123' },
    });
    const [login, health] = await Promise.all([
      load(`${svc.url}/api/auth/login/`, {
        method: 'POST',
        body: JSON.stringify({ username: 'bench', password: 'bench-pw-123' }),
        headers: { 'content-type': 'application/json' },
        connections: 8,
      }),
      load(`${svc.url}/api/health/`, { connections: 4 }),
    ]);
    row('POST /api/auth/login/ (8 connections)', fmt(login.rps), `${login.p99} ms`, pct(login.rps, ideal), 'goal ≥ 80%');
    row('  concurrent GET /api/health/ p99', '', `${health.p99} ms`, '', 'goal ≤ 25 ms');
  } finally {
    await svc.stop();
  }
}
