/**
 * SPEC "SMS"; DECISIONS "Mail, SMS, events": the inbound webhook (Twilio's form fields;
 * `local` guarded by X-Webhook-Secret, `twilio` by X-Twilio-Signature), conversations per
 * identity and peer, read marking, messages, phone numbers, and the SSE `sms` event.
 */
import { startTestServer, type TestServer } from '../support/server.js';
import { openSse, type SseReader } from '../support/sse-client.js';
import { publicUrlForms, twilioSignature } from '../../services/sms/providers.js';
import { newId, nowIso } from '../../services/kernel/ids.js';

const SECRET = 'local-webhook-secret-123';
const ADMIN = 'admin-token-sms-test';
const TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>';

let s: TestServer;
let owner: { access: string; user: { pk: number } };
let stranger: { access: string };
let idA: string;
let phoneA: string;
let idB: string;
let phoneB: string;
const readers: SseReader[] = [];

beforeAll(async () => {
  s = await startTestServer({ SMS_WEBHOOK_SECRET: SECRET, ADMIN_TOKEN: ADMIN, SSE_KEEPALIVE_MS: '1000' });
  owner = await s.signUp();
  stranger = await s.signUp();
  // Phones are a paid add-on: the admin API moves the account to a plan that has them.
  const upgrade = await s.api('PUT', `/api/admin/users/${owner.user.pk}/subscription/`, { token: ADMIN, body: { plan: 'developer', status: 'active' } });
  expect(upgrade.status).toBe(200);
  ({ id: idA, phone: phoneA } = await identityWithPhone('sms-a'));
  ({ id: idB, phone: phoneB } = await identityWithPhone('sms-b'));
});
afterEach(() => {
  for (const r of readers.splice(0)) r.close();
});
afterAll(async () => s?.close());

async function identityWithPhone(name: string): Promise<{ id: string; phone: string }> {
  const res = await s.api('POST', '/api/identities/', { token: owner.access, body: { name, provision_phone: true } });
  if (res.status !== 201 || !res.body.phone) throw new Error(`identity with phone: ${res.status} ${res.text}`);
  return { id: res.body.uuid, phone: res.body.phone };
}

let sid = 0;
const nextSid = () => `SM${String(++sid).padStart(32, '0')}`;

function webhook(fields: Record<string, string>, headers: Record<string, string> = { 'x-webhook-secret': SECRET }) {
  return s.api('POST', '/api/webhooks/sms/', { form: fields, headers });
}

const get = (path: string, identity: string, token = owner.access) => s.api('GET', path, { token, identity });

