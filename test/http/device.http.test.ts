/**
 * RFC 8628 device authorization over HTTP (SPEC "States and transitions", DECISIONS
 * "Device authorization"): the whole state table, slow_down, long polls, the RFC 8414
 * metadata, a standard OAuth client (openid-client), and the /device page without a browser.
 */
import * as oidc from 'openid-client';
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';
import { eventually } from '../support/eventually.js';
import { whileReadModelsFull } from '../support/read-models-full.js';

const USER_CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/;
const GRANT = 'urn:ietf:params:oauth:grant-type:device_code';


async function startOnKnownPort(env: Record<string, string> = {}): Promise<TestServer> {
  const port = await freePort();
  return startTestServer({ PORT: String(port), HOST: '127.0.0.1', PUBLIC_URL: `http://127.0.0.1:${port}`, ...env });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Long polls parked in the device service right now. */
const parked = (server: TestServer) => (server.runtime.parts.find((p) => p.name === 'device') as unknown as { device: { waitingCount(): number } }).device.waitingCount();

let s: TestServer;
let human: Awaited<ReturnType<TestServer['signUp']>>;

beforeAll(async () => {
  s = await startOnKnownPort({ DEVICE_POLL_INTERVAL: '2', DEVICE_WAIT_MAX: '2' });
  human = await s.signUp();
});
afterAll(async () => s?.close());

/** The device flow's calls on `server` (read when called), decided by `person` unless another token is given. */
function deviceCalls(server: () => TestServer, person: () => { access: string }) {
  return {
    async start(body?: unknown) {
      const res = await server().api('POST', '/api/auth/device/', body === undefined ? {} : { body });
      expect(res.status).toBe(200);
      return res.body as { device_code: string; user_code: string; verification_uri: string; verification_uri_complete: string; expires_in: number; interval: number };
    },
    poll: (device_code: string, extra: Record<string, unknown> = {}) => server().api('POST', '/api/auth/device/token/', { body: { device_code, ...extra } }),
    approve: (user_code: string, token = person().access) => server().api('POST', '/api/auth/device/approve/', { token, body: { user_code } }),
    deny: (user_code: string, token = person().access) => server().api('POST', '/api/auth/device/deny/', { token, body: { user_code } }),
  };
}
const { start, poll, approve, deny } = deviceCalls(() => s, () => human);
const streamOf = async (deviceCode: string) => {
  const all = await s.runtime.events.readAll({ filter: { streamPrefixes: ['deviceauth-'] } });
  const { createHash } = await import('node:crypto');
  const hash = createHash('sha256').update(deviceCode).digest('base64url');
  const first = all.find((e) => e.type === 'DeviceAuthorizationRequested' && e.data.deviceCodeHash === hash);
  return all.filter((e) => e.stream === first?.stream);
};

describe('RFC 8414 metadata', () => {
  it('GET /.well-known/oauth-authorization-server names the issuer, endpoints and the device_code grant', async () => {
    const res = await s.api('GET', '/.well-known/oauth-authorization-server');
    expect(res.status).toBe(200);
    const base = s.runtime.config.publicUrl;
    expect(res.body).toMatchObject({
      issuer: base,
      token_endpoint: `${base}/api/auth/device/token/`,
      device_authorization_endpoint: `${base}/api/auth/device/`,
      response_types_supported: [],
      token_endpoint_auth_methods_supported: ['none'],
    });
    expect(res.body.grant_types_supported).toContain(GRANT);
  });
});

describe('POST /api/auth/device/ (RFC 8628 §3.2)', () => {
  it('answers the codes, the verification URIs, expires_in and interval without a credential or body', async () => {
    const res = await fetch(`${s.url}/api/auth/device/`, { method: 'POST' });
    expect(res.status).toBe(200);
    const b = (await res.json()) as Record<string, any>;
    expect(b.device_code).toMatch(/^[\w-]{43,}$/);
    expect(b.user_code).toMatch(USER_CODE);
    expect(b.verification_uri).toBe(`${s.runtime.config.publicUrl}/device`);
    expect(b.verification_uri_complete).toBe(`${s.runtime.config.publicUrl}/device?user_code=${b.user_code}`);
    expect(b.expires_in).toBe(600);
    expect(b.interval).toBe(2);
  });

  it('accepts JSON, form-urlencoded and multipart bodies with an RFC 8628 client_id', async () => {
    expect((await s.api('POST', '/api/auth/device/', { body: { client_id: 'agent-cli' } })).status).toBe(200);
    expect((await s.api('POST', '/api/auth/device/', { form: { client_id: 'agent-cli', scope: 'openid' } })).status).toBe(200);
    const fd = new FormData();
    fd.set('client_id', 'agent-cli');
    const res = await fetch(`${s.url}/api/auth/device/`, { method: 'POST', body: fd });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { user_code: string }).user_code).toMatch(USER_CODE);
  });

  it('codes differ per request, and events keep only hashes of them', async () => {
    const a = await start();
    const b = await start();
    expect(a.device_code).not.toBe(b.device_code);
    expect(a.user_code).not.toBe(b.user_code);
    const events = await streamOf(a.device_code);
    expect(events.map((e) => e.type)).toEqual(['DeviceAuthorizationRequested']);
    expect(events[0].stream).toMatch(/^deviceauth-[0-9a-f-]{36}$/);
    const text = JSON.stringify(await s.runtime.events.readAll());
    expect(text).not.toContain(a.device_code);
    expect(text).not.toContain(a.user_code.replace('-', ''));
    expect(text).not.toContain(a.user_code);
  });
});

