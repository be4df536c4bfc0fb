/** Issue 4: outgoing mail is DKIM-signed when DKIM_SELECTOR + DKIM_PRIVATE_KEY_FILE are set (RFC 6376). */
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { startTestServer, type TestServer } from '../support/server.js';
import { startSmtpSink, type SmtpSink } from '../support/smtp-sink.js';

const require = createRequire(import.meta.url);
const { dkimVerify } = require('mailauth/lib/dkim/verify') as {
  dkimVerify: (raw: Buffer, opts: { resolver: (name: string, type: string) => Promise<string[][]> }) => Promise<{ results: Array<{ status: { result: string }; signingDomain: string; selector: string }> }>;
};

let s: TestServer;
let sink: SmtpSink;
let dir: string;
let publicKeyB64: string;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'ais-dkim-'));
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  writeFileSync(path.join(dir, 'dkim.pem'), privateKey.export({ type: 'pkcs8', format: 'pem' }));
  publicKeyB64 = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
  sink = await startSmtpSink();
  s = await startTestServer({ SMTP_RELAY_URL: sink.url, DKIM_SELECTOR: 'ais1', DKIM_PRIVATE_KEY_FILE: path.join(dir, 'dkim.pem'), MAIL_DOMAIN: 'agents.example' });
});
afterAll(async () => {
  await s?.close();
  await sink?.close();
  rmSync(dir, { recursive: true, force: true });
});

it('signs relayed mail with the configured selector; the signature verifies against the published key', async () => {
  const u = await s.signUp();
  const identity = await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'Signer', email_identifier: 'signer' } });
  expect(identity.status).toBe(201);
  const sent = await s.api('POST', '/api/email-messages/compose/', {
    token: u.access,
    identity: identity.body.uuid,
    body: { to: 'someone@elsewhere.example', subject: 'Signed', body: '<p>signed body</p>', cc: '', bcc: '', attachment_uuids: [] },
  });
  expect(sent.status).toBe(201);
  const mail = await sink.waitFor((m) => m.parsed.subject === 'Signed');
  expect(mail.parsed.headers.get('dkim-signature')).toBeTruthy();
  const resolver = async (name: string) => {
    if (name !== 'ais1._domainkey.agents.example') throw Object.assign(new Error('NXDOMAIN'), { code: 'ENOTFOUND' });
    return [[`v=DKIM1; k=rsa; p=${publicKeyB64}`]];
  };
  const verdict = await dkimVerify(mail.raw, { resolver });
  expect(verdict.results[0]).toMatchObject({ signingDomain: 'agents.example', selector: 'ais1', status: { result: 'pass' } });
  // A tampered body fails verification: the test can fail.
  const tampered = Buffer.from(mail.raw.toString('utf8').replace('signed body', 'forged body'));
  const bad = await dkimVerify(tampered, { resolver });
  expect(bad.results[0].status.result).not.toBe('pass');
});

it('refuses to start with half a DKIM configuration, or a selector or domain no signature could carry', async () => {
  await expect(startTestServer({ DKIM_SELECTOR: 'only' })).rejects.toThrow(/DKIM_SELECTOR and DKIM_PRIVATE_KEY_FILE/);
  const key = path.join(dir, 'dkim.pem');
  await expect(startTestServer({ DKIM_SELECTOR: 'bad_sel!', DKIM_PRIVATE_KEY_FILE: key })).rejects.toThrow(/DKIM_SELECTOR must be letters, digits and hyphens/);
  await expect(startTestServer({ DKIM_SELECTOR: 'ais1', DKIM_DOMAIN: 'bad_dom!', DKIM_PRIVATE_KEY_FILE: key })).rejects.toThrow(/DKIM_DOMAIN must be a domain name/);
  const dotted = await startTestServer({ DKIM_SELECTOR: 'Mail-2026.eu', DKIM_DOMAIN: 'Agents.Example', DKIM_PRIVATE_KEY_FILE: key });
  await dotted.close();
});
