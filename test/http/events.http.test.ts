/**
 * SPEC "Events"; DECISIONS "Mail, SMS, events": GET /api/events/stream/ is a Server-Sent
 * Events stream read off the event log: `id:` = log position, Last-Event-ID replays, then
 * live, with no gap and no duplicate; only the identity's own events, ever.
 * Inbound messages are appended to the log directly (as the mail and SMS contexts do), which
 * is what the stream reads.
 */
import net from 'node:net';
import { EventSource } from 'eventsource';
import { startTestServer, type TestServer } from '../support/server.js';
import { openSse, type SseReader } from '../support/sse-client.js';
import { eventually } from '../support/eventually.js';
import { newId, nowIso } from '../../services/kernel/ids.js';
import type { EmailReceivedData } from '../../services/mail/events.js';
import { FRAME_TEXT_MAX } from '../../services/events/frames.js';
import { InvalidPositionError } from '../../infra/ports/event-store.js';

let s: TestServer;
let owner: { access: string };
let other: { access: string };
let idA: string;
let idB: string;
let idC: string; // another account's
const readers: SseReader[] = [];

beforeAll(async () => {
  s = await startTestServer({ SSE_KEEPALIVE_MS: '50' });
  owner = await s.signUp();
  other = await s.signUp();
  idA = await createIdentity(owner.access, 'alpha');
  idB = await createIdentity(owner.access, 'bravo');
  idC = await createIdentity(other.access, 'charlie');
});
afterEach(() => {
  for (const r of readers.splice(0)) r.close();
});
afterAll(async () => s?.close());

async function createIdentity(token: string, name: string): Promise<string> {
  const res = await s.api('POST', '/api/identities/', { token, body: { name } });
  if (res.status !== 201) throw new Error(`identity create: ${res.status} ${res.text}`);
  return res.body.uuid;
}

async function stream(token: string, identity: string | null, extra: Record<string, string> = {}, query = ''): Promise<SseReader> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, ...extra };
  if (identity) headers['x-service-identity'] = identity;
  const r = await openSse(`${s.url}/api/events/stream/${query}`, headers);
  readers.push(r);
  return r;
}

let counter = 0;

/** An EmailReceived as the mail context records it (its projection reads every field). */
function emailData(identityId: string, subject: string, preview: string): EmailReceivedData {
  return {
    identityId,
    inbox: `x@agents.localhost`,
    messageId: newId(),
    threadId: newId(),
    internetMessageId: `<${newId()}@example.com>`,
    inReplyTo: null,
    references: [],
    from: { address: 'sender@example.com', name: 'Sender' },
    to: [{ address: 'x@agents.localhost', name: '' }],
    cc: [],
    replyTo: [],
    subject,
    text: preview,
    html: null,
    textBlob: null,
    htmlBlob: null,
    preview,
    attachments: [],
    raw: null,
    via: 'internal',
    sourceMessageId: null,
    date: null,
    at: nowIso(),
  };
}

async function email(identityId: string, subject = `subject ${++counter}`, preview = `preview ${counter}`): Promise<string> {
  const res = await s.runtime.events.append(`mailbox-${identityId}`, [{ id: newId(), type: 'EmailReceived', data: emailData(identityId, subject, preview) }]);
  return res.position;
}

async function sms(identityId: string, body = `text ${++counter}`): Promise<string> {
  const res = await s.runtime.events.append(`smsbox-${identityId}`, [
    {
      id: newId(),
      type: 'SmsReceived',
      data: { identityId, messageId: newId(), conversationId: newId(), messageSid: `SM${counter}`, from: '+15550001111', to: '+15550002222', body, preview: body, at: nowIso() },
    },
  ]);
  return res.position;
}

/** Lets the live subscription deliver whatever was appended (it is one macrotask behind). */
const settle = (ms = 100) => new Promise((r) => setTimeout(r, ms));