describe('POST /api/auth/device/token/: the state table (RFC 8628 §3.4, §3.5)', () => {
  it('pending → 400 authorization_pending', async () => {
    const d = await start();
    const res = await poll(d.device_code);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'authorization_pending' });
  });

  it('polling faster than the interval → slow_down, and the interval grows by 5 s for that code (§3.5)', async () => {
    const d = await start();
    expect((await poll(d.device_code)).body.error).toBe('authorization_pending');
    const fast = await poll(d.device_code);
    expect(fast.status).toBe(400);
    expect(fast.body).toEqual({ error: 'slow_down' });
    const events = await streamOf(d.device_code);
    expect(events.filter((e) => e.type === 'DeviceAuthorizationIntervalIncreased').map((e) => e.data.interval)).toEqual([7]);
    // Waiting the old interval (2 s) is still too fast now: the new one is 7 s.
    await sleep(2100);
    expect((await poll(d.device_code)).body.error).toBe('slow_down');
  });

  it('a waiting poll never counts as too fast, and answers pending when DEVICE_WAIT_MAX passes', async () => {
    const d = await start();
    expect((await poll(d.device_code)).body.error).toBe('authorization_pending');
    const t0 = Date.now();
    const waited = await poll(d.device_code, { wait: 'true' });
    expect(waited.body).toEqual({ error: 'authorization_pending' });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1900);
    // A flag that is none of its spellings is a field error; null is said as for any field.
    expect((await poll(d.device_code, { wait: 'maybe' })).body).toEqual({ wait: ['Must be a valid boolean.'] });
    expect((await poll(d.device_code, { wait: null })).body).toEqual({ wait: ['This field may not be null.'] });
  });

  it('a code typed in fullwidth forms (an East Asian keyboard) is the same code (NFKC)', async () => {
    const d = await start();
    const fullwidth = [...d.user_code].map((c) => String.fromCharCode(c.charCodeAt(0) + 0xfee0)).join(''); // Ｂ…－…
    expect(fullwidth).not.toBe(d.user_code);
    expect((await approve(fullwidth)).status).toBe(200);
    const hyphenated = await start(); // a word processor's hyphen (U+2010) or minus sign (U+2212)
    expect((await approve(hyphenated.user_code.replace('-', '\u2010'))).status).toBe(200);
    const minus = await start();
    expect((await approve(minus.user_code.replace('-', '\u2212'))).status).toBe(200);
    expect((await poll(d.device_code)).status).toBe(200);
  });

  it('approved (by a user JWT, code typed in lower case without dash) → 200 with tokens and a working management key; then spent', async () => {
    const d = await start();
    expect((await poll(d.device_code)).body.error).toBe('authorization_pending');
    const ok = await approve(d.user_code.toLowerCase().replace('-', ''));
    expect(ok.status).toBe(200);
    expect(typeof ok.body.detail).toBe('string');

    const res = await poll(d.device_code); // immediately: slow_down applies only while pending
    expect(res.status).toBe(200);
    expect(res.body.management_key).toMatch(/^svc_mgmt_/);
    expect(res.body.user).toMatchObject({ pk: human.user.pk, username: human.user.username });
    expect(res.body.access_token).toBeUndefined();

    const who = await s.api('GET', '/api/health/whoami/', { token: res.body.management_key });
    expect(who.status).toBe(200);
    expect(who.body.kind).toBe('management_key');
    expect(who.body.user.pk).toBe(human.user.pk);
    expect(who.body.key.label).toMatch(/^Device sign-up \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/);
    expect((await s.api('GET', '/api/auth/user/', { token: res.body.access })).body.pk).toBe(human.user.pk);
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: res.body.refresh } })).status).toBe(200);

    const again = await poll(d.device_code);
    expect(again.status).toBe(400);
    expect(again.body).toEqual({ error: 'invalid_grant' });
    // Approving the used code again is a conflict, not a promise of tokens that never come.
    const reapproved = await approve(d.user_code);
    expect([reapproved.status, reapproved.body.detail]).toEqual([409, expect.stringMatching(/already used/)]);

    const events = await streamOf(d.device_code);
    expect(events.map((e) => e.type)).toEqual(['DeviceAuthorizationRequested', 'DeviceAuthorizationApproved', 'DeviceAuthorizationRedeemed']);
    expect(events[1].data.userPk).toBe(human.user.pk);
    expect(events[2].data.keyId).toBe(who.body.key.uuid);
    expect(JSON.stringify(events)).not.toContain(res.body.management_key);
  });

  it('a revocation answered 503 while the read models are behind signs the device out all the same (a retried DELETE is a 404)', async () => {
    const d = await start();
    expect((await approve(d.user_code)).status).toBe(200);
    const res = await poll(d.device_code);
    const key = (await s.api('GET', '/api/health/whoami/', { token: res.body.management_key })).body.key.uuid;
    await whileReadModelsFull(s, async () => {
      const revoked = await s.api('DELETE', `/api/auth/keys/management/${key}/`, { token: human.access });
      expect([revoked.status, revoked.body.code]).toEqual([503, 'projection_lag']);
    });
    expect((await s.api('DELETE', `/api/auth/keys/management/${key}/`, { token: human.access })).status).toBe(404);
    // Ended for the key's sake (not tried with a refresh meanwhile: a second use of one refresh
    // token ends its session too, as reuse).
    const started = (await s.runtime.events.readAll({ filter: { eventTypes: ['SessionStarted'] } })).find((e) => e.data.keyId === key)!;
    await eventually(async () => (await s.runtime.events.readStream(started.stream)).some((e) => e.type === 'SessionRevoked' && e.data.reason === 'key_revoked'));
    const refreshed = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: res.body.refresh } });
    expect([refreshed.status, refreshed.body.code]).toEqual([401, 'token_expired']);
  }, 30_000);

  it('a poll answered while the read models are behind still gets its tokens and key (a 503 spent the code: the next poll got invalid_grant)', async () => {
    const d = await start();
    expect((await approve(d.user_code)).status).toBe(200);
    const res = await whileReadModelsFull(s, () => poll(d.device_code));
    expect([res.status, res.body.management_key]).toEqual([200, expect.stringMatching(/^svc_mgmt_/)]);
    // One key made, and it works once the read models show it; the tokens work.
    const whoami = await eventually(async () => {
      const r = await s.api('GET', '/api/health/whoami/', { token: res.body.management_key });
      return r.status === 200 && r;
    });
    const minted = (await s.api('GET', '/api/auth/keys/management/', { token: human.access })).body.filter((k: { uuid: string; label: string }) => k.label.startsWith('Device sign-up'));
    expect(minted.map((k: { uuid: string }) => k.uuid)).toContain(whoami.body.key.uuid);
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: res.body.refresh } })).status).toBe(200);
    expect((await poll(d.device_code)).body).toEqual({ error: 'invalid_grant' }); // spent, once
  }, 30_000);

  it('revoking the management key a device sign-up got also signs that device out: its refresh token is refused', async () => {
    const d = await start();
    expect((await approve(d.user_code)).status).toBe(200);
    const res = await poll(d.device_code);
    expect(res.status).toBe(200);
    // Another sign-in of the same person is not the device's: it stays.
    const other = await s.api('POST', '/api/auth/login/', { body: { username: human.user.username, password: human.password } });
    const key = (await s.api('GET', '/api/health/whoami/', { token: res.body.management_key })).body.key.uuid;
    expect((await s.api('DELETE', `/api/auth/keys/management/${key}/`, { token: human.access })).status).toBe(204);
    const refreshed = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: res.body.refresh } });
    expect([refreshed.status, refreshed.body.code]).toEqual([401, 'token_expired']);
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: other.body.refresh } })).status).toBe(200);
  });

  it('denied → 400 access_denied; deciding again the other way → 409', async () => {
    const d = await start();
    const res = await deny(d.user_code);
    expect(res.status).toBe(200);
    expect((await poll(d.device_code)).body).toEqual({ error: 'access_denied' });
    expect((await deny(d.user_code)).status).toBe(200); // same decision: idempotent
    const late = await approve(d.user_code);
    expect(late.status).toBe(409);
    expect(late.body.detail).toMatch(/denied/);
    expect((await streamOf(d.device_code)).map((e) => e.type)).toEqual(['DeviceAuthorizationRequested', 'DeviceAuthorizationDenied']);
  });

  it('an unknown device_code → invalid_grant; a missing one → 400 validation; another grant_type → unsupported_grant_type', async () => {
    expect((await poll('not-a-device-code')).body).toEqual({ error: 'invalid_grant' });
    const missing = await s.api('POST', '/api/auth/device/token/', { body: {} });
    expect(missing.status).toBe(400);
    expect(missing.body.device_code).toEqual(['This field is required.']);
    const wrong = await s.api('POST', '/api/auth/device/token/', { form: { grant_type: 'password', device_code: 'x' } });
    expect(wrong.status).toBe(400);
    expect(wrong.body).toEqual({ error: 'unsupported_grant_type' });
  });

  it('an RFC 8628 form request (grant_type + client_id) also gets the RFC 6749 token names', async () => {
    const d = (await s.api('POST', '/api/auth/device/', { form: { client_id: 'agent-cli' } })).body;
    const pending = await s.api('POST', '/api/auth/device/token/', { form: { grant_type: GRANT, device_code: d.device_code, client_id: 'agent-cli' } });
    expect(pending.status).toBe(400);
    expect(pending.body).toEqual({ error: 'authorization_pending' });
    await approve(d.user_code);
    const res = await s.api('POST', '/api/auth/device/token/', { form: { grant_type: GRANT, device_code: d.device_code, client_id: 'agent-cli' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ token_type: 'Bearer', access_token: res.body.access, refresh_token: res.body.refresh });
    expect(res.body.management_key).toMatch(/^svc_mgmt_/);
  });
});

