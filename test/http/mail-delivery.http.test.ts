/**
 * Delivery under trouble: mails a relay keeps deferring wait out their backoff without
 * holding one of the reactor's places (services/kernel/reactor.ts), so they stop no other
 * mail; an outbox that cannot be written defers the mail instead of failing it.
 */
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
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

it('a message the outbox cannot file (our own disk at fault) is deferred and filed once it can, never failed', async () => {
  const local = await startTestServer({}); // no relay: mail to the outside is filed in DATA_DIR/outbox
  try {
    const u = await local.signUp();
    const sender = (await local.api('POST', '/api/identities/', { token: u.access, body: { name: 'Outbox sender' } })).body as { uuid: string };
    const outbox = path.join(local.dataDir, 'outbox');
    rmSync(outbox, { recursive: true, force: true });
    writeFileSync(outbox, 'a file where the outbox directory should be');
    const sent = await local.api('POST', '/api/email-messages/compose/', { token: u.access, identity: sender.uuid, body: { to: 'someone@external.example', subject: 'filed later', body: '<p>x</p>' } });
    expect(sent.status).toBe(201);
    const history = () => local.runtime.events.readStream(`delivery-${sent.body.uuid}`);
    for (let i = 0; i < 100 && !(await history()).some((e) => e.type === 'EmailDeliveryDeferred'); i++) await new Promise((r) => setTimeout(r, 50));
    const deferred = (await history()).find((e) => e.type === 'EmailDeliveryDeferred');
    expect(deferred?.data.error).toMatch(/^the outbox could not file the message \(E[A-Z]+\)$/); // no server path in it
    const message = async () => (await local.api('GET', `/api/email-messages/${sent.body.uuid}/`, { token: u.access, identity: sender.uuid })).body as { status: string };
    expect((await message()).status).toBe('queued');

    rmSync(outbox);
    for (let i = 0; i < 200 && (await message()).status === 'queued'; i++) await new Promise((r) => setTimeout(r, 50));
    expect((await message()).status).toBe('sent');
    const files = readdirSync(outbox);
    expect(files.filter((f) => f.endsWith('.eml')).length).toBeGreaterThanOrEqual(1);
    expect(files.filter((f) => f.endsWith('.tmp'))).toEqual([]);
  } finally {
    await local.close();
  }
}, 30_000);