describe('POST /api/webhooks/sms/ (local provider)', () => {
  it('records the message and answers an empty TwiML response', async () => {
    const res = await webhook({ From: '+15557770001', To: phoneA, Body: 'hello there', MessageSid: nextSid(), NumMedia: '0' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/xml/);
    expect(res.text).toBe(TWIML);
    const list = await get('/api/messages/', idA);
    expect(list.status).toBe(200);
    expect(list.body[0]).toMatchObject({ from_number: '+15557770001', to_number: phoneA, body: 'hello there', direction: 'inbound', read: false });
  });

  it('NumMedia reads decimal text only (Infinity, 0x5 or a blank were numbers): 400, nothing recorded', async () => {
    const before = (await get('/api/messages/', idA)).body.length;
    for (const NumMedia of ['Infinity', '1e400', '0x5', ' ']) {
      const res = await webhook({ From: '+15557770093', To: phoneA, Body: 'x', MessageSid: nextSid(), NumMedia });
      expect([NumMedia, res.status, res.body]).toEqual([NumMedia, 400, { NumMedia: ['A valid integer is required.'] }]);
    }
    expect((await get('/api/messages/', idA)).body.length).toBe(before);
    expect((await webhook({ From: '+15557770093', To: phoneA, Body: 'x', MessageSid: nextSid(), NumMedia: ' 1 ' })).status).toBe(200);
  });

  it('403 with a wrong or missing X-Webhook-Secret; nothing is recorded', async () => {
    const before = (await get('/api/messages/', idA)).body.length;
    const wrong = await webhook({ From: '+15557770002', To: phoneA, Body: 'x', MessageSid: nextSid() }, { 'x-webhook-secret': `${SECRET}x` });
    expect(wrong.status).toBe(403);
    expect(wrong.body).toMatchObject({ code: 'invalid_webhook_secret' });
    const missing = await webhook({ From: '+15557770002', To: phoneA, Body: 'x', MessageSid: nextSid() }, {});
    expect(missing.status).toBe(403);
    expect((await get('/api/messages/', idA)).body.length).toBe(before);
  });

  it('the same MessageSid twice records one message', async () => {
    const fields = { From: '+15557770003', To: phoneA, Body: 'only once', MessageSid: nextSid() };
    expect((await webhook(fields)).status).toBe(200);
    expect((await webhook(fields)).status).toBe(200);
    const all = (await get('/api/messages/?limit=200', idA)).body as { message_sid: string }[];
    expect(all.filter((m) => m.message_sid === fields.MessageSid)).toHaveLength(1);
    const conv = (await get('/api/sms-inbox/', idA)).body.find((c: { peer: string }) => c.peer === '+15557770003');
    expect(conv.message_count).toBe(1);
  });

  it('a number no identity holds: 404 unknown_number, never a 500', async () => {
    const res = await webhook({ From: '+15557770004', To: '+19990000000', Body: 'lost', MessageSid: nextSid() });
    expect(res.status).toBe(404);
    expect(res.body).toMatchObject({ code: 'unknown_number' });
  });

  it('missing fields: 400 naming them', async () => {
    const res = await webhook({ Body: 'no addressing' });
    expect(res.status).toBe(400);
    expect(res.body).toHaveProperty('From');
    expect(res.body).toHaveProperty('To');
    expect(res.body).toHaveProperty('MessageSid');
  });

  it('a "+" sent unencoded (decoded as a space) still finds the number', async () => {
    const raw = `From=${encodeURIComponent('+15557770005')}&To=${phoneA}&Body=plus&MessageSid=${nextSid()}`; // To's "+" becomes " "
    const res = await fetch(`${s.url}/api/webhooks/sms/`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-webhook-secret': SECRET }, body: raw });
    expect(res.status).toBe(200);
  });
});

describe('conversations and messages', () => {
  let peer: string;
  beforeAll(async () => {
    peer = '+15558880001';
    for (const body of ['first', 'second', 'third']) expect((await webhook({ From: peer, To: phoneB, Body: body, MessageSid: nextSid() })).status).toBe(200);
    expect((await webhook({ From: '+15558880002', To: phoneB, Body: 'other peer', MessageSid: nextSid() })).status).toBe(200);
  });

  it('one conversation per peer, newest first, with counts and preview', async () => {
    const res = await get('/api/sms-inbox/', idB);
    expect(res.status).toBe(200);
    expect(res.body.map((c: { peer: string }) => c.peer)).toEqual(['+15558880002', peer]);
    expect(res.body[1]).toMatchObject({ from_number: peer, to_number: phoneB, preview: 'third', message_count: 3, unread_count: 3, unread: true });
    expect(res.body[1].conversation_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(new Date(res.body[1].last_message_at).toISOString()).toBe(res.body[1].last_message_at);
  });

  it('opening a conversation returns its messages in order and marks them read (HEAD marks nothing)', async () => {
    const conv = (await get('/api/sms-inbox/', idB)).body.find((c: { peer: string }) => c.peer === peer);
    const head = (path: string) => fetch(`${s.url}${path}`, { method: 'HEAD', headers: { authorization: `Bearer ${owner.access}`, 'x-service-identity': idB } });
    expect((await head(`/api/sms-inbox/${conv.conversation_id}/`)).status).toBe(200);
    const firstMessage = (await get(`/api/messages/?conversation_id=${conv.conversation_id}`, idB)).body.at(-1);
    const twice = await get(`/api/messages/?conversation_id=${conv.conversation_id}&conversation_id=x`, idB);
    expect([twice.status, twice.body]).toEqual([400, { conversation_id: ['Give conversation_id once.'] }]);
    expect((await head(`/api/messages/${firstMessage.uuid}/`)).status).toBe(200);
    expect((await get('/api/sms-inbox/', idB)).body.find((c: { peer: string }) => c.peer === peer).unread_count).toBe(3);
    const detail = await get(`/api/sms-inbox/${conv.conversation_id}/`, idB);
    expect(detail.status).toBe(200);
    expect(detail.body.messages.map((m: { body: string }) => m.body)).toEqual(['first', 'second', 'third']);
    expect([detail.body.unread_count, detail.body.unread]).toEqual([0, false]);
    expect(detail.body.messages.every((m: { read: boolean }) => m.read)).toBe(true);
    const unread = await get('/api/sms-inbox/?unread=true', idB);
    expect(unread.body.map((c: { peer: string }) => c.peer)).toEqual(['+15558880002']);
    const unreadMessages = await get('/api/messages/?unread=true', idB);
    expect(unreadMessages.body.map((m: { body: string }) => m.body)).toEqual(['other peer']);
  });

  it('opening a conversation longer than its latest 500 messages marks only those read', async () => {
    const long = '+15558880099';
    for (let i = 0; i < 502; i++) expect((await webhook({ From: long, To: phoneB, Body: `m${i}`, MessageSid: nextSid() })).status).toBe(200);
    const conv = (await get('/api/sms-inbox/', idB)).body.find((c: { peer: string }) => c.peer === long);
    const opened = await get(`/api/sms-inbox/${conv.conversation_id}/`, idB);
    expect([opened.body.messages.length, opened.body.messages[0].body, opened.body.messages.every((m: { read: boolean }) => m.read)]).toEqual([500, 'm2', true]);
    expect(opened.body.unread_count).toBe(2); // m0 and m1 were not shown
    const unread = await get(`/api/messages/?conversation_id=${conv.conversation_id}&unread=true`, idB);
    expect(unread.body.map((m: { body: string }) => m.body)).toEqual(['m1', 'm0']);
  }, 60_000);

  it('a new message makes the conversation unread again, in the same conversation', async () => {
    const before = (await get('/api/sms-inbox/', idB)).body.find((c: { peer: string }) => c.peer === peer);
    expect((await webhook({ From: peer, To: phoneB, Body: 'fourth', MessageSid: nextSid() })).status).toBe(200);
    const unread = (await get('/api/sms-inbox/?unread=true', idB)).body;
    const again = unread.find((c: { peer: string }) => c.peer === peer);
    expect(again).toMatchObject({ conversation_id: before.conversation_id, message_count: 4, unread_count: 1, preview: 'fourth' });
  });

  it('GET /api/messages/{id}/ answers the message and marks it read', async () => {
    const [latest] = (await get('/api/messages/', idB)).body;
    expect(latest.read).toBe(false);
    const one = await get(`/api/messages/${latest.id}/`, idB);
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ id: latest.id, body: 'fourth', read: true });
    expect((await get('/api/messages/', idB)).body[0].read).toBe(true);
  });

  it('pages with limit and a Link rel="next"', async () => {
    const first = await get('/api/messages/?limit=2', idB);
    expect(first.body).toHaveLength(2);
    const next = /<([^>]+)>; rel="next"/.exec(first.headers.get('link') ?? '')?.[1];
    expect(next).toBeDefined();
    const second = await get(new URL(next!).pathname + new URL(next!).search, idB);
    expect(second.body[0].id).not.toBe(first.body[1].id);
    expect(first.body.concat(second.body).map((m: { id: string }) => m.id)).toEqual((await get('/api/messages/?limit=4', idB)).body.map((m: { id: string }) => m.id));
  });

  it('another identity and another account see none of it', async () => {
    const conv = (await get('/api/sms-inbox/', idB)).body[0];
    const msg = (await get('/api/messages/', idB)).body[0];
    expect((await get(`/api/sms-inbox/${conv.conversation_id}/`, idA)).status).toBe(404);
    expect((await get(`/api/messages/${msg.id}/`, idA)).status).toBe(404);
    expect((await get('/api/sms-inbox/', idA)).body.map((c: { peer: string }) => c.peer)).not.toContain('+15558880002');
    expect((await get('/api/sms-inbox/', idB, stranger.access)).status).toBe(403);
    expect((await s.api('GET', '/api/sms-inbox/', { token: owner.access })).status).toBe(400);
    expect((await s.api('GET', '/api/sms-inbox/')).status).toBe(401);
    expect((await get('/api/messages/not-a-uuid/', idB)).status).toBe(404);
  });
});

describe('GET /api/phone/', () => {
  it("lists the active identity's numbers", async () => {
    const res = await get('/api/phone/', idA);
    expect(res.status).toBe(200);
    expect(res.body).toEqual([{ number: phoneA, provider: 'local', capabilities: ['sms'], created_dt: expect.any(String) }]);
  });

  it('is empty for an identity without a phone', async () => {
    const res = await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'no-phone' } });
    expect((await get('/api/phone/', res.body.uuid)).body).toEqual([]);
  });
});

