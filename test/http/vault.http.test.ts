/**
 * The E2E vault through a real server: SPEC "Passwords", "Vault secrets", "Encryption",
 * "Authentication" 7; DECISIONS last bullet. Client side: services/sdk/crypto.ts.
 */
import { startTestServer, type TestServer } from '../support/server.js';
import {
  changePin,
  CryptoError,
  decryptField,
  encryptField,
  memoryLockStore,
  recover,
  setupEncryption,
  unlock,
  type EncryptionMetadata,
  type FieldBinding,
  type KdfParams,
  type VaultKey,
} from '../../services/sdk/crypto.js';

const FAST: KdfParams = { memoryKiB: 19456, iterations: 2, parallelism: 1 };
const E2E = /^e2e::[A-Za-z0-9+/]+={0,2}$/;

let srv: TestServer;
let tokenA: string; // account A
let tokenB: string; // account B
let idA1: string;
let idA2: string;
let idB1: string;
let keyA1: string; // identity key fenced to A1
let keyA2: string;
// Client state of account A after setup.
let pinA = '123456';
let deviceSecretA: string;
let recoveryKeyA: string;
let vaultKeyA: VaultKey;

async function identity(token: string, name: string): Promise<string> {
  const res = await srv.api('POST', '/api/identities/', { token, body: { name } });
  expect(res.status).toBe(201);
  return res.body.uuid;
}

async function identityKey(token: string, identityUuid: string): Promise<string> {
  const res = await srv.api('POST', '/api/auth/keys/identity/', { token, body: { label: 'agent', identity_uuid: identityUuid } });
  expect(res.status).toBe(201);
  return res.body.key;
}

const metadataOf = async (token: string): Promise<EncryptionMetadata> => {
  const res = await srv.api('GET', '/api/encryption/', { token });
  expect(res.status).toBe(200);
  return res.body;
};

const pw = (identityId: string, entry: string, domain: string, field: 'username' | 'password' | 'notes'): FieldBinding => ({ kind: 'password', identity: identityId, entry, domain, field });

function fakeCiphertext(n = 1): string {
  return 'e2e::' + Buffer.from(`not really encrypted ${n}`).toString('base64');
}

beforeAll(async () => {
  srv = await startTestServer();
  tokenA = (await srv.signUp()).access;
  tokenB = (await srv.signUp()).access;
  idA1 = await identity(tokenA, 'agent one');
  idA2 = await identity(tokenA, 'agent two');
  idB1 = await identity(tokenB, 'other account');
  keyA1 = await identityKey(tokenA, idA1);
  keyA2 = await identityKey(tokenA, idA2);
});

afterAll(async () => {
  await srv?.close();
});