describe('refusals are JSON answered before the stream opens', () => {
  it('401 not_authenticated without a credential', async () => {
    const r = await openSse(`${s.url}/api/events/stream/`, { 'x-service-identity': idA });
    expect(r.status).toBe(401);
    expect(r.errorBody).toMatchObject({ code: 'not_authenticated' });
  });

  it('400 identity_required when no identity is selected', async () => {
    const r = await stream(owner.access, null);
    expect(r.status).toBe(400);
    expect(r.errorBody).toMatchObject({ code: 'identity_required' });
  });

  it('403 for an identity of another account, 404 for an unknown one', async () => {
    expect((await stream(owner.access, idC)).status).toBe(403);
    expect((await stream(owner.access, '01890000-0000-7000-8000-000000000000')).status).toBe(404);
  });

  it.each(['abc', '-1', '1.5', '1'.repeat(31), '12 34'])('400 for a malformed Last-Event-ID %p (header)', async (bad) => {
    const r = await stream(owner.access, idA, { 'last-event-id': bad });
    expect(r.status).toBe(400);
    expect(r.errorBody).toHaveProperty('last_event_id');
  });

  it('400 for a malformed last_event_id query parameter', async () => {
    const r = await stream(owner.access, idA, {}, '?last_event_id=x1');
    expect(r.status).toBe(400);
    const twice = await stream(owner.access, idA, {}, '?last_event_id=1&last_event_id=2');
    expect([twice.status, twice.errorBody]).toEqual([400, { last_event_id: ['Give one last_event_id.'] }]);
  });

  it('400 for a well-formed id beyond the last event (never sent: following it would miss every live event)', async () => {
    for (const [headers, query] of [[{ 'last-event-id': '100000000' }, ''], [{}, `?last_event_id=${'9'.repeat(30)}`]] as const) {
      const r = await stream(owner.access, idA, headers, query);
      expect(r.status).toBe(400);
      expect(r.errorBody).toHaveProperty('last_event_id');
    }
  });

  it('400 for an id the event store says it never handed out (on EventStoreDB: no record has it), before the stream opens', async () => {
    const store = s.runtime.events;
    const readAll = store.readAll;
    // As the EventStoreDB adapter answers a position whose prepare part is past its commit part.
    store.readAll = async (options) => {
      if (options?.after === '1') throw new InvalidPositionError('1', 'not the position of a record');
      return readAll.call(store, options);
    };
    try {
      const r = await stream(owner.access, idA, { 'last-event-id': '1' });
      expect([r.status, r.errorBody]).toEqual([400, { last_event_id: ['Last-Event-ID is not an id received from this stream (no event has it).'] }]);
      expect((await stream(owner.access, idA, { 'last-event-id': '2' })).status).toBe(200);
    } finally {
      store.readAll = readAll;
    }
  });
});

describe('wire format', () => {
  it('is text/event-stream, uncached, unbuffered; starts with retry:, then keepalive comments', async () => {
    const r = await stream(owner.access, idA);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(r.headers.get('cache-control')).toBe('no-cache');
    expect(r.headers.get('x-accel-buffering')).toBe('no');
    await r.comment('keepalive', 2000);
    expect(r.log[0]).toEqual({ kind: 'retry', value: '3000' });
    // With it, the id the stream starts after (the log's position now): no event yet, a client
    // cut off before one resumes from there.
    expect(r.log[1]).toEqual({ kind: 'id', value: expect.stringMatching(/^\d+$/) });
    // Every 50 ms here: a second one comes (waited for, not timed: a busy machine delays timers).
    await eventually(() => r.log.filter((l) => l.kind === 'comment' && l.text === 'keepalive').length >= 2, 10_000);
  });

  it('named events email and sms, data JSON of strings, id = log position', async () => {
    const r = await stream(owner.access, idA);
    await settle();
    const p1 = await email(idA, 'Hello\nworld', 'Hi there');
    const p2 = await sms(idA, 'code 123456');
    const [f1, f2] = await r.frames(2);
    expect(f1.event).toBe('email');
    expect(f1.id).toBe(p1);
    const d1 = JSON.parse(f1.data);
    expect(d1).toMatchObject({ from_email: 'sender@example.com', subject: 'Hello\nworld', preview: 'Hi there' });
    expect(typeof d1.thread_id).toBe('string');
    expect(f2.event).toBe('sms');
    expect(f2.id).toBe(p2);
    const d2 = JSON.parse(f2.data);
    expect(d2).toMatchObject({ from_number: '+15550001111', preview: 'code 123456' });
    expect(typeof d2.conversation_id).toBe('string');
    for (const d of [d1, d2]) for (const v of Object.values(d)) expect(typeof v).toBe('string');
  });

  it('the identity query parameter selects the identity too', async () => {
    const r = await stream(owner.access, null, {}, `?identity=${idB}`);
    expect(r.status).toBe(200);
    await settle();
    const p = await email(idB);
    expect((await r.frames(1))[0].id).toBe(p);
  });
});

