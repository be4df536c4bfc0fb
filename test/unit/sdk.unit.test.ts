/** SDK client behaviour (SPEC "Errors": retry 5xx with backoff; 401 token_expired: refresh and retry). */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { eventually } from '../support/eventually.js';
import { ApiRequestError, createClient, isEmailEvent, isSmsEvent, SseParser, UnexpectedResponseError, UnlockedVault, VaultKey } from '../../services/sdk/index.js';
import { nextLink, retryAfterMs } from '../../services/sdk/client.js';

type Handler = (req: http.IncomingMessage, body: string, res: http.ServerResponse) => void;
let server: http.Server;
let url: string;
let handler: Handler;
const seen: { method: string; url: string; headers: http.IncomingHttpHeaders; body: string; raw: Buffer }[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const body = raw.toString('utf8');
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body, raw });
      handler(req, body, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));
beforeEach(() => (seen.length = 0));

/** Runs `body` with a server that takes connections and never answers (a frozen process); `connections()` counts them. */
async function withSilentServer(body: (url: string, connections: () => number) => Promise<void>): Promise<void> {
  const sockets: net.Socket[] = [];
  const silent = net.createServer((socket) => void sockets.push(socket));
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  try {
    await body(`http://127.0.0.1:${(silent.address() as AddressInfo).port}`, () => sockets.length);
  } finally {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((r) => silent.close(() => r()));
  }
}

const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(body === undefined ? undefined : JSON.stringify(body));
};

describe('retries', () => {
  test('a GET answered 503 twice is retried with backoff and then succeeds', async () => {
    let n = 0;
    handler = (_q, _b, res) => (++n < 3 ? json(res, 503, { detail: 'busy' }) : json(res, 200, { kind: 'jwt' }));
    const c = createClient({ baseUrl: url, token: 't', backoffMs: 5 });
    await expect(c.whoami()).resolves.toMatchObject({ kind: 'jwt' });
    expect(seen).toHaveLength(3);
  });

  test('a credential or identity no header can carry is refused before sending, without quoting it (not retried as a network failure)', async () => {
    handler = (_q, _b, res) => json(res, 200, []);
    const calls = [() => createClient({ baseUrl: url, managementKey: 'svc_mgmt_SECRET\nrest', backoffMs: 1 }).whoami(), () => createClient({ baseUrl: url, token: 't', identity: 'a\u202eb\u{1F600}', backoffMs: 1 }).email.inbox()];
    for (const call of calls) {
      const err = await call().catch((e) => e);
      expect([err.name, err.message]).toEqual(['TypeError', expect.stringMatching(/header cannot carry the value given/)]);
      expect(err.message).not.toContain('SECRET');
    }
    expect(seen).toHaveLength(0);
  });

  test('a POST answered 500 is NOT retried (it may have been applied)', async () => {
    handler = (_q, _b, res) => json(res, 500, { detail: 'Internal server error.' });
    const c = createClient({ baseUrl: url, token: 't', backoffMs: 5 });
    await expect(c.identities.create({ name: 'x' })).rejects.toMatchObject({ status: 500 });
    expect(seen).toHaveLength(1);
  });

  test('a POST answered 503 with Retry-After is NOT sent again (projection_lag: the write was saved)', async () => {
    handler = (_q, _b, res) => json(res, 503, { detail: 'The change was saved but is not readable yet; retry shortly.', code: 'projection_lag' }, { 'retry-after': '1' });
    const c = createClient({ baseUrl: url, managementKey: 'svc_mgmt_x', identity: 'i1', backoffMs: 1 });
    const err = await c.identities.create({ name: 'x' }).catch((e) => e);
    expect(err).toMatchObject({ status: 503, code: 'projection_lag', retryAfter: 1 });
    expect(seen).toHaveLength(1);
  });

  test('a send carries an Idempotency-Key and is retried with the same key after a 5xx or a lost answer (the service answers the repeat with the first send)', async () => {
    let n = 0;
    handler = (_q, _b, res) => {
      n += 1;
      if (n === 1) return json(res, 503, { detail: 'saved, not readable yet', code: 'projection_lag' }, { 'retry-after': '0' });
      if (n === 2) return res.destroy(); // the answer is lost
      json(res, 201, { uuid: 'm1' });
    };
    const c = createClient({ baseUrl: url, managementKey: 'svc_mgmt_x', identity: 'i1', backoffMs: 1 });
    await expect(c.email.compose({ to: 'a@example.com', subject: 's', body: 'b' })).resolves.toEqual({ uuid: 'm1' });
    const keys = seen.map((r) => r.headers['idempotency-key']);
    expect(keys).toHaveLength(3);
    expect(new Set(keys).size).toBe(1);
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
    // A key of the caller's own, and a new one for each call that names none.
    seen.length = 0;
    await c.email.reply('m1', { body: 'r' }, { idempotencyKey: 'my-key' });
    await c.email.replyAll('m1', { body: 'r' });
    await c.email.replyAll('m1', { body: 'r' });
    expect(seen[0].headers['idempotency-key']).toBe('my-key');
    expect(seen[1].headers['idempotency-key']).not.toBe(seen[2].headers['idempotency-key']);
  });

  test('gives up after `retries` attempts with the last error', async () => {
    handler = (_q, _b, res) => json(res, 502, { detail: 'bad gateway' });
    const c = createClient({ baseUrl: url, token: 't', backoffMs: 1, retries: 2 });
    await expect(c.identities.list()).rejects.toBeInstanceOf(ApiRequestError);
    expect(seen).toHaveLength(3);
  });

  test('429 waits for Retry-After, for a POST too', async () => {
    let n = 0;
    handler = (_q, _b, res) => (++n === 1 ? json(res, 429, { detail: 'slow down', code: 'throttled' }, { 'retry-after': '1' }) : json(res, 201, { uuid: 'm1' }));
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1' });
    const t0 = Date.now();
    await expect(c.email.compose({ to: 'a@b.c', subject: 's', body: 'b' })).resolves.toEqual({ uuid: 'm1' });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(950);
    expect(seen).toHaveLength(2);
  });

  test('429 asking for longer than maxDelayMs (a send limit for the hour) fails at once with its Retry-After, no futile retries', async () => {
    handler = (_q, _b, res) => json(res, 429, { detail: 'Email send limit reached. Try again in 3509 seconds.', code: 'throttled' }, { 'retry-after': '3509' });
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1' });
    const t0 = Date.now();
    const err = await c.email.compose({ to: 'a@b.c', subject: 's', body: 'b' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiRequestError);
    expect([(err as ApiRequestError).status, (err as ApiRequestError).code]).toEqual([429, 'throttled']);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(seen).toHaveLength(1);
  });

  test('timeoutMs gives up on an attempt with no answer: a GET is retried, then fails as a NetworkError', async () => {
    handler = (_q, _b, res) => setTimeout(() => json(res, 200, []), 1000); // answers too late
    const c = createClient({ baseUrl: url, managementKey: 'svc_mgmt_x', timeoutMs: 100, retries: 1, backoffMs: 1 });
    const err = await c.identities.list().catch((e) => e);
    expect(err.name).toBe('NetworkError');
    expect(err.message).toMatch(/Cannot reach/);
    expect(seen.length).toBeGreaterThanOrEqual(2);
  });

  test('timeoutMs bounds the wait for an answer, not the reading of a slow body', async () => {
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('[{"uuid":');
      setTimeout(() => res.end('"a"}]'), 2000);
    };
    // Headers at once, the body after 4 × timeoutMs (a timeout this short loses to a slow machine).
    const c = createClient({ baseUrl: url, managementKey: 'svc_mgmt_x', timeoutMs: 500 });
    expect(await c.identities.list()).toEqual([{ uuid: 'a' }]);
  });

  test('network errors on GET are retried', async () => {
    let n = 0;
    handler = (req, _b, res) => {
      if (++n === 1) return req.socket.destroy();
      json(res, 200, []);
    };
    const c = createClient({ baseUrl: url, token: 't', backoffMs: 1 });
    await expect(c.identities.list()).resolves.toEqual([]);
  });
});

