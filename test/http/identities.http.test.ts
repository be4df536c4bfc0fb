/** Identities over HTTP (SPEC "Identities", "Authentication" 5 and 8; DECISIONS "Auth"). */
import http from 'node:http';
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { jest } from '@jest/globals';
import { RESERVED } from '../../services/kernel/reservations.js';
import { createClient } from '../../services/sdk/index.js';
import { IdentityCreated, identityStream, type IdentityCreatedData } from '../../services/identities/events.js';
import { loadConfig } from '../../infra/config.js';
import { startRuntime } from '../../infra/runtime.js';
import { apiClient, startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/eventually.js';
import { whileReadModelsFull } from '../support/read-models-full.js';

let s: TestServer;
let owner: { access: string; user: { pk: number } };
let other: { access: string; user: { pk: number } };

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

async function create(token: string, body: unknown) {
  return s.api('POST', '/api/identities/', { token, body });
}

async function identityKey(token: string, identity: string): Promise<string> {
  const res = await s.api('POST', '/api/auth/keys/identity/', { token, body: { label: 'agent', identity_uuid: identity } });
  expect(res.status).toBe(201);
  return res.body.key;
}

beforeAll(async () => {
  s = await startTestServer();
  owner = await s.signUp();
  other = await s.signUp();
});
afterAll(async () => {
  await s?.close();
});

describe('create', () => {
  it('answers 201 with the Identity: uuid, name, inbox at MAIL_DOMAIN, phone null, created_dt', async () => {
    const res = await create(owner.access, { name: 'Sales Bot', email_identifier: 'Sales.Bot' });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ uuid: expect.any(String), name: 'Sales Bot', inbox: 'sales.bot@agents.localhost', phone: null, created_dt: expect.stringMatching(ISO_MS) });
    expect(res.body.uuid).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-/);
    expect(res.headers.get('location')).toBe(`/api/identities/${res.body.uuid}/`); // RFC 9110 §10.2.2
    const got = await s.api('GET', res.headers.get('location')!, { token: owner.access });
    expect(got.status).toBe(200);
    expect(got.body).toEqual(res.body);
  });

  it('generates a readable unique email identifier when omitted', async () => {
    const a = await create(owner.access, { name: 'Support Agent Ü' });
    const b = await create(owner.access, { name: 'support agent u' });
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(a.body.inbox).toMatch(/^support-agent-u-[a-z2-9]{4}@agents\.localhost$/);
    expect(a.body.inbox).not.toBe(b.body.inbox);
  });

  it('accepts provision_phone false in every spelling', async () => {
    // Django REST framework's BooleanField spellings (the spec leaves the type open).
    for (const [i, provision_phone] of [false, 'false', 'False', 'FALSE', 0, '0', 'no', 'NO', 'off', 'f', 'N', null].entries()) {
      const res = await create(owner.access, { name: `no phone ${i}`, provision_phone });
      expect(res.status).toBe(201);
      expect(res.body.phone).toBeNull();
    }
  });

  it('400 when a JSON value has the wrong type: JSON bodies are not coerced (form fields are text and are)', async () => {
    for (const [name, message] of [
      [123, 'Not a valid string.'],
      [true, 'Not a valid string.'],
      [null, 'This field may not be null.'],
    ] as const) {
      const res = await create(owner.access, { name });
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ name: [message] });
    }
    expect((await create(owner.access, { name: 'typed phone', provision_phone: 2 })).body).toEqual({ provision_phone: ['Must be a valid boolean.'] });
    // With a name (trimmed before the schema counts it) the body stays JSON: an address is never made of `true` (addresses are never given back).
    for (const email_identifier of [true, 5, 12.5]) {
      const res = await create(owner.access, { name: `typed address ${email_identifier}`, email_identifier });
      expect([email_identifier, res.status, res.body]).toEqual([email_identifier, 400, { email_identifier: ['Not a valid string.'] }]);
    }
    const list = await s.api('GET', '/api/identities/', { token: owner.access });
    expect(list.body.map((i: { name: string }) => i.name)).not.toEqual(expect.arrayContaining(['123', 'true', 'typed phone']));
  });

  it('400 when name is missing or blank', async () => {
    const missing = await create(owner.access, {});
    expect(missing.status).toBe(400);
    expect(missing.body.name).toEqual(expect.any(Array));
    const blank = await create(owner.access, { name: '   ' });
    expect(blank.status).toBe(400);
    expect(blank.body.name).toEqual(expect.any(Array));
    const long = await create(owner.access, { name: 'x'.repeat(151) });
    expect(long.status).toBe(400);
  });

  it('400 when email_identifier is not an RFC 5321 dot-atom of at most 64 characters', async () => {
    for (const email_identifier of ['a..b', '.a', 'a.', 'has space', 'a@b', 'x'.repeat(65), '']) {
      const res = await create(owner.access, { name: `bad ${email_identifier.slice(0, 20)}`, email_identifier });
      expect(res.status).toBe(400);
      expect(res.body.email_identifier).toEqual(expect.any(Array));
    }
  });

  it('400 when provision_phone is not a boolean', async () => {
    const res = await create(owner.access, { name: 'bad flag', provision_phone: 'maybe' });
    expect(res.status).toBe(400);
    expect(res.body.provision_phone).toEqual(expect.any(Array));
  });

  it('401 without credentials', async () => {
    const res = await s.api('POST', '/api/identities/', { body: { name: 'anon' } });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('not_authenticated');
  });
});

