/**
 * Issue 4: delivery is a reactor on the event log that survives restarts. A message queued
 * while the relay is down is deferred (temporary failure, retried with backoff); the service
 * is stopped, the relay comes up, the service restarts on the same DATA_DIR, and the message
 * is delivered exactly once, its status moving from queued to sent.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort, spawnService } from '../support/spawn.js';
import { startSmtpSink } from '../support/smtp-sink.js';

async function call(base: string, method: string, p: string, token?: string, body?: unknown) {
  const res = await fetch(base + p, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json().catch(() => null)) as any };
}

it('a message deferred while the relay is down is delivered once after a restart', async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-mail-restart-'));
  const relayPort = await freePort(); // nothing listens there yet: connection refused = temporary
  const env = { DATA_DIR: dataDir, SMTP_RELAY_URL: `smtp://127.0.0.1:${relayPort}` };
  let svc = await spawnService(env);
  const reg = await call(svc.url, 'POST', '/api/auth/social/', undefined, { username: 'restarter', email: 'restarter@example.com', password1: 'pw', password2: 'pw' });
  const token = reg.body.access as string;
  const identity = await call(svc.url, 'POST', '/api/identities/', token, { name: 'Courier' });
  const key = (await call(svc.url, 'POST', '/api/auth/keys/identity/', token, { label: 'k', identity_uuid: identity.body.uuid })).body.key as string;
  const sent = await call(svc.url, 'POST', '/api/email-messages/compose/', key, { to: 'far@away.example', subject: 'Survives restarts', body: '<p>hi</p>' });
  expect(sent.status).toBe(201);
  // Wait for the first attempt to fail: the message stays queued (deferred), not failed.
  await new Promise((r) => setTimeout(r, 1500));
  expect((await call(svc.url, 'GET', `/api/email-messages/${sent.body.uuid}/`, key)).body.status).toBe('queued');
  svc.child.kill('SIGTERM');
  expect(await svc.exited).toBe(0);

  const sink = await startSmtpSink(relayPort);
  try {
    svc = await spawnService(env);
    const mail = await sink.waitFor((m) => m.parsed.subject === 'Survives restarts', 60_000);
    expect(mail.envelope.to).toEqual(['far@away.example']);
    let status = '';
    for (let i = 0; i < 50 && status !== 'sent'; i++) {
      status = (await call(svc.url, 'GET', `/api/email-messages/${sent.body.uuid}/`, key)).body.status;
      if (status !== 'sent') await new Promise((r) => setTimeout(r, 100));
    }
    expect(status).toBe('sent');
    await new Promise((r) => setTimeout(r, 500));
    expect(sink.messages.filter((m) => m.parsed.subject === 'Survives restarts')).toHaveLength(1);
  } finally {
    svc.child.kill('SIGTERM');
    await svc.exited;
    await sink.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 90_000);
