/**
 * Message bodies held in memory at once are bounded (services/mail/body-budget.ts): uploads
 * and inbound SMTP DATA share the budget; past it an upload is answered 503 (Retry-After)
 * and a mail 452 (the sender retries), and nothing is lost once bodies finish.
 */
import net from 'node:net';
import nodemailer from 'nodemailer';
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';
import { BODY_BUDGET_BYTES } from '../../services/mail/body-budget.js';
import { MAX_MESSAGE_BYTES } from '../../services/mail/service.js';

let server: TestServer;
let smtpPort: number;
beforeAll(async () => {
  smtpPort = await freePort();
  server = await startTestServer({ SMTP_PORT: String(smtpPort), PASSWORD_HASH_MEMORY_KIB: '1024' });
});
afterAll(() => server.close());

test('uploads and inbound mail wait their turn once bodies in memory reach the budget', async () => {
  const { access: token } = await server.signUp();
  const identity = (await server.api('POST', '/api/identities/', { token, body: { name: 'Budget' } })).body;
  const presign = async () =>
    (await server.api('POST', '/api/email-attachments/presign/', { token, identity: identity.uuid, body: { filename: 'big.bin', content_type: 'application/octet-stream', size: MAX_MESSAGE_BYTES } })).body;

  // Uploads that started and stall hold the budget for what they announced.
  const stalled: net.Socket[] = [];
  const holding = Math.floor(BODY_BUDGET_BYTES / MAX_MESSAGE_BYTES);
  for (let i = 0; i < holding; i++) {
    const url = new URL((await presign()).upload_url);
    const socket = net.connect(Number(url.port), url.hostname);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.on('error', () => {});
    socket.write(`PUT ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${MAX_MESSAGE_BYTES}\r\n\r\nfirst bytes`);
    stalled.push(socket);
  }
  const put = async (upload: { upload_url: string }) =>
    fetch(upload.upload_url, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array(MAX_MESSAGE_BYTES) });
  const next = await presign();
  let refused: Response | null = null;
  for (let i = 0; i < 50 && refused?.status !== 503; i++) {
    await new Promise((r) => setTimeout(r, 20)); // until the stalled ones are in
    refused = await put(next);
  }
  expect([refused!.status, refused!.headers.get('retry-after'), ((await refused!.json()) as { code: string }).code]).toEqual([503, '5', 'service_unavailable']);

  // A mail larger than what is left is refused for now with a temporary 452.
  const sender = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
  const left = BODY_BUDGET_BYTES - holding * MAX_MESSAGE_BYTES;
  const mail = { from: 'peer@example.com', to: identity.inbox, subject: 'large', text: 'x'.repeat(left + 1024) };
  await expect(sender.sendMail(mail)).rejects.toMatchObject({ responseCode: 452, response: expect.stringContaining('4.3.1') });

  // Once the stalled uploads go, both go through.
  for (const socket of stalled) socket.destroy();
  let accepted = null;
  for (let i = 0; i < 50 && !accepted; i++) {
    await new Promise((r) => setTimeout(r, 20));
    accepted = await sender.sendMail(mail).catch(() => null);
  }
  expect(accepted?.response).toMatch(/^250/);
  expect((await put(next)).status).toBe(200);
}, 60_000);