describe('encryption metadata (per account)', () => {
  test('needs a credential', async () => {
    expect((await srv.api('GET', '/api/encryption/')).status).toBe(401);
    expect((await srv.api('POST', '/api/encryption/', { body: { public_key: 'x', verifier: 'y' } })).status).toBe(401);
  });

  test('before setup: a server-made salt from account creation, public_key and verifier null', async () => {
    const m = await metadataOf(tokenA);
    expect(Buffer.from(m.salt, 'base64')).toHaveLength(16);
    expect(m.public_key).toBeNull();
    expect(m.verifier).toBeNull();
    expect((await metadataOf(tokenA)).salt).toBe(m.salt); // stable
    expect((await metadataOf(tokenB)).salt).not.toBe(m.salt); // per account
    const pk = (await srv.api('GET', '/api/auth/user/', { token: tokenA })).body.pk;
    const doc = await srv.runtime.reads.collection('users').get(String(pk));
    expect(doc?.encryptionSalt).toBe(m.salt);
  });

  test('an unlock before any upload reports encryption_missing on the client', async () => {
    const err = await unlock({ pin: '123456', deviceSecret: 'SK1-0000-0000-0000-0000-0000-0000-0000-0000', metadata: await metadataOf(tokenB), lockStore: memoryLockStore() }).catch((e) => e);
    expect(err).toBeInstanceOf(CryptoError);
    expect(err.code).toBe('encryption_missing');
  });

  test('upload validation: public_key and verifier required; wrapped keys must be e2e ciphertext', async () => {
    const res = await srv.api('POST', '/api/encryption/', { token: tokenA, body: {} });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ public_key: ['This field is required.'], verifier: ['This field is required.'] });
    const bad = await srv.api('POST', '/api/encryption/', { token: tokenA, body: { public_key: 'pk', verifier: 'v', wrapped_key: 'plain vault key' } });
    expect(bad.status).toBe(400);
    expect(Object.keys(bad.body)).toEqual(['wrapped_key']);
    expect((await metadataOf(tokenA)).public_key).toBeNull(); // nothing stored
  });

  test('client setup → POST 201 → GET returns it to any credential, identity keys included; a second POST is 409', async () => {
    const { salt } = await metadataOf(tokenA);
    const s = await setupEncryption({ pin: pinA, salt, kdf: FAST });
    deviceSecretA = s.deviceSecret;
    recoveryKeyA = s.recoveryKey;
    vaultKeyA = s.vaultKey;
    const res = await srv.api('POST', '/api/encryption/', { token: tokenA, body: s.upload });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ salt, ...s.upload });
    const viaKey = await srv.api('GET', '/api/encryption/', { token: keyA1 });
    expect(viaKey.status).toBe(200);
    expect(viaKey.body).toEqual(res.body);
    const again = await srv.api('POST', '/api/encryption/', { token: tokenA, body: s.upload });
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('conflict');
    const k = await unlock({ pin: pinA, deviceSecret: deviceSecretA, metadata: await metadataOf(tokenA), lockStore: memoryLockStore() });
    expect(k.exportBytes().equals(vaultKeyA.exportBytes())).toBe(true);
  });

  test('the one-time upload is race-safe: concurrent POSTs give exactly one 201', async () => {
    const { access } = await srv.signUp();
    const results = await Promise.all(
      Array.from({ length: 5 }, (_, i) => srv.api('POST', '/api/encryption/', { token: access, body: { public_key: `pk${i}`, verifier: `v${i}` } })),
    );
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
    const winner = results.find((r) => r.status === 201)!.body;
    expect(await metadataOf(access)).toMatchObject({ public_key: winner.public_key, verifier: winner.verifier });
  });

  test('PUT re-wrap: not before the upload (404 encryption_missing), not with an identity key (nor the setup), public key immutable', async () => {
    const none = await srv.api('PUT', '/api/encryption/', { token: tokenB, body: { verifier: 'v' } });
    expect(none.status).toBe(404);
    expect(none.body.code).toBe('encryption_missing');
    expect((await srv.api('PUT', '/api/encryption/', { token: keyA1, body: { verifier: 'v' } })).status).toBe(403);
    expect((await srv.api('POST', '/api/encryption/', { token: keyA1, body: { public_key: 'pk', verifier: 'v' } })).status).toBe(403); // nor the setup
    const swap = await srv.api('PUT', '/api/encryption/', { token: tokenA, body: { verifier: 'v', public_key: 'another' } });
    expect(swap.status).toBe(400);
    expect(Object.keys(swap.body)).toEqual(['public_key']);
  });

  test('PUT cannot remove a key wrap once set (the vault key would be nowhere); replacing one works', async () => {
    const before = await metadataOf(tokenA);
    for (const field of ['wrapped_key', 'recovery_wrapped_key']) {
      const res = await srv.api('PUT', '/api/encryption/', { token: tokenA, body: { verifier: before.verifier, [field]: null } });
      expect(res.status).toBe(400);
      expect(Object.keys(res.body)).toEqual([field]);
    }
    expect(await metadataOf(tokenA)).toEqual(before); // nothing changed
    const same = await srv.api('PUT', '/api/encryption/', { token: tokenA, body: { verifier: before.verifier, wrapped_key: before.wrapped_key, recovery_wrapped_key: before.recovery_wrapped_key } });
    expect(same.status).toBe(200);
    expect(await metadataOf(tokenA)).toEqual({ ...before, updated_dt: same.body.updated_dt });
  });
});