describe('long polls (here DEVICE_WAIT_MAX is 30 s: an answer before it came from the decision, not the timeout)', () => {
  let patient: TestServer;
  let person: Awaited<ReturnType<TestServer['signUp']>>;
  beforeAll(async () => {
    patient = await startTestServer({ DEVICE_POLL_INTERVAL: '2', DEVICE_WAIT_MAX: '30' });
    person = await patient.signUp();
  });
  afterAll(async () => patient?.close());
  const { start: begin, poll: longPoll, approve: approveHere, deny: denyHere } = deviceCalls(() => patient, () => person);

  it('a long poll (wait: true) is released by a parallel approval at once', async () => {
    const d = await begin();
    const t0 = Date.now();
    const waiting = longPoll(d.device_code, { wait: true });
    await eventually(() => parked(patient) === 1);
    expect((await approveHere(d.user_code)).status).toBe(200);
    const res = await waiting;
    expect(res.status).toBe(200);
    expect(res.body.management_key).toMatch(/^svc_mgmt_/);
    expect(Date.now() - t0).toBeLessThan(10_000); // DEVICE_WAIT_MAX is 30 s here
  });

  it('many parallel long polls park without work, are each released by their denial, and leave no waiter behind', async () => {
    const codes = await Promise.all(Array.from({ length: 20 }, () => begin()));
    const polls = codes.map((d) => longPoll(d.device_code, { wait: true }));
    await eventually(() => parked(patient) === 20);
    await Promise.all(codes.map((d) => denyHere(d.user_code)));
    const answers = await Promise.all(polls);
    expect(answers.map((a) => a.body.error)).toEqual(codes.map(() => 'access_denied'));
    expect(parked(patient)).toBe(0);
  });

  it('one code parks at most two waiting polls: more are answered at once, as ordinary polls (each would hold a socket)', async () => {
    const d = await begin();
    const t0 = Date.now();
    const waiting = [longPoll(d.device_code, { wait: true }), longPoll(d.device_code, { wait: true })];
    await eventually(() => parked(patient) === 2);
    const extra = await Promise.all(Array.from({ length: 5 }, () => longPoll(d.device_code, { wait: true })));
    expect(Date.now() - t0).toBeLessThan(10_000); // not held for DEVICE_WAIT_MAX (30 s)
    expect(extra.map((a) => a.body.error).sort()).toEqual(['authorization_pending', 'slow_down', 'slow_down', 'slow_down', 'slow_down']);
    expect(parked(patient)).toBe(2);
    await denyHere(d.user_code);
    expect((await Promise.all(waiting)).map((a) => a.body.error)).toEqual(['access_denied', 'access_denied']);
  });

  it('a long poll whose client goes away stops waiting', async () => {
    const d = await begin();
    const abort = new AbortController();
    const gone = fetch(`${patient.url}/api/auth/device/token/`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ device_code: d.device_code, wait: true }), signal: abort.signal }).catch(() => 'aborted');
    await eventually(() => parked(patient) === 1);
    abort.abort();
    expect(await gone).toBe('aborted');
    expect(await eventually(() => parked(patient) === 0)).toBe(true);
  });
});