describe('conflicts (409)', () => {
  it('a name with control characters is a 400; names equal after Unicode normalisation collide', async () => {
    for (const name of ['a\nb', 'tab\there', '\u0000nul', 'a\u0085b', 'a\u2028b', 'a\u2029b', 'a\u009bb', '\tBot\n', 'Bot\r\n']) {
      const res = await create(owner.access, { name });
      expect([name, res.status, Object.keys(res.body)]).toEqual([name, 400, ['name']]);
    }
    // 1 to 150 characters after trimming: the spaces around do not count.
    const padded = await create(owner.access, { name: ` ${'p'.repeat(150)} ` });
    expect([padded.status, padded.body.name]).toEqual([201, 'p'.repeat(150)]);
    expect((await create(owner.access, { name: 'q'.repeat(151) })).status).toBe(400);
    const blank = await create(owner.access, { name: '   ' });
    expect([blank.status, blank.body]).toEqual([400, { name: ['This field may not be blank.'] }]);
    expect((await create(owner.access, { name: 'Caf\u00e9 bot' })).status).toBe(201);
    expect((await create(owner.access, { name: 'CAFE\u0301 BOT' })).status).toBe(409);
  });

  it('409 when the name is taken within the account, case-insensitively', async () => {
    expect((await create(owner.access, { name: 'Unique Name' })).status).toBe(201);
    const dup = await create(owner.access, { name: 'unique NAME' });
    expect(dup.status).toBe(409);
    expect(dup.body).toEqual({ detail: expect.any(String), code: 'conflict' });
  });

  it('the same name in another account is fine', async () => {
    expect((await create(owner.access, { name: 'Shared Name' })).status).toBe(201);
    expect((await create(other.access, { name: 'Shared Name' })).status).toBe(201);
  });

  it('409 when the address is taken, by any account', async () => {
    expect((await create(owner.access, { name: 'addr 1', email_identifier: 'taken-addr' })).status).toBe(201);
    const dup = await create(other.access, { name: 'addr 2', email_identifier: 'TAKEN-addr' });
    expect(dup.status).toBe(409);
    expect(dup.body.code).toBe('conflict');
  });

  it('409 for the reserved operator mailboxes (postmaster, abuse), saying they are reserved', async () => {
    const pm = await create(owner.access, { name: 'pm', email_identifier: 'postmaster' });
    expect(pm.status).toBe(409);
    expect(pm.body.detail).toMatch(/postmaster@.* is reserved/);
    expect((await create(owner.access, { name: 'ab', email_identifier: 'Abuse' })).status).toBe(409);
    // A certificate authority's validation addresses (CA/B Forum BR 3.2.2.4.4): one who reads them can get a certificate for the domain.
    for (const local of ['admin', 'Administrator', 'root', 'ssladmin']) {
      const res = await create(owner.access, { name: `ca ${local}`, email_identifier: local });
      expect([local, res.status, res.body.code]).toEqual([local, 409, 'conflict']);
    }
  });

  it('an identity that took an address before it was reserved keeps it, and every start warns about it', async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-reserved-'));
    const config = loadConfig({ PORT: '0', SMTP_PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'silent', PASSWORD_HASH_MEMORY_KIB: '19456' });
    try {
      const first = await startRuntime(config, { logger: pino({ level: 'silent' }) });
      const api = apiClient(() => first.url);
      const { access, user } = (await api('POST', '/api/auth/social/', { body: { username: 'legacy', email: 'legacy@example.com', password1: 'pw-Secret-1', password2: 'pw-Secret-1' } })).body;
      // As an older release recorded it, when admin@ was not reserved yet.
      const legacyId = randomUUID();
      const data: IdentityCreatedData = { identityId: legacyId, ownerPk: user.pk, name: 'Old admin', inbox: `admin@${config.mailDomain}`, phone: null, at: new Date().toISOString() };
      await first.events.append(identityStream(legacyId), [{ id: randomUUID(), type: IdentityCreated, data }], { expectedRevision: 'no_stream' });
      await first.close();
      const lines: string[] = [];
      const second = await startRuntime(config, { logger: pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) }) });
      try {
        const warned = lines.map((l) => JSON.parse(l) as { inbox?: string; identityId?: string; msg: string }).filter((l) => l.inbox);
        expect(warned).toEqual([expect.objectContaining({ inbox: `admin@${config.mailDomain}`, identityId: legacyId, msg: expect.stringMatching(/reserved.*certificate authority/) })]);
        const kept = await apiClient(() => second.url)('GET', `/api/identities/${legacyId}/`, { token: access });
        expect([kept.status, kept.body.inbox]).toEqual([200, `admin@${config.mailDomain}`]);
      } finally {
        await second.close();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 30_000);

  it('200 concurrent creates of one name give exactly one 201 (the rest 409)', async () => {
    const results = await Promise.all(Array.from({ length: 200 }, () => create(owner.access, { name: 'Race Condition' })));
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((x) => x === 201)).toHaveLength(1);
    expect(statuses.filter((x) => x === 409)).toHaveLength(199);
    const list = await s.api('GET', '/api/identities/?limit=200', { token: owner.access });
    expect(list.body.filter((i: { name: string }) => i.name === 'Race Condition')).toHaveLength(1);
  }, 120_000);
});