describe('refresh on 401 token_expired', () => {
  test('refreshes once, retries once with the new token and reports the new pair', async () => {
    handler = (req, body, res) => {
      if (req.url === '/api/auth/token/refresh/') {
        expect(JSON.parse(body)).toEqual({ refresh: 'r1' });
        return json(res, 200, { access: 'a2', refresh: 'r2' });
      }
      if (req.headers.authorization === 'Bearer a2') return json(res, 200, { pk: 1, username: 'u' });
      json(res, 401, { detail: 'expired', code: 'token_expired' });
    };
    const saved: unknown[] = [];
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1', onTokens: (t) => void saved.push(t) });
    await expect(c.auth.user()).resolves.toEqual({ pk: 1, username: 'u' });
    expect(saved).toEqual([{ access: 'a2', refresh: 'r2' }]);
    expect(seen.map((s) => s.url)).toEqual(['/api/auth/user/', '/api/auth/token/refresh/', '/api/auth/user/']);
  });

  test('logout sends the refresh token held, so an expired access token still signs out', async () => {
    handler = (_req, _b, res) => json(res, 200, { detail: 'Successfully logged out.' });
    await createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1' }).auth.logout();
    await createClient({ baseUrl: url, token: 'a1' }).auth.logout();
    expect(seen.map((s) => [s.url, s.body && JSON.parse(s.body)])).toEqual([
      ['/api/auth/logout/', { refresh: 'r1' }],
      ['/api/auth/logout/', {}],
    ]);
  });

  test('concurrent 401s share ONE refresh (refresh tokens rotate)', async () => {
    handler = (req, _b, res) => {
      if (req.url === '/api/auth/token/refresh/') return setTimeout(() => json(res, 200, { access: 'a2', refresh: 'r2' }), 20);
      if (req.headers.authorization === 'Bearer a2') return json(res, 200, []);
      json(res, 401, { detail: 'expired', code: 'token_expired' });
    };
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1' });
    await Promise.all([c.identities.list(), c.keys.management.list(), c.keys.identity.list()]);
    expect(seen.filter((s) => s.url === '/api/auth/token/refresh/')).toHaveLength(1);
  });

  test('a 401 that arrives after the refresh it needed is done takes the new token without refreshing again', async () => {
    let refreshed = false;
    let releaseLate!: () => void;
    const late = new Promise<void>((resolve) => (releaseLate = resolve));
    handler = (req, _b, res) => {
      if (req.url === '/api/auth/token/refresh/') {
        refreshed = true;
        return json(res, 200, { access: 'a2', refresh: 'r2' });
      }
      if (req.headers.authorization === 'Bearer a2') return json(res, 200, []);
      // The keys list's 401 is held until the refresh the identities list asked for is done.
      if (req.url?.startsWith('/api/auth/keys/')) return void late.then(() => json(res, 401, { detail: 'expired', code: 'token_expired' }));
      json(res, 401, { detail: 'expired', code: 'token_expired' });
    };
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1' });
    const keys = c.keys.management.list();
    await c.identities.list();
    expect(refreshed).toBe(true);
    releaseLate();
    await expect(keys).resolves.toEqual([]);
    expect(seen.filter((s) => s.url === '/api/auth/token/refresh/')).toHaveLength(1);
    expect(c.tokens).toEqual({ access: 'a2', refresh: 'r2' });
  });

  test('withIdentity copies share the one refresh too (two exchanges would revoke the family)', async () => {
    handler = (req, _b, res) => {
      if (req.url === '/api/auth/token/refresh/') return setTimeout(() => json(res, 200, { access: 'a2', refresh: 'r2' }), 20);
      if (req.headers.authorization === 'Bearer a2') return json(res, 200, []);
      json(res, 401, { detail: 'expired', code: 'token_expired' });
    };
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1', identity: 'A' });
    await Promise.all([c.email.inbox({ limit: 1 }), c.withIdentity('B').email.inbox({ limit: 1 })]);
    expect(seen.filter((s) => s.url === '/api/auth/token/refresh/')).toHaveLength(1);
  });

  test('a refused refresh surfaces as token_expired and is not retried again', async () => {
    handler = (req, _b, res) =>
      req.url === '/api/auth/token/refresh/' ? json(res, 401, { detail: 'Token is invalid or expired', code: 'token_expired' }) : json(res, 401, { detail: 'expired', code: 'token_expired' });
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1' });
    await expect(c.whoami()).rejects.toMatchObject({ status: 401, code: 'token_expired' });
    expect(seen).toHaveLength(2);
  });

  test('timeoutMs bounds the refresh too: a service that does not answer it fails as a NetworkError, the refresh not sent again', async () => {
    handler = (req, _b, res) => {
      if (req.url !== '/api/auth/token/refresh/') return json(res, 401, { detail: 'expired', code: 'token_expired' });
      const late = setTimeout(() => json(res, 200, { access: 'a2', refresh: 'r2' }), 10_000);
      res.on('close', () => clearTimeout(late)); // the client gave up: nothing left to answer
    };
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1', timeoutMs: 1000, backoffMs: 1 });
    const started = Date.now();
    const err = await c.whoami().catch((e) => e);
    expect([err.name, err.message]).toEqual(['NetworkError', `Cannot reach ${url}: no answer in time`]);
    expect(Date.now() - started).toBeLessThan(8000);
    expect(seen.filter((s) => s.url === '/api/auth/token/refresh/')).toHaveLength(1);
  });

  test('401 with another code is not refreshed', async () => {
    handler = (_q, _b, res) => json(res, 401, { detail: 'bad', code: 'token_not_valid' });
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1' });
    await expect(c.whoami()).rejects.toMatchObject({ code: 'token_not_valid' });
    expect(seen).toHaveLength(1);
  });
});

