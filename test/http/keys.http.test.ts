/** API keys and whoami over HTTP (SPEC "API keys", "Key kinds", "Authentication"; DECISIONS "Auth"). */
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/eventually.js';
import { whileReadModelsFull } from '../support/read-models-full.js';

let s: TestServer;
let owner: Awaited<ReturnType<TestServer['signUp']>>;
let other: Awaited<ReturnType<TestServer['signUp']>>;
let identity: string;

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

async function mgmtKey(token: string, label = 'ci') {
  const res = await s.api('POST', '/api/auth/keys/management/', { token, body: { label } });
  expect(res.status).toBe(201);
  return res.body as { uuid: string; key: string; masked_key: string; label: string; created_dt: string };
}

async function idKey(token: string, id: string, label = 'agent') {
  const res = await s.api('POST', '/api/auth/keys/identity/', { token, body: { label, identity_uuid: id } });
  expect(res.status).toBe(201);
  return res.body as { uuid: string; key: string; masked_key: string; identity_uuid: string };
}

beforeAll(async () => {
  s = await startTestServer();
  owner = await s.signUp();
  other = await s.signUp();
  identity = (await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Key Holder' } })).body.uuid;
});
afterAll(async () => {
  await s?.close();
});

describe('management keys', () => {
  it('create answers 201 {uuid, label, key, masked_key, created_dt}; the key is svc_mgmt_ + ≥160 random bits', async () => {
    const k = await mgmtKey(owner.access, 'laptop');
    expect(Object.keys(k).sort()).toEqual(['created_dt', 'key', 'label', 'masked_key', 'uuid']);
    expect(k.label).toBe('laptop');
    expect(k.key).toMatch(/^svc_mgmt_[0-9A-Za-z]{40}$/); // 40 × log2(62) ≈ 238 bits
    expect(k.masked_key).toBe(`svc_mgmt_…${k.key.slice(-4)}`);
    expect(k.created_dt).toMatch(ISO_MS);
  });

  it('the full key is shown once: the list carries masked_key only', async () => {
    const k = await mgmtKey(owner.access, 'listed');
    const list = await s.api('GET', '/api/auth/keys/management/', { token: owner.access });
    expect(list.status).toBe(200);
    const item = list.body.find((x: { uuid: string }) => x.uuid === k.uuid);
    expect(item).toEqual({ uuid: k.uuid, masked_key: k.masked_key, label: 'listed', last_used_at: null, created_dt: k.created_dt });
    expect(list.text).not.toContain(k.key);
  });

  it('a management key authenticates, can create identities and mint keys', async () => {
    const k = await mgmtKey(owner.access);
    const made = await s.api('POST', '/api/identities/', { token: k.key, body: { name: 'made by key' } });
    expect(made.status).toBe(201);
    expect((await s.api('POST', '/api/auth/keys/management/', { token: k.key, body: { label: 'child' } })).status).toBe(201);
  });

  it('400 when label is missing, blank or longer than 100', async () => {
    for (const body of [{}, { label: '' }, { label: '   ' }, { label: 'x'.repeat(101) }]) {
      const res = await s.api('POST', '/api/auth/keys/management/', { token: owner.access, body });
      expect(res.status).toBe(400);
      expect(res.body.label).toEqual(expect.any(Array));
    }
    expect((await s.api('POST', '/api/auth/keys/management/', { token: owner.access, body: { label: 'x'.repeat(100) } })).status).toBe(201);
  });

  it('revocation: 204, then the key fails with 401 token_not_valid at once; a second revoke is 404', async () => {
    const k = await mgmtKey(owner.access);
    expect((await s.api('GET', '/api/identities/', { token: k.key })).status).toBe(200);
    const del = await s.api('DELETE', `/api/auth/keys/management/${k.uuid}/`, { token: owner.access });
    expect(del.status).toBe(204);
    expect(del.text).toBe('');
    const after = await s.api('GET', '/api/identities/', { token: k.key });
    expect(after.status).toBe(401);
    expect(after.body.code).toBe('token_not_valid');
    expect((await s.api('DELETE', `/api/auth/keys/management/${k.uuid}/`, { token: owner.access })).status).toBe(404);
    const list = await s.api('GET', '/api/auth/keys/management/', { token: owner.access });
    expect(list.body.some((x: { uuid: string }) => x.uuid === k.uuid)).toBe(false);
  });

  it("a key of another account → 404 on delete", async () => {
    const theirs = await mgmtKey(other.access);
    expect((await s.api('DELETE', `/api/auth/keys/management/${theirs.uuid}/`, { token: owner.access })).status).toBe(404);
    expect((await s.api('GET', '/api/identities/', { token: theirs.key })).status).toBe(200);
    expect((await s.api('DELETE', '/api/auth/keys/management/not-a-uuid/', { token: owner.access })).status).toBe(404);
  });

  it('an unknown or malformed key → 401 token_not_valid', async () => {
    for (const token of ['svc_mgmt_' + 'A'.repeat(40), 'svc_id_nope']) {
      const res = await s.api('GET', '/api/identities/', { token });
      expect(res.status).toBe(401);
      expect(res.body.code).toBe('token_not_valid');
    }
  });

  it('last_used_at shows a use at once, and every later use (recorded at most once a minute, survives a restart)', async () => {
    const k = await mgmtKey(owner.access, 'used');
    const usedAt = async () =>
      ((await s.api('GET', '/api/auth/keys/management/', { token: owner.access })).body as { uuid: string; last_used_at: string | null }[]).find((x) => x.uuid === k.uuid)!.last_used_at;
    const before = Date.now();
    expect((await s.api('GET', '/api/identities/', { token: k.key })).status).toBe(200);
    const first = await usedAt(); // right after the use: no waiting
    expect(first).toMatch(ISO_MS);
    expect(Date.parse(first!)).toBeGreaterThanOrEqual(before - 1);
    await new Promise((r) => setTimeout(r, 20));
    expect((await s.api('GET', '/api/identities/', { token: k.key })).status).toBe(200);
    expect(Date.parse((await usedAt())!)).toBeGreaterThan(Date.parse(first!));
    // The first use was also recorded as an event (what other processes and a restart see).
    const recorded = await s.runtime.events.readStream(`apikey-${k.uuid}`);
    expect(recorded.some((e) => e.type === 'ApiKeyUsed')).toBe(true);
  });
});

describe('identity keys', () => {
  it('create with identity_uuid answers 201 {uuid, label, identity_uuid, key, masked_key, created_dt}', async () => {
    const res = await s.api('POST', '/api/auth/keys/identity/', { token: owner.access, body: { label: 'runtime', identity_uuid: identity } });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ uuid: expect.any(String), label: 'runtime', identity_uuid: identity, key: expect.stringMatching(/^svc_id_[0-9A-Za-z]{40}$/), masked_key: expect.any(String), created_dt: expect.stringMatching(ISO_MS) });
    expect(res.body.masked_key).toBe(`svc_id_…${res.body.key.slice(-4)}`);
  });

  it('create also accepts `identity` (DECISIONS "Auth")', async () => {
    const res = await s.api('POST', '/api/auth/keys/identity/', { token: owner.access, body: { label: 'example', identity } });
    expect(res.status).toBe(201);
    expect(res.body.identity_uuid).toBe(identity);
  });

  it('400 without an identity, with a malformed one, or with a bad label', async () => {
    expect((await s.api('POST', '/api/auth/keys/identity/', { token: owner.access, body: { label: 'x' } })).body.identity_uuid).toEqual(expect.any(Array));
    expect((await s.api('POST', '/api/auth/keys/identity/', { token: owner.access, body: { label: 'x', identity_uuid: 'nope' } })).status).toBe(400);
    expect((await s.api('POST', '/api/auth/keys/identity/', { token: owner.access, body: { label: '', identity_uuid: identity } })).status).toBe(400);
  });

  it("404 for an unknown identity, 403 for another account's", async () => {
    const unknown = await s.api('POST', '/api/auth/keys/identity/', { token: owner.access, body: { label: 'x', identity_uuid: '0190a6f0-0000-7000-8000-000000000002' } });
    expect(unknown.status).toBe(404);
    const theirs = (await s.api('POST', '/api/identities/', { token: other.access, body: { name: 'Other Holder' } })).body.uuid;
    expect((await s.api('POST', '/api/auth/keys/identity/', { token: owner.access, body: { label: 'x', identity_uuid: theirs } })).status).toBe(403);
  });

  it('the list shows {uuid, masked_key, label, identity, last_used_at, created_dt}, never the full key', async () => {
    const k = await idKey(owner.access, identity, 'listed');
    const list = await s.api('GET', '/api/auth/keys/identity/', { token: owner.access });
    expect(list.status).toBe(200);
    const item = list.body.find((x: { uuid: string }) => x.uuid === k.uuid);
    expect(Object.keys(item).sort()).toEqual(['created_dt', 'identity', 'label', 'last_used_at', 'masked_key', 'uuid']);
    expect(item.identity).toBe(identity);
    expect(list.text).not.toContain(k.key);
    const another = (await s.api('POST', '/api/identities/', { token: owner.access, body: { name: `Listed apart ${Date.now()}` } })).body.uuid;
    const theirs = await idKey(owner.access, another, 'apart');
    const all = await s.api('GET', '/api/auth/keys/identity/?limit=200', { token: owner.access });
    expect(all.body.map((x: { uuid: string }) => x.uuid)).toEqual(expect.arrayContaining([k.uuid, theirs.uuid]));
    const filtered = await s.api('GET', `/api/auth/keys/identity/?identity=${identity}`, { token: owner.access });
    expect(filtered.body.map((x: { uuid: string }) => x.uuid)).toContain(k.uuid);
    expect(filtered.body.every((x: { identity: string }) => x.identity === identity)).toBe(true);
    // The header names the identity as the query does (SPEC: the query "instead" of the header).
    const byHeader = await s.api('GET', '/api/auth/keys/identity/', { token: owner.access, identity: another });
    expect(byHeader.body.map((x: { uuid: string }) => x.uuid)).toEqual([theirs.uuid]);
    // Spaces around it are trimmed, as for every identity selector (header, query).
    const padded = await s.api('GET', `/api/auth/keys/identity/?identity=%20${identity.toUpperCase()}%20`, { token: owner.access });
    expect([padded.status, padded.body]).toEqual([200, filtered.body]);
  });

  it('an identity key cannot mint or list keys (403)', async () => {
    const k = await idKey(owner.access, identity);
    expect((await s.api('POST', '/api/auth/keys/identity/', { token: k.key, body: { label: 'x', identity_uuid: identity } })).status).toBe(403);
    expect((await s.api('POST', '/api/auth/keys/management/', { token: k.key, body: { label: 'x' } })).status).toBe(403);
    expect((await s.api('GET', '/api/auth/keys/identity/', { token: k.key })).status).toBe(403);
    expect((await s.api('GET', '/api/auth/keys/management/', { token: k.key })).status).toBe(403);
    expect((await s.api('DELETE', `/api/auth/keys/identity/${k.uuid}/`, { token: k.key })).status).toBe(403);
  });

  it('an identity key cannot change the account (profile, password: 403) nor end its sessions (logout: 200, nothing ended)', async () => {
    const u = await s.signUp();
    const own = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'Fenced agent' } })).body.uuid;
    const k = await idKey(u.access, own);
    for (const [method, path, body] of [
      ['PATCH', '/api/auth/user/', { first_name: 'hacked' }],
      ['PUT', '/api/auth/user/', { username: 'renamed_by_agent' }],
      ['POST', '/api/auth/password/change/', { new_password1: 'pw-agent', new_password2: 'pw-agent' }],
    ] as const) {
      const res = await s.api(method, path, { token: k.key, body });
      expect([path, res.status, res.body.code]).toEqual([path, 403, 'permission_denied']);
    }
    expect((await s.api('POST', '/api/auth/logout/', { token: k.key, body: {} })).status).toBe(200); // anonymous-friendly
    expect((await s.api('GET', '/api/auth/user/', { token: k.key })).body).toMatchObject({ username: u.user.username, first_name: '' });
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } })).status).toBe(200); // not logged out
    expect((await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } })).status).toBe(200);
    // A management key manages the account.
    const m = await mgmtKey(u.access, 'manager');
    expect((await s.api('PATCH', '/api/auth/user/', { token: m.key, body: { first_name: 'Managed' } })).body.first_name).toBe('Managed');
  });

  it('an identity key naming another identity is 403 on every endpoint, account-level ones too', async () => {
    const k = await idKey(owner.access, identity);
    const second = (await s.api('POST', '/api/identities/', { token: owner.access, body: { name: `Elsewhere ${Date.now()}` } })).body.uuid;
    for (const path of ['/api/subscription/', '/api/encryption/', '/api/auth/user/', '/api/passwords/generate_password/']) {
      expect([path, (await s.api('GET', path, { token: k.key, identity: second })).status]).toEqual([path, 403]);
      expect([path, (await s.api('GET', `${path}?identity=${second}`, { token: k.key })).status]).toEqual([path, 403]);
      expect([path, (await s.api('GET', path, { token: k.key, identity })).status]).toEqual([path, 200]); // its own: fine
    }
  });

  it('every identity a request names (header and query) is checked on every endpoint: another account 403, unknown 404', async () => {
    const m = await mgmtKey(owner.access, 'namer');
    const stranger = await s.signUp();
    const theirs = (await s.api('POST', '/api/identities/', { token: stranger.access, body: { name: 'Not yours' } })).body.uuid;
    const unknown = '0190a6f0-0000-7000-8000-0000000000ff';
    for (const path of ['/api/subscription/', '/api/encryption/']) {
      for (const token of [m.key, owner.access]) {
        expect([path, (await s.api('GET', path, { token, identity: theirs })).status]).toEqual([path, 403]);
        expect([path, (await s.api('GET', `${path}?identity=${theirs}`, { token })).status]).toEqual([path, 403]);
        expect([path, (await s.api('GET', path, { token, identity: unknown })).status]).toEqual([path, 404]);
        expect([path, (await s.api('GET', path, { token })).status]).toEqual([path, 200]); // none named: fine here
      }
    }
    // A different identity in the query than in the header is checked too (403 before the 400 for naming two).
    expect((await s.api('GET', `/api/passwords/?identity=${theirs}`, { token: m.key, identity })).status).toBe(403);
    const k = await idKey(owner.access, identity);
    const second = (await s.api('POST', '/api/identities/', { token: owner.access, body: { name: `Second of owner ${Date.now()}` } })).body.uuid;
    expect((await s.api('GET', `/api/vault/?identity=${second}`, { token: k.key, identity })).status).toBe(403);
    expect((await s.api('GET', '/api/vault/', { token: k.key, identity })).status).toBe(200);
    const twice = await s.api('GET', `/api/passwords/?identity=${identity}&identity=${identity}`, { token: m.key });
    expect([twice.status, twice.body]).toEqual([400, { identity: ['Give one identity.'] }]);
    // The header twice reaches the server as one joined value: the same answer.
    const headers = new Headers({ authorization: `Bearer ${m.key}` });
    headers.append('X-Service-Identity', identity);
    headers.append('X-Service-Identity', identity);
    const headerTwice = await fetch(`${s.url}/api/passwords/`, { headers });
    expect([headerTwice.status, await headerTwice.json()]).toEqual([400, { identity: ['Give one identity.'] }]);
  });

  it('revocation makes the identity key fail with 401 immediately; the management path does not revoke it', async () => {
    const k = await idKey(owner.access, identity);
    expect((await s.api('DELETE', `/api/auth/keys/management/${k.uuid}/`, { token: owner.access })).status).toBe(404);
    expect((await s.api('GET', '/api/health/whoami/', { token: k.key })).status).toBe(200);
    expect((await s.api('DELETE', `/api/auth/keys/identity/${k.uuid}/`, { token: owner.access })).status).toBe(204);
    const res = await s.api('GET', '/api/health/whoami/', { token: k.key });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('token_not_valid');
  });
});

