/**
 * Event-sourced data stays readable forever: a DATA_DIR written by an earlier release starts
 * under this code and serves everything it held, through the public API (DEPLOYMENT.md
 * "Upgrading": stop, `npm ci`, start on the same DATA_DIR).
 *
 * The fixtures (test/fixtures/upgrade/<release>.*, made by record.ts there from a checkout of
 * the release) are what a release wrote and answered: its event log as its store held it
 * (`.events.jsonl`), the blobs and the key ring those events need, its read models as it left
 * them, and the answers of its API to a workload run through its public interfaces only
 * (HTTP, SMTP, the SMS webhook, the admin API). Each is loaded into a fresh DATA_DIR through
 * this code's own ports, in two ways, and the real service then started on it must answer as
 * the release did:
 * - rebuilt: the log without read models, so every projection folds the release's events, as
 *   at the first start of a projection renamed `:vN` or after `npm run rebuild`;
 * - kept: with the release's read models, as an upgrade in place finds them (a projection this
 *   code did not rename serves the documents the release's projection wrote).
 * Fields added since are ignored; nothing the release answered may be missing or different.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import pino from 'pino';
import { loadConfig } from '../../infra/config.js';
import { startRuntime, type Runtime } from '../../infra/runtime.js';
import { openSqliteEventStore } from '../../infra/sqlite/event-store.js';
import { openSqliteReadStore } from '../../infra/sqlite/read-store.js';
import { createFsBlobStore } from '../../infra/blobs/fs-blob-store.js';
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import { decryptField, memoryLockStore, unlock } from '../../services/sdk/crypto.js';
import { openSse, type SseFrame } from '../support/sse-client.js';
import { freePort } from '../support/spawn.js';
import { apiClient, type ApiOptions } from '../support/server.js';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/upgrade');
/** Releases whose DATA_DIR this code must serve; record the next one's (record.ts) when a release changes what it writes. */
const RELEASES = ['2026-11-22', '2026-11-23'];

interface Answer {
  name: string;
  path: string;
  /** Name of the credential in `recorded.creds` (none: anonymous). */
  cred?: string;
  identity?: string;
  range?: string;
  bytes?: boolean;
  status: number;
  body?: unknown;
  sha?: string;
  contentType?: string;
  disposition?: string;
}

interface Fixture {
  release: string;
  commit: string;
  env: Record<string, string>;
  keyRing: { 'jwt-ed25519.pem': string; 'hmac.key': string };
  /** Blob key (SHA-256 of the bytes) → gzip, base64. */
  blobs: Record<string, string>;
  readModels: { checkpoints: Record<string, string>; projections: Record<string, string[]>; collections: Record<string, Doc[]> };
  recorded: any;
  answers: Answer[];
}

function loadFixture(release: string): { fixture: Fixture; events: RecordedEvent[] } {
  const fixture = JSON.parse(readFileSync(path.join(FIXTURES, `${release}.json`), 'utf8')) as Fixture;
  const events = readFileSync(path.join(FIXTURES, `${release}.events.jsonl`), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as RecordedEvent);
  return { fixture, events };
}