describe('passwords: client encrypts, server stores ciphertext, client decrypts', () => {
  const texts = { username: 'zoë@example.com 🔑', password: 'p@ss wörd «»\u0000 パスワード', notes: '' };
  let entryId: string;

  test('round trip byte for byte (unicode and the empty string)', async () => {
    entryId = crypto.randomUUID();
    const body = {
      uuid: entryId,
      domain: 'github.com',
      username: encryptField(vaultKeyA, texts.username, pw(idA1, entryId, 'github.com', 'username')),
      password: encryptField(vaultKeyA, texts.password, pw(idA1, entryId, 'github.com', 'password')),
      notes: encryptField(vaultKeyA, texts.notes, pw(idA1, entryId, 'github.com', 'notes')),
    };
    const res = await srv.api('POST', '/api/passwords/', { token: tokenA, identity: idA1, body });
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe(`/api/passwords/${res.body.uuid}/`);
    expect(res.body).toEqual({ ...body, created_dt: expect.any(String), updated_dt: expect.any(String) });

    const got = await srv.api('GET', `/api/passwords/${entryId}/`, { token: keyA1 });
    expect(got.status).toBe(200);
    const key = await unlock({ pin: pinA, deviceSecret: deviceSecretA, metadata: await metadataOf(keyA1), lockStore: memoryLockStore() });
    for (const f of ['username', 'password', 'notes'] as const) {
      const plain = decryptField(key, got.body[f], pw(idA1, entryId, got.body.domain, f));
      expect(Buffer.from(plain, 'utf8').equals(Buffer.from(texts[f], 'utf8'))).toBe(true);
    }
  });

  test('ciphertext swapped between fields or entries by the server is rejected on decrypt', async () => {
    const entry = (await srv.api('GET', `/api/passwords/${entryId}/`, { token: tokenA, identity: idA1 })).body;
    // The server (or anyone with write access) moves the password ciphertext into the username field.
    const swapped = await srv.api('PATCH', `/api/passwords/${entryId}/`, { token: tokenA, identity: idA1, body: { username: entry.password } });
    expect(swapped.status).toBe(200);
    expect(() => decryptField(vaultKeyA, swapped.body.username, pw(idA1, entryId, 'github.com', 'username'))).toThrow(expect.objectContaining({ code: 'decrypt_failed' }));
    // ...or relabels the entry for another site.
    const relabelled = await srv.api('PATCH', `/api/passwords/${entryId}/`, { token: tokenA, identity: idA1, body: { domain: 'evil.example' } });
    expect(() => decryptField(vaultKeyA, relabelled.body.password, pw(idA1, entryId, relabelled.body.domain, 'password'))).toThrow(expect.objectContaining({ code: 'decrypt_failed' }));
    // ...or copies it into another entry.
    const other = await srv.api('POST', '/api/passwords/', { token: tokenA, identity: idA1, body: { domain: 'github.com', password: entry.password } });
    expect(other.status).toBe(201);
    expect(() => decryptField(vaultKeyA, other.body.password, pw(idA1, other.body.uuid, 'github.com', 'password'))).toThrow(expect.objectContaining({ code: 'decrypt_failed' }));
    // A flipped byte.
    const raw = Buffer.from(entry.password.slice(5), 'base64');
    raw[raw.length - 1] ^= 1;
    const tampered = await srv.api('PATCH', `/api/passwords/${entryId}/`, { token: tokenA, identity: idA1, body: { domain: 'github.com', password: 'e2e::' + raw.toString('base64') } });
    expect(tampered.status).toBe(200);
    expect(() => decryptField(vaultKeyA, tampered.body.password, pw(idA1, entryId, 'github.com', 'password'))).toThrow(expect.objectContaining({ code: 'decrypt_failed' }));
  });

  test('no plaintext reaches the event log', async () => {
    const all = JSON.stringify(await srv.runtime.events.readAll({ filter: { streamPrefixes: ['vault-', 'encryption-'] } }));
    expect(all).toContain('PasswordEntryCreated');
    for (const t of [texts.username, texts.password, 'zoë', 'wörd', pinA, recoveryKeyA, deviceSecretA, vaultKeyA.exportBytes().toString('base64')]) expect(all).not.toContain(t);
  });

  test('PIN change re-wraps only: old entries still decrypt with the new PIN', async () => {
    const lock = memoryLockStore();
    const c = await changePin({ pin: pinA, newPin: '246810', deviceSecret: deviceSecretA, metadata: await metadataOf(tokenA), lockStore: lock });
    const res = await srv.api('PUT', '/api/encryption/', { token: tokenA, body: c.upload });
    expect(res.status).toBe(200);
    pinA = '246810';
    const m = await metadataOf(tokenA);
    expect(m.verifier).toBe(c.upload.verifier);
    expect(await unlock({ pin: '123456', deviceSecret: deviceSecretA, metadata: m, lockStore: memoryLockStore() }).catch((e) => e.code)).toBe('wrong_pin');
    const key = await unlock({ pin: pinA, deviceSecret: deviceSecretA, metadata: m, lockStore: lock });
    const entry = (await srv.api('GET', `/api/passwords/`, { token: keyA1 })).body.find((e: { uuid: string }) => e.uuid === entryId);
    expect(decryptField(key, entry.notes, pw(idA1, entryId, 'github.com', 'notes'))).toBe('');
  });

  test('wrong PIN three times → pin_locked; the recovery key restores access under a new PIN', async () => {
    const secretCt = encryptField(vaultKeyA, 'survives recovery', { kind: 'secret', identity: idA1, key: 'RECOVERY_CHECK' });
    const stored = await srv.api('POST', '/api/vault/', { token: keyA1, body: { key: 'RECOVERY_CHECK', value: secretCt } });
    expect([stored.status, stored.headers.get('location')]).toEqual([201, `/api/vault/${stored.body.uuid}/`]);
    const lock = memoryLockStore();
    const m = await metadataOf(tokenA);
    const codes = [];
    for (const pin of ['000000', '111111', '222222', pinA]) codes.push(await unlock({ pin, deviceSecret: deviceSecretA, metadata: m, lockStore: lock }).then(() => 'ok', (e) => e.code));
    expect(codes).toEqual(['wrong_pin', 'wrong_pin', 'pin_locked', 'pin_locked']);

    const r = await recover({ recoveryKey: recoveryKeyA, newPin: '135790', metadata: m, deviceSecret: deviceSecretA, lockStore: lock });
    expect((await srv.api('PUT', '/api/encryption/', { token: tokenA, body: r.upload })).status).toBe(200);
    pinA = '135790';
    const key = await unlock({ pin: pinA, deviceSecret: deviceSecretA, metadata: await metadataOf(tokenA), lockStore: lock });
    const list = (await srv.api('GET', '/api/vault/?key=RECOVERY_CHECK', { token: keyA1 })).body;
    const one = (await srv.api('GET', `/api/vault/${list[0].uuid}/`, { token: keyA1 })).body;
    expect(decryptField(key, one.value, { kind: 'secret', identity: idA1, key: 'RECOVERY_CHECK' })).toBe('survives recovery');
  });
});