describe('delete', () => {
  it('204; then 404; its keys fail with 401 at once; the name is free again; the address is never reused', async () => {
    const made = await create(owner.access, { name: 'Short Lived', email_identifier: 'short-lived' });
    const key = await identityKey(owner.access, made.body.uuid);
    expect((await s.api('GET', '/api/health/whoami/', { token: key })).status).toBe(200);

    const del = await s.api('DELETE', `/api/identities/${made.body.uuid}/`, { token: owner.access });
    expect(del.status).toBe(204);
    expect(del.text).toBe('');
    expect((await s.api('GET', `/api/identities/${made.body.uuid}/`, { token: owner.access })).status).toBe(404);
    const withKey = await s.api('GET', '/api/health/whoami/', { token: key });
    expect(withKey.status).toBe(401);
    expect(withKey.body.code).toBe('token_not_valid');
    const keys = await s.api('GET', '/api/auth/keys/identity/', { token: owner.access });
    expect(keys.body.some((k: { identity: string }) => k.identity === made.body.uuid)).toBe(false);

    expect((await s.api('DELETE', `/api/identities/${made.body.uuid}/`, { token: owner.access })).status).toBe(404);
    const again = await create(owner.access, { name: 'Short Lived' });
    expect(again.status).toBe(201);
    const reuse = await create(other.access, { name: 'hijack', email_identifier: 'short-lived' });
    expect(reuse.status).toBe(409);
  });

  it("403 when deleting another account's identity", async () => {
    const made = await create(other.access, { name: 'Not yours' });
    expect((await s.api('DELETE', `/api/identities/${made.body.uuid}/`, { token: owner.access })).status).toBe(403);
    expect((await s.api('GET', `/api/identities/${made.body.uuid}/`, { token: other.access })).status).toBe(200);
  });
});