describe('isolation: only the identity\'s own events, ever', () => {
  it('between identities of one account and between accounts', async () => {
    const a = await stream(owner.access, idA);
    const b = await stream(owner.access, idB);
    const c = await stream(other.access, idC);
    await settle();
    const pa = await email(idA);
    const pb = await sms(idB);
    const pc = await email(idC);
    expect((await a.frames(1))[0].id).toBe(pa);
    expect((await b.frames(1))[0].id).toBe(pb);
    expect((await c.frames(1))[0].id).toBe(pc);
    await settle(200);
    for (const r of [a, b, c]) expect(r.log.filter((l) => l.kind === 'frame')).toHaveLength(1);
  });

  it('a replay from 0 holds only the identity\'s events', async () => {
    const r = await stream(owner.access, idB, { 'last-event-id': '0' });
    const head = await email(idB);
    const frames: string[] = [];
    for (;;) {
      const [f] = await r.frames(1);
      frames.push(f.id!);
      if (f.id === head) break;
    }
    const own = await s.runtime.events.readAll({ filter: { streams: [`mailbox-${idB}`, `smsbox-${idB}`] } });
    expect(frames).toEqual(own.map((e) => e.position));
  });
});

describe('Last-Event-ID: replay from the log, then live, no gap, no duplicate', () => {
  it('resumes after a disconnect with the events appended meanwhile', async () => {
    const first = await stream(owner.access, idA);
    await settle();
    const p1 = await email(idA);
    const [f1] = await first.frames(1);
    expect(f1.id).toBe(p1);
    first.close();

    const missed = [await sms(idA), await email(idA), await sms(idA)];
    const resumed = await stream(owner.access, idA, { 'last-event-id': f1.id! });
    const replayed = await resumed.frames(3);
    expect(replayed.map((f) => f.id)).toEqual(missed);
    const live = await email(idA);
    expect((await resumed.frames(1))[0].id).toBe(live);
    await settle(150);
    expect(resumed.log.filter((l) => l.kind === 'frame')).toHaveLength(4);
  });

  it('the last_event_id query parameter works like the header', async () => {
    const p1 = await email(idA);
    const p2 = await email(idA);
    const r = await stream(owner.access, idA, {}, `?last_event_id=${p1}`);
    expect((await r.frames(1))[0].id).toBe(p2);
  });

  it('events appended while a long replay runs are sent once, in order', async () => {
    const fresh = await createIdentity(owner.access, `replay-${Date.now()}`);
    const mail = (i: number) => ({ id: newId(), type: 'EmailReceived', data: emailData(fresh, `s${i}`, 'x'.repeat(300)) });
    for (let i = 0; i < 20; i++) await s.runtime.events.append(`mailbox-${fresh}`, Array.from({ length: 100 }, (_, j) => mail(i * 100 + j)));
    // Appends keep coming, one by one, before, during and after the replay.
    let appending = true;
    const appender = (async () => {
      for (let i = 0; appending || i < 5; i++) {
        await (i % 2 ? sms(fresh) : email(fresh));
        if (i % 4 === 0) await new Promise((r) => setImmediate(r));
      }
    })();
    await settle(5);
    const r = await stream(owner.access, fresh, { 'last-event-id': '0' });
    await r.frames(2100, 20_000);
    appending = false;
    await appender;
    const all = await s.runtime.events.readAll({ filter: { streams: [`mailbox-${fresh}`, `smsbox-${fresh}`] } });
    const rest = await r.frames(all.length - 2100, 10_000);
    await settle(150);
    const ids = r.log.flatMap((l) => (l.kind === 'frame' ? [l.frame.id] : []));
    expect(rest.length).toBeGreaterThan(0);
    expect(ids).toEqual(all.map((e) => e.position));
  }, 40_000);

  it('a frame carries at most 1,000 characters of a subject or preview, live and replayed (a megabyte subject is copied into no stream)', async () => {
    const fresh = await createIdentity(owner.access, `large-${Date.now()}`);
    const live = await stream(owner.access, fresh);
    await settle();
    const huge = await email(fresh, `${'😀'.repeat(499)}x${'"'.repeat(700_000)}`, 'p'.repeat(5_000));
    const after = await sms(fresh, 's'.repeat(2_000));
    const check = (frames: { id: string | null; data?: string }[]) => {
      expect(frames.map((f) => f.id)).toEqual([huge, after]);
      const [mail, text] = frames.map((f) => JSON.parse(f.data!));
      expect([mail.subject, mail.preview.length, text.preview.length]).toEqual([`${'😀'.repeat(499)}x"`, FRAME_TEXT_MAX, FRAME_TEXT_MAX]);
    };
    check(await live.frames(2, 10_000));
    check(await (await stream(owner.access, fresh, { 'last-event-id': String(BigInt(huge) - 1n) })).frames(2, 10_000));
    await email(fresh, `x${'😀'.repeat(500)}`); // a cut that would split an emoji leaves it out
    expect(JSON.parse((await live.frames(1, 10_000))[0].data!).subject).toBe(`x${'😀'.repeat(499)}`);
  }, 40_000);

  it('HEAD answers the stream\'s headers and ends (it opened a stream that never ended: a request after it on the connection hung)', async () => {
    const { port, hostname } = new URL(s.url);
    const socket = net.connect(Number(port), hostname);
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk) => (text += chunk));
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write(`HEAD /api/events/stream/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${owner.access}\r\nX-Service-Identity: ${idA}\r\n\r\nGET /api/health/ HTTP/1.1\r\nHost: x\r\n\r\n`);
    for (let i = 0; i < 60 && !text.includes('{"status":"ok"}'); i++) await settle(50);
    socket.destroy();
    expect(text).toMatch(/^HTTP\/1\.1 200 [^]*text\/event-stream[^]*HTTP\/1\.1 200 [^]*\{"status":"ok"\}/);
    const head = text.split('\r\n\r\n')[0].toLowerCase(); // the headers a GET's stream has
    for (const header of ['cache-control: no-cache', 'x-accel-buffering: no']) expect(head).toContain(header);
  });

  it('a real EventSource client reconnects by itself and resumes without duplicates', async () => {
    const fresh = await createIdentity(owner.access, `es-${Date.now()}`);
    const received: { id: string; type: string }[] = [];
    const es = new EventSource(`${s.url}/api/events/stream/`, {
      fetch: (input, init) => fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), Authorization: `Bearer ${owner.access}`, 'X-Service-Identity': fresh } }),
    });
    const onEvent = (type: string) => (e: MessageEvent) => received.push({ id: e.lastEventId, type });
    es.addEventListener('email', onEvent('email'));
    es.addEventListener('sms', onEvent('sms'));
    const until = async (n: number, ms = 10_000) => {
      const start = Date.now();
      while (received.length < n) {
        if (Date.now() - start > ms) throw new Error(`got ${received.length} of ${n}`);
        await settle(20);
      }
    };
    try {
      await new Promise<void>((resolve, reject) => {
        es.onopen = () => resolve();
        es.onerror = (e) => reject(new Error(`EventSource error ${String((e as { message?: string }).message)}`));
      });
      es.onerror = null;
      await settle();
      const p1 = await email(fresh);
      const p2 = await sms(fresh);
      await until(2);
      // The server cuts every connection; the client reconnects after `retry` with Last-Event-ID.
      s.runtime.server.closeAllConnections();
      const meanwhile = [await email(fresh), await sms(fresh)];
      await until(4, 10_000);
      const live = await email(fresh);
      await until(5);
      await settle(150);
      expect(received.map((r) => r.id)).toEqual([p1, p2, ...meanwhile, live]);
      expect(received.map((r) => r.type)).toEqual(['email', 'sms', 'email', 'sms', 'email']);
    } finally {
      es.close();
    }
  }, 20_000);

  it('a client cut off before its first event resumes from where its stream started: what came meanwhile is not lost', async () => {
    // The first frame says the id the stream starts after; a browser's EventSource (WHATWG:
    // a frame without data sets the id) and the SDK send it back when they reconnect.
    const fresh = await createIdentity(owner.access, `early-${Date.now()}`);
    const first = await stream(owner.access, fresh);
    await eventually(() => first.log.some((l) => l.kind === 'id'));
    const started = (first.log.find((l) => l.kind === 'id') as { value: string }).value;
    first.close();
    const meanwhile = await email(fresh); // while no stream is open
    const again = await stream(owner.access, fresh, { 'last-event-id': started });
    const [frame] = await again.frames(1);
    expect([frame.id, frame.event]).toEqual([meanwhile, 'email']);
    again.close();
    // Without the id (a client that kept none), the stream is live from now: that mail is not sent.
    const live = await stream(owner.access, fresh);
    await live.comment('keepalive', 2000);
    expect(live.log.filter((l) => l.kind === 'frame')).toEqual([]);
    live.close();
  });
});

