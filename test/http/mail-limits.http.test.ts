/**
 * Send limits (EMAIL_LIMIT_HOUR / EMAIL_LIMIT_DAY, rolling windows counted from the event
 * log) and delivery retries against a relay that answers 4xx, then 5xx.
 */
import { SMTPServer } from 'smtp-server';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';
import { eventually } from '../support/eventually.js';

/** A relay that refuses recipients by rule: `tempfail-once@` gets one 451, `tempfail-always@` always 451, `reject@` always 550. */
let attempts: Record<string, number> = {};
/** The RCPT list of each message the relay took. */
const envelopes: string[][] = [];
const relay = new SMTPServer({
  authOptional: true,
  disabledCommands: ['AUTH', 'STARTTLS'],
  logger: false,
  onRcptTo(address, _session, callback) {
    const a = address.address;
    attempts[a] = (attempts[a] ?? 0) + 1;
    if ((a.startsWith('tempfail-once@') && attempts[a] === 1) || a.startsWith('tempfail-always@')) return callback(Object.assign(new Error('4.3.2 try later'), { responseCode: 451 }));
    if (a.startsWith('reject@')) return callback(Object.assign(new Error('5.1.1 no such user'), { responseCode: 550 }));
    callback();
  },
  onData(stream, session, callback) {
    envelopes.push(session.envelope.rcptTo.map((r) => r.address));
    stream.resume();
    stream.on('end', () => callback());
  },
});

let server: TestServer;
let token: string;
let identity: { uuid: string; inbox: string };
let other: { uuid: string };

beforeAll(async () => {
  const relayPort = await freePort();
  await new Promise<void>((resolve) => relay.listen(relayPort, '127.0.0.1', () => resolve()));
  server = await startTestServer({ EMAIL_LIMIT_HOUR: '2', EMAIL_LIMIT_DAY: '3', SMTP_RELAY_URL: `smtp://127.0.0.1:${relayPort}` });
  const user = await server.signUp();
  token = user.access;
  const create = (name: string) => server.api('POST', '/api/identities/', { token, body: { name } }).then((r) => r.body);
  identity = await create('Sender');
  other = await create('Other sender');
}, 60_000);

afterAll(async () => {
  await server?.close();
  await new Promise<void>((resolve) => relay.close(() => resolve()));
});

/** Bytes of every file under DATA_DIR/blobs. */
function blobBytes(): number {
  const walk = (dir: string): number =>
    readdirSync(dir, { withFileTypes: true }).reduce((sum, e) => sum + (e.isDirectory() ? walk(path.join(dir, e.name)) : statSync(path.join(dir, e.name)).size), 0);
  return walk(path.join(server.dataDir, 'blobs'));
}

const compose = (id: string, to: string, subject = 'hi') =>
  server.api('POST', '/api/email-messages/compose/', { token, identity: id, body: { to, subject, body: '<p>hi</p>' } });