describe('the SSE `sms` event', () => {
  it('reaches the streams of the right identity only', async () => {
    const a = await openSse(`${s.url}/api/events/stream/`, { authorization: `Bearer ${owner.access}`, 'x-service-identity': idA });
    const b = await openSse(`${s.url}/api/events/stream/`, { authorization: `Bearer ${owner.access}`, 'x-service-identity': idB });
    readers.push(a, b);
    await new Promise((r) => setTimeout(r, 100));
    expect((await webhook({ From: '+15559990001', To: phoneA, Body: 'Your code is 424242', MessageSid: nextSid() })).status).toBe(200);
    const [frame] = await a.frames(1);
    expect(frame.event).toBe('sms');
    const data = JSON.parse(frame.data);
    expect(data).toMatchObject({ from_number: '+15559990001', preview: 'Your code is 424242' });
    const conv = (await get('/api/sms-inbox/', idA)).body.find((c: { peer: string }) => c.peer === '+15559990001');
    expect(data.conversation_id).toBe(conv.conversation_id);
    await new Promise((r) => setTimeout(r, 200));
    expect(b.log.filter((l) => l.kind === 'frame')).toHaveLength(0);
  });
});

describe('From and To are normalised once, before anything is stored', () => {
  type Conv = { peer: string; from_number: string; conversation_id: string; message_count: number };
  const peers = async () => ((await get('/api/sms-inbox/?limit=200', idA)).body as Conv[]).map((c) => c.peer);
  const messageCount = async () => ((await get('/api/messages/?limit=200', idA)).body as unknown[]).length;

  it.each([
    ['a bidi override (RLO: display spoofing)', '+1555\u202E7770005'],
    ['a zero-width space', '+1555\u200B7770004'],
    ['a NUL', '+1555777\u00000006'],
    ['a soft hyphen', '+1555\u00AD7770007'],
    ['a zero-width joiner in a sender ID', 'ACME\u200DBANK'],
    ['a newline', '+15557770008\n'],
  ])('a From with %s: 400 {From: [...]}, nothing recorded', async (_what, from) => {
    const [before, beforePeers] = [await messageCount(), await peers()];
    const res = await webhook({ From: from, To: phoneA, Body: 'spoof', MessageSid: nextSid() });
    expect(res.status).toBe(400);
    expect(Object.keys(res.body)).toEqual(['From']);
    expect(res.body.From).toEqual([expect.stringMatching(/control or invisible/)]);
    expect(await messageCount()).toBe(before);
    expect(await peers()).toEqual(beforePeers);
  });

  it('digits of another script (Arabic-Indic) are refused: 400, no second conversation for +15557770002', async () => {
    const before = await peers();
    const res = await webhook({ From: '+\u0661\u0665\u0665\u0665\u0667\u0667\u0667\u0660\u0660\u0660\u0662', To: phoneA, Body: 'x', MessageSid: nextSid() });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ From: [expect.stringMatching(/ASCII/)] });
    expect(await peers()).toEqual(before);
  });

  it('a full-width number (＋１５５５...) is the ASCII number: same peer, same conversation, same SSE from_number', async () => {
    const sse = await openSse(`${s.url}/api/events/stream/`, { authorization: `Bearer ${owner.access}`, 'x-service-identity': idA });
    readers.push(sse);
    await new Promise((r) => setTimeout(r, 100));
    expect((await webhook({ From: '+15557770003', To: phoneA, Body: 'ascii', MessageSid: nextSid() })).status).toBe(200);
    expect((await webhook({ From: '\uFF0B15557770003', To: phoneA, Body: 'full-width plus', MessageSid: nextSid() })).status).toBe(200);
    expect((await webhook({ From: '\uFF0B\uFF11\uFF15\uFF15\uFF15\uFF17\uFF17\uFF17\uFF10\uFF10\uFF10\uFF13', To: phoneA, Body: 'full-width digits', MessageSid: nextSid() })).status).toBe(200);
    const frames = await sse.frames(3);
    expect(frames.map((f) => JSON.parse(f.data).from_number)).toEqual(['+15557770003', '+15557770003', '+15557770003']);
    const convs = ((await get('/api/sms-inbox/?limit=200', idA)).body as Conv[]).filter((c) => c.peer.normalize('NFKC') === '+15557770003');
    expect(convs).toHaveLength(1);
    expect(convs[0]).toMatchObject({ peer: '+15557770003', from_number: '+15557770003' });
    expect(new Set(frames.map((f) => JSON.parse(f.data).conversation_id))).toEqual(new Set([convs[0].conversation_id]));
    const detail = await get(`/api/sms-inbox/${convs[0].conversation_id}/`, idA);
    expect(detail.body.messages.slice(-2).map((m: { body: string; from_number: string }) => [m.body, m.from_number])).toEqual([
      ['full-width plus', '+15557770003'],
      ['full-width digits', '+15557770003'],
    ]);
  });

  it('a To in full-width digits finds the identity; a To with a zero-width space or letters is a 400 naming To', async () => {
    const wide = phoneA.replace(/[+0-9]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 0xfee0));
    const ok = await webhook({ From: '+15557770009', To: wide, Body: 'wide to', MessageSid: nextSid() });
    expect(ok.status).toBe(200);
    expect((await get('/api/messages/', idA)).body[0]).toMatchObject({ body: 'wide to', to_number: phoneA, from_number: '+15557770009' });
    const zw = await webhook({ From: '+15557770009', To: `${phoneA.slice(0, 4)}\u200B${phoneA.slice(4)}`, Body: 'x', MessageSid: nextSid() });
    expect([zw.status, Object.keys(zw.body)]).toEqual([400, ['To']]);
    const letters = await webhook({ From: '+15557770009', To: 'ACMEBANK', Body: 'x', MessageSid: nextSid() });
    expect([letters.status, Object.keys(letters.body)]).toEqual([400, ['To']]);
  });

  it('alphanumeric sender IDs (Latin or not, with punctuation) are compacted as they always were, so a sender keeps its conversation', async () => {
    const cases = [
      ['ACMEBANK', 'ACMEBANK'],
      ['\u0411\u0430\u043d\u043a', '\u0411\u0430\u043d\u043a'],
      ['My Bank', 'MyBank'],
      ['2FA', '2FA'],
      ['T-Mobile', 'TMobile'],
      ['Amazon.com', 'Amazoncom'],
      ['AT&T', 'AT&T'],
      ['ACMEBANKLTDX', 'ACMEBANKLTDX'],
    ];
    for (const [sender, peer] of cases) {
      const res = await webhook({ From: sender, To: phoneA, Body: `from ${sender}`, MessageSid: nextSid() });
      expect([sender, res.status]).toEqual([sender, 200]);
      expect((await get('/api/messages/', idA)).body[0]).toMatchObject({ from_number: peer, body: `from ${sender}` });
    }
    expect(await peers()).toEqual(expect.arrayContaining(cases.map(([, peer]) => peer)));
    const long = await webhook({ From: 'A'.repeat(65), To: phoneA, Body: 'x', MessageSid: nextSid() });
    expect([long.status, Object.keys(long.body)]).toEqual([400, ['From']]);
  });

  it('ordinary numbers are still read as E.164 (spaces, dashes, parentheses, a 00 prefix); too short or too long is a 400', async () => {
    for (const from of ['+1 (555) 777-0010', '0015557770010', '+1.555.777.0010']) expect((await webhook({ From: from, To: phoneA, Body: from, MessageSid: nextSid() })).status).toBe(200);
    const conv = ((await get('/api/sms-inbox/?limit=200', idA)).body as Conv[]).find((c) => c.peer === '+15557770010');
    expect(conv?.message_count).toBe(3);
    for (const from of ['+1', '+1234567890123456', '+07700900123', '07700900123']) {
      const res = await webhook({ From: from, To: phoneA, Body: 'x', MessageSid: nextSid() });
      expect([from, res.status, Object.keys(res.body)]).toEqual([from, 400, ['From']]);
    }
  });

  it('a short code (3 to 8 digits alone) is kept as the carrier sends it, without a +', async () => {
    for (const from of ['894546', '711', '12345678']) {
      expect((await webhook({ From: from, To: phoneA, Body: `code from ${from}`, MessageSid: nextSid() })).status).toBe(200);
      expect((await get('/api/messages/', idA)).body[0]).toMatchObject({ from_number: from, body: `code from ${from}` });
    }
    // Nine digits with no sign are no short code: read as E.164, as before.
    expect((await webhook({ From: '155577700', To: phoneA, Body: 'nine', MessageSid: nextSid() })).status).toBe(200);
    expect((await get('/api/messages/', idA)).body[0]).toMatchObject({ from_number: '+155577700' });
  });
});