/** The release's DATA_DIR, written through this code's ports (never by copying the release's files). */
async function writeDataDir(dir: string, fixture: Fixture, events: RecordedEvent[], keepReadModels: boolean): Promise<void> {
  mkdirSync(path.join(dir, 'keys'), { recursive: true, mode: 0o700 });
  writeFileSync(path.join(dir, 'keys', 'jwt-ed25519.pem'), fixture.keyRing['jwt-ed25519.pem'], { mode: 0o600 });
  writeFileSync(path.join(dir, 'keys', 'hmac.key'), Buffer.from(fixture.keyRing['hmac.key'], 'base64'), { mode: 0o600 });

  const blobs = createFsBlobStore({ dir: path.join(dir, 'blobs') });
  for (const [key, packed] of Object.entries(fixture.blobs)) expect((await blobs.put(gunzipSync(Buffer.from(packed, 'base64')))).key).toBe(key);

  // Appended stream by stream in log order, at the revisions they had: positions come out as
  // the release numbered them (event-stream ids are positions: old Last-Event-IDs must hold).
  // Sent at once, so the writer commits them in one batch, in the order they were called.
  const store = await openSqliteEventStore({ file: path.join(dir, 'events.sqlite'), logger: { warn() {}, error() {} } });
  try {
    const runs: RecordedEvent[][] = [];
    for (const e of events) {
      if (runs.at(-1)?.[0].stream === e.stream) runs.at(-1)!.push(e);
      else runs.push([e]);
    }
    const appended = await Promise.all(
      runs.map((run) =>
        store.append(
          run[0].stream,
          run.map((e) => ({ id: e.id, type: e.type, data: e.data, metadata: e.metadata })),
          { expectedRevision: run[0].revision === 0 ? 'no_stream' : run[0].revision - 1 },
        ),
      ),
    );
    expect(appended.flatMap((a) => a.events.map((e) => [e.position, e.revision]))).toEqual(events.map((e) => [e.position, e.revision]));
  } finally {
    await store.close();
  }

  if (!keepReadModels) return;
  const reads = openSqliteReadStore({ file: path.join(dir, 'read-models.sqlite'), cache: false });
  try {
    const { checkpoints, projections, collections } = fixture.readModels;
    await reads.ensureCollections(Object.values(projections).flat().map((name) => ({ name })));
    for (const [projection, position] of Object.entries(checkpoints)) {
      const docs = (projections[projection] ?? []).flatMap((c) => collections[c].map((doc) => ({ collection: c, id: doc.id, doc })));
      await reads.commit(projection, position, docs); // reactors' checkpoints too (no documents)
    }
  } finally {
    await reads.close();
  }
}

/** Seconds-since-epoch expiry of a JWT (not verified: only to know whether the release's token may still be used). */
const expiresAt = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString()).exp as number;
const isJwt = (cred: string) => cred.split('.').length === 3;
const alive = (jwt: string) => expiresAt(jwt) > Date.now() / 1000 + 60;
/** Past its expiry (with a margin for the server's clock): in the minutes between, neither answer is asserted. */
const expired = (jwt: string) => expiresAt(jwt) < Date.now() / 1000 - 5;
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/**
 * Where `now` differs from what the release answered (`then`): every field it had, with the
 * same value (fields added since are ignored), arrays of the same length in the same order.
 */
function differences(then: unknown, now: unknown, at: string): string[] {
  const field = at.slice(at.lastIndexOf('.') + 1);
  // A key's last use moves on with use (the probes use keys); 2026-11-22 also showed uses it
  // held in memory and never recorded. A use it showed must still show as one.
  if (field === 'last_used_at') return then === null || typeof now === 'string' ? [] : [`${at}: was ${String(then)}, now ${String(now)}`];
  // Since 2026-11-23 a download_url names its identity (a management key can use it as given); the old form still works.
  if (field === 'download_url' && typeof then === 'string' && typeof now === 'string' && (now === then || now.startsWith(`${then}?identity=`))) return [];
  if (Array.isArray(then)) {
    if (!Array.isArray(now) || now.length !== then.length) return [`${at}: ${then.length} items then, now ${JSON.stringify(now)?.slice(0, 300)}`];
    return then.flatMap((t, i) => differences(t, now[i], `${at}[${i}]`));
  }
  if (then !== null && typeof then === 'object') {
    if (now === null || typeof now !== 'object' || Array.isArray(now)) return [`${at}: an object then, now ${JSON.stringify(now)?.slice(0, 300)}`];
    return Object.entries(then).flatMap(([k, v]) => (k in now ? differences(v, (now as Record<string, unknown>)[k], `${at}.${k}`) : [`${at}.${k}: missing (was ${JSON.stringify(v)?.slice(0, 200)})`]));
  }
  return Object.is(then, now) ? [] : [`${at}: was ${JSON.stringify(then)?.slice(0, 200)}, now ${JSON.stringify(now)?.slice(0, 200)}`];
}