describe('the stream ends when its identity goes away', () => {
  it('deleting the identity closes its open streams', async () => {
    const doomed = await createIdentity(owner.access, `doomed-${Date.now()}`);
    const r = await stream(owner.access, doomed);
    expect(r.status).toBe(200);
    const del = await s.api('DELETE', `/api/identities/${doomed}/`, { token: owner.access });
    expect(del.status).toBe(204);
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([r.ended.then(() => 'ended'), new Promise((res) => (timer = setTimeout(() => res('still open'), 3000)))]);
    clearTimeout(timer);
    expect(outcome).toBe('ended');
    expect((await stream(owner.access, doomed)).status).toBe(404);
  });
});

describe('the stream ends when its credential is revoked', () => {
  const endsWithin = async (r: SseReader, ms: number) => {
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([r.ended.then(() => 'ended'), new Promise((res) => (timer = setTimeout(() => res('still open'), ms)))]);
    clearTimeout(timer);
    return outcome;
  };

  it('revoking the identity key closes the streams opened with it, not the others', async () => {
    const minted = await s.api('POST', '/api/auth/keys/identity/', { token: owner.access, body: { label: 'agent', identity_uuid: idA } });
    expect(minted.status).toBe(201);
    const viaKey = await stream(minted.body.key, null); // the key's own identity
    expect(viaKey.status).toBe(200);
    const viaToken = await stream(owner.access, idA);
    await settle();
    const p = await email(idA);
    expect((await viaKey.frames(1))[0].id).toBe(p);
    expect((await viaToken.frames(1))[0].id).toBe(p);
    expect((await s.api('DELETE', `/api/auth/keys/identity/${minted.body.uuid}/`, { token: owner.access })).status).toBe(204);
    expect(await endsWithin(viaKey, 3000)).toBe('ended');
    expect(await endsWithin(viaToken, 300)).toBe('still open');
    expect((await stream(minted.body.key, null)).status).toBe(401);
  });

  it('revoking a management key closes its streams', async () => {
    const minted = await s.api('POST', '/api/auth/keys/management/', { token: owner.access, body: { label: 'ops' } });
    expect(minted.status).toBe(201);
    const r = await stream(minted.body.key, idB);
    expect(r.status).toBe(200);
    expect((await s.api('DELETE', `/api/auth/keys/management/${minted.body.uuid}/`, { token: owner.access })).status).toBe(204);
    expect(await endsWithin(r, 3000)).toBe('ended');
  });

  it('signing out ends the streams of the account\'s sessions (not those of keys), and their tokens open no new one; a password change likewise', async () => {
    const u = await s.signUp();
    const id = await createIdentity(u.access, 'session bound');
    const second = (await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } })).body;
    const key = (await s.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: 'k' } })).body.key;
    const first = await stream(u.access, id);
    const other = await stream(second.access, id);
    const viaKey = await stream(key, id);
    expect([first.status, other.status, viaKey.status]).toEqual([200, 200, 200]);
    // Sign-out ends every session of the account (DECISIONS: logout invalidates the user's refresh tokens).
    expect((await s.api('POST', '/api/auth/logout/', { token: u.access, body: { refresh: u.refresh } })).status).toBe(200);
    expect(await endsWithin(first, 3000)).toBe('ended');
    expect(await endsWithin(other, 3000)).toBe('ended');
    expect(await endsWithin(viaKey, 300)).toBe('still open');
    // The access token stays valid for requests until it expires (a JWT), but opens no stream:
    // a client reconnecting with it would otherwise carry on.
    const reopened = await stream(u.access, id);
    expect([reopened.status, (reopened.errorBody as { code: string }).code]).toEqual([401, 'token_expired']);
    // A fresh sign-in streams again; a password change ends it (and leaves the key's).
    const fresh = (await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } })).body;
    const third = await stream(fresh.access, id);
    expect(third.status).toBe(200);
    const changed = await s.api('POST', '/api/auth/password/change/', { token: fresh.access, body: { new_password1: 'a-new-pass-1', new_password2: 'a-new-pass-1' } });
    expect(changed.status).toBe(200);
    expect(await endsWithin(third, 3000)).toBe('ended');
    expect(await endsWithin(viaKey, 300)).toBe('still open');
  });

  it('a stream opened with an access token ends when the token expires (the client resumes with a fresh one)', async () => {
    // 3 s: times are whole seconds, so the token lives at least 2 s, room for a login and the
    // stream on a busy machine.
    const t = await startTestServer({ SSE_KEEPALIVE_MS: '100', ACCESS_TOKEN_TTL: '3' });
    try {
      const u = await t.signUp();
      const id = (await t.api('POST', '/api/identities/', { token: u.access, body: { name: 'short lived' } })).body.uuid;
      // A token of its own, signed just before the stream opens (the sign-up's may be spent by now).
      const { access } = (await t.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } })).body;
      const r = await openSse(`${t.url}/api/events/stream/`, { authorization: `Bearer ${access}`, 'x-service-identity': id });
      readers.push(r);
      expect(r.status).toBe(200);
      expect(await endsWithin(r, 5000)).toBe('ended');
      const again = await openSse(`${t.url}/api/events/stream/`, { authorization: `Bearer ${access}`, 'x-service-identity': id });
      readers.push(again);
      expect(again.status).toBe(401);
    } finally {
      await t.close();
    }
  });
});

