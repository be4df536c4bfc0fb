/**
 * One client address holds at most MAX_CLIENTS_PER_ADDRESS of the SMTP listener's
 * connections (services/mail/smtp.ts): past it `421 4.7.0`, while other addresses still get
 * in and a freed connection can be opened again. Real sockets from two loopback addresses.
 */
import net from 'node:net';
import nodemailer from 'nodemailer';
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';
import { eventually } from '../support/eventually.js';
import { MAX_CLIENTS_PER_ADDRESS } from '../../services/mail/smtp.js';

let server: TestServer;
let smtpPort: number;
let token: string;
beforeAll(async () => {
  smtpPort = await freePort();
  server = await startTestServer({ SMTP_PORT: String(smtpPort), PASSWORD_HASH_MEMORY_KIB: '1024' });
  token = (await server.signUp()).access;
});
afterAll(() => server.close());

/** A raw connection from `localAddress` and the first line the server says to it. */
async function connect(localAddress = '127.0.0.1'): Promise<{ socket: net.Socket; greeting: string }> {
  const socket = net.connect({ port: smtpPort, host: '127.0.0.1', localAddress });
  socket.on('error', () => {});
  const greeting = await new Promise<string>((resolve, reject) => {
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      text += chunk;
      if (text.includes('\r\n')) resolve(text.slice(0, text.indexOf('\r\n')));
    });
    socket.once('close', () => reject(new Error(`closed before a reply: ${JSON.stringify(text)}`)));
  });
  return { socket, greeting };
}

const closed = (socket: net.Socket) => new Promise<void>((resolve) => (socket.destroyed ? resolve() : socket.once('close', () => resolve())));

test('an address past its share of connections is told 421 and let go; others still get in, and a freed connection can be had again', async () => {
  const reader = (await server.api('POST', '/api/identities/', { token, body: { name: 'Reader' } })).body as { uuid: string; inbox: string };
  const held = await Promise.all(Array.from({ length: MAX_CLIENTS_PER_ADDRESS }, () => connect()));
  expect(held.every((c) => c.greeting.startsWith('220 '))).toBe(true);

  const refused = await connect();
  expect(refused.greeting).toBe('421 4.7.0 Too many connections from your address, try again later');
  await closed(refused.socket); // the server hangs up

  // Mail from another address is not held back by the first one's connections.
  const elsewhere = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true, localAddress: '127.0.0.2' });
  const info = await elsewhere.sendMail({ from: 'peer@example.com', to: reader.inbox, subject: 'from elsewhere', text: 'hi' });
  expect(info.response).toMatch(/^250 /);

  // One connection of the first address ends: it may open one again.
  held[0].socket.end('QUIT\r\n');
  await closed(held[0].socket);
  // The server counts the close a moment after it: asked again until it has (bounded by time,
  // not by 50 tries, which a loaded machine could run through first).
  const again = await eventually(async () => {
    const c = await connect();
    return c.greeting.startsWith('220 ') && c;
  }).catch(() => connect()); // never: its greeting says why
  expect(again.greeting).toMatch(/^220 /);
  for (const c of [...held.slice(1), again]) c.socket.destroy();
  const inbox = (await server.api('GET', '/api/email-inbox/', { token, identity: reader.uuid })).body as { subject: string }[];
  expect(inbox.map((t) => t.subject)).toEqual(['from elsewhere']);
});