describe('POST /api/auth/device/approve/ and /deny/', () => {
  it('need a user credential: none → 401, an API key → 403', async () => {
    const d = await start();
    expect((await s.api('POST', '/api/auth/device/approve/', { body: { user_code: d.user_code } })).status).toBe(401);
    const key = await s.api('POST', '/api/auth/keys/management/', { token: human.access, body: { label: 'k' } });
    expect(key.status).toBe(201);
    const res = await approve(d.user_code, key.body.key);
    expect(res.status).toBe(403);
    expect((await poll(d.device_code)).body.error).toBe('authorization_pending');
  });

  it('a malformed code → 400 on user_code; an unknown one → 404 with a detail', async () => {
    const bad = await approve('hello');
    expect(bad.status).toBe(400);
    expect(bad.body.user_code).toHaveLength(1);
    const missing = await s.api('POST', '/api/auth/device/approve/', { token: human.access, body: {} });
    expect(missing.status).toBe(400);
    expect(missing.body.user_code).toEqual(['This field is required.']);
    const unknown = await approve('BBBB-BBBB');
    expect(unknown.status).toBe(404);
    expect(typeof unknown.body.detail).toBe('string');
  });

  it('wrong user codes are rate-limited per account (RFC 8628 §5.1) → 429 with Retry-After', async () => {
    const guesser = await s.signUp();
    let last = null;
    for (let i = 0; i < 10; i++) last = await approve('BBBB-BBB' + 'CDFGHJKLMN'[i], guesser.access);
    expect(last!.status).toBe(404);
    const d = await start();
    const blocked = await approve(d.user_code, guesser.access); // even the right code, now
    expect(blocked.status).toBe(429);
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
    // Another account is not affected.
    expect((await approve(d.user_code)).status).toBe(200);
  });

  it('a burst of parallel wrong codes cannot pass the budget before its guesses are counted: at most 10 are tried', async () => {
    const guesser = await s.signUp();
    const codes = Array.from({ length: 60 }, (_, i) => 'BBBB-' + ['C', 'D', 'F', 'G', 'H', 'J'][i % 6] + 'CDFGHJKLMN'[Math.floor(i / 6)] + 'BB');
    const answers = await Promise.all(codes.map((c) => approve(c, guesser.access)));
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((x) => x === 404).length).toBe(10);
    expect(statuses.filter((x) => x === 429).length).toBe(50);
  });
});