describe('send limits', () => {
  test('the third email within an hour answers 429 with Retry-After and a clear detail; other identities are not affected', async () => {
    expect((await compose(identity.uuid, 'a@example.com')).status).toBe(201);
    expect((await compose(identity.uuid, 'b@example.com')).status).toBe(201);
    const third = await compose(identity.uuid, 'c@example.com');
    expect(third.status).toBe(429);
    expect(third.body.detail).toMatch(/2 emails per hour/);
    const retryAfter = Number(third.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(3500);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    // Replies count too.
    const list = await server.api('GET', '/api/email-messages/', { token, identity: identity.uuid });
    const reply = await server.api('POST', `/api/email-messages/${list.body[0].uuid}/reply/`, { token, identity: identity.uuid, body: { body: 'x' } });
    expect(reply.status).toBe(429);
    // Refused before its body is stored: a sender past its limit writes no blobs.
    const stored = blobBytes();
    for (let i = 0; i < 3; i++) {
      const big = await server.api('POST', '/api/email-messages/compose/', { token, identity: identity.uuid, body: { to: 'e@example.com', subject: 'big', body: `<p>${String(i).repeat(200_000)}</p>` } });
      expect(big.status).toBe(429);
    }
    expect(blobBytes()).toBe(stored);
    expect((await compose(other.uuid, 'd@example.com')).status).toBe(201);
  });

  test('concurrent composes never exceed the limit (the append is checked against the stream revision)', async () => {
    const results = await Promise.all([1, 2, 3, 4].map((i) => compose(other.uuid, `p${i}@example.com`)));
    expect(results.filter((r) => r.status === 201)).toHaveLength(1); // one was used above
    expect(results.filter((r) => r.status === 429)).toHaveLength(3);
  });
});

describe('delivery reactor', () => {
  test('a temporary (4xx) relay failure is retried with backoff, then sent', async () => {
    const third = await server.api('POST', '/api/identities/', { token, body: { name: 'Retrier' } });
    const res = await compose(third.body.uuid, 'tempfail-once@example.com', 'retry me');
    expect(res.status).toBe(201);
    const sent = await eventually(async () => {
      const m = await server.api('GET', `/api/email-messages/${res.body.uuid}/`, { token, identity: third.body.uuid });
      return m.body.status === 'sent' && m.body;
    });
    expect(attempts['tempfail-once@example.com']).toBe(2);
    expect(sent.status).toBe('sent');
    const reject = await compose(third.body.uuid, 'reject@example.com', 'bounce');
    const failed = await eventually(async () => {
      const m = await server.api('GET', `/api/email-messages/${reject.body.uuid}/`, { token, identity: third.body.uuid });
      return m.body.status === 'failed' && m.body;
    });
    expect(failed.error).toMatch(/550|5\.1\.1/);
    expect(attempts['reject@example.com']).toBe(1);
  }, 30_000);

  test('deleting an identity stops its mail that has not gone out: a deferred message fails instead of being sent later', async () => {
    const doomed = await server.api('POST', '/api/identities/', { token, body: { name: 'Doomed sender' } });
    // Refused for now at every attempt: whether a retry comes before the deletion or not, only
    // the deletion can end it (retries alone would go on, and fail later saying so).
    const res = await compose(doomed.body.uuid, 'tempfail-always@example.org', 'never after deletion');
    expect(res.status).toBe(201);
    const stream = `delivery-${res.body.uuid}`;
    await eventually(async () => (await server.runtime.events.readStream(stream)).some((e) => e.type === 'EmailDeliveryDeferred'));
    expect((await server.api('DELETE', `/api/identities/${doomed.body.uuid}/`, { token })).status).toBe(204);
    const failed = await eventually(async () => (await server.runtime.events.readStream(stream)).find((e) => e.type === 'EmailFailed'));
    expect((failed.data as { error: string }).error).toMatch(/identity was deleted/);
    const tried = attempts['tempfail-always@example.org'];
    await new Promise((resolve) => setTimeout(resolve, 2500)); // past the first retry's wait (2 s)
    expect(attempts['tempfail-always@example.org']).toBe(tried); // no attempt after it failed
    expect(envelopes.flat()).not.toContain('tempfail-always@example.org');
  }, 30_000);

  test('recipients refused one by one: a 5xx is listed in `rejected`, a 4xx is retried alone; the others get it once', async () => {
    const fourth = await server.api('POST', '/api/identities/', { token, body: { name: 'Mixed' } });
    const res = await compose(fourth.body.uuid, 'ok-mixed@example.com, reject@example.com, tempfail-once@example.net', 'mixed');
    expect(res.status).toBe(201);
    const sent = await eventually(async () => {
      const m = await server.api('GET', `/api/email-messages/${res.body.uuid}/`, { token, identity: fourth.body.uuid });
      return m.body.status === 'sent' && m.body;
    });
    expect(sent.rejected).toEqual(['reject@example.com']);
    const mine = envelopes.filter((to) => to.some((a) => a === 'ok-mixed@example.com' || a === 'tempfail-once@example.net'));
    expect(mine).toEqual([['ok-mixed@example.com'], ['tempfail-once@example.net']]);
  }, 30_000);
});