describe('twilio provider: X-Twilio-Signature', () => {
  const TOKEN = 'twilio-auth-token-test';
  const PUBLIC = 'https://agents.example.com';
  let t: TestServer;
  let identityId: string;
  let tw: { access: string };
  const number = '+15550109999';

  beforeAll(async () => {
    t = await startTestServer({ SMS_PROVIDER: 'twilio', TWILIO_ACCOUNT_SID: 'AC00000000000000000000000000000000', TWILIO_AUTH_TOKEN: TOKEN, PUBLIC_URL: PUBLIC });
    tw = await t.signUp();
    const res = await t.api('POST', '/api/identities/', { token: tw.access, body: { name: 'tw' } });
    identityId = res.body.uuid;
    // A number bought from Twilio (provisioning itself calls Twilio's API, out of scope here).
    const append = await t.runtime.events.append(`identity-${identityId}`, [
      { id: newId(), type: 'PhoneProvisioned', data: { identityId, phone: number, provider: 'twilio', providerRef: 'PN0000', at: nowIso() } },
    ]);
    await t.runtime.runner.waitFor(append.position);
  });
  afterAll(async () => t?.close());

  const post = (fields: Record<string, string>, signature: string | null, path = '/api/webhooks/sms/') =>
    fetch(`${t.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...(signature ? { 'x-twilio-signature': signature } : {}) },
      body: new URLSearchParams(fields).toString(),
    });

  it('matches the example of Twilio\'s documentation', () => {
    // https://www.twilio.com/docs/usage/security#validating-requests
    const params = { CallSid: 'CA1234567890ABCDE', Caller: '+12349013030', Digits: '1234', From: '+12349013030', To: '+18005551212' };
    expect(twilioSignature('12345', 'https://mycompany.com/myapp.php?foo=1&bar=2', params)).toBe('0/KCTR6DLpKmkAf8muzZqo1nDgQ=');
  });

  it('accepts a correctly signed request and answers TwiML', async () => {
    const fields = { AccountSid: 'AC00000000000000000000000000000000', From: '+15551230000', To: number, Body: 'signed', MessageSid: nextSid(), NumMedia: '0' };
    const res = await post(fields, twilioSignature(TOKEN, `${PUBLIC}/api/webhooks/sms/`, fields));
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(TWIML);
    const list = await t.api('GET', '/api/messages/', { token: tw.access, identity: identityId });
    expect(list.body).toMatchObject([{ body: 'signed', message_sid: fields.MessageSid, to_number: number }]);
    expect((await t.api('GET', '/api/phone/', { token: tw.access, identity: identityId })).body).toMatchObject([{ number, provider: 'twilio' }]);
  });

  it('accepts the URL signed with or without the default port, as twilio-node does; no other port', async () => {
    for (const base of [`${PUBLIC}:443`, PUBLIC]) {
      const fields = { From: '+15551230001', To: number, Body: `port ${base}`, MessageSid: nextSid() };
      expect([base, (await post(fields, twilioSignature(TOKEN, `${base}/api/webhooks/sms/`, fields))).status]).toEqual([base, 200]);
    }
    const fields = { From: '+15551230001', To: number, Body: 'other port', MessageSid: nextSid() };
    expect((await post(fields, twilioSignature(TOKEN, `${PUBLIC}:8443/api/webhooks/sms/`, fields))).status).toBe(403);
    expect(publicUrlForms('http://h:80/base')).toEqual(['http://h:80/base', 'http://h/base']);
    expect(publicUrlForms('https://h:8443')).toEqual(['https://h:8443']);
  });

  it('refuses a missing or wrong signature, or one over other parameters', async () => {
    const fields = { From: '+15551230000', To: number, Body: 'forged', MessageSid: nextSid() };
    expect((await post(fields, null)).status).toBe(403);
    expect((await post(fields, twilioSignature('wrong-token', `${PUBLIC}/api/webhooks/sms/`, fields))).status).toBe(403);
    const signedOther = twilioSignature(TOKEN, `${PUBLIC}/api/webhooks/sms/`, { ...fields, Body: 'original' });
    expect((await post(fields, signedOther)).status).toBe(403);
    expect((await post(fields, twilioSignature(TOKEN, `http://localhost/api/webhooks/sms/`, fields))).status).toBe(403);
  });

  it('X-Webhook-Secret does not open the twilio webhook', async () => {
    const res = await fetch(`${t.url}/api/webhooks/sms/`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-webhook-secret': 'anything' }, body: 'From=1&To=2&MessageSid=x' });
    expect(res.status).toBe(403);
  });
});

describe('local provider without SMS_WEBHOOK_SECRET', () => {
  it('the simulator webhook is open: an SMS posted without a secret reaches the identity', async () => {
    const t = await startTestServer({ ADMIN_TOKEN: ADMIN });
    try {
      const { access, user } = await t.signUp();
      const admin = await t.api('PUT', `/api/admin/users/${user.pk}/subscription/`, { token: ADMIN, body: { plan: 'developer', status: 'active' } });
      expect(admin.status).toBe(200);
      const identity = (await t.api('POST', '/api/identities/', { token: access, body: { name: 'open-sms', provision_phone: true } })).body;
      expect(identity.phone).toMatch(/^\+\d+$/);
      const res = await t.api('POST', '/api/webhooks/sms/', { form: { From: '+15550001111', To: identity.phone, Body: 'no secret set', MessageSid: 'SMopen1' } });
      expect(res.status).toBe(200);
      const list = await t.api('GET', '/api/messages/', { token: access, identity: identity.uuid });
      expect(list.body.map((m: { body: string }) => m.body)).toEqual(['no secret set']);
    } finally {
      await t.close();
    }
  });
});