describe('a standard OAuth client (openid-client) against our RFC 8414 metadata', () => {
  it('completes the device authorization grant and receives a management key', async () => {
    const config = await oidc.discovery(new URL(s.runtime.config.publicUrl), 'agent-cli', undefined, oidc.None(), { algorithm: 'oauth2', execute: [oidc.allowInsecureRequests] });
    const started = await oidc.initiateDeviceAuthorization(config, {});
    expect(started.user_code).toMatch(USER_CODE);
    expect((await approve(started.user_code)).status).toBe(200);
    const tokens = await oidc.pollDeviceAuthorizationGrant(config, started);
    expect(tokens.token_type.toLowerCase()).toBe('bearer');
    expect((tokens as unknown as { management_key: string }).management_key).toMatch(/^svc_mgmt_/);
    expect((await s.api('GET', '/api/auth/user/', { token: tokens.access_token })).body.pk).toBe(human.user.pk);
  });
});

describe('the /device page over plain HTTP (local password sign-in)', () => {
  const cookieJar = new Map<string, string>();
  const remember = (res: Response) => {
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const [name, value] = [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)];
      if (value === '') cookieJar.delete(name);
      else cookieJar.set(name, value);
    }
  };
  const cookieHeader = () => [...cookieJar].map(([k, v]) => `${k}=${v}`).join('; ');
  /** A browser's navigation: typed or opened from the device's link (Sec-Fetch-Site: none) unless `site` says otherwise. */
  const get = async (path: string, site: string | null = 'none') => {
    const res = await fetch(s.url + path, { headers: { cookie: cookieHeader(), ...(site ? { 'sec-fetch-site': site } : {}) }, redirect: 'manual' });
    remember(res);
    return { res, html: await res.text() };
  };
  const post = async (path: string, form: Record<string, string>) => {
    const res = await fetch(s.url + path, { method: 'POST', headers: { cookie: cookieHeader(), 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(form), redirect: 'manual' });
    remember(res);
    return { res, html: await res.text() };
  };
  const csrfOf = (html: string) => /name="csrf" value="([^"]+)"/.exec(html)?.[1] ?? '';

  it('shows the code back, signs in, approves with a CSRF token, and the device gets its tokens', async () => {
    const d = await start();
    const page = await get(`/device?user_code=${d.user_code.toLowerCase()}`);
    expect(page.res.status).toBe(200);
    expect(page.res.headers.get('content-type')).toMatch(/text\/html/);
    expect(page.res.headers.get('content-security-policy')).toMatch(/default-src 'none'/);
    expect(page.html).toContain(d.user_code);
    expect(page.html).not.toMatch(/<script/i);

    // No CSRF token: refused.
    expect((await post('/device/login', { user_code: d.user_code, login: human.user.username, password: human.password })).res.status).toBe(403);
    const wrong = await post('/device/login', { user_code: d.user_code, login: human.user.username, password: 'nope', csrf: csrfOf(page.html) });
    expect(wrong.res.status).toBe(400);
    const signedIn = await post('/device/login', { user_code: d.user_code, login: human.user.email, password: human.password, csrf: csrfOf(page.html) });
    expect(signedIn.res.status).toBe(303);
    const cookie = signedIn.res.headers.getSetCookie().find((c) => c.startsWith('ais_session='))!;
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Lax/);
    expect(cookie).not.toMatch(/Secure/); // PUBLIC_URL is http here
    expect(signedIn.res.headers.get('location')).toBe(`/device?user_code=${d.user_code}`);

    const approval = await get(`/device?user_code=${d.user_code}`);
    expect(approval.html).toContain('id="approve"');
    expect(approval.html).toContain(human.user.username);
    // The pre-session token does not work once signed in, nor does a forged one.
    expect((await post('/device/approve', { user_code: d.user_code, csrf: csrfOf(page.html) })).res.status).toBe(403);
    // The session cookie does not authorize a form-encoded API call (CSRF).
    const forged = await fetch(`${s.url}/api/auth/device/approve/`, { method: 'POST', headers: { cookie: cookieHeader(), 'content-type': 'application/x-www-form-urlencoded' }, body: `user_code=${d.user_code}` });
    expect(forged.status).toBe(403);
    expect((await poll(d.device_code)).body.error).toBe('authorization_pending');
    // Nor any other write of the API: forms and text/plain (what another page can post), or
    // JSON from another origin, are refused; the account is unchanged.
    const cookieWrite = (path: string, type: string, payload: string, origin?: string) =>
      fetch(`${s.url}${path}`, { method: 'POST', headers: { cookie: cookieHeader(), 'content-type': type, ...(origin ? { origin } : {}) }, body: payload });
    const newPassword = JSON.stringify({ new_password1: 'forged-pass-1', new_password2: 'forged-pass-1' });
    expect((await cookieWrite('/api/auth/password/change/', 'text/plain', newPassword)).status).toBe(403);
    expect((await cookieWrite('/api/auth/password/change/', 'application/json', newPassword, 'https://evil.example')).status).toBe(403);
    expect((await cookieWrite('/api/auth/keys/management/', 'application/x-www-form-urlencoded', 'label=forged')).status).toBe(403);
    // A body with no Content-Type at all (another page's fetch of a typeless Blob) is read as JSON: refused too.
    const untyped = await fetch(`${s.url}/api/auth/password/change/`, { method: 'POST', headers: { cookie: cookieHeader() }, body: new Blob([newPassword]) });
    expect([untyped.status, ((await untyped.json()) as { code: string }).code]).toEqual([403, 'csrf_failed']);
    const keys = await fetch(`${s.url}/api/auth/keys/management/`, { headers: { cookie: cookieHeader() } });
    expect(((await keys.json()) as { label: string }[]).map((k) => k.label)).not.toContain('forged');
    expect((await s.api('POST', '/api/auth/login/', { body: { username: human.user.username, password: human.password } })).status).toBe(200);
    // The cookie is a browser session, not a refresh token of the API.
    const asRefresh = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: decodeURIComponent(cookieJar.get('ais_session')!) } });
    expect(asRefresh.status).toBe(401);

    const done = await post('/device/approve', { user_code: d.user_code, csrf: csrfOf(approval.html) });
    expect(done.res.status).toBe(303); // post/redirect/get: the outcome is a page of its own
    expect(done.res.headers.get('location')).toBe(`/device/done?user_code=${d.user_code}&decision=approve`);
    expect((await get(done.res.headers.get('location')!, 'same-origin')).html).toContain('Device approved');
    const res = await poll(d.device_code, { wait: true });
    expect(res.status).toBe(200);
    expect(res.body.user.pk).toBe(human.user.pk);
    const events = await streamOf(d.device_code);
    expect(events[1]).toMatchObject({ type: 'DeviceAuthorizationApproved', data: { userPk: human.user.pk, via: 'device-page' } });
  });

  it('a code brought by a link from elsewhere (or a browser that does not say where it comes from) is confirmed with a CSRF-checked form, then shown with what asks', async () => {
    const d = (await s.api('POST', '/api/auth/device/', { body: { client_id: 'confirm-agent' } })).body;
    const linked = await get(`/device?user_code=${d.user_code}`, null); // no Sec-Fetch-Site: not known to be the person's own
    expect(linked.html).toContain('action="/device/lookup"');
    expect((await post('/device/lookup', { user_code: d.user_code })).res.status).toBe(403); // no CSRF token
    const shown = await post('/device/lookup', { user_code: d.user_code, csrf: csrfOf(linked.html) });
    expect(shown.res.status).toBe(200);
    expect(shown.html).toContain('id="approve"');
    expect(shown.html).toContain('confirm-agent');
  });

  it("another site's links cannot spend the person's wrong-code budget: only their own visits look codes up, and looking up never blocks a decision", async () => {
    const visit = async (code: string, site: string) => {
      const res = await fetch(`${s.url}/device?user_code=${code}`, { headers: { cookie: cookieHeader(), 'sec-fetch-site': site }, redirect: 'manual' });
      return { status: res.status, html: await res.text() };
    };
    const madeUp = (i: number) => `BCDF-GH${'JKLMNPQRSTVWXZ'[Math.floor(i / 14)]}${'JKLMNPQRSTVWXZ'[i % 14]}`;
    // A cross-site navigation (a link or popup elsewhere) is asked to confirm the code first, looking nothing up.
    for (let i = 0; i < 12; i++) {
      const page = await visit(madeUp(i), 'cross-site');
      expect(page.status).toBe(200);
      expect(page.html).toContain('action="/device/lookup"');
      expect(page.html).toContain(`value="${madeUp(i)}"`);
      expect(page.html).not.toContain('id="approve"');
    }
    // The person's own visits look codes up: ten unknown ones are said at once...
    for (let i = 20; i < 30; i++) expect((await visit(madeUp(i), 'none')).status).toBe(404);
    // ...then the page shows the choice without looking up (no 429 page for a look)...
    const d = await start();
    const spent = await visit(d.user_code, 'none');
    expect(spent.status).toBe(200);
    expect(spent.html).not.toContain('class="facts"');
    // ...and the decision, counted apart, goes through.
    const done = await post('/device/approve', { user_code: d.user_code, csrf: csrfOf(spent.html) });
    expect(done.res.status).toBe(303);
    expect((await get(done.res.headers.get('location')!, 'same-origin')).html).toContain('Device approved');
  });

  it('a malformed code in the link asks for the code again; the stylesheet is served', async () => {
    const bad = await get('/device?user_code=AEIOU');
    expect(bad.res.status).toBe(400);
    expect(bad.html).toContain('name="user_code"');
    const css = await fetch(`${s.url}/device/device.css`);
    expect(css.status).toBe(200);
    expect(css.headers.get('content-type')).toMatch(/text\/css/);
  });
});

