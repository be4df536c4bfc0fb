/**
 * `Idempotency-Key` on sends (compose, reply, reply-all; MAIL.md "Sending"): a send repeated
 * with its key answers the same message and sends nothing more, also concurrently, past the
 * send limit and with attachments already used; the key with another request is 422; keys
 * are per identity.
 */
import { startTestServer, type TestServer } from '../support/server.js';
import { startSmtpSink, type SmtpSink } from '../support/smtp-sink.js';
import { eventually } from '../support/eventually.js';

let relay: SmtpSink;
let server: TestServer;
let token: string;
let sender: { uuid: string; inbox: string };
let other: { uuid: string; inbox: string };

beforeAll(async () => {
  relay = await startSmtpSink();
  server = await startTestServer({ EMAIL_LIMIT_HOUR: '4', SMTP_RELAY_URL: relay.url });
  token = (await server.signUp()).access;
  const create = (name: string) => server.api('POST', '/api/identities/', { token, body: { name } }).then((r) => r.body);
  sender = await create('Idempotent sender');
  other = await create('Other sender');
}, 60_000);

afterAll(async () => {
  await server?.close();
  await relay?.close();
});

const compose = (identity: string, key: string | null, body: Record<string, unknown>) =>
  server.api('POST', '/api/email-messages/compose/', { token, body, headers: { 'x-service-identity': identity, ...(key === null ? {} : { 'idempotency-key': key }) } });

const outbound = async (identity: string) =>
  ((await server.api('GET', '/api/email-messages/?limit=200', { token, headers: { 'x-service-identity': identity } })).body as { uuid: string; subject: string; direction: string }[]).filter((m) => m.direction === 'outbound');