describe('backpressure', () => {
  it('a reader that does not read is cut instead of buffered without bound', async () => {
    const fresh = await createIdentity(owner.access, `slow-${Date.now()}`);
    const { port } = new URL(s.url);
    const socket = net.connect(Number(port), '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(`GET /api/events/stream/ HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${owner.access}\r\nX-Service-Identity: ${fresh}\r\n\r\n`);
    let head = '';
    await new Promise<void>((resolve) => {
      const onData = (chunk: Buffer) => {
        head += chunk.toString();
        if (head.includes('retry:')) {
          socket.off('data', onData);
          resolve();
        }
      };
      socket.on('data', onData);
    });
    socket.pause(); // stop reading: the kernel buffers fill, then the server's
    let closed = false;
    socket.on('close', () => (closed = true));
    socket.on('error', () => {});
    const total = 6000;
    const big = 'y'.repeat(FRAME_TEXT_MAX);
    for (let i = 0; i < total; i += 200) await Promise.all(Array.from({ length: 200 }, (_, k) => email(fresh, `${i + k} ${big}`, big))); // ~13 MB in all
    await s.runtime.runner.waitFor((await s.runtime.events.headPosition())!, 20_000); // frames go out once the read models have their events
    await settle(500);
    let received = '';
    socket.on('data', (c: Buffer) => (received += c.toString()));
    socket.resume();
    const start = Date.now();
    while (!closed && Date.now() - start < 10_000) await settle(50);
    expect(closed).toBe(true);
    const frames = (received.match(/^event: email$/gm) ?? []).length;
    expect(frames).toBeLessThan(total);
  }, 30_000);
});

describe('streams per account', () => {
  it('an account holds at most SSE_STREAMS_PER_ACCOUNT streams: one more is refused with 429 until one closes', async () => {
    const capped = await startTestServer({ SSE_STREAMS_PER_ACCOUNT: '3' });
    try {
      const user = await capped.signUp();
      const id = (await capped.api('POST', '/api/identities/', { token: user.access, body: { name: 'streams' } })).body.uuid;
      const outsider = await capped.signUp();
      const theirs = (await capped.api('POST', '/api/identities/', { token: outsider.access, body: { name: 'theirs' } })).body.uuid;
      const open = (token: string, identity: string) => openSse(`${capped.url}/api/events/stream/`, { authorization: `Bearer ${token}`, 'x-service-identity': identity });
      const held = [await open(user.access, id), await open(user.access, id), await open(user.access, id)];
      expect(held.map((r) => r.status)).toEqual([200, 200, 200]);
      const refused = await fetch(`${capped.url}/api/events/stream/`, { headers: { authorization: `Bearer ${user.access}`, 'x-service-identity': id } });
      expect([refused.status, refused.headers.get('retry-after'), ((await refused.json()) as { code: string }).code]).toEqual([429, '3', 'too_many_streams']);
      const another = await open(outsider.access, theirs); // other accounts are not held back
      expect(another.status).toBe(200);
      held[0].close();
      another.close();
      let again: SseReader | null = null;
      for (let i = 0; i < 50 && again?.status !== 200; i++) {
        again?.close();
        await settle(20);
        again = await open(user.access, id);
      }
      expect(again!.status).toBe(200);
      for (const r of [...held, again!]) r.close();
    } finally {
      await capped.close();
    }
  });

  it('a client gone while its stream was being opened is not counted against the account', async () => {
    const capped = await startTestServer({ SSE_STREAMS_PER_ACCOUNT: '2' });
    try {
      const user = await capped.signUp();
      const id = (await capped.api('POST', '/api/identities/', { token: user.access, body: { name: 'streams' } })).body.uuid;
      const basic = Buffer.from(`${user.user.username}:${user.password}`).toString('base64');
      const { port } = new URL(capped.url);
      // HTTP basic: the password check (Argon2) keeps the request in its checks while the client leaves.
      for (let i = 0; i < 10; i++) {
        const socket = net.connect(Number(port), '127.0.0.1');
        socket.on('error', () => {});
        await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
        socket.write(`GET /api/events/stream/ HTTP/1.1\r\nHost: x\r\nAuthorization: Basic ${basic}\r\nX-Service-Identity: ${id}\r\n\r\n`);
        await settle(5);
        socket.destroy();
      }
      await settle(500);
      const open = () => openSse(`${capped.url}/api/events/stream/`, { authorization: `Bearer ${user.access}`, 'x-service-identity': id });
      const both = [await open(), await open()];
      expect(both.map((r) => r.status)).toEqual([200, 200]);
      for (const r of both) r.close();
    } finally {
      await capped.close();
    }
  });
});

describe('what an event names is readable when the event arrives', () => {
  /** Opens an EventSource on `identity`; each email/sms event at once GETs the message and the thread (conversation) it names. */
  function readOnArrival(identity: string, query = '') {
    const answers: Promise<string>[] = [];
    const es = new EventSource(`${s.url}/api/events/stream/${query}`, {
      fetch: (input, init) => fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), Authorization: `Bearer ${owner.access}`, 'X-Service-Identity': identity } }),
    });
    const onEvent = (e: MessageEvent) => {
      const d = JSON.parse(e.data) as Record<string, string>;
      const paths = e.type === 'email' ? [`/api/email-messages/${d.message_id}/`, `/api/email-inbox/${d.thread_id}/`] : [`/api/messages/${d.message_id}/`, `/api/sms-inbox/${d.conversation_id}/`];
      for (const p of paths) answers.push(s.api('GET', p, { token: owner.access, headers: { 'x-service-identity': identity } }).then((r) => `${r.status} ${p}`));
    };
    es.addEventListener('email', onEvent);
    es.addEventListener('sms', onEvent);
    const opened = new Promise<void>((resolve) => (es.onopen = () => resolve()));
    return { answers, opened, close: () => es.close() };
  }

  it('live: the message and its thread or conversation answer 200 to a GET sent as the event arrives (the stream did not wait for the read models)', async () => {
    const fresh = await createIdentity(owner.access, `ready-${Date.now()}`);
    const reader = readOnArrival(fresh);
    try {
      await reader.opened;
      for (let i = 0; i < 30; i++) await Promise.all([email(fresh), sms(fresh)]);
      await eventually(() => reader.answers.length >= 120, 10_000);
      const answers = await Promise.all(reader.answers);
      expect(answers.filter((a) => !a.startsWith('200 '))).toEqual([]);
    } finally {
      reader.close();
    }
  });

  it('replayed: the same for an event the log has and the read models may not have yet (email and SMS)', async () => {
    const fresh = await createIdentity(owner.access, `replayed-${Date.now()}`);
    for (let i = 0; i < 15; i++) {
      const before = (await s.runtime.events.headPosition()) ?? '0';
      await Promise.all([email(fresh), sms(fresh)]);
      const reader = readOnArrival(fresh, `?last_event_id=${before}`);
      try {
        await eventually(() => reader.answers.length >= 4, 10_000);
        expect((await Promise.all(reader.answers)).filter((a) => !a.startsWith('200 '))).toEqual([]);
      } finally {
        reader.close();
      }
    }
  });
});
