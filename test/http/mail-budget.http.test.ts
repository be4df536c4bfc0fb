/**
 * Message bodies held in memory at once are bounded (services/mail/body-budget.ts): uploads
 * and inbound SMTP DATA share the budget, taken as bytes arrive, at most a quarter of it per
 * holder (an uploading identity, an SMTP client's address). Past it an upload is answered
 * 503 (Retry-After) and a mail 452 (the sender retries); nothing is lost once bodies finish.
 */
import net from 'node:net';
import nodemailer from 'nodemailer';
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';
import { eventually } from '../support/eventually.js';
import { BODY_BUDGET_BYTES, HOLDER_SHARE } from '../../services/mail/body-budget.js';
import { MAX_MESSAGE_BYTES } from '../../services/mail/service.js';

let server: TestServer;
let smtpPort: number;
let token: string;
beforeAll(async () => {
  smtpPort = await freePort();
  server = await startTestServer({ SMTP_PORT: String(smtpPort), PASSWORD_HASH_MEMORY_KIB: '1024' });
  token = (await server.signUp()).access;
});
afterAll(() => server.close());

const SHARE = BODY_BUDGET_BYTES / HOLDER_SHARE;
const identity = async (name: string) => (await server.api('POST', '/api/identities/', { token, body: { name } })).body as { uuid: string; inbox: string };
const presign = async (id: string, size: number) =>
  (await server.api('POST', '/api/email-attachments/presign/', { token, identity: id, body: { filename: 'big.bin', content_type: 'application/octet-stream', size } })).body as { upload_url: string };
const put = (upload: { upload_url: string }, size: number) =>
  fetch(upload.upload_url, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array(size) });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** An upload that sends `sent` of its bytes and stalls (it holds what it sent). */
async function stalledUpload(upload: { upload_url: string }, size: number, sent: number): Promise<net.Socket> {
  const url = new URL(upload.upload_url);
  const socket = net.connect(Number(url.port), url.hostname);
  socket.on('error', () => {});
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  socket.write(`PUT ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${size}\r\n\r\n`);
  await new Promise<void>((resolve) => socket.write(Buffer.alloc(sent), () => resolve()));
  return socket;
}

test('an upload is refused its bytes up front when it announces another size, and while the same attachment is being uploaded', async () => {
  const id = await identity('Checks');
  const upload = await presign(id.uuid, 1000);
  const wrong = await put(upload, 1001);
  expect([wrong.status, ((await wrong.json()) as { code: string }).code]).toEqual([400, 'size_mismatch']);
  const first = await stalledUpload(upload, 1000, 10);
  await sleep(300); // its checks done, it waits for the rest of its bytes
  const second = await put(upload, 1000);
  expect([second.status, ((await second.json()) as { code: string }).code]).toEqual([409, 'upload_in_progress']);
  first.destroy();
  expect(await eventually(async () => (await put(upload, 1000)).status === 200)).toBe(true);
});

test("one holder gets a quarter of the budget, so one tenant's bodies hold back nobody else's; all of it full, mail waits its turn", async () => {
  const sender = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
  const reader = await identity('Reader');
  const mail = { from: 'peer@example.com', to: reader.inbox, subject: 'hello', text: 'x'.repeat(2 * 1024 * 1024) };

  // One identity's uploads: past its share, 503 for it; mail from elsewhere still goes in.
  const size = MAX_MESSAGE_BYTES;
  const MiB = 1024 * 1024;
  /** Stalled uploads of one identity holding all its share but a MiB (one upload is at most 25 MiB). */
  const holdShare = async (id: string) => [
    await stalledUpload(await presign(id, size), size, 24 * MiB),
    await stalledUpload(await presign(id, size), size, SHARE - 25 * MiB),
  ];
  const greedy = await identity('Greedy');
  const held = await holdShare(greedy.uuid);
  const more = await presign(greedy.uuid, 4 * 1024 * 1024);
  let refused: Response | null = null;
  expect(await eventually(async () => (refused = await put(more, 4 * 1024 * 1024)).status === 503)).toBe(true);
  expect(refused!.headers.get('retry-after')).toBe('5');
  expect((await sender.sendMail(mail)).response).toMatch(/^250/);

  // Every byte of the budget held (four holders at their share): mail gets 452 until they go.
  for (let i = 1; i < HOLDER_SHARE; i++) {
    const other = await identity(`Holder ${i}`);
    held.push(...(await holdShare(other.uuid)));
  }
  const large = { ...mail, text: 'x'.repeat(6 * MiB) }; // more than the budget has left (4 MiB)
  const full = await eventually(() =>
    sender.sendMail(large).then(
      () => false,
      (err: { responseCode?: number; response?: string }) => err.responseCode === 452 && /4\.3\.1/.test(err.response ?? ''),
    ),
  );
  expect(full).toBe(true);
  for (const socket of held) socket.destroy();
  expect(await eventually(() => sender.sendMail(large).then(() => true, () => false))).toBe(true);
  expect((await put(more, 4 * 1024 * 1024)).status).toBe(200);
}, 60_000);
