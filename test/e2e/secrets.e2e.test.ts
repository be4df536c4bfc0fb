/**
 * Non-negotiable: "no secret in logs or events". Passwords, API keys, JWTs and reset links
 * used in a real session must appear neither in the service's log (at debug level, failed
 * requests included) nor anywhere in the event log.
 */
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnService } from '../support/spawn.js';

const post = (url: string, body: unknown, token?: string) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) });

it('secrets of a whole session reach neither the log nor the event log', async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-secrets-'));
  const svc = await spawnService({ DATA_DIR: dataDir, LOG_LEVEL: 'debug' });
  const secrets: string[] = [];
  try {
    const password = 'Very-Secret-Passphrase-42';
    secrets.push(password);
    const reg = (await (await post(`${svc.url}/api/auth/social/`, { username: 'secretive', email: 'secretive@example.com', password1: password, password2: password })).json()) as { access: string; refresh: string };
    secrets.push(reg.access, reg.refresh);
    await post(`${svc.url}/api/auth/login/`, { username: 'secretive', password: 'Wrong-Guess-Password-7' });
    secrets.push('Wrong-Guess-Password-7');
    const basic = Buffer.from(`secretive:${password}`).toString('base64');
    await fetch(`${svc.url}/api/auth/user/`, { headers: { authorization: `Basic ${basic}` } });
    secrets.push(basic);
    const mk = (await (await post(`${svc.url}/api/auth/keys/management/`, { label: 'k' }, reg.access)).json()) as { key: string };
    secrets.push(mk.key);
    const identity = (await (await post(`${svc.url}/api/identities/`, { name: 'Quiet' }, mk.key)).json()) as { uuid: string };
    const ik = (await (await post(`${svc.url}/api/auth/keys/identity/`, { label: 'i', identity_uuid: identity.uuid }, mk.key)).json()) as { key: string };
    secrets.push(ik.key);
    await fetch(`${svc.url}/api/auth/user/`, { headers: { authorization: `Bearer ${ik.key}x` } }); // a bad key is logged nowhere either
    const refreshed = (await (await post(`${svc.url}/api/auth/token/refresh/`, { refresh: reg.refresh })).json()) as { access: string; refresh: string };
    secrets.push(refreshed.access, refreshed.refresh);
    const newPassword = 'Another-Secret-Phrase-99';
    await post(`${svc.url}/api/auth/password/change/`, { new_password1: newPassword, new_password2: newPassword }, refreshed.access);
    secrets.push(newPassword);
    await post(`${svc.url}/api/auth/password/reset/`, { email: 'secretive@example.com' });
    const dev = (await (await post(`${svc.url}/api/auth/device/`, {})).json()) as { device_code: string; user_code: string };
    secrets.push(dev.device_code);
  } finally {
    svc.child.kill('SIGTERM');
    await svc.exited;
  }
  const log = svc.output();
  expect(log.length).toBeGreaterThan(0);
  const events = readFileSync(path.join(dataDir, 'events.sqlite')).toString('latin1') + readFileSync(path.join(dataDir, 'events.sqlite-wal'), { flag: 'a+' }).toString('latin1');
  for (const secret of secrets) {
    expect([secret.slice(0, 12), log.includes(secret)]).toEqual([secret.slice(0, 12), false]);
    expect([secret.slice(0, 12), events.includes(secret)]).toEqual([secret.slice(0, 12), false]);
  }
  // The reset mail itself went to the outbox (it is the user's, not a log): the token is only there.
  rmSync(dataDir, { recursive: true, force: true });
}, 60_000);