describe('read and update', () => {
  it("GET: another account's identity 403, unknown 404, not a uuid 404", async () => {
    const theirs = await create(other.access, { name: 'Private' });
    const res = await s.api('GET', `/api/identities/${theirs.body.uuid}/`, { token: owner.access });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('permission_denied');
    expect((await s.api('GET', '/api/identities/0190a6f0-0000-7000-8000-000000000000/', { token: owner.access })).status).toBe(404);
    expect((await s.api('GET', '/api/identities/nope/', { token: owner.access })).status).toBe(404);
  });

  it('lists only the account\'s identities, paginated with limit, cursor and Link rel="next"', async () => {
    const fresh = await s.signUp();
    for (let i = 0; i < 3; i++) expect((await create(fresh.access, { name: `p${i}` })).status).toBe(201);
    const first = await s.api('GET', '/api/identities/?limit=2', { token: fresh.access });
    expect(first.status).toBe(200);
    expect(first.body.map((i: { name: string }) => i.name)).toEqual(['p0', 'p1']);
    const link = first.headers.get('link')!;
    expect(link).toMatch(/rel="next"/);
    const next = new URL(/<([^>]+)>/.exec(link)![1]);
    const second = await s.api('GET', next.pathname + next.search, { token: fresh.access });
    expect(second.body.map((i: { name: string }) => i.name)).toEqual(['p2']);
    expect(second.headers.get('link')).toBeNull();
    expect((await s.api('GET', '/api/identities/?limit=0', { token: fresh.access })).status).toBe(400);
    // The SDK: a list method with a limit answers one page; listPage also gives the next cursor.
    const sdk = createClient({ baseUrl: s.url, token: fresh.access });
    expect((await sdk.identities.list({ limit: 2 })).map((i) => i.name)).toEqual(['p0', 'p1']);
    const page1 = await sdk.listPage<{ name: string }>('/api/identities/', { limit: 2 }, false);
    expect(page1.items.map((i) => i.name)).toEqual(['p0', 'p1']);
    const page2 = await sdk.listPage<{ name: string }>('/api/identities/', { limit: 2, cursor: page1.cursor! }, false);
    expect([page2.items.map((i) => i.name), page2.cursor]).toEqual([['p2'], null]);
    // A request line in absolute form names another host: the link still names the service.
    const absolute = await new Promise<string>((resolve, reject) => {
      const { hostname, port } = new URL(s.url);
      http
        .get({ hostname, port, path: 'http://evil.example/api/identities/?limit=2', headers: { authorization: `Bearer ${fresh.access}` } }, (res) => {
          res.resume();
          resolve(String(res.headers.link));
        })
        .on('error', reject);
    });
    expect(new URL(/<([^>]+)>/.exec(absolute)![1]).origin).toBe(next.origin); // PUBLIC_URL's
  });

  it('a list read again after each write shows that write (cached answers never go stale)', async () => {
    const u = await s.signUp();
    const names = async () => ((await s.api('GET', '/api/identities/', { token: u.access })).body as { name: string }[]).map((i) => i.name);
    expect(await names()).toEqual([]);
    const a = await create(u.access, { name: 'First' });
    expect(await names()).toEqual(['First']);
    expect(await names()).toEqual(['First']); // the same answer twice (served from the cache)
    await s.api('PATCH', `/api/identities/${a.body.uuid}/`, { token: u.access, body: { name: 'Renamed' } });
    expect(await names()).toEqual(['Renamed']);
    await create(u.access, { name: 'Second' });
    expect(await names()).toEqual(['Renamed', 'Second']);
    await s.api('DELETE', `/api/identities/${a.body.uuid}/`, { token: u.access });
    expect(await names()).toEqual(['Second']);
    // A repeated list (its JSON reused from the cache) is still answered as JSON.
    for (let i = 0; i < 2; i++) {
      const res = await s.api('GET', '/api/identities/', { token: u.access });
      expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
      expect(Number(res.headers.get('content-length'))).toBe(Buffer.byteLength(JSON.stringify(res.body)));
    }
  });

  it('PUT renames (409 when taken; the old name is freed); PATCH changes only what it names', async () => {
    const a = await create(owner.access, { name: 'Rename Me', email_identifier: 'rename-me' });
    await create(owner.access, { name: 'Occupied' });
    expect((await s.api('PUT', `/api/identities/${a.body.uuid}/`, { token: owner.access, body: { name: 'occupied' } })).status).toBe(409);
    const put = await s.api('PUT', `/api/identities/${a.body.uuid}/`, { token: owner.access, body: { name: 'Renamed' } });
    expect(put.status).toBe(200);
    expect(put.body).toEqual({ ...a.body, name: 'Renamed' });
    expect((await create(owner.access, { name: 'Rename Me' })).status).toBe(201);
    expect((await s.api('PUT', `/api/identities/${a.body.uuid}/`, { token: owner.access, body: {} })).status).toBe(400);
    const patch = await s.api('PATCH', `/api/identities/${a.body.uuid}/`, { token: owner.access, body: {} });
    expect(patch.status).toBe(200);
    expect(patch.body.name).toBe('Renamed');
    const caseOnly = await s.api('PATCH', `/api/identities/${a.body.uuid}/`, { token: owner.access, body: { name: 'RENAMED' } });
    expect(caseOnly.status).toBe(200);
    expect(caseOnly.body.name).toBe('RENAMED');
  });

  it('writes racing the deletion of their identity are either done before it or refused (404): none is applied after it', async () => {
    for (let round = 0; round < 3; round++) {
      const target = (await create(owner.access, { name: `Doomed ${round}` })).body;
      const e2e = 'e2e::AAAA';
      const writes = Array.from({ length: 12 }, (_, i) =>
        i % 2
          ? s.api('POST', '/api/vault/', { token: owner.access, identity: target.uuid, body: { key: `k${i}`, value: e2e } })
          : s.api('POST', '/api/passwords/', { token: owner.access, identity: target.uuid, body: { domain: `d${i}.example`, password: e2e } }),
      );
      await new Promise((r) => setTimeout(r, round * 3));
      const deleted = await s.api('DELETE', `/api/identities/${target.uuid}/`, { token: owner.access });
      expect(deleted.status).toBe(204);
      const answers = await Promise.all(writes);
      expect(answers.every((r) => r.status === 201 || r.status === 404)).toBe(true);
      const log = await s.runtime.events.readAll({ filter: { streams: [`identity-${target.uuid}`, `vault-${target.uuid}`] } });
      const deletedAt = log.findIndex((e) => e.type === 'IdentityDeleted');
      expect(log.slice(deletedAt + 1).map((e) => e.type)).toEqual([]);
      expect(log.filter((e) => e.type === 'VaultSecretCreated' || e.type === 'PasswordEntryCreated')).toHaveLength(answers.filter((r) => r.status === 201).length);
    }
  });

  it('a client slow to send its write body does not hold up the deletion of the identity', async () => {
    const target = (await create(owner.access, { name: 'Stalled writer' })).body;
    const url = new URL(s.url);
    const socket = net.connect(Number(url.port), url.hostname);
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.on('error', () => undefined);
    // The write is past its credential and identity checks and reading its body (the server's
    // request starts flowing), which never comes: a fixed 200 ms could be too short on a
    // loaded machine, and a deletion that came first proved nothing.
    const reading = new Promise<void>((resolve) => s.runtime.server.once('request', (req: http.IncomingMessage) => req.once('resume', () => resolve())));
    socket.write(`POST /api/vault/ HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${owner.access}\r\nX-Service-Identity: ${target.uuid}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"key":`);
    await reading; // the request is in, its body is not
    const started = Date.now();
    const deleted = await s.api('DELETE', `/api/identities/${target.uuid}/`, { token: owner.access });
    expect(deleted.status).toBe(204);
    expect(Date.now() - started).toBeLessThan(5_000);
    socket.destroy();
  });

  it('the same rename sent many times at once (a client retrying) keeps the name reserved: another identity cannot take it', async () => {
    const a = await create(owner.access, { name: 'Before Burst' });
    const answers = await Promise.all(Array.from({ length: 10 }, () => s.api('PATCH', `/api/identities/${a.body.uuid}/`, { token: owner.access, body: { name: 'After Burst' } })));
    expect(answers.map((r) => [r.status, r.body.name])).toEqual(Array(10).fill([200, 'After Burst']));
    expect((await create(owner.access, { name: 'after burst' })).status).toBe(409);
    expect((await create(owner.access, { name: 'Before Burst' })).status).toBe(201);
  });
});

