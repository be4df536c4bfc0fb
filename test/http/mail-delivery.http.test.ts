/**
 * Delivery under trouble: mails a relay keeps deferring wait out their backoff without
 * holding one of the reactor's places (services/kernel/reactor.ts), so they stop no other
 * mail; an outbox that cannot be written defers the mail instead of failing it.
 */
import { jest } from '@jest/globals';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { openDatabase } from '../../infra/sqlite/driver.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { startSmtpSink, type SmtpSink } from '../support/smtp-sink.js';
import { eventually } from '../support/eventually.js';

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
  const greylisted: string[] = [];
  for (let i = 0; i < 10; i++) {
    const res = await compose(`g${i}@greylist.example`, `greylisted ${i}`);
    expect(res.status).toBe(201);
    greylisted.push(res.body.uuid);
  }
  // Every one tried once and waiting out its backoff (its deferral is in the log): a fixed
  // 300 ms could be too short on a loaded machine. All ten only if those waiting give
  // their places up (8 are at work at once).
  const deferred = async () => (await Promise.all(greylisted.map(async (uuid) => (await s.runtime.events.readStream(`delivery-${uuid}`)).some((e) => e.type === 'EmailDeliveryDeferred')))).filter(Boolean).length;
  await eventually(async () => (await deferred()) === greylisted.length).catch(() => undefined);
  expect(await deferred()).toBe(greylisted.length);

  const external = await compose('someone@fine.example', 'fine external');
  expect(external.status).toBe(201);
  const internal = await compose(reader.inbox, 'fine internal');
  expect([internal.status, internal.body.status]).toEqual([201, 'sent']); // answered once delivered (up to 5 s)
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

it('a retry recorded for a time far ahead (a clock set back since) waits no longer than its backoff', async () => {
  let greylisting = true;
  const sink = await startSmtpSink(0, { refuseRcpt: () => (greylisting ? { code: 451, message: '4.7.1 greylisted, try later' } : null) });
  let local = await startTestServer({ SMTP_RELAY_URL: sink.url });
  const dataDir = local.dataDir;
  try {
    const u = await local.signUp();
    const sender = (await local.api('POST', '/api/identities/', { token: u.access, body: { name: 'Clock sender' } })).body as { uuid: string };
    const sent = await local.api('POST', '/api/email-messages/compose/', { token: u.access, identity: sender.uuid, body: { to: 'later@greylist.example', subject: 'retried in time', body: '<p>x</p>' } });
    const stream = `delivery-${sent.body.uuid}`;
    for (let i = 0; i < 100 && !(await local.runtime.events.readStream(stream)).length; i++) await new Promise((r) => setTimeout(r, 50));
    await local.runtime.close();
    // The deferral was recorded while the clock ran a day ahead; it is right again now.
    const db = openDatabase(path.join(dataDir, 'events.sqlite'));
    for (const row of db.prepare("SELECT id, data FROM events WHERE stream = ? AND type = 'EmailDeliveryDeferred'").all(stream) as { id: string; data: string }[]) {
      db.prepare('UPDATE events SET data = ? WHERE id = ?').run(JSON.stringify({ ...JSON.parse(row.data), retryAt: new Date(Date.now() + 86_400_000).toISOString() }), row.id);
    }
    db.close();
    greylisting = false;
    local = await startTestServer({ DATA_DIR: dataDir, SMTP_RELAY_URL: sink.url });
    await sink.waitFor((m) => m.parsed.subject === 'retried in time', 10_000); // its backoff (2 s), not a day
  } finally {
    await local.close();
    await sink.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 30_000);

it('senders of internal mail wait for its outcome on one shared subscription, not one each (EventStoreDB serves a connection ~100 streams)', async () => {
  const u = await s.signUp();
  const identity = async (name: string) => (await s.api('POST', '/api/identities/', { token: u.access, body: { name } })).body as { uuid: string; inbox: string };
  const sender = await identity('Busy sender');
  const reader = await identity('Busy reader');
  const subscribe = jest.spyOn(s.runtime.events, 'subscribeAll');
  try {
    const sends = await Promise.all(
      Array.from({ length: 6 }, (_, i) => s.api('POST', '/api/email-messages/compose/', { token: u.access, identity: sender.uuid, body: { to: reader.inbox, subject: `busy ${i}`, body: '<p>x</p>' } })),
    );
    expect(sends.map((r) => [r.status, r.body.status])).toEqual(sends.map(() => [201, 'sent'])); // each answered with its outcome
    expect(subscribe).not.toHaveBeenCalled();
  } finally {
    subscribe.mockRestore();
  }
}, 30_000);