describe('errors and identity', () => {
  test('validation errors carry fields', async () => {
    handler = (_q, _b, res) => json(res, 400, { name: ['This field is required.'] });
    const c = createClient({ baseUrl: url, managementKey: 'svc_mgmt_x' });
    const err = await c.identities.create({ name: '' }).catch((e) => e);
    expect(err).toBeInstanceOf(ApiRequestError);
    expect(err).toMatchObject({ status: 400, fields: { name: ['This field is required.'] } });
  });

  test('withIdentity sends X-Service-Identity; account calls send none', async () => {
    handler = (_q, _b, res) => json(res, 200, []);
    const c = createClient({ baseUrl: url, managementKey: 'svc_mgmt_x' });
    await c.withIdentity('id-1').sms.inbox({ unread: true });
    await c.withIdentity('id-1').identities.list();
    expect(seen[0].headers['x-service-identity']).toBe('id-1');
    expect(seen[0].url).toBe('/api/sms-inbox/?unread=true');
    expect(seen[0].headers.authorization).toBe('Bearer svc_mgmt_x');
    expect(seen[1].headers['x-service-identity']).toBeUndefined();
  });

  test('lists follow Link rel="next"', async () => {
    handler = (req, _b, res) =>
      req.url === '/api/identities/' ? json(res, 200, [{ uuid: 'a' }], { link: `<${url}/api/identities/?cursor=c2>; rel="next"` }) : json(res, 200, [{ uuid: 'b' }]);
    const c = createClient({ baseUrl: url, token: 't' });
    expect((await c.identities.list()).map((i) => i.uuid)).toEqual(['a', 'b']);
  });

  test('a next link naming another host (the service\'s PUBLIC_URL) is followed on the client\'s own base URL, the credential with it', async () => {
    handler = (req, _b, res) =>
      req.url === '/api/identities/' ? json(res, 200, [{ uuid: 'a' }], { link: '<http://public.invalid/api/identities/?cursor=c2>; rel="next"' }) : json(res, 200, [{ uuid: 'b' }]);
    const c = createClient({ baseUrl: url, token: 't' });
    expect((await c.identities.list()).map((i) => i.uuid)).toEqual(['a', 'b']);
    expect(seen.map((r) => [r.url, r.headers.authorization])).toEqual([
      ['/api/identities/', 'Bearer t'],
      ['/api/identities/?cursor=c2', 'Bearer t'],
    ]);
  });

  test('register switches the client to the new account\'s tokens, as login does', async () => {
    handler = (req, _b, res) => (req.url === '/api/auth/social/' ? json(res, 201, { access: 'fresh', refresh: 'r', user: { pk: 7, username: 'ada', email: 'a@x' } }) : json(res, 200, []));
    const c = createClient({ baseUrl: url });
    await c.auth.register({ username: 'ada', email: 'a@x', password1: 'p', password2: 'p' });
    await c.identities.list();
    expect([seen[0].headers.authorization, seen[1].headers.authorization]).toEqual([undefined, 'Bearer fresh']);
  });

  test('bindIdentity switches the client to the bound tokens', async () => {
    handler = (req, _b, res) => (req.url === '/api/auth/bind-identity/' ? json(res, 200, { access: 'bound', refresh: 'r2', identity: 'i9' }) : json(res, 200, []));
    const c = createClient({ baseUrl: url, token: 't', refreshToken: 'r1' });
    expect(await c.auth.bindIdentity('i9')).toEqual({ access: 'bound', refresh: 'r2', identity: 'i9' });
    await c.identities.list();
    expect(seen[1].headers.authorization).toBe('Bearer bound');
  });

  test('device polling: pending is an answer, expired_token is device_code_expired', async () => {
    let n = 0;
    handler = (_q, _b, res) => (++n === 1 ? json(res, 400, { error: 'authorization_pending' }) : json(res, 400, { error: 'expired_token', code: 'device_code_expired', detail: 'expired' }));
    const c = createClient({ baseUrl: url });
    await expect(c.auth.devicePoll('dc', { wait: true })).resolves.toEqual({ error: 'authorization_pending' });
    expect(JSON.parse(seen[0].body)).toEqual({ device_code: 'dc', wait: true });
    await expect(c.auth.devicePoll('dc')).rejects.toMatchObject({ code: 'device_code_expired' });
  });

  test('waiting for approval rides out a service restart: a cut connection or a 503 mid-poll is polled again', async () => {
    let n = 0;
    handler = (req, _b, res) => {
      n += 1;
      if (n === 1) return req.socket.destroy(); // the service went down mid-poll
      if (n === 2) return json(res, 503, { detail: 'starting', code: 'service_unavailable' });
      json(res, 200, { access: 'a', refresh: 'r', user: { pk: 1, username: 'u', email: 'u@x' } });
    };
    const c = createClient({ baseUrl: url, backoffMs: 1, retries: 0 });
    const tokens = await c.auth.deviceWait({ device_code: 'dc', user_code: 'ABCD-EFGH', verification_uri: 'x', verification_uri_complete: 'x', expires_in: 60, interval: 1 } as never, { wait: true });
    expect([tokens.access, n]).toEqual(['a', 3]);
  }, 15_000);
});