describe('fences and scoping', () => {
  let mine: string;
  let second: string;
  let key: string;
  beforeAll(async () => {
    mine = (await create(owner.access, { name: 'Fenced One' })).body.uuid;
    second = (await create(owner.access, { name: 'Fenced Two' })).body.uuid;
    key = await identityKey(owner.access, mine);
  });

  it('an identity key cannot create identities (403)', async () => {
    const res = await create(key, { name: 'from key' });
    expect(res.status).toBe(403);
  });

  it('an identity key cannot update or delete identities (403), even its own', async () => {
    expect((await s.api('PUT', `/api/identities/${mine}/`, { token: key, body: { name: 'x' } })).status).toBe(403);
    expect((await s.api('DELETE', `/api/identities/${mine}/`, { token: key })).status).toBe(403);
  });

  it('an identity key sees only its identity: list has one item, another identity is 403', async () => {
    const list = await s.api('GET', '/api/identities/', { token: key });
    expect(list.status).toBe(200);
    expect(list.body.map((i: { uuid: string }) => i.uuid)).toEqual([mine]);
    expect((await s.api('GET', `/api/identities/${mine}/`, { token: key })).status).toBe(200);
    expect((await s.api('GET', `/api/identities/${second}/`, { token: key })).status).toBe(403);
  });

  it('identity key on another identity via X-Service-Identity or ?identity= → 403', async () => {
    expect((await s.api('GET', '/api/identities/current/', { token: key, identity: second })).status).toBe(403);
    expect((await s.api('GET', `/api/identities/current/?identity=${second}`, { token: key })).status).toBe(403);
    const own = await s.api('GET', '/api/identities/current/', { token: key });
    expect(own.status).toBe(200);
    expect(own.body.uuid).toBe(mine);
  });

  it('identity-scoped endpoint without an identity → 400 identity_required', async () => {
    const res = await s.api('GET', '/api/identities/current/', { token: owner.access });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('identity_required');
  });

  it('X-Service-Identity and the identity query select the identity; both naming different ones is a 400', async () => {
    expect((await s.api('GET', '/api/identities/current/', { token: owner.access, identity: second })).body.uuid).toBe(second);
    expect((await s.api('GET', `/api/identities/current/?identity=${second}`, { token: owner.access })).body.uuid).toBe(second);
    expect((await s.api('GET', `/api/identities/current/?identity=${second.toUpperCase()}`, { token: owner.access, identity: second })).body.uuid).toBe(second);
    const both = await s.api('GET', `/api/email-inbox/?identity=${second}`, { token: owner.access, identity: mine });
    expect([both.status, Object.keys(both.body)]).toEqual([400, ['identity']]);
  });

  it("another account's identity → 403; unknown → 404", async () => {
    const theirs = (await create(other.access, { name: 'Theirs' })).body.uuid;
    expect((await s.api('GET', '/api/identities/current/', { token: owner.access, identity: theirs })).status).toBe(403);
    expect((await s.api('GET', '/api/identities/current/', { token: owner.access, identity: '0190a6f0-0000-7000-8000-000000000001' })).status).toBe(404);
    // Not a uuid at all: no such identity either, by header or by query.
    expect((await s.api('GET', '/api/identities/current/', { token: owner.access, identity: 'not-a-uuid' })).body.code).toBe('not_found');
    expect((await s.api('GET', '/api/identities/current/?identity=bogus', { token: owner.access })).status).toBe(404);
  });

  it('a token from bind-identity selects its identity', async () => {
    const bound = await s.api('POST', '/api/auth/bind-identity/', { token: owner.access, body: { identity: second } });
    expect(bound.status).toBe(200);
    const res = await s.api('GET', '/api/identities/current/', { token: bound.body.access });
    expect(res.status).toBe(200);
    expect(res.body.uuid).toBe(second);
  });
});