describe.each(RELEASES.flatMap((release) => [[release, 'rebuilt'], [release, 'kept']] as const))('a DATA_DIR written by the %s release (read models %s) is served by this one', (release, mode) => {
  const { fixture, events } = loadFixture(release);
  const rec = fixture.recorded;
  const creds: Record<string, string> = rec.creds;
  const { alpha, beta, gamma } = rec.ids;
  let dir: string;
  let rt: Runtime;
  let smtpPort: number;
  const start = async () =>
    startRuntime(
      loadConfig({ ...fixture.env, DATA_DIR: dir, PORT: '0', SMTP_PORT: String(smtpPort), LOG_LEVEL: 'silent' }),
      { logger: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }) },
    );

  const api = apiClient(() => rt.url);
  /** `api` with a credential of the fixture by name; links the release answered name its PUBLIC_URL (kept as the tokens' issuer), not this server. */
  const call = (method: string, p: string, o: ApiOptions & { cred?: string } = {}) =>
    api(method, p.replace(fixture.env.PUBLIC_URL, ''), { ...o, token: o.token ?? (o.cred ? creds[o.cred] : undefined) });

  /** The same GETs as the release's answers, compared with them (tokens the clock has ended are skipped). */
  async function compareAnswers(answers: Answer[]): Promise<string[]> {
    const found: string[] = [];
    for (const then of answers) {
      if (then.cred && isJwt(creds[then.cred]) && !alive(creds[then.cred])) continue; // the key-based answers cover the same reads
      const now = await call('GET', then.path, { cred: then.cred, identity: then.identity, headers: then.range ? { range: then.range } : {} });
      if (now.status !== then.status) found.push(`${then.name} ${then.path}: ${then.status} then, ${now.status} now ${JSON.stringify(now.body)?.slice(0, 300)}`);
      else if (then.sha) {
        const got = [sha256(now.bytes), now.headers.get('content-type'), now.headers.get('content-disposition')];
        if (got.join() !== [then.sha, then.contentType, then.disposition].join()) found.push(`${then.name}: bytes ${JSON.stringify(got)}`);
      } else found.push(...differences(then.body, now.body, then.name));
    }
    return found;
  }

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), `ais-upgrade-${release}-`));
    smtpPort = await freePort();
    await writeDataDir(dir, fixture, events, mode === 'kept');
    rt = await start();
  });

  afterAll(async () => {
    await rt?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('every answer the release gave is given again: accounts, keys, identities, mail, attachments, SMS, vault', async () => {
    expect(fixture.answers.length).toBeGreaterThan(90);
    expect(await compareAnswers(fixture.answers)).toEqual([]);
  });

  test('the event stream replays from each old id exactly the later events, then goes on live', async () => {
    for (const [identity, cred, frames] of [[alpha, 'k1', rec.sse.alpha], [beta, 'kb', rec.sse.beta]] as [{ uuid: string; inbox: string }, string, SseFrame[]][]) {
      const streams = await Promise.all(['0', ...frames.map((f) => f.id!)].map((id) => openSse(`${rt.url}/api/events/stream/?last_event_id=${id}`, { authorization: `Bearer ${creds[cred]}` })));
      expect(streams.map((s) => s.status)).toEqual(streams.map(() => 200));
      // One new event for the identity: each stream's next frame after its replay must be that one (no gap, no extra).
      const other = identity === alpha ? beta : alpha;
      const sent = await call('POST', '/api/email-messages/compose/', { cred: 'm1', identity: other.uuid, body: { to: identity.inbox, subject: 'After the upgrade', body: '<p>new</p>' } });
      expect([sent.status, sent.body.status]).toEqual([201, 'sent']);
      for (const [i, s] of streams.entries()) {
        const got = await s.frames(frames.length - i + 1, 10_000);
        s.close();
        const expected = frames.slice(i);
        expect(got.slice(0, -1).map((f) => [f.id, f.event])).toEqual(expected.map((f) => [f.id, f.event]));
        got.slice(0, -1).forEach((f, j) => expect(differences(JSON.parse(expected[j].data), JSON.parse(f.data), `frame ${f.id}`)).toEqual([]));
        expect(JSON.parse(got.at(-1)!.data)).toMatchObject({ subject: 'After the upgrade' });
        expect(BigInt(got.at(-1)!.id!)).toBeGreaterThan(BigInt(events.at(-1)!.position));
      }
    }
  });

  test('credentials: the key ring and the sessions are kept; spent, ended and revoked ones stay refused', async () => {
    // Tokens work until they expire (the fixture's were minted for a year and ten years), then say token_expired.
    const access = await call('POST', '/api/auth/token/verify/', { body: { token: creds.aliceAccess } });
    if (alive(creds.aliceAccess) || expired(creds.aliceAccess)) expect(access.status).toBe(alive(creds.aliceAccess) ? 200 : 401);
    for (const name of ['aliceRefresh', 'deviceRefresh', 'aliceBoundRefresh', 'bobRefresh']) {
      const res = await call('POST', '/api/auth/token/refresh/', { body: { refresh: creds[name] } });
      if (expired(creds[name])) expect([name, res.status, res.body.code]).toEqual([name, 401, 'token_expired']);
      else if (alive(creds[name])) {
        expect([name, res.status]).toEqual([name, 200]);
        expect((await call('GET', '/api/auth/user/', { token: res.body.access })).status).toBe(200);
      }
      if (name === 'aliceBoundRefresh' && res.status === 200) expect((await call('GET', '/api/identities/current/', { token: res.body.access })).body.uuid).toBe(alpha.uuid);
    }
    // Refresh tokens from before bob's password change, of an ended session, and a spent one (whose reuse ends its family).
    expect((await call('POST', '/api/auth/token/refresh/', { body: { refresh: creds.bobOldRefresh } })).status).toBe(401);
    if (creds.carolEndedRefresh) expect((await call('POST', '/api/auth/token/refresh/', { body: { refresh: creds.carolEndedRefresh } })).status).toBe(401);
    expect((await call('POST', '/api/auth/token/refresh/', { body: { refresh: creds.aliceSpentRefresh } })).status).toBe(401);
    expect((await call('POST', '/api/auth/token/refresh/', { body: { refresh: creds.aliceRefreshFamily1Live } })).status).toBe(401);
    // Passwords: the changed one signs in, the one before it does not.
    expect((await call('POST', '/api/auth/login/', { body: { username: 'bob', password: rec.users.bob.password } })).status).toBe(200);
    expect((await call('POST', '/api/auth/login/', { body: { username: 'bob', password: rec.users.bob.oldPassword } })).status).toBe(400);
    // Keys: live ones answer (their whoami is among the answers), revoked and deleted identities' ones do not.
    for (const key of ['m2', 'k2', 'k3']) expect([key, (await call('GET', '/api/health/whoami/', { cred: key })).status]).toEqual([key, 401]);
  });

  test('old data takes new writes: replies join old threads, SMS the old conversation; names, addresses and the plan hold', async () => {
    const smtp = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
    await smtp.sendMail({ from: 'ext@example.com', to: alpha.inbox, subject: 'Re: Quarterly report', messageId: '<after-upgrade@example.com>', inReplyTo: '<orig-1@example.com>', text: 'later' });
    smtp.close();
    const mine = (await call('GET', '/api/email-messages/?limit=200', { cred: 'k1' })).body as { message_id: string; thread_id: string }[];
    expect(mine.find((m) => m.message_id === '<after-upgrade@example.com>')?.thread_id).toBe(rec.mail.origThread);
    const thread = await call('GET', `/api/email-inbox/${rec.mail.origThread}/`, { cred: 'k1' });
    expect(thread.body.messages.map((m: { message_id: string }) => m.message_id)).toEqual(['<orig-1@example.com>', '<orig-2@example.com>', rec.mail.replyMessageId, '<after-upgrade@example.com>']);
    const kickoffThread = mine.find((m) => m.message_id === '<kickoff@example.com>')!.thread_id;
    const replyAll = await call('POST', `/api/email-messages/${rec.mail.kickoff}/reply-all/`, { cred: 'k1', body: { body: '<p>later</p>' } });
    expect([replyAll.status, replyAll.body.thread_id]).toEqual([201, kickoffThread]);

    const sms = (sid: string, body: string) =>
      call('POST', '/api/webhooks/sms/', { form: { From: '+15557770001', To: beta.phone, Body: body, MessageSid: sid }, headers: { 'x-webhook-secret': fixture.env.SMS_WEBHOOK_SECRET } });
    expect((await sms('SMafter-upgrade', 'later')).status).toBe(200);
    expect((await sms('SMupgrade0001', 'Your code is 424242')).status).toBe(200); // a provider's retry of an old one: nothing new
    const conversation = ((await call('GET', '/api/sms-inbox/', { cred: 'kb' })).body as { peer: string; conversation_id: string; message_count: number }[]).find((c) => c.peer === '+15557770001');
    expect(conversation && [rec.sms.conversations.includes(conversation.conversation_id), conversation.message_count]).toEqual([true, 3]);

    // The vault's ciphertext still opens with the account's PIN, bound to the same identity, entry and names.
    const key = await unlock({ pin: rec.vault.pin, deviceSecret: rec.vault.deviceSecret, metadata: (await call('GET', '/api/encryption/', { cred: 'k1' })).body, lockStore: memoryLockStore() });
    const entry = (await call('GET', `/api/passwords/${rec.vault.entry}/`, { cred: 'k1' })).body;
    for (const f of ['username', 'password', 'notes'] as const) {
      expect(decryptField(key, entry[f], { kind: 'password', identity: alpha.uuid, entry: rec.vault.entry, domain: 'github.com', field: f })).toBe(rec.vault.plain[f]);
    }
    const secret = (await call('GET', `/api/vault/${rec.vault.secrets.API_TOKEN}/`, { cred: 'k1' })).body;
    expect(decryptField(key, secret.value, { kind: 'secret', identity: alpha.uuid, key: 'API_TOKEN' })).toBe(rec.vault.secrets.apiTokenPlain);

    // Reservations: a live name and a deleted identity's address stay taken; a deleted or renamed identity's name is free.
    const create = async (body: Record<string, unknown>) => (await call('POST', '/api/identities/', { cred: 'm1', body })).status;
    expect([await create({ name: 'Alpha' }), await create({ name: 'Another', email_identifier: 'gamma' }), await create({ name: gamma.name }), await create({ name: 'Delta' })]).toEqual([409, 409, 201, 201]);
    const phone = await call('POST', '/api/identities/', { cred: 'm1', body: { name: 'Epsilon', provision_phone: true } }); // the developer plan is kept
    expect([phone.status, typeof phone.body.phone, phone.body.phone === beta.phone]).toEqual([201, 'string', false]);
  });

  test('a restart after all that keeps everything', async () => {
    const snapshot = async () => {
      const out: Answer[] = [];
      for (const a of fixture.answers.filter((a) => !a.cred || !isJwt(creds[a.cred]))) {
        const now = await call('GET', a.path, { cred: a.cred, identity: a.identity, headers: a.range ? { range: a.range } : {} });
        out.push({ ...a, status: now.status, body: a.sha ? undefined : now.body, sha: a.sha ? sha256(now.bytes) : undefined });
      }
      return out;
    };
    await snapshot(); // opening the new SMS's conversation marks it read: the second pass is what stays
    const before = await snapshot();
    await rt.close();
    rt = await start();
    expect(await compareAnswers(before)).toEqual([]);
  });
});