describe('whoami', () => {
  it('jwt: {kind, user, identity: null, key: null}', async () => {
    const res = await s.api('GET', '/api/health/whoami/', { token: owner.access });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ kind: 'jwt', user: { pk: owner.user.pk, username: owner.user.username, email: owner.user.email }, identity: null, key: null });
  });

  it('management_key: reports the key; the identity selected by header or query', async () => {
    const k = await mgmtKey(owner.access, 'who');
    const res = await s.api('GET', '/api/health/whoami/', { token: k.key });
    expect(res.body).toEqual({ kind: 'management_key', user: expect.objectContaining({ pk: owner.user.pk }), identity: null, key: { uuid: k.uuid, label: 'who', masked_key: k.masked_key } });
    expect((await s.api('GET', '/api/health/whoami/', { token: k.key, identity })).body.identity).toBe(identity);
    expect((await s.api('GET', `/api/health/whoami/?identity=${identity}`, { token: k.key })).body.identity).toBe(identity);
  });

  it('identity_key: reports its fenced identity; another identity named → 403', async () => {
    const k = await idKey(owner.access, identity, 'fenced');
    const res = await s.api('GET', '/api/health/whoami/', { token: k.key });
    expect(res.body).toEqual({ kind: 'identity_key', user: expect.objectContaining({ pk: owner.user.pk }), identity, key: { uuid: k.uuid, label: 'fenced', masked_key: k.masked_key } });
    const second = (await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Second' } })).body.uuid;
    expect((await s.api('GET', '/api/health/whoami/', { token: k.key, identity: second })).status).toBe(403);
  });

  it('basic: the account username and password', async () => {
    const basic = Buffer.from(`${owner.user.username}:${owner.password}`).toString('base64');
    const res = await s.api('GET', '/api/health/whoami/', { headers: { authorization: `Basic ${basic}` } });
    expect(res.status).toBe(200);
    expect(res.body.kind).toBe('jwt'); // DECISIONS' three kinds: a user's own credential
    expect(res.body.user.pk).toBe(owner.user.pk);
    // A bad one is a bad credential: DECISIONS' token_not_valid (no other 401 code).
    for (const authorization of [`Basic ${Buffer.from(`${owner.user.username}:wrong`).toString('base64')}`, 'Basic !!!', 'Digest abc']) {
      const bad = await s.api('GET', '/api/health/whoami/', { headers: { authorization } });
      expect([authorization, bad.status, bad.body.code]).toEqual([authorization, 401, 'token_not_valid']);
    }
  });

  it('session: the dashboard cookie', async () => {
    const user = await s.runtime.shared.accounts.getUser(owner.user.pk);
    const session = await s.runtime.shared.accounts.startSession(user, { via: 'test', kind: 'cookie' });
    const res = await s.api('GET', '/api/health/whoami/', { headers: { cookie: `ais_session=${session.refresh}` } });
    expect(res.status).toBe(200);
    expect(res.body.kind).toBe('jwt');
    // "Bind-identity requires a JWT" (SPEC): not the cookie.
    const bind = await s.api('POST', '/api/auth/bind-identity/', { headers: { cookie: `ais_session=${session.refresh}` }, body: { identity } });
    expect([bind.status, bind.body.code]).toEqual([403, 'permission_denied']);
  });

  it('bind-identity: the bound token reports its identity', async () => {
    const bound = await s.api('POST', '/api/auth/bind-identity/', { token: owner.access, body: { identity } });
    expect(bound.status).toBe(200);
    const res = await s.api('GET', '/api/health/whoami/', { token: bound.body.access });
    expect(res.body).toEqual(expect.objectContaining({ kind: 'jwt', identity }));
  });

  it("an identity of another account named → 403; an unknown one → 404; none needed (no identity_required)", async () => {
    const theirs = (await s.api('POST', '/api/identities/', { token: other.access, body: { name: 'Foreign' } })).body.uuid;
    expect((await s.api('GET', '/api/health/whoami/', { token: owner.access, identity: theirs })).status).toBe(403);
    expect((await s.api('GET', '/api/health/whoami/', { token: owner.access, identity: '0190a6f0-0000-7000-8000-000000000003' })).status).toBe(404);
    expect((await s.api('GET', '/api/health/whoami/', { token: owner.access })).status).toBe(200);
  });

  it('401 without a credential', async () => {
    const res = await s.api('GET', '/api/health/whoami/');
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('not_authenticated');
  });
});