describe('phone (plan)', () => {
  it('provision_phone on the free plan → 402 payment_required naming the plan needed; nothing is created', async () => {
    const res = await create(owner.access, { name: 'Wants Phone', provision_phone: true });
    expect(res.status).toBe(402);
    expect(res.body).toEqual({ detail: expect.any(String), code: 'payment_required', plan_required: 'developer' });
    expect((await create(owner.access, { name: 'Wants Phone', provision_phone: 'false' })).status).toBe(201);
  });

  it('a bad input (400) or a taken name or address (409) is said before the plan (402)', async () => {
    const bad = await create(owner.access, { name: 'Plan Order', provision_phone: true, email_identifier: 'bad id' });
    expect([bad.status, Object.keys(bad.body)]).toEqual([400, ['email_identifier']]);
    expect((await create(owner.access, { name: 'Plan Order', email_identifier: 'plan-order' })).status).toBe(201);
    const name = await create(owner.access, { name: 'plan order', provision_phone: true });
    expect([name.status, name.body.code]).toEqual([409, 'conflict']);
    const address = await create(owner.access, { name: 'Plan Order 2', provision_phone: true, email_identifier: 'Plan-Order' });
    expect([address.status, address.body.code]).toEqual([409, 'conflict']);
    // Refused for the plan, the address asked for stays free
    expect((await create(owner.access, { name: 'Plan Order 3', provision_phone: true, email_identifier: 'plan-order-3' })).status).toBe(402);
    const again = await create(owner.access, { name: 'Plan Order 3', email_identifier: 'plan-order-3' });
    expect([again.status, again.body.inbox]).toEqual([201, expect.stringMatching(/^plan-order-3@/)]);
  });

  it('a PUT or PATCH refused with 402 changes nothing: the rename is not applied and the new name stays free', async () => {
    const id = (await create(owner.access, { name: 'Keeps Its Name' })).body.uuid;
    for (const method of ['PUT', 'PATCH']) {
      const res = await s.api(method, `/api/identities/${id}/`, { token: owner.access, body: { name: `Renamed by ${method}`, provision_phone: true } });
      expect([method, res.status]).toEqual([method, 402]);
      expect((await s.api('GET', `/api/identities/${id}/`, { token: owner.access })).body).toMatchObject({ name: 'Keeps Its Name', phone: null });
    }
    expect((await create(owner.access, { name: 'Renamed by PUT' })).status).toBe(201); // the name was not kept reserved
    const renamed = await s.api('PATCH', `/api/identities/${id}/`, { token: owner.access, body: { name: 'Renamed at last' } });
    expect([renamed.status, renamed.body.name]).toEqual([200, 'Renamed at last']);
  });
});

