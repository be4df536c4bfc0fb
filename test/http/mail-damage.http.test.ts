/**
 * Damaged blobs (a flipped byte on disk): never served as the blob. A large attachment's
 * download breaks off before its full length; a damaged mail body leaves the rest of the
 * message, and the list holding it, readable (the body shows as missing, and is logged).
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import nodemailer from 'nodemailer';
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';

let s: TestServer;
let smtpPort: number;
let token: string;
let identity: { uuid: string; inbox: string };

beforeAll(async () => {
  smtpPort = await freePort();
  s = await startTestServer({ SMTP_PORT: String(smtpPort) });
  token = (await s.signUp()).access;
  identity = (await s.api('POST', '/api/identities/', { token, body: { name: 'Damage' } })).body;
}, 60_000);
afterAll(async () => {
  await s?.close();
});

const send = (mail: { subject: string; text: string; attachments?: { filename: string; content: Buffer }[] }) =>
  nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true }).sendMail({ from: 'a@example.org', to: identity.inbox, ...mail });
const messages = async () => (await s.api('GET', '/api/email-messages/', { token, identity: identity.uuid })) as { status: number; body: { subject: string; text: string | null; attachments: { download_url: string }[] }[] };

/** Flips one byte of `needle`'s first occurrence in any file under `dir`. */
function damage(dir: string, needle: Buffer): void {
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const file = path.join(entry.parentPath ?? (entry as unknown as { path: string }).path, entry.name);
    const bytes = readFileSync(file);
    const at = bytes.indexOf(needle);
    if (at < 0) continue;
    bytes[at + 10] ^= 0xff;
    writeFileSync(file, bytes);
    return;
  }
  throw new Error('bytes not found on disk');
}

it('a damaged large attachment breaks off before its full length: the client cannot take it for the file', async () => {
  const content = Buffer.alloc(1_500_000, 7);
  content.write('a marker no other file holds', 200_000);
  await send({ subject: 'large', text: 'see attached', attachments: [{ filename: 'big.bin', content }] });
  const url = (await messages()).body.find((m) => m.subject === 'large')!.attachments[0].download_url;
  const intact = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
  expect(Buffer.from(await intact.arrayBuffer()).equals(content)).toBe(true);

  damage(path.join(s.dataDir, 'blobs'), Buffer.from('a marker no other file holds'));
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200); // the damage shows only once the bytes are read
  await expect(res.arrayBuffer()).rejects.toThrow();
}, 30_000);

it('a damaged mail body leaves the message, and the list holding it, readable without that body', async () => {
  const text = `${'a long body that goes to the blob store. '.repeat(600)}the end`;
  await send({ subject: 'long', text });
  expect((await messages()).body.find((m) => m.subject === 'long')!.text?.trim() === text).toBe(true);
  damage(path.join(s.dataDir, 'blobs'), Buffer.from(text)); // the body blob (the raw MIME holds it folded)
  const list = await messages();
  expect(list.status).toBe(200);
  expect(list.body.find((m) => m.subject === 'long')!.text).toBeNull();
  expect(list.body.find((m) => m.subject === 'large')).toBeDefined();
}, 30_000);