describe('password entries: server rules', () => {
  test('identity scoping: identity required for a token, other account 403, unknown 404', async () => {
    expect((await srv.api('GET', '/api/passwords/', { token: tokenA })).body.code).toBe('identity_required');
    expect((await srv.api('GET', '/api/passwords/', { token: tokenA, identity: idB1 })).status).toBe(403);
    expect((await srv.api('GET', '/api/passwords/', { token: tokenA, identity: crypto.randomUUID() })).status).toBe(404);
    expect((await srv.api('GET', '/api/passwords/', { token: keyA1, identity: idA2 })).status).toBe(403);
    expect((await srv.api('GET', `/api/passwords/?identity=${idA1}`, { token: tokenA })).status).toBe(200);
  });

  test('fields other than domain must be e2e ciphertext; domain and password are required', async () => {
    const post = (body: unknown) => srv.api('POST', '/api/passwords/', { token: keyA1, body });
    const plain = await post({ domain: 'a.com', username: 'alice', password: 'hunter2', notes: 'n' });
    expect(plain.status).toBe(400);
    expect(Object.keys(plain.body).sort()).toEqual(['notes', 'password', 'username']);
    expect((await post({ domain: 'a.com', password: 'e2e::' })).status).toBe(400);
    expect((await post({ domain: 'a.com', password: 'e2e::abc$' })).status).toBe(400);
    expect((await post({ domain: 'a.com', password: 'E2E::YWJj' })).status).toBe(400);
    expect((await post({ domain: 'a.com', password: 12345 })).status).toBe(400);
    expect((await post({ password: fakeCiphertext() })).body).toEqual({ domain: ['This field is required.'] });
    expect((await post({ domain: 'a.com' })).body).toEqual({ password: ['This field is required.'] });
    const ok = await post({ domain: 'a.com', password: fakeCiphertext(), username: null });
    expect(ok.status).toBe(201);
    expect(ok.body).toMatchObject({ domain: 'a.com', username: null, notes: null });
    expect(ok.body.uuid).toMatch(/^[0-9a-f-]{36}$/);
  });

  test('CRUD: PUT replaces what it is given (optional fields left out keep their ciphertext, null clears), PATCH merges, DELETE 204 then 404; a used uuid is 409', async () => {
    const id = crypto.randomUUID();
    const c = await srv.api('POST', '/api/passwords/', { token: keyA1, body: { uuid: id, domain: 'x.com', username: fakeCiphertext(1), password: fakeCiphertext(2), notes: fakeCiphertext(3) } });
    expect(c.status).toBe(201);
    expect(c.body.uuid).toBe(id);
    expect((await srv.api('POST', '/api/passwords/', { token: keyA1, body: { uuid: id, domain: 'x.com', password: fakeCiphertext() } })).status).toBe(409);

    const put = await srv.api('PUT', `/api/passwords/${id}/`, { token: keyA1, body: { domain: 'y.com', password: fakeCiphertext(4) } });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ uuid: id, domain: 'y.com', username: fakeCiphertext(1), password: fakeCiphertext(4), notes: fakeCiphertext(3), created_dt: c.body.created_dt });
    expect(put.body.updated_dt >= c.body.updated_dt).toBe(true);
    const cleared = await srv.api('PUT', `/api/passwords/${id}/`, { token: keyA1, body: { domain: 'y.com', password: fakeCiphertext(4), username: null, notes: null } });
    expect(cleared.body).toMatchObject({ username: null, notes: null });
    expect((await srv.api('PUT', `/api/passwords/${id}/`, { token: keyA1, body: { domain: 'y.com' } })).status).toBe(400);

    const patch = await srv.api('PATCH', `/api/passwords/${id}/`, { token: keyA1, body: { notes: fakeCiphertext(5) } });
    expect(patch.body).toMatchObject({ domain: 'y.com', password: fakeCiphertext(4), notes: fakeCiphertext(5) });
    expect((await srv.api('PATCH', `/api/passwords/${id}/`, { token: keyA1, body: { password: 'plain' } })).status).toBe(400);
    expect((await srv.api('PATCH', `/api/passwords/${id}/`, { token: keyA1, body: { password: null } })).status).toBe(400);

    expect((await srv.api('GET', `/api/passwords/${id}/`, { token: keyA1 })).body).toEqual(patch.body);
    const del = await srv.api('DELETE', `/api/passwords/${id}/`, { token: keyA1 });
    expect([del.status, del.text]).toEqual([204, '']);
    expect((await srv.api('GET', `/api/passwords/${id}/`, { token: keyA1 })).status).toBe(404);
    // Not a uuid at all: the same 404, in the resource's own words.
    for (const [path, detail] of [['/api/passwords/nope/', 'Password entry not found.'], ['/api/vault/nope/', 'Secret not found.']]) {
      const res = await srv.api('GET', path, { token: keyA1 });
      expect([path, res.status, res.body.detail]).toEqual([path, 404, detail]);
    }
    expect((await srv.api('DELETE', `/api/passwords/${id}/`, { token: keyA1 })).status).toBe(404);
    expect((await srv.api('PUT', `/api/passwords/${id}/`, { token: keyA1, body: { domain: 'y.com', password: fakeCiphertext() } })).status).toBe(404);
    expect((await srv.api('POST', '/api/passwords/', { token: keyA1, body: { uuid: id, domain: 'x.com', password: fakeCiphertext() } })).status).toBe(409);
    expect((await srv.api('GET', '/api/passwords/not-a-uuid/', { token: keyA1 })).status).toBe(404);
  });

  test("another identity's entry is invisible (404), also with the same client-chosen uuid", async () => {
    const id = crypto.randomUUID();
    expect((await srv.api('POST', '/api/passwords/', { token: keyA1, body: { uuid: id, domain: 'one.com', password: fakeCiphertext(1) } })).status).toBe(201);
    for (const [method, body] of [['GET'], ['PUT', { domain: 'z', password: fakeCiphertext() }], ['PATCH', { domain: 'z' }], ['DELETE']] as const) {
      expect([method, (await srv.api(method, `/api/passwords/${id}/`, { token: keyA2, body })).status]).toEqual([method, 404]);
      expect([method, (await srv.api(method, `/api/passwords/${id}/`, { token: tokenA, identity: idA2, body })).status]).toEqual([method, 404]);
    }
    // A2 may use the same uuid for its own entry; neither sees the other's.
    expect((await srv.api('POST', '/api/passwords/', { token: keyA2, body: { uuid: id, domain: 'two.com', password: fakeCiphertext(2) } })).status).toBe(201);
    expect((await srv.api('GET', `/api/passwords/${id}/`, { token: keyA1 })).body.domain).toBe('one.com');
    expect((await srv.api('GET', `/api/passwords/${id}/`, { token: keyA2 })).body.domain).toBe('two.com');
    const listA2 = (await srv.api('GET', '/api/passwords/', { token: keyA2 })).body;
    expect(listA2.map((e: { domain: string }) => e.domain)).toEqual(['two.com']);
  });

  test('the list pages with limit and a Link rel="next" cursor', async () => {
    const idX = await identity(tokenA, 'pager');
    for (let i = 0; i < 3; i++) await srv.api('POST', '/api/passwords/', { token: tokenA, identity: idX, body: { domain: `d${i}.com`, password: fakeCiphertext(i) } });
    const first = await srv.api('GET', '/api/passwords/?limit=2', { token: tokenA, identity: idX });
    expect(first.body.map((e: { domain: string }) => e.domain)).toEqual(['d0.com', 'd1.com']);
    const next = /<([^>]+)>; rel="next"/.exec(first.headers.get('link') ?? '')![1];
    const second = await srv.api('GET', new URL(next).pathname + new URL(next).search, { token: tokenA, identity: idX });
    expect(second.body.map((e: { domain: string }) => e.domain)).toEqual(['d2.com']);
    expect(second.headers.get('link')).toBeNull();
  });
});