describe('limit per account (IDENTITY_LIMIT)', () => {
  let limited: TestServer;
  beforeAll(async () => {
    limited = await startTestServer({ IDENTITY_LIMIT: '3' });
  });
  afterAll(async () => {
    await limited?.close();
  });

  it('concurrent creates past the limit: exactly the limit succeed, the rest 403 identity_limit_reached; a deletion frees a place', async () => {
    const { access } = await limited.signUp();
    const { access: otherAccount } = await limited.signUp();
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => limited.api('POST', '/api/identities/', { token: access, body: { name: `Fleet ${i}` } })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 201, 201, 403, 403, 403, 403, 403]);
    const refused = results.find((r) => r.status === 403)!;
    expect(refused.body).toEqual({ detail: expect.stringMatching(/limit \(3\).*support/), code: 'identity_limit_reached' });
    const list = await limited.api('GET', '/api/identities/', { token: access });
    expect(list.body).toHaveLength(3);
    // A refused name was not kept: it is free once there is room.
    const refusedName = `Fleet ${results.indexOf(refused)}`;
    // A bad input and a taken name are said first (400, 409), as for the plan.
    expect((await limited.api('POST', '/api/identities/', { token: access, body: { name: '' } })).status).toBe(400);
    expect((await limited.api('POST', '/api/identities/', { token: access, body: { name: list.body[0].name } })).status).toBe(409);
    const takenAddress = list.body[0].inbox.split('@')[0];
    const addressFirst = await limited.api('POST', '/api/identities/', { token: access, body: { name: 'New name', email_identifier: takenAddress } });
    expect([addressFirst.status, addressFirst.body.code]).toEqual([409, 'conflict']);
    // Another account has its own limit.
    expect((await limited.api('POST', '/api/identities/', { token: otherAccount, body: { name: refusedName } })).status).toBe(201);
    expect((await limited.api('DELETE', `/api/identities/${list.body[0].uuid}/`, { token: access })).status).toBe(204);
    const again = await limited.api('POST', '/api/identities/', { token: access, body: { name: refusedName } });
    expect([again.status, again.body.name]).toEqual([201, refusedName]);
    expect((await limited.api('POST', '/api/identities/', { token: access, body: { name: 'One Too Many' } })).status).toBe(403);
  });

  it('a create answered 503 while the read models are behind made its identity: it keeps its name, and counts before the next create', async () => {
    const { access } = await limited.signUp();
    const post = (name: string) => limited.api('POST', '/api/identities/', { token: access, body: { name } });
    for (const name of ['Lag 1', 'Lag 2']) expect((await post(name)).status).toBe(201);
    // The read models cannot be written meanwhile: requests wait 5 s for them and answer 503.
    await whileReadModelsFull(limited, async () => {
      const third = await post('Lag 3');
      expect([third.status, third.body.code]).toEqual([503, 'projection_lag']); // created all the same
      const fourth = await post('Lag 4');
      expect([fourth.status, fourth.body.code]).toEqual([503, 'projection_lag']); // created nothing: it waited for the third
    });
    const names = await eventually(async () => {
      const list = (await limited.api('GET', '/api/identities/', { token: access })).body as { name: string }[];
      return list.length >= 3 && list.map((i) => i.name).sort();
    });
    expect(names).toEqual(['Lag 1', 'Lag 2', 'Lag 3']);
    // The third kept its name (a 503 once gave its reservation back, as for a failed create).
    const again = await limited.api('POST', '/api/identities/', { token: access, body: { name: 'Lag 3' } });
    expect([again.status, again.body.code]).toEqual([409, 'conflict']);
    const past = await post('Lag 5');
    expect([past.status, past.body.code]).toEqual([403, 'identity_limit_reached']);
  }, 30_000);

  it('a create that fails late (402: a phone beyond the plan) refuses no other meanwhile, for its name or for the last place', async () => {
    // Every outcome must be one the two requests taken one by one could have had: the valid
    // create succeeds though the failing one went first (a held reservation once answered it
    // 409 or 403).
    const { access } = await limited.signUp();
    const post = (body: Record<string, unknown>) => limited.api('POST', '/api/identities/', { token: access, body });
    /**
     * Sends `first`; once it holds its first reservation (it is inside its turn then), sends
     * `second`, and lets `first` go on only once `second` has read its body (from there its
     * handler goes straight to the turn `first` holds, with no wait of its own) or has been
     * answered. Sent side by side, either could reach the server first (a CI run once had the
     * valid one first); a fixed 200 ms after `second` reached the server could be too short
     * on a loaded machine for it to get there.
     */
    async function whileFirstHolds<T>(first: () => Promise<T>, second: () => Promise<T>): Promise<[T, T]> {
      const events = limited.runtime.events;
      const append = events.append.bind(events);
      let holding!: () => void;
      const held = new Promise<void>((resolve) => (holding = resolve));
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let armed = true;
      const gate = jest.spyOn(events, 'append').mockImplementation(async (stream, batch, options) => {
        const appended = await append(stream, batch, options);
        if (armed && batch.some((e) => e.type === RESERVED)) {
          armed = false;
          holding();
          await released;
        }
        return appended;
      });
      try {
        const answer = first();
        await held;
        const arrived = new Promise<http.IncomingMessage>((resolve) => limited.runtime.server.once('request', resolve));
        const other = second();
        const req = await arrived; // at the server
        const bodyRead = new Promise<void>((resolve) => (req.readableEnded ? resolve() : req.once('end', () => resolve())));
        await Promise.race([bodyRead, other]);
        await new Promise((resolve) => setImmediate(resolve)); // its handler has gone on, to wait for the turn the first holds
        release();
        return [await answer, await other];
      } finally {
        gate.mockRestore();
      }
    }
    for (let round = 0; round < 3; round++) {
      const [phone, plain] = await whileFirstHolds(() => post({ name: `Both ${round}`, provision_phone: true }), () => post({ name: `Both ${round}` }));
      expect([round, phone.status, plain.status]).toEqual([round, 402, 201]);
      expect((await limited.api('DELETE', `/api/identities/${plain.body.uuid}/`, { token: access })).status).toBe(204);
    }
    expect((await post({ name: 'First' })).status).toBe(201);
    const second = (await post({ name: 'Second' })).body.uuid as string;
    for (let round = 0; round < 3; round++) {
      const [phone, last] = await whileFirstHolds(() => post({ name: `Phone ${round}`, provision_phone: true }), () => post({ name: `Last ${round}` }));
      expect([round, phone.status, last.status]).toEqual([round, 402, 201]);
      expect((await limited.api('DELETE', `/api/identities/${last.body.uuid}/`, { token: access })).status).toBe(204);
    }
    // A rename refused late (its phone: 402) does not refuse a create of the name it held.
    for (let round = 0; round < 3; round++) {
      const [rename, plain] = await whileFirstHolds(
        () => limited.api('PATCH', `/api/identities/${second}/`, { token: access, body: { name: `Wanted ${round}`, provision_phone: true } }),
        () => post({ name: `Wanted ${round}` }),
      );
      expect([round, rename.status, plain.status]).toEqual([round, 402, 201]);
      expect((await limited.api('DELETE', `/api/identities/${plain.body.uuid}/`, { token: access })).status).toBe(204);
    }
  });
});