describe('answers of something else at the address (a web page, another service)', () => {
  const page = (res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<html><body>Sign in to the proxy</body></html>');
  };

  test('an HTML page, JSON of another shape, nothing: an UnexpectedResponseError naming the call and the address, not retried', async () => {
    const c = createClient({ baseUrl: url, managementKey: 'svc_mgmt_x', identity: 'i1', backoffMs: 1 });
    const cases: Array<[http.RequestListener, () => Promise<unknown>, string]> = [
      [(_q, res) => page(res), () => c.identities.list(), 'GET /api/identities/ with an HTML page'],
      [(_q, res) => json(res, 200, { ok: true, items: {} }), () => c.identities.create({ name: 'x' }), 'POST /api/identities/ with JSON of another shape (an object with "uuid" expected)'],
      [(_q, res) => json(res, 200, { ok: true }), () => c.email.inbox(), 'GET /api/email-inbox/ with JSON of another shape (a list of objects with "thread_id" expected)'],
      [(_q, res) => json(res, 200, [{ uuid: 'a' }, null]), () => c.identities.list({ limit: 10 }), 'GET /api/identities/ with JSON of another shape (a list of objects with "uuid" expected)'],
      [(_q, res) => json(res, 200, null), () => c.whoami(), 'GET /api/health/whoami/ with JSON of another shape (an object with "kind" expected)'],
      [(_q, res) => res.writeHead(200).end(), () => c.email.compose({ to: 'a@b.c', subject: 's', body: 'b' }), 'POST /api/email-messages/compose/ with nothing'],
      [(_q, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"uuid":'), () => c.vault.list(), 'GET /api/vault/ with JSON that does not parse'],
      [(_q, res) => page(res), () => c.auth.devicePoll('dc'), 'POST /api/auth/device/token/ with an HTML page'],
    ];
    for (const [answer, call, said] of cases) {
      seen.length = 0;
      handler = (q, _b, res) => answer(q, res);
      const err = await call().then(() => undefined, (e: Error & { code?: string; status?: number }) => e);
      expect(err).toBeInstanceOf(UnexpectedResponseError);
      expect([err?.code, err?.status, err?.message]).toEqual(['unexpected_response', 200, `${url} answered ${said}, not with this service's API: is ${url} the service's address?`]);
      expect(seen).toHaveLength(1);
    }
  });

  test('an operation without a body, an attachment download, a 4xx page: unexpected too; a proxy\'s 502, 413 and 429 pages stay API errors, said without the page', async () => {
    const c = createClient({ baseUrl: url, managementKey: 'svc_mgmt_x', identity: 'i1', retries: 0 });
    const cases: Array<[http.RequestListener, () => Promise<unknown>, string]> = [
      [(_q, res) => page(res), () => c.identities.delete('abc'), 'DELETE /api/identities/abc/ with an HTML page where no body was due'],
      [(_q, res) => page(res), () => c.auth.verify('t'), 'POST /api/auth/token/verify/ with an HTML page where no body was due'],
      [(_q, res) => page(res), () => c.email.download('att-1'), 'GET /api/email-attachments/att-1/ with an HTML page that is no attachment download (no Content-Disposition: attachment)'],
      [(_q, res) => res.writeHead(404, { 'content-type': 'text/html' }).end('<h1>Not Found</h1>'), () => c.identities.get('abc'), 'GET /api/identities/abc/ with an HTML page (HTTP 404)'],
      [(_q, res) => res.writeHead(404, { 'content-type': 'text/plain' }).end('404 page not found'), () => c.keys.management.revoke('k'), 'DELETE /api/auth/keys/management/k/ with a text/plain document (HTTP 404)'],
    ];
    for (const [answer, call, said] of cases) {
      handler = (q, _b, res) => answer(q, res);
      const err = (await call().catch((e: Error) => e)) as Error;
      expect([err.constructor, err.message]).toEqual([UnexpectedResponseError, `${url} answered ${said}, not with this service's API: is ${url} the service's address?`]);
    }
    // What a proxy in front says by itself is what it means (and the page is not pasted into the message).
    for (const [status, text] of [[502, 'Bad Gateway'], [413, 'Payload Too Large'], [429, 'Too Many Requests']] as const) {
      handler = (_q, _b, res) => res.writeHead(status, { 'content-type': 'text/html' }).end(`<html><body><h1>${status}</h1>${'x'.repeat(2000)}</body></html>`);
      const err = await c.identities.list().catch((e) => e);
      expect([err.constructor, err.status, err.detail]).toEqual([ApiRequestError, status, `${text} (an HTML page)`]);
    }
    // The real answers pass: 204s, an empty 200 of verify, a download marked as one (an HTML file too).
    handler = (q, _b, res) => {
      if (q.method === 'DELETE') return res.writeHead(204).end();
      if (q.url === '/api/auth/token/verify/') return res.writeHead(200).end();
      res.writeHead(200, { 'content-type': 'text/html', 'content-disposition': 'attachment; filename="page.html"' }).end('<p>a file</p>');
    };
    await expect(c.identities.delete('abc')).resolves.toBeNull();
    await expect(c.auth.verify('t')).resolves.toBeNull();
    await expect(c.email.download('att-1')).resolves.toEqual({ bytes: new TextEncoder().encode('<p>a file</p>'), contentType: 'text/html' });
  });

  test('a token refresh answered with a page is unexpected too; `access_token` (a spelling of the spec\'s) is taken', async () => {
    let refreshAnswer: (res: http.ServerResponse) => void = page;
    handler = (req, _b, res) => {
      if (req.url === '/api/auth/token/refresh/') return refreshAnswer(res);
      if (req.headers.authorization === 'Bearer a2') return json(res, 200, { pk: 1, username: 'u' });
      json(res, 401, { detail: 'expired', code: 'token_expired' });
    };
    const err = await createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1' }).auth.user().catch((e) => e);
    expect(err).toBeInstanceOf(UnexpectedResponseError);
    expect(err.message).toContain('answered POST /api/auth/token/refresh/ with an HTML page');
    refreshAnswer = (res) => json(res, 200, { access_token: 'a2', refresh: 'r2' });
    await expect(createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1' }).auth.user()).resolves.toEqual({ pk: 1, username: 'u' });
    refreshAnswer = (res) => json(res, 200, { token: 'a2' });
    await expect(createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1' }).auth.user()).rejects.toThrow('with JSON of another shape (an object with "access" expected)');
  });

  test('what the schemas do not describe is answered as before (JSON when it parses, else the text); a path under a prefix is still checked', async () => {
    handler = (_q, _b, res) => page(res);
    const c = createClient({ baseUrl: url, token: 't' });
    await expect(c.request('GET', '/api/something-new/')).resolves.toBe('<html><body>Sign in to the proxy</body></html>');
    await expect(createClient({ baseUrl: `${url}/ais`, token: 't' }).identities.list()).rejects.toThrow(`${url}/ais answered GET /api/identities/ with an HTML page`);
    // A literal path is not taken for a template's: compose/ is no message id.
    handler = (_q, _b, res) => json(res, 201, { uuid: 'm1', extra: 1 });
    await expect(c.withIdentity('i1').email.compose({ to: 'a@b.c', subject: 's', body: 'b' })).resolves.toEqual({ uuid: 'm1', extra: 1 });
  });
});

describe('attachment upload', () => {
  const presign = (res: http.ServerResponse, uploadUrl: string) =>
    json(res, 201, { uuid: 'att-1', upload_url: uploadUrl, method: 'PUT', headers: { 'x-amz-meta': 'm' }, expires_at: new Date().toISOString() });

  test('streams with Content-Length (not chunked), reports growing progress ending at the total', async () => {
    const data = new Uint8Array(300 * 1024 + 3).map((_, i) => i % 251);
    handler = (req, _b, res) => (req.url === '/api/email-attachments/presign/' ? presign(res, `${url}/upload/att-1/?sig=x`) : json(res, 200, { status: 'uploaded' }));
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1' });
    const calls: [number, number][] = [];
    await expect(c.email.upload({ filename: 'a.bin', data }, (s, t) => calls.push([s, t]))).resolves.toBe('att-1');
    const put = seen[1];
    expect(put.method).toBe('PUT');
    expect(put.headers['content-length']).toBe(String(data.byteLength));
    expect(put.headers['transfer-encoding']).toBeUndefined();
    expect(put.headers['content-type']).toBe('application/octet-stream');
    expect(put.headers['x-amz-meta']).toBe('m');
    expect(Buffer.compare(put.raw, Buffer.from(data))).toBe(0);
    expect(JSON.parse(seen[0].body)).toEqual({ filename: 'a.bin', content_type: 'application/octet-stream', size: data.byteLength });
    expect(calls.length).toBeGreaterThan(2);
    expect(calls.at(-1)).toEqual([data.byteLength, data.byteLength]);
    for (let i = 1; i < calls.length; i++) expect(calls[i][0]).toBeGreaterThanOrEqual(calls[i - 1][0]);
  });

  test('the Bearer goes to our own origin only, never to a foreign presigned URL', async () => {
    handler = (req, _b, res) => (req.url === '/api/email-attachments/presign/' ? presign(res, `http://localhost:${new URL(url).port}/up/`) : json(res, 200, {}));
    const c = createClient({ baseUrl: url, token: 'secret-token', identity: 'i1' });
    await c.email.upload({ filename: 'a.txt', content_type: 'text/plain', data: new TextEncoder().encode('hi') });
    expect(seen[1].headers.authorization).toBeUndefined(); // localhost is another origin than 127.0.0.1
    expect(seen[0].headers.authorization).toBe('Bearer secret-token');
  });

  test('a 503 is retried; a 409 already_uploaded on the retry means the first one landed', async () => {
    let puts = 0;
    handler = (req, _b, res) => {
      if (req.url === '/api/email-attachments/presign/') return presign(res, `${url}/upload/`);
      return ++puts === 1 ? json(res, 503, { detail: 'busy' }) : json(res, 409, { detail: 'done', code: 'already_uploaded' });
    };
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1', backoffMs: 1 });
    await expect(c.email.upload({ filename: 'a.txt', data: new Uint8Array(10) })).resolves.toBe('att-1');
    expect(puts).toBe(2);
  });

  test('with a fetch of the caller\'s own, the presign\'s `Content-Type` is sent once (it was joined with ours: "text/plain, text/plain")', async () => {
    handler = (req, _b, res) => {
      if (req.url === '/api/email-attachments/presign/') {
        return json(res, 201, { uuid: 'att-1', upload_url: `${url}/upload/`, method: 'PUT', headers: { 'Content-Type': 'text/plain' }, expires_at: new Date().toISOString() });
      }
      json(res, 200, { status: 'uploaded' });
    };
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1', fetch: (input, init) => fetch(input, init) });
    await expect(c.email.upload({ filename: 'a.txt', content_type: 'text/plain', data: new TextEncoder().encode('hi') })).resolves.toBe('att-1');
    expect(seen[1].headers['content-type']).toBe('text/plain');
  });

  test('timeoutMs bounds an upload to a URL that takes the connection and says nothing: a NetworkError (TimeoutError), not a wait for good', async () => {
    await withSilentServer(async (silentUrl) => {
      handler = (_req, _b, res) => presign(res, `${silentUrl}/up/`);
      for (const fetchOption of [{}, { fetch: (input: any, init: any) => fetch(input, init) }]) {
        const c = createClient({ baseUrl: url, token: 't', identity: 'i1', timeoutMs: 300, retries: 0, ...fetchOption });
        const err = await c.email.upload({ filename: 'a.txt', data: new Uint8Array(10) }).catch((e) => e);
        expect([err.name, err.cause?.name]).toEqual(['NetworkError', 'TimeoutError']);
      }
    });
  });

  test('a refused upload surfaces the API error', async () => {
    handler = (req, _b, res) =>
      req.url === '/api/email-attachments/presign/' ? presign(res, `${url}/upload/`) : json(res, 400, { detail: 'Content-Type must be "text/plain"', code: 'content_type_mismatch' });
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1' });
    await expect(c.email.upload({ filename: 'a.txt', data: new Uint8Array(10) })).rejects.toMatchObject({ status: 400, code: 'content_type_mismatch' });
  });
});

describe('helpers', () => {
  test('Retry-After: seconds and HTTP-date (RFC 9110 §10.2.3)', () => {
    expect(retryAfterMs('3')).toBe(3000);
    expect(retryAfterMs(new Date(Date.now() + 5000).toUTCString())).toBeGreaterThan(3000);
    expect(retryAfterMs('soon')).toBeNull();
  });
  test('nextLink picks rel=next among several', () => {
    expect(nextLink('<http://x/a>; rel="prev", <http://x/b>; rel="next"')).toBe('http://x/b');
    expect(nextLink(null)).toBeNull();
  });
  test('SSE parser: WHATWG fields, CRLF split across chunks, comments, multi-line data, id persistence', () => {
    const got: unknown[] = [];
    let retry = 0;
    const p = new SseParser((e) => got.push(e), (ms) => (retry = ms));
    p.push('\uFEFFretry: 1500\r');
    p.push('\n\r\n: keepalive\n\nid: 7\nevent: email\ndata: {"a":1}\n\ndata: x\ndata:y\n');
    p.push('\n');
    expect(retry).toBe(1500);
    expect(got).toEqual([
      { id: '7', event: 'email', data: '{"a":1}' },
      { id: '7', event: 'message', data: 'x\ny' },
    ]);
  });
});

describe('unlocked vault', () => {
  test('updatePassword without notes keeps them, re-sealed for the new domain (the domain is bound into each field)', async () => {
    const stored = new Map<string, Record<string, string>>();
    handler = (req, body, res) => {
      const uuid = req.url!.split('/')[3];
      if (req.method === 'GET') return json(res, 200, stored.get(uuid));
      const entry = { ...stored.get(uuid), ...JSON.parse(body), uuid: uuid || JSON.parse(body).uuid };
      stored.set(entry.uuid, entry);
      json(res, req.method === 'POST' ? 201 : 200, entry);
    };
    const vault = new UnlockedVault(createClient({ baseUrl: url, managementKey: 'svc_mgmt_x', identity: 'i1' }), new VaultKey(randomBytes(32)));
    const added = await vault.addPassword({ domain: 'github.com', username: 'bob', password: 'hunter2', notes: 'n1' });
    const updated = await vault.updatePassword(added.uuid, { domain: 'gitlab.com', username: 'bob2', password: 'p2' });
    expect(updated).toMatchObject({ domain: 'gitlab.com', username: 'bob2', notes: 'n1' });
    expect((await vault.getPassword(added.uuid)).notes).toBe('n1');
  });

  /** A vault server holding entries and secrets; `swap` maps a requested uuid to the one it answers with. */
  function vaultServer(swap: Map<string, string>) {
    const entries = new Map<string, Record<string, string>>();
    const secrets = new Map<string, { uuid: string; key: string; value: string }>();
    handler = (req, body, res) => {
      const [, , kind, id] = req.url!.split('?')[0].split('/');
      if (kind === 'passwords') {
        if (req.method === 'POST') {
          const e = JSON.parse(body);
          entries.set(e.uuid, e);
          return json(res, 201, e);
        }
        if (!id) return json(res, 200, [...entries.values()]);
        return json(res, 200, entries.get(swap.get(id) ?? id));
      }
      if (req.method === 'POST') {
        const { key, value } = JSON.parse(body);
        const s = { uuid: secrets.get(key)?.uuid ?? crypto.randomUUID(), key, value };
        secrets.set(key, s);
        return json(res, 201, s);
      }
      if (!id) return json(res, 200, [...secrets.values()].map((s) => ({ ...s, value: null })));
      const found = [...secrets.values()].find((s) => s.uuid === (swap.get(id) ?? id));
      return found ? json(res, 200, found) : json(res, 404, { detail: 'Not found.' });
    };
    return { entries, secrets, vault: new UnlockedVault(createClient({ baseUrl: url, managementKey: 'svc_mgmt_x', identity: 'i1' }), new VaultKey(randomBytes(32))) };
  }

  test('a server answering with another password entry or secret than the one asked is caught, not decrypted', async () => {
    const swap = new Map<string, string>();
    const { vault, secrets } = vaultServer(swap);
    const github = await vault.addPassword({ domain: 'github.com', username: 'me', password: 'gh-pass' });
    const evil = await vault.addPassword({ domain: 'evil.example', username: 'me', password: 'evil-pass' });
    const real = await vault.setSecret('OPENAI_KEY', 'sk-real');
    const other = await vault.setSecret('STAGING_KEY', 'sk-staging');
    swap.set(github.uuid, evil.uuid);
    swap.set(real.uuid, other.uuid);
    await expect(vault.getPassword(github.uuid)).rejects.toMatchObject({ code: 'decrypt_failed' });
    await expect(vault.getSecret('OPENAI_KEY')).rejects.toMatchObject({ code: 'decrypt_failed' });
    await expect(vault.getSecret(real.uuid)).rejects.toMatchObject({ code: 'decrypt_failed' });
    // Lying consistently (the other secret's ciphertext under this name and uuid) fails the decryption itself.
    swap.clear();
    secrets.set('OPENAI_KEY', { ...secrets.get('OPENAI_KEY')!, value: secrets.get('STAGING_KEY')!.value });
    await expect(vault.getSecret('OPENAI_KEY')).rejects.toMatchObject({ code: 'decrypt_failed' });
    expect((await vault.getSecret('STAGING_KEY')).value).toBe('sk-staging');
  });

  test('a secret named like a uuid is found by its name; a uuid that names no secret is looked up as a uuid', async () => {
    const { vault } = vaultServer(new Map());
    const name = 'deadbeef-0000-4000-8000-000000000000';
    const s = await vault.setSecret(name, 'v1');
    await vault.setSecret('plain', 'v2');
    expect(await vault.getSecret(name)).toEqual({ uuid: s.uuid, key: name, value: 'v1' });
    expect((await vault.getSecret(s.uuid)).value).toBe('v1');
    await expect(vault.getSecret(crypto.randomUUID())).rejects.toMatchObject({ code: 'not_found' });
  });

  test('one entry that does not decrypt is reported, the others listed', async () => {
    const { vault, entries } = vaultServer(new Map());
    const a = await vault.addPassword({ domain: 'a.example', username: 'u', password: 'pa' });
    const b = await vault.addPassword({ domain: 'b.example', username: 'u', password: 'pb' });
    entries.get(b.uuid)!.domain = 'renamed.example'; // the domain changed without re-sealing
    expect((await vault.listPasswords()).map((e) => e.uuid)).toEqual([a.uuid]);
    expect((await vault.listPasswordsReport()).failed).toEqual([{ uuid: b.uuid, domain: 'renamed.example', error: 'decrypt_failed' }]);
  });
});

describe('event stream', () => {
  test('resumes with Last-Event-ID after a disconnect', async () => {
    let n = 0;
    handler = (req, _b, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (++n === 1) {
        res.write('retry: 10\n\nid: 1\nevent: email\ndata: {"thread_id":"t1"}\n\n');
        setTimeout(() => res.destroy(), 10);
      } else {
        expect(req.headers['last-event-id']).toBe('1');
        res.write('id: 2\nevent: email\ndata: {"thread_id":"t2"}\n\n');
      }
    };
    const ac = new AbortController();
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1' });
    const ids: string[] = [];
    for await (const e of c.events({ signal: ac.signal, maxBackoffMs: 50 })) {
      // The guards type the frames' data (no cast); an sms frame is not an email one.
      if (isEmailEvent(e)) ids.push(e.data.thread_id);
      expect(isSmsEvent(e)).toBe(false);
      if (ids.length === 2) break;
    }
    ac.abort();
    expect(ids).toEqual(['t1', 't2']);
    expect(seen[1].headers['x-service-identity']).toBe('i1');
  });

  test('an answer that is no event stream (a web page at that address) fails at once as unexpected, not retried', async () => {
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<html>proxy</html>');
    };
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1' });
    const run = async () => {
      for await (const _ of c.events({ maxBackoffMs: 10 })) return 'an event';
    };
    await expect(run()).rejects.toThrow(new UnexpectedResponseError(200, `${url} answered GET /api/events/stream/ with an HTML page, not with this service's API: is ${url} the service's address?`));
    expect(seen).toHaveLength(1);
  });

  test('a connection that gets no answer at all (a frozen process) is given up after idleTimeoutMs and made again, each attempt said through onStatus', async () => {
    await withSilentServer(async (silentUrl, connections) => {
      const ac = new AbortController();
      const statuses: Array<{ state: string; error?: unknown }> = [];
      const c = createClient({ baseUrl: silentUrl, token: 't', identity: 'i1' });
      const run = (async () => {
        for await (const _ of c.events({ signal: ac.signal, idleTimeoutMs: 200, maxBackoffMs: 20, onStatus: (st) => statuses.push(st) })) return;
      })();
      await eventually(() => connections() >= 3);
      ac.abort();
      await run;
      expect(statuses[0]).toMatchObject({ state: 'reconnecting', error: new Error('no data from the event stream: connection taken for dead') });
    });
  });

  test('too many streams (429 with Retry-After) is said at once through onStatus and waited out as asked, not retried silently first', async () => {
    handler = (_q, _b, res) => json(res, 429, { detail: 'Too many event streams.', code: 'too_many_streams' }, { 'retry-after': '1' });
    const ac = new AbortController();
    const statuses: Array<{ state: string; delayMs?: number; error?: unknown }> = [];
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1' });
    const run = (async () => {
      for await (const _ of c.events({ signal: ac.signal, maxBackoffMs: 20, onStatus: (st) => statuses.push(st) })) return;
    })();
    await eventually(() => statuses.length >= 1, 5_000);
    expect(seen).toHaveLength(1);
    expect(statuses[0]).toMatchObject({ state: 'reconnecting', delayMs: 1000, error: { status: 429, code: 'too_many_streams' } });
    ac.abort();
    await run;
  });

  test('cut off before its first event, it resumes from the id its stream started with (a frame without data)', async () => {
    let n = 0;
    handler = (req, _b, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (++n === 1) {
        res.write('retry: 10\nid: 41\n\n'); // the service's first frame: where the stream starts
        setTimeout(() => res.destroy(), 10);
      } else {
        expect(req.headers['last-event-id']).toBe('41');
        res.write('retry: 10\n\nid: 42\nevent: email\ndata: {"thread_id":"t42"}\n\n');
      }
    };
    const ac = new AbortController();
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1' });
    const got: { id: string; thread: string }[] = [];
    for await (const e of c.events({ signal: ac.signal, maxBackoffMs: 50 })) {
      got.push({ id: e.id, thread: (e.data as { thread_id: string }).thread_id });
      break;
    }
    ac.abort();
    expect(got).toEqual([{ id: '42', thread: 't42' }]); // the id-only frame is no event
    expect(n).toBe(2);
  });

  test('a refresh that cannot reach the service (cut, no answer in time) is retried with the reconnect backoff, not taken for an ended session', async () => {
    let refreshes = 0;
    handler = (req, _b, res) => {
      if (req.url === '/api/auth/token/refresh/') {
        if (++refreshes === 1) return res.destroy(); // the connection cut
        if (refreshes === 2) {
          const late = setTimeout(() => json(res, 200, { access: 'a2', refresh: 'r2' }), 10_000); // no answer within timeoutMs
          return res.on('close', () => clearTimeout(late));
        }
        return json(res, 200, { access: 'a2', refresh: 'r2' });
      }
      if (req.headers.authorization !== 'Bearer a2') return json(res, 401, { detail: 'expired', code: 'token_expired' });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('retry: 10\n\nid: 1\nevent: email\ndata: {"thread_id":"t1"}\n\n');
    };
    const ac = new AbortController();
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1', identity: 'i1', timeoutMs: 1000 });
    const reconnects: string[] = [];
    const threads: string[] = [];
    for await (const e of c.events({ signal: ac.signal, maxBackoffMs: 50, onStatus: (s) => s.state === 'reconnecting' && reconnects.push((s.error as Error).name) })) {
      threads.push((e.data as { thread_id: string }).thread_id);
      break;
    }
    ac.abort();
    expect([threads, refreshes, reconnects]).toEqual([['t1'], 3, ['NetworkError', 'NetworkError']]);
    expect(c.tokens).toEqual({ access: 'a2', refresh: 'r2' });
  });

  test('a token from a refresh that expired while connects kept failing is refreshed again (once per token)', async () => {
    const jwt = (exp: number) => `e30.${Buffer.from(JSON.stringify({ exp })).toString('base64url')}.sig`;
    const stale = jwt(Math.floor(Date.now() / 1000) - 5); // lived out during an outage
    const fresh = jwt(Math.floor(Date.now() / 1000) + 3600);
    let refreshes = 0;
    handler = (req, _b, res) => {
      if (req.url === '/api/auth/token/refresh/') return json(res, 200, ++refreshes === 1 ? { access: stale, refresh: 'r2' } : { access: fresh, refresh: 'r3' });
      if (req.headers.authorization !== `Bearer ${fresh}`) return json(res, 401, { detail: 'expired', code: 'token_expired' });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('retry: 10\n\nid: 1\nevent: email\ndata: {"thread_id":"t1"}\n\n');
    };
    const ac = new AbortController();
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1', identity: 'i1' });
    const threads: string[] = [];
    for await (const e of c.events({ signal: ac.signal, maxBackoffMs: 50 })) {
      threads.push((e.data as { thread_id: string }).thread_id);
      break;
    }
    ac.abort();
    expect([threads, refreshes]).toEqual([['t1'], 2]);
  });

  test('a refresh the service refuses ends the stream as token_expired, tried once', async () => {
    handler = (req, _b, res) =>
      req.url === '/api/auth/token/refresh/' ? json(res, 401, { detail: 'Token is invalid or expired', code: 'token_not_valid' }) : json(res, 401, { detail: 'expired', code: 'token_expired' });
    const c = createClient({ baseUrl: url, token: 'a1', refreshToken: 'r1', identity: 'i1' });
    const stream = c.events({ maxBackoffMs: 50 });
    await expect(stream.forEach(() => undefined)).rejects.toMatchObject({ status: 401, code: 'token_expired' });
    expect(seen.map((s) => s.url)).toEqual(['/api/events/stream/', '/api/auth/token/refresh/']);
  });

  test('a connection that goes silent (no keepalive) is replaced, resuming after the last id', async () => {
    let n = 0;
    handler = (req, _b, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (++n === 1) res.write('retry: 10\n\nid: 1\nevent: email\ndata: {"thread_id":"t1"}\n\n'); // then nothing, never closed
      else {
        expect(req.headers['last-event-id']).toBe('1');
        res.write('id: 2\nevent: email\ndata: {"thread_id":"t2"}\n\n');
      }
    };
    const ac = new AbortController();
    const c = createClient({ baseUrl: url, token: 't', identity: 'i1' });
    const ids: string[] = [];
    for await (const e of c.events({ signal: ac.signal, maxBackoffMs: 50, idleTimeoutMs: 300 })) {
      ids.push((e.data as { thread_id: string }).thread_id);
      if (ids.length === 2) break;
    }
    ac.abort();
    expect(ids).toEqual(['t1', 't2']);
  });
});