describe('generate_password', () => {
  const gen = (q = '', token: string | null = tokenA, identity: string | undefined = idA1) =>
    srv.api('GET', `/api/passwords/generate_password/${q}`, { token: token ?? undefined, identity });

  test('needs a credential and an identity (SPEC: "Passwords (identity header required)"); 20 characters from all four classes by default', async () => {
    expect((await gen('', null)).status).toBe(401);
    const none = await gen('', tokenA, '');
    expect([none.status, none.body.code]).toEqual([400, 'identity_required']);
    const res = await gen();
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['password']);
    const p: string = res.body.password;
    expect(p).toHaveLength(20);
    for (const re of [/[a-z]/, /[A-Z]/, /[0-9]/, /[^A-Za-z0-9]/]) expect(p).toMatch(re);
    expect((await gen()).body.password).not.toBe(p);
    expect((await gen('', keyA1)).status).toBe(200);
  });

  test('length 8 to 128; classes can be switched off; bad input is 400', async () => {
    expect((await gen('?length=8')).body.password).toHaveLength(8);
    expect((await gen('?length=128')).body.password).toHaveLength(128);
    for (const bad of ['7', '129', 'abc', '-1', '20.5']) expect([bad, (await gen(`?length=${bad}`)).status]).toEqual([bad, 400]);
    expect((await gen('?length=200')).body).toEqual({ length: ['Must be an integer from 8 to 128.'] });
    expect((await gen('?length=64&lowercase=false&uppercase=false&symbols=false')).body.password).toMatch(/^[0-9]{64}$/);
    expect((await gen('?symbols=0&digits=no')).body.password).toMatch(/^[A-Za-z]{20}$/);
    expect((await gen('?symbols=f&digits=off')).body.password).toMatch(/^[A-Za-z]{20}$/); // the texts of every boolean flag
    expect((await gen('?lowercase=false&uppercase=false&digits=false&symbols=false')).status).toBe(400);
    expect((await gen('?digits=maybe')).body).toEqual({ digits: ['Must be a valid boolean.'] });
  });

  test('is never stored: no event is written', async () => {
    const before = await srv.runtime.events.headPosition();
    await gen('?length=32');
    expect(await srv.runtime.events.headPosition()).toBe(before);
  });
});

