/**
 * The delivery reactor's concurrency (services/kernel/reactor.ts): mails a relay keeps
 * deferring wait out their backoff without holding a place, so they stop no other mail.
 */
import { startTestServer, type TestServer } from '../support/server.js';
import { startSmtpSink, type SmtpSink } from '../support/smtp-sink.js';

let s: TestServer;
let relay: SmtpSink;

beforeAll(async () => {
  relay = await startSmtpSink(0, { refuseRcpt: (address) => (address.endsWith('@greylist.example') ? { code: 451, message: '4.7.1 greylisted, try later' } : null) });
  s = await startTestServer({ SMTP_RELAY_URL: relay.url });
});
afterAll(async () => {
  await s?.close();
  await relay?.close();
});

it('mails a relay keeps deferring (more than the 8 at work at once) hold up neither external nor internal mail', async () => {
  const u = await s.signUp();
  const identity = async (name: string) => (await s.api('POST', '/api/identities/', { token: u.access, body: { name } })).body as { uuid: string; inbox: string };
  const sender = await identity('Greylisted sender');
  const reader = await identity('Reader');
  const compose = (to: string, subject: string) => s.api('POST', '/api/email-messages/compose/', { token: u.access, identity: sender.uuid, body: { to, subject, body: '<p>x</p>' } });
  for (let i = 0; i < 10; i++) expect((await compose(`g${i}@greylist.example`, `greylisted ${i}`)).status).toBe(201);
  await new Promise((r) => setTimeout(r, 300)); // every one tried once and waiting out its backoff

  const external = await compose('someone@fine.example', 'fine external');
  expect(external.status).toBe(201);
  const internal = await compose(reader.inbox, 'fine internal');
  expect([internal.status, internal.body.status]).toEqual([201, 'sent']); // answered once delivered (up to 2 s)
  await relay.waitFor((m) => m.parsed.subject === 'fine external', 5_000);
  const inbox = await s.api('GET', '/api/email-inbox/', { token: u.access, identity: reader.uuid });
  expect(inbox.body.map((t: { subject: string }) => t.subject)).toContain('fine internal');
}, 30_000);