describe('device requests are rate-limited per client address', () => {
  it('answers 429 with Retry-After past the limit', async () => {
    let res = await s.api('POST', '/api/auth/device/');
    for (let i = 0; i < 130 && res.status === 200; i++) res = await s.api('POST', '/api/auth/device/');
    expect(res.status).toBe(429);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    await s.runtime.shared.platform.limiter.reset('device:request:127.0.0.1');
    await s.runtime.shared.platform.limiter.reset('device:request:::ffff:127.0.0.1');
  });
});

describe('expiry (DEVICE_CODE_TTL=1)', () => {
  let e: TestServer;
  beforeAll(async () => (e = await startTestServer({ DEVICE_CODE_TTL: '1', DEVICE_POLL_INTERVAL: '0' })));
  afterAll(async () => e?.close());

  it('a code not approved in time → expired_token with code device_code_expired; approving it then → 400', async () => {
    const d = (await e.api('POST', '/api/auth/device/')).body;
    expect(d.expires_in).toBe(1);
    await sleep(1100);
    const res = await e.api('POST', '/api/auth/device/token/', { body: { device_code: d.device_code } });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: 'expired_token', code: 'device_code_expired' });
    expect(typeof res.body.detail).toBe('string');
    const user = await e.signUp();
    const late = await e.api('POST', '/api/auth/device/approve/', { token: user.access, body: { user_code: d.user_code } });
    expect(late.status).toBe(400);
    expect(late.body.code).toBe('device_code_expired');
    const types = (await e.runtime.events.readAll({ filter: { streamPrefixes: ['deviceauth-'] } })).map((x) => x.type);
    expect(types.filter((t) => t === 'DeviceAuthorizationExpired')).toHaveLength(1);
  });

  it('a long poll is released when the code expires', async () => {
    const d = (await e.api('POST', '/api/auth/device/')).body;
    const t0 = Date.now();
    const res = await e.api('POST', '/api/auth/device/token/', { body: { device_code: d.device_code, wait: true } });
    expect(res.body.error).toBe('expired_token');
    expect(Date.now() - t0).toBeLessThan(3000);
  });
});

describe('an external provider that cannot be reached', () => {
  let o: TestServer;
  beforeAll(async () => {
    const dead = await freePort(); // nothing listens there
    o = await startOnKnownPort({ OIDC_ISSUER: `http://127.0.0.1:${dead}`, OIDC_CLIENT_ID: 'c', OIDC_CLIENT_SECRET: 's' });
  });
  afterAll(async () => o?.close());

  it('leaves the page and the password sign-in working; "continue with" explains the failure', async () => {
    const d = (await o.api('POST', '/api/auth/device/')).body;
    const page = await fetch(`${o.url}/device?user_code=${d.user_code}`);
    const html = await page.text();
    expect(page.status).toBe(200);
    expect(html).toContain('Continue with 127.0.0.1:');
    expect(html).toContain('id="sign-in"');
    const cookie = page.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
    const csrf = /name="csrf" value="([^"]+)"/.exec(html)![1];
    const start = await fetch(`${o.url}/device/oidc/start`, {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ user_code: d.user_code, csrf }),
      redirect: 'manual',
    });
    expect(start.status).toBe(502);
    expect(await start.text()).toContain('could not be reached');
  });
});