describe('vault secrets', () => {
  test('upsert by key: 201 then 200 with the same uuid; list redacts; GET one returns the ciphertext', async () => {
    const ct1 = encryptField(vaultKeyA, 'sk-first', { kind: 'secret', identity: idA1, key: 'OPENAI_API_KEY' });
    const ct2 = encryptField(vaultKeyA, 'sk-second', { kind: 'secret', identity: idA1, key: 'OPENAI_API_KEY' });
    const a = await srv.api('POST', '/api/vault/', { token: keyA1, body: { key: 'OPENAI_API_KEY', value: ct1 } });
    expect(a.status).toBe(201);
    expect(a.body).toEqual({ uuid: expect.any(String), key: 'OPENAI_API_KEY', value: ct1, created_dt: expect.any(String), updated_dt: expect.any(String) });
    const b = await srv.api('POST', '/api/vault/', { token: keyA1, body: { key: 'OPENAI_API_KEY', value: ct2 } });
    expect(b.status).toBe(200);
    expect([a.headers.get('location'), b.headers.get('location')]).toEqual([`/api/vault/${a.body.uuid}/`, null]); // only a creation has one
    expect(b.body).toMatchObject({ uuid: a.body.uuid, value: ct2, created_dt: a.body.created_dt });

    const list = await srv.api('GET', '/api/vault/', { token: keyA1 });
    expect(list.status).toBe(200);
    const item = list.body.find((s: { key: string }) => s.key === 'OPENAI_API_KEY');
    expect(item).toEqual({ uuid: a.body.uuid, key: 'OPENAI_API_KEY', value: null, created_dt: a.body.created_dt, updated_dt: b.body.updated_dt });
    expect(list.body.every((s: { value: unknown }) => s.value === null)).toBe(true);
    expect(list.text).not.toContain('e2e::');

    const one = await srv.api('GET', `/api/vault/${a.body.uuid}/`, { token: keyA1 });
    expect(one.body.value).toBe(ct2);
    expect(decryptField(vaultKeyA, one.body.value, { kind: 'secret', identity: idA1, key: 'OPENAI_API_KEY' })).toBe('sk-second');
    expect((await srv.api('GET', '/api/vault/?key=OPENAI_API_KEY', { token: keyA1 })).body).toEqual([item]);
    expect((await srv.api('GET', '/api/vault/?key=openai_api_key', { token: keyA1 })).body).toEqual([]); // case-sensitive
    // A filter given twice is a 400, not dropped (it listed every secret).
    const twice = await srv.api('GET', '/api/vault/?key=OPENAI_API_KEY&key=nope', { token: keyA1 });
    expect([twice.status, twice.body]).toEqual([400, { key: ['Give key once.'] }]);
    const length = await srv.api('GET', '/api/passwords/generate_password/?length=10&length=12', { token: keyA1 });
    expect([length.status, length.body]).toEqual([400, { length: ['Give length once.'] }]);
  });

  test('a burst of independent writes to one identity all succeed: 60 secrets and 20 passwords at once', async () => {
    const secrets = await Promise.all(
      Array.from({ length: 60 }, (_, i) => srv.api('POST', '/api/vault/', { token: keyA1, body: { key: `BURST_${i}`, value: fakeCiphertext(i + 1) } })),
    );
    expect(secrets.map((r) => r.status)).toEqual(Array(60).fill(201));
    const passwords = await Promise.all(
      Array.from({ length: 20 }, (_, i) => srv.api('POST', '/api/passwords/', { token: keyA1, body: { domain: `burst${i}.example`, password: fakeCiphertext(i + 1) } })),
    );
    expect(passwords.map((r) => r.status)).toEqual(Array(20).fill(201));
    const listed = await srv.api('GET', '/api/vault/?limit=200', { token: keyA1 });
    expect(listed.body.filter((s: { key: string }) => s.key.startsWith('BURST_'))).toHaveLength(60);
  });

  test('a value moved to another key does not decrypt', async () => {
    const ct = encryptField(vaultKeyA, 'db-pass', { kind: 'secret', identity: idA1, key: 'DB_PASSWORD' });
    const moved = await srv.api('POST', '/api/vault/', { token: keyA1, body: { key: 'DB_PASSWORD_COPY', value: ct } });
    expect(moved.status).toBe(201);
    expect(() => decryptField(vaultKeyA, moved.body.value, { kind: 'secret', identity: idA1, key: 'DB_PASSWORD_COPY' })).toThrow(expect.objectContaining({ code: 'decrypt_failed' }));
  });

  test('validation: key name and e2e value', async () => {
    const post = (body: unknown) => srv.api('POST', '/api/vault/', { token: keyA1, body });
    const spaced = await post({ key: 'API KEY', value: fakeCiphertext() });
    expect([spaced.status, Object.keys(spaced.body)]).toEqual([400, ['key']]);
    expect((await post({ key: '', value: fakeCiphertext() })).status).toBe(400);
    expect((await post({ key: 'k'.repeat(256), value: fakeCiphertext() })).status).toBe(400);
    expect((await post({ key: 'prod/db:password@v2', value: fakeCiphertext() })).status).toBe(201);
    expect(Object.keys((await post({ key: 'X', value: 'plaintext' })).body)).toEqual(['value']);
    expect(Object.keys((await post({ key: 'X', value: null })).body)).toEqual(['value']);
    expect(Object.keys((await post({ key: 'X' })).body)).toEqual(['value']);
  });

  test('per identity: the same key in two identities is two secrets; another identity gets 404', async () => {
    const a = await srv.api('POST', '/api/vault/', { token: keyA1, body: { key: 'SHARED_NAME', value: fakeCiphertext(1) } });
    const b = await srv.api('POST', '/api/vault/', { token: keyA2, body: { key: 'SHARED_NAME', value: fakeCiphertext(2) } });
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(a.body.uuid).not.toBe(b.body.uuid);
    expect((await srv.api('GET', `/api/vault/${a.body.uuid}/`, { token: keyA2 })).status).toBe(404);
    expect((await srv.api('DELETE', `/api/vault/${a.body.uuid}/`, { token: keyA2 })).status).toBe(404);
    expect((await srv.api('GET', `/api/vault/${a.body.uuid}/`, { token: tokenB, identity: idB1 })).status).toBe(404);
    expect((await srv.api('GET', `/api/vault/${a.body.uuid}/`, { token: tokenB, identity: idA1 })).status).toBe(403);
    expect((await srv.api('GET', '/api/vault/', { token: tokenA })).body.code).toBe('identity_required');
  });

  test('DELETE 204, then 404; the name is free again (201, new uuid)', async () => {
    const a = await srv.api('POST', '/api/vault/', { token: keyA1, body: { key: 'TEMP', value: fakeCiphertext() } });
    const del = await srv.api('DELETE', `/api/vault/${a.body.uuid}/`, { token: keyA1 });
    expect([del.status, del.text]).toEqual([204, '']);
    expect((await srv.api('GET', `/api/vault/${a.body.uuid}/`, { token: keyA1 })).status).toBe(404);
    expect((await srv.api('DELETE', `/api/vault/${a.body.uuid}/`, { token: keyA1 })).status).toBe(404);
    const again = await srv.api('POST', '/api/vault/', { token: keyA1, body: { key: 'TEMP', value: fakeCiphertext() } });
    expect(again.status).toBe(201);
    expect(again.body.uuid).not.toBe(a.body.uuid);
  });

  test('parallel PUTs of one entry each answer the entry as their own write left it', async () => {
    const id = crypto.randomUUID();
    expect((await srv.api('POST', '/api/passwords/', { token: keyA2, body: { uuid: id, domain: 'race.example', password: fakeCiphertext(1) } })).status).toBe(201);
    const answers = await Promise.all(Array.from({ length: 15 }, (_, i) => srv.api('PUT', `/api/passwords/${id}/`, { token: keyA2, body: { domain: 'race.example', password: fakeCiphertext(200 + i) } })));
    expect(answers.map((r) => r.body.password)).toEqual(Array.from({ length: 15 }, (_, i) => fakeCiphertext(200 + i)));
  });

  test('concurrent upserts of one name make one secret: one 201, the rest 200', async () => {
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => srv.api('POST', '/api/vault/', { token: keyA2, body: { key: 'RACE', value: fakeCiphertext(i) } })));
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 201]);
    expect(new Set(results.map((r) => r.body.uuid)).size).toBe(1);
    expect((await srv.api('GET', '/api/vault/?key=RACE', { token: keyA2 })).body).toHaveLength(1);
    // Each answer is the secret as that request left it, not a later writer's value.
    expect(results.map((r) => r.body.value)).toEqual(Array.from({ length: 6 }, (_, i) => fakeCiphertext(i)));
    for (let round = 0; round < 3; round++) {
      const burst = await Promise.all(Array.from({ length: 20 }, (_, i) => srv.api('POST', '/api/vault/', { token: keyA2, body: { key: 'RACE', value: fakeCiphertext(100 + i) } })));
      expect(burst.map((r) => r.body.value)).toEqual(Array.from({ length: 20 }, (_, i) => fakeCiphertext(100 + i)));
    }
  });
});
