/**
 * Inbound SMTP with STARTTLS (SMTP_TLS_CERT / SMTP_TLS_KEY): offered when a certificate is
 * configured, and a sender that requires TLS delivers through it. The certificate is made
 * with openssl for the test.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import nodemailer from 'nodemailer';
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';

let dir: string;
let server: TestServer;
let smtpPort: number;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'ais-tls-'));
  const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2', '-subj', '/CN=agents.localhost', '-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem')], { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`openssl could not make a test certificate (.ci/run installs openssl): ${made.stderr}`);
  smtpPort = await freePort();
  server = await startTestServer({ SMTP_PORT: String(smtpPort), MAIL_DOMAIN: 'agents.localhost', SMTP_TLS_CERT: path.join(dir, 'cert.pem'), SMTP_TLS_KEY: path.join(dir, 'key.pem') });
}, 60_000);

afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The EHLO answer of the listener. */
function ehlo(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let buffer = '';
    socket.on('data', (d) => {
      buffer += d;
      if (/^220 /m.test(buffer) && !buffer.includes('EHLO sent')) {
        buffer += '\nEHLO sent\n';
        socket.write('EHLO client.example\r\n');
      } else if (/^250 /m.test(buffer.split('EHLO sent')[1] ?? '')) {
        socket.end('QUIT\r\n');
        resolve(buffer.split('EHLO sent')[1]);
      }
    });
    socket.on('error', reject);
  });
}

test('STARTTLS is offered, and a sender that requires TLS delivers through it', async () => {
  expect(await ehlo(smtpPort)).toMatch(/^250-STARTTLS\r?$/m);
  const user = await server.signUp();
  const identity = (await server.api('POST', '/api/identities/', { token: user.access, body: { name: 'Secure', email_identifier: 'secure' } })).body as { uuid: string; inbox: string };
  const info = await nodemailer
    .createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, requireTLS: true, tls: { rejectUnauthorized: false } })
    .sendMail({ from: 'sender@example.com', to: identity.inbox, subject: 'over TLS', text: 'encrypted in transit' });
  expect(info.response).toMatch(/^250 /);
  const list = await server.api('GET', '/api/email-messages/', { token: user.access, identity: identity.uuid });
  expect(list.body.map((m: { subject: string }) => m.subject)).toEqual(['over TLS']);
});

test('without a certificate no STARTTLS is offered', async () => {
  const plainPort = await freePort();
  const plain = await startTestServer({ SMTP_PORT: String(plainPort) });
  try {
    expect(await ehlo(plainPort)).not.toMatch(/STARTTLS/);
  } finally {
    await plain.close();
  }
});
