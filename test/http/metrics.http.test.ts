/**
 * GET /metrics (services/kernel/metrics.ts): the operator's Prometheus endpoint. It exists
 * only with METRICS_TOKEN, answers only to it, and counts what the service did: HTTP answers
 * by route pattern (never by path), inbound SMTP outcomes over a real SMTP conversation,
 * appended events by type, open event streams, and how far each read model is.
 */
import nodemailer from 'nodemailer';
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';
import { openSse } from '../support/sse-client.js';

const TOKEN = 'metrics-secret-token';
let s: TestServer;
let smtpPort: number;

beforeAll(async () => {
  smtpPort = await freePort();
  s = await startTestServer({ METRICS_TOKEN: TOKEN, SMTP_PORT: String(smtpPort) });
});
afterAll(async () => s?.close());

const scrape = async (token: string | null = TOKEN) => fetch(`${s.url}/metrics`, { headers: token === null ? {} : { authorization: `Bearer ${token}` } });

/** The value of one sample (`name{labels}`), or undefined when absent. */
async function sample(name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  const text = await (await scrape()).text();
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const inside = /\{([^}]*)\}/.exec(line)?.[1] ?? '';
    if (wanted.every((w) => inside.split(',').includes(w))) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return undefined;
}

describe('GET /metrics', () => {
  it('answers only to METRICS_TOKEN: none 401, wrong 401 token_not_valid, an account credential 403, right 200 in the Prometheus text format', async () => {
    const none = await scrape(null);
    expect(none.status).toBe(401);
    expect(((await none.json()) as { code: string }).code).toBe('not_authenticated');
    const wrong = await scrape('nope');
    expect(wrong.status).toBe(401);
    expect(((await wrong.json()) as { code: string }).code).toBe('token_not_valid');
    // An account's own credential has no access: 403 (as on the admin API), in any form, and
    // it is no wrong guess of the token (those are limited per address).
    const user = await s.signUp();
    const basic = `Basic ${Buffer.from(`${user.user.username}:${user.password}`).toString('base64')}`;
    for (const authorization of [`Bearer ${user.access}`, basic]) {
      const refused = await fetch(`${s.url}/metrics`, { headers: { authorization } });
      expect([refused.status, ((await refused.json()) as { code: string }).code]).toEqual([403, 'permission_denied']);
    }
    const ok = await scrape();
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await ok.text();
    expect(text).toContain('# TYPE ais_http_requests_total counter');
    expect(text).toMatch(/^ais_process_resident_memory_bytes \d+/m);
    expect(text).toMatch(/^ais_nodejs_eventloop_lag_seconds /m);
    // Counted from the start, not from the first scrape (the server has parsed, hashed, served by now).
    expect(Number(/^ais_process_cpu_seconds_total (\S+)/m.exec(text)?.[1])).toBeGreaterThan(0.05);
    // Gauges are not named like counters (promtool check metrics refuses prom-client's three).
    expect(text).not.toMatch(/^# TYPE \S+_total gauge$/m);
  });

  it('does not exist without METRICS_TOKEN (404, as the admin API without ADMIN_TOKEN)', async () => {
    const plain = await startTestServer();
    try {
      const res = await fetch(`${plain.url}/metrics`, { headers: { authorization: 'Bearer anything' } });
      expect(res.status).toBe(404);
      for (const method of ['POST', 'OPTIONS', 'HEAD']) {
        const other = await fetch(`${plain.url}/metrics`, { method });
        expect([method, other.status, other.headers.get('allow')]).toEqual([method, 404, null]);
      }
    } finally {
      await plain.close();
    }
  });

  it('counts HTTP answers by route pattern and status, never by path', async () => {
    const u = await s.signUp();
    const identity = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'Counted' } })).body;
    const route = '/api/identities/:uuid/';
    const before = (await sample('ais_http_requests_total', { method: 'GET', route, status: '200' })) ?? 0;
    for (let i = 0; i < 3; i++) expect((await s.api('GET', `/api/identities/${identity.uuid}/`, { token: u.access })).status).toBe(200);
    expect(await sample('ais_http_requests_total', { method: 'GET', route, status: '200' })).toBe(before + 3);
    expect((await s.api('GET', `/api/no-such-thing-${identity.uuid}/`, { token: u.access })).status).toBe(404);
    const text = await (await scrape()).text();
    expect(text).not.toContain(identity.uuid); // ids never become labels
    expect(await sample('ais_http_requests_total', { method: 'GET', route: 'unmatched', status: '404' })).toBeGreaterThanOrEqual(1);
    expect(await sample('ais_http_request_duration_seconds_count', { method: 'GET', route })).toBeGreaterThanOrEqual(3);
  });

  it('counts inbound SMTP outcomes and the events appended, and shows open event streams and read-model positions', async () => {
    const u = await s.signUp();
    const identity = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'Mailbox', email_identifier: 'counted' } })).body;
    const accepted = (await sample('ais_smtp_messages_total', { outcome: 'accepted' })) ?? 0;
    const received = (await sample('ais_events_appended_total', { type: 'EmailReceived' })) ?? 0;
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
    await transport.sendMail({ from: 'ann@example.com', to: identity.inbox, subject: 'hello', text: 'counted' });
    await expect(transport.sendMail({ from: 'ann@example.com', to: 'nobody@agents.localhost', subject: 'x', text: 'x' })).rejects.toThrow(/550/);
    transport.close();
    expect(await sample('ais_smtp_messages_total', { outcome: 'accepted' })).toBe(accepted + 1);
    expect(await sample('ais_smtp_messages_total', { outcome: 'recipient_rejected' })).toBeGreaterThanOrEqual(1);
    expect(await sample('ais_events_appended_total', { type: 'EmailReceived' })).toBe(received + 1);

    const streams = (await sample('ais_sse_streams')) ?? 0;
    const sse = await openSse(`${s.url}/api/events/stream/`, { authorization: `Bearer ${u.access}`, 'x-service-identity': identity.uuid });
    expect(sse.status).toBe(200);
    expect(await sample('ais_sse_streams')).toBe(streams + 1);
    sse.close();

    // Every read model is at the head once the writes settled, also those the last events did
    // not touch (their stored checkpoints move only every thousand events: an alert on the
    // stored ones would see a healthy service lagging).
    // (One scrape holds both; a reactor's record, as a sign-up's verification mail, may land between two.)
    const reading = async () => {
      const text = await (await scrape()).text();
      const head = Number(/^ais_event_store_head_position (\d+)$/m.exec(text)?.[1]);
      const positions = [...text.matchAll(/^ais_projection_position\{projection="([^"]+)"\} (\d+)$/gm)].map((m) => Number(m[2]));
      return { head, positions };
    };
    let r = await reading();
    for (let i = 0; i < 40 && r.positions.some((p) => p !== r.head); i++) r = (await new Promise((ok) => setTimeout(ok, 50)), await reading());
    expect(r.head).toBeGreaterThan(0);
    expect(r.positions.length).toBeGreaterThanOrEqual(9);
    expect(r.positions.every((p) => p === r.head)).toBe(true);
  });
});
