/**
 * "Answer 250 only after the event is durably appended": a mail acknowledged by the MX
 * survives kill -9 of the whole service (a real child process on a temp DATA_DIR).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import nodemailer from 'nodemailer';
import { freePort } from '../support/spawn.js';


const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-mail-crash-'));
let httpPort: number;
let smtpPort: number;
let child: ChildProcess | null = null;

async function startService(): Promise<void> {
  child = spawn(process.execPath, ['--import', 'tsx', 'services/main.ts'], {
    cwd: process.cwd(), // jest runs from the repository root
    env: { ...process.env, PORT: String(httpPort), SMTP_PORT: String(smtpPort), DATA_DIR: dataDir, LOG_LEVEL: 'error', PASSWORD_HASH_MEMORY_KIB: '19456' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const res = await fetch(`http://127.0.0.1:${httpPort}/api/health/`);
      if (res.ok) {
        // The SMTP listener starts before the gateway listens, so it is up too.
        return;
      }
    } catch {
      /* not yet */
    }
    if (Date.now() > deadline) throw new Error('service did not start');
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function api(method: string, p: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`http://127.0.0.1:${httpPort}${p}`, {
    method,
    headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json().catch(() => null)) as any };
}

beforeAll(async () => {
  httpPort = await freePort();
  smtpPort = await freePort();
});

afterAll(() => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  rmSync(dataDir, { recursive: true, force: true });
});

test('a mail acknowledged with 250 is readable after kill -9 and restart', async () => {
  await startService();
  const username = `crash${process.pid}`;
  const password = 'Crash-test-password-1';
  const reg = await api('POST', '/api/auth/social/', { username, email: `${username}@example.com`, password1: password, password2: password });
  expect(reg.status).toBe(201);
  const auth = { authorization: `Bearer ${reg.body.access}` };
  const identity = await api('POST', '/api/identities/', { name: 'Durable', email_identifier: `durable${process.pid}` }, auth);
  expect(identity.status).toBe(201);

  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
  const info = await transport.sendMail({ from: 'sender@example.com', to: identity.body.inbox, subject: 'Survive the crash', text: 'still here' });
  expect(info.response).toMatch(/^250/);

  child!.kill('SIGKILL');
  await new Promise((resolve) => child!.once('exit', resolve));

  await startService();
  const login = await api('POST', '/api/auth/login/', { username, password });
  expect(login.status).toBe(200);
  const list = await api('GET', '/api/email-messages/', undefined, { authorization: `Bearer ${login.body.access}`, 'x-service-identity': identity.body.uuid });
  expect(list.status).toBe(200);
  expect(list.body.map((m: { subject: string }) => m.subject)).toContain('Survive the crash');
  child!.kill('SIGTERM');
  await new Promise((resolve) => child!.once('exit', resolve));
}, 120_000);