describe('limit per account (KEY_LIMIT)', () => {
  let limited: TestServer;
  beforeAll(async () => {
    limited = await startTestServer({ KEY_LIMIT: '3', DEVICE_POLL_INTERVAL: '0' });
  });
  afterAll(async () => {
    await limited?.close();
  });

  it('concurrent creates past the limit: exactly the limit succeed, the rest 403 key_limit_reached; a revocation frees a place; another account has its own', async () => {
    const u = await limited.signUp();
    const other = await limited.signUp();
    const id = (await limited.api('POST', '/api/identities/', { token: u.access, body: { name: 'Keyed' } })).body.uuid;
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        i % 2 ? limited.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: `m${i}` } }) : limited.api('POST', '/api/auth/keys/identity/', { token: u.access, body: { label: `i${i}`, identity_uuid: id } }),
      ),
    );
    expect(results.map((r) => r.status).sort()).toEqual([201, 201, 201, 403, 403, 403, 403, 403]);
    expect(results.find((r) => r.status === 403)!.body).toEqual({ detail: expect.stringMatching(/3 API keys, its limit \(3\).*support/), code: 'key_limit_reached' });
    expect((await limited.api('POST', '/api/auth/keys/management/', { token: other.access, body: { label: 'theirs' } })).status).toBe(201);
    const made = results.find((r) => r.status === 201)!.body as { uuid: string; identity_uuid?: string };
    const kind = made.identity_uuid ? 'identity' : 'management';
    expect((await limited.api('DELETE', `/api/auth/keys/${kind}/${made.uuid}/`, { token: u.access })).status).toBe(204);
    expect((await limited.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: 'again' } })).status).toBe(201);
    expect((await limited.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: 'one more' } })).status).toBe(403);
  });

  it("a device sign-up's key is not refused at the limit (a person approved it), and counts", async () => {
    const u = await limited.signUp();
    for (let i = 0; i < 3; i++) expect((await limited.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: `k${i}` } })).status).toBe(201);
    const d = (await limited.api('POST', '/api/auth/device/', { body: { client_id: 'agent' } })).body as { device_code: string; user_code: string };
    expect((await limited.api('POST', '/api/auth/device/approve/', { token: u.access, body: { user_code: d.user_code } })).status).toBe(200);
    const redeemed = await limited.api('POST', '/api/auth/device/token/', { body: { device_code: d.device_code } });
    expect([redeemed.status, redeemed.body.management_key]).toEqual([200, expect.stringMatching(/^svc_mgmt_/)]);
    expect((await limited.api('GET', '/api/auth/keys/management/', { token: u.access })).body).toHaveLength(4);
    const refused = await limited.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: 'past it' } });
    expect([refused.status, refused.body.detail]).toEqual([403, expect.stringMatching(/holds 4 API keys/)]);
  });

  it('a key minted while the read models are behind is answered with its secret (shown once), works once they catch up, and counts before the next create', async () => {
    const u = await limited.signUp();
    for (let i = 0; i < 2; i++) expect((await limited.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: `k${i}` } })).status).toBe(201);
    // The read models cannot be written meanwhile: requests wait 5 s for them.
    const third = await whileReadModelsFull(limited, async () => {
      const minted = await limited.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: 'k2' } });
      expect([minted.status, minted.body.label, minted.body.key]).toEqual([201, 'k2', expect.stringMatching(/^svc_mgmt_/)]); // a 503 lost the secret of a key made all the same
      const fourth = await limited.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: 'k3' } });
      expect([fourth.status, fourth.body.code]).toEqual([503, 'projection_lag']); // minted nothing: it waited for the third, to count it
      return minted.body;
    });
    const whoami = await eventually(async () => {
      const r = await limited.api('GET', '/api/health/whoami/', { token: third.key });
      return r.status === 200 && r.body;
    });
    expect(whoami.key.uuid).toBe(third.uuid);
    const listed = await eventually(async () => {
      const keys = (await limited.api('GET', '/api/auth/keys/management/', { token: u.access })).body as { label: string }[];
      return keys.length >= 3 && keys;
    });
    expect(listed.map((k) => k.label).sort()).toEqual(['k0', 'k1', 'k2']);
    const past = await limited.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: 'k4' } });
    expect([past.status, past.body.code]).toEqual([403, 'key_limit_reached']);
  }, 30_000);
});