describe('Idempotency-Key on sends', () => {
  it('a compose sent again with its key answers the same message (Idempotent-Replayed) and sends nothing more, also when the copies run at once', async () => {
    const mail = { to: 'someone@example.com', subject: 'once only', body: '<p>hi</p>' };
    const first = await compose(sender.uuid, 'key-once', mail);
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const again = await compose(sender.uuid, 'key-once', mail);
    expect([again.status, again.body.uuid, again.headers.get('idempotent-replayed'), again.headers.get('location')]).toEqual([201, first.body.uuid, 'true', `/api/email-messages/${first.body.uuid}/`]);

    const together = await Promise.all(Array.from({ length: 5 }, () => compose(sender.uuid, 'key-together', { ...mail, subject: 'together' })));
    expect(together.map((r) => r.status)).toEqual([201, 201, 201, 201, 201]);
    expect(new Set(together.map((r) => r.body.uuid)).size).toBe(1);
    expect(together.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(4);

    await Promise.all(['once only', 'together'].map((subject) => relay.waitFor((m) => m.parsed.subject === subject)));
    await new Promise((r) => setTimeout(r, 300));
    const relayed = relay.messages.map((m) => m.parsed.subject);
    expect([relayed.filter((s) => s === 'once only').length, relayed.filter((s) => s === 'together').length]).toEqual([1, 1]);
    expect((await outbound(sender.uuid)).filter((m) => m.subject === 'once only' || m.subject === 'together')).toHaveLength(2);
  });

  it('the key with another request is 422 idempotency_key_reused and sends nothing; a key is its identity\'s own', async () => {
    const first = await compose(other.uuid, 'shared-key', { to: 'a@example.com', subject: 'first ask', body: 'x' });
    expect(first.status).toBe(201);
    const changed = await compose(other.uuid, 'shared-key', { to: 'a@example.com', subject: 'second ask', body: 'x' });
    expect([changed.status, changed.body.code]).toEqual([422, 'idempotency_key_reused']);
    expect((await outbound(other.uuid)).map((m) => m.subject)).toEqual(['first ask']);
    // The same key at another identity is another send.
    const elsewhere = await compose(sender.uuid, 'shared-key', { to: 'a@example.com', subject: 'second ask', body: 'x' });
    expect([elsewhere.status, elsewhere.headers.get('idempotent-replayed')]).toEqual([201, null]);
  });

  it('a retry is answered past the send limit, and with its attachment already used; a reply too', async () => {
    const fresh = (await server.api('POST', '/api/identities/', { token, body: { name: `limited ${Date.now()}` } })).body as { uuid: string };
    const h = { 'x-service-identity': fresh.uuid };
    const presign = await server.api('POST', '/api/email-attachments/presign/', { token, headers: h, body: { filename: 'a.txt', content_type: 'text/plain', size: 5 } });
    expect((await fetch(presign.body.upload_url, { method: 'PUT', headers: presign.body.headers, body: 'hello' })).status).toBe(200);
    const withFile = { to: 'b@example.com', subject: 'with a file', body: 'see file', attachment_uuids: [presign.body.uuid] };
    const sent = await compose(fresh.uuid, 'file-key', withFile);
    expect(sent.status).toBe(201);
    for (let i = 0; i < 3; i++) expect((await compose(fresh.uuid, null, { to: 'b@example.com', subject: `filler ${i}`, body: 'x' })).status).toBe(201);
    expect((await compose(fresh.uuid, null, { to: 'b@example.com', subject: 'over', body: 'x' })).status).toBe(429); // the hour's 4 are used
    const retry = await compose(fresh.uuid, 'file-key', withFile);
    expect([retry.status, retry.body.uuid, retry.body.attachments.length]).toEqual([201, sent.body.uuid, 1]);

    // Copies sent at once, the first taking the hour's last place: every copy gets that send
    // (a copy that looked for the key before the first was made found the hour full after).
    const racer = (await server.api('POST', '/api/identities/', { token, body: { name: `racer ${Date.now()}` } })).body as { uuid: string };
    for (let i = 0; i < 3; i++) expect((await compose(racer.uuid, null, { to: 'b@example.com', subject: `filler ${i}`, body: 'x' })).status).toBe(201);
    const copies = await Promise.all(Array.from({ length: 8 }, () => compose(racer.uuid, 'last-place', { to: 'b@example.com', subject: 'last place', body: 'x' })));
    expect(copies.map((r) => r.status)).toEqual(Array(8).fill(201));
    expect(new Set(copies.map((r) => r.body.uuid)).size).toBe(1);

    // A reply repeated with its key: one reply (the limit is full, so a second would be a 429).
    const inbound = await server.api('POST', '/api/email-messages/compose/', { token, headers: { 'x-service-identity': sender.uuid }, body: { to: other.inbox, subject: 'ask me', body: 'q' } });
    expect(inbound.status).toBe(201);
    const received = await eventually(async () => ((await server.api('GET', '/api/email-messages/', { token, headers: { 'x-service-identity': other.uuid } })).body as { uuid: string; subject: string }[]).find((m) => m.subject === 'ask me'), 10_000);
    const reply = (key: string) => server.api('POST', `/api/email-messages/${received.uuid}/reply/`, { token, headers: { 'x-service-identity': other.uuid, 'idempotency-key': key }, body: { body: 'answer' } });
    const r1 = await reply('reply-key');
    const r2 = await reply('reply-key');
    expect([r1.status, r2.status, r2.body.uuid, r2.headers.get('idempotent-replayed')]).toEqual([201, 201, r1.body.uuid, 'true']);
  });

  it('a key that is not 1 to 255 visible ASCII characters is 400 invalid_idempotency_key', async () => {
    for (const key of ['x'.repeat(256), 'two words', 'clé']) {
      const r = await server.api('POST', '/api/email-messages/compose/', { token, headers: { 'x-service-identity': sender.uuid, 'idempotency-key': encodeURI(key) === key ? key : Buffer.from(key).toString('latin1') }, body: { to: 'c@example.com', subject: 's', body: 'b' } });
      expect([key.slice(0, 10), r.status, r.body.code]).toEqual([key.slice(0, 10), 400, 'invalid_idempotency_key']);
    }
  });
});
