/**
 * Non-negotiable: "Bad input gets a clear 4xx error in the spec's shapes, never a 500."
 * Every operation of the OpenAPI document (so every endpoint, as the coverage test in
 * openapi.http.test.ts guarantees) is called with malformed bodies, wrong field types,
 * oversized strings, garbage path parameters and query strings, by an authenticated caller
 * scoped to an identity. No answer may be a 5xx, and every 4xx must be JSON in the spec's
 * shapes: `{detail, code?}` or `{field: [messages]}` (or RFC 8628's `{error}` on the token
 * endpoint).
 */
import net from 'node:net';
import { jest } from '@jest/globals';
import { startTestServer, type TestServer } from '../support/server.js';
import { runClient } from '../support/client-process.js';

let s: TestServer;
let token: string;
let identity: string;
let doc: { paths: Record<string, Record<string, { requestBody?: { content: Record<string, { schema: { $ref: string } }> } }>>; components: { schemas: Record<string, any> } };

beforeAll(async () => {
  s = await startTestServer({ ADMIN_TOKEN: 'admin-token', SMS_WEBHOOK_SECRET: 'hook' });
  const u = await s.signUp();
  token = u.access;
  identity = (await s.api('POST', '/api/identities/', { token, body: { name: 'Target' } })).body.uuid;
  doc = (await s.api('GET', '/api/schema/')).body;
});
afterAll(async () => s?.close());

/** Bodies that break the operation's schema in every way we can think of. */
function badBodies(schemaRef: string | undefined): unknown[] {
  const bodies: unknown[] = ['', '[]', '"text"', 'null', '{"unterminated":', '{}', JSON.stringify({ extra: { nested: [1, 2, { deep: true }] } })];
  // Nested thousands of levels inside the object (well under 1 MiB): nothing recursive may overflow on it.
  bodies.push(`{"x":${'{"a":'.repeat(3000)}1${'}'.repeat(3000)}}`, `{"x":${'['.repeat(6000)}${']'.repeat(6000)}}`);
  const name = schemaRef?.replace('#/components/schemas/', '');
  const props = (name && doc.components.schemas[name]?.properties) || {};
  const wrong = [123, -1, 1.5, true, false, null, [], ['a', 1], { a: 1 }, '', ' ', 'x'.repeat(5000), '\u0000\uffff\ud800', 'not-a-uuid', '../../etc/passwd', '<script>alert(1)</script>'];
  for (const field of Object.keys(props)) {
    for (const value of wrong) bodies.push(JSON.stringify({ [field]: value }));
  }
  bodies.push(JSON.stringify(Object.fromEntries(Object.keys(props).map((f) => [f, 'x'.repeat(300)]))));
  return bodies;
}

const pathVariants = (path: string): string[] => {
  if (!path.includes('{')) return [path];
  return ['not-a-uuid', '00000000-0000-0000-0000-000000000000', 'x'.repeat(300), '%00', identity].map((v) => path.replace(/\{\w+\}/g, encodeURIComponent(v)));
};

function checkShape(method: string, path: string, status: number, body: unknown, text: string) {
  const where = `${method.toUpperCase()} ${path} → ${status} ${text.slice(0, 200)}`;
  expect([where, status < 500]).toEqual([where, true]);
  if (status >= 400 && path.startsWith('/api/')) {
    expect([where, typeof body]).toEqual([where, 'object']);
    const b = body as Record<string, unknown>;
    const standard = typeof b.detail === 'string';
    const validation = Object.values(b).every((v) => Array.isArray(v) && v.every((m) => typeof m === 'string'));
    const oauth = typeof b.error === 'string';
    expect([where, standard || validation || oauth]).toEqual([where, true]);
    // A validation error is keyed by the request's own field names (a list item's error too).
    if (validation && !standard) expect([where, Object.keys(b).filter((k) => /[.[\]/]/.test(k))]).toEqual([where, []]);
  }
}

it('no endpoint answers 5xx to malformed input, and every error has the spec\'s shape', async () => {
  let calls = 0;
  for (const [path, ops] of Object.entries(doc.paths)) {
    if (path === '/api/events/stream/') continue; // long-lived: its bad-input answers are tested in events.http.test.ts
    for (const [method, op] of Object.entries(ops)) {
      const ref = op.requestBody?.content['application/json']?.schema.$ref;
      for (const p of pathVariants(path)) {
        const bodies = method === 'get' || method === 'delete' ? [undefined] : badBodies(ref);
        for (const body of bodies) {
          for (const query of ['', '?limit=abc&cursor=%%%&unread=maybe&identity=nope', '?limit=0', '?limit=99999&cursor=eyJ4Ijp9']) {
            const res = await fetch(`${s.url}${p}${query}`, {
              method: method.toUpperCase(),
              headers: { authorization: `Bearer ${token}`, 'x-service-identity': identity, 'content-type': 'application/json' },
              body: body as string | undefined,
            });
            const text = await res.text();
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              /* not JSON: checkShape reports it for /api/ errors */
            }
            checkShape(method, p + query, res.status, parsed, text);
            calls++;
            if (body !== undefined && query) break; // bodies × the first query only, to bound the run
          }
        }
      }
    }
  }
  expect(calls).toBeGreaterThan(500);
}, 180_000);

it("an error in a list's item is said under the list's field, naming the item", async () => {
  const sender = (await s.api('POST', '/api/identities/', { token, body: { name: 'List items' } })).body.uuid; // the sweep above deletes `identity`
  const compose = await s.api('POST', '/api/email-messages/compose/', { token, identity: sender, body: { to: ['a@example.com', 5], subject: 's', body: 'b', attachment_uuids: [123] } });
  expect(compose.status).toBe(400);
  expect(compose.body).toEqual({ to: ['to[1]: Not a valid string.'], attachment_uuids: [expect.stringMatching(/^attachment_uuids\[0\]: /)] });
  const typed = await s.api('POST', '/api/email-messages/compose/', { token, identity: sender, body: { to: 'a@example.com', cc: 123, attachment_uuids: {} } });
  expect(typed.body).toEqual({ cc: ['Not a valid string or list of strings.'], attachment_uuids: ['Not a valid string or list of strings.'] }); // said in words, not the schema's 'string,array,null'
  const nul = await s.api('POST', '/api/email-messages/compose/', { token, identity: sender, body: { to: ['a@example.com', 'b\u0000@example.com'], subject: 's', body: 'b' } });
  expect(nul.body).toEqual({ to: ['Null characters are not allowed.'] });
});

it('a garbage credential or identity header is a 4xx on every endpoint', async () => {
  for (const [path, ops] of Object.entries(doc.paths)) {
    if (path === '/api/events/stream/') continue;
    for (const method of Object.keys(ops)) {
      const variants: Record<string, string>[] = [{ authorization: 'Bearer svc_mgmt_nope' }, { authorization: 'Basic !!!' }, { authorization: `Bearer ${token}`, 'x-service-identity': 'garbage' }, { cookie: 'ais_session=forged' }];
      for (const headers of variants) {
        const p = path.replace(/\{\w+\}/g, identity);
        const res = await fetch(`${s.url}${p}`, { method: method.toUpperCase(), headers: { ...headers, 'content-type': 'application/json' }, body: method === 'get' || method === 'delete' ? undefined : '{}' });
        const text = await res.text();
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {
          /* reported below */
        }
        checkShape(method, `${p} ${JSON.stringify(headers).slice(0, 60)}`, res.status, parsed, text);
      }
    }
  }
}, 120_000);

it('bodies are UTF-8: invalid bytes, another charset or a Content-Encoding are refused, never stored as U+FFFD', async () => {
  const post = (body: Buffer | string, headers: Record<string, string>) =>
    fetch(`${s.url}/api/identities/`, { method: 'POST', headers: { authorization: `Bearer ${token}`, ...headers }, body });
  const latin1 = Buffer.concat([Buffer.from('{"name":"lat'), Buffer.from([0xe9]), Buffer.from('"}')]);
  let res = await post(latin1, { 'content-type': 'application/json' });
  expect([res.status, ((await res.json()) as { code: string }).code]).toEqual([400, 'parse_error']);
  res = await post(latin1, { 'content-type': 'application/json; charset=iso-8859-1' });
  expect(res.status).toBe(415);
  res = await post('{"name":"gz"}', { 'content-type': 'application/json', 'content-encoding': 'gzip' });
  expect(res.status).toBe(415);
  res = await post('\ufeff{"name":"With BOM é"}', { 'content-type': 'application/json; charset=UTF-8' });
  expect([res.status, ((await res.json()) as { name: string }).name]).toEqual([201, 'With BOM é']);
  const names = ((await s.api('GET', '/api/identities/', { token })).body as { name: string }[]).map((i) => i.name);
  expect(names.some((n) => n.includes('\ufffd') || n === 'gz')).toBe(false);
});

it('JSON strings must be Unicode text: an unpaired surrogate escape is a 400 (it was a 500 at the SMS webhook), a pair is a character', async () => {
  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${s.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers }, body });
  for (const name of ['"\\ud800"', '"x\\uDFFFy"', '"\\ude00\\ud83d"']) {
    const res = await post('/api/identities/', `{"name":${name}}`);
    expect([res.status, ((await res.json()) as { code: string }).code]).toEqual([400, 'parse_error']);
  }
  const key = await post('/api/identities/', '{"name":"ok", "\\ud800":1}');
  expect(key.status).toBe(400);
  const webhook = await post('/api/webhooks/sms/', '{"From":"\\ud800","To":"+12395550153","Body":"x","MessageSid":"SMsur"}', { 'x-webhook-secret': 'anything' });
  expect(webhook.status).toBe(400);
  const pair = await post('/api/identities/', '{"name":"smile \\ud83d\\ude00"}');
  expect([pair.status, ((await pair.json()) as { name: string }).name]).toEqual([201, 'smile \u{1F600}']);
});

it('JSON nested deeper than 64 levels is a 400 read off the text, never parsed (1 MiB of brackets cost JSON.parse ~10x a flat body); brackets in strings do not count', async () => {
  const post = (body: string) => fetch(`${s.url}/api/auth/login/`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const deep = `{"a":${'['.repeat(500_000)}${']'.repeat(500_000)}}`;
  const parse = jest.spyOn(JSON, 'parse');
  try {
    const res = await post(deep);
    expect([res.status, ((await res.json()) as { detail: string }).detail]).toEqual([400, 'The request body is nested too deeply (more than 64 levels).']);
    expect(parse.mock.calls.filter(([text]) => text === deep)).toEqual([]);
  } finally {
    parse.mockRestore();
  }
  const levels = (n: number) => `{"username":"nobody","password":"x","p":${'['.repeat(n - 1)}${']'.repeat(n - 1)}}`;
  expect((await (await post(levels(65))).json()) as { detail?: string }).toMatchObject({ detail: expect.stringMatching(/nested too deeply/) });
  for (const body of [levels(64), `{"username":"nobody","password":"${'[{'.repeat(100)}\\\"${'['.repeat(100)}"}`]) {
    const res = await post(body);
    expect([res.status, ((await res.json()) as { detail?: string }).detail]).toEqual([400, expect.not.stringMatching(/nested/)]);
  }
});

it("what Node's HTTP parser refuses is answered in the API's error shape, not an empty body", async () => {
  const { port, hostname } = new URL(s.url);
  const exchange = (request: string) =>
    new Promise<{ status: number; type: string; body: { code?: string; detail?: string } }>((resolve, reject) => {
      const socket = net.connect(Number(port), hostname, () => socket.write(request));
      let text = '';
      socket.setEncoding('latin1');
      socket.on('data', (chunk) => (text += chunk));
      socket.on('error', reject);
      socket.on('close', () => {
        const [head, body] = text.split('\r\n\r\n');
        resolve({ status: Number(head.split(' ')[1]), type: /content-type: ([^\r]+)/i.exec(head)?.[1] ?? '', body: body ? JSON.parse(body) : {} });
      });
    });
  const unknownMethod = await exchange('FOO /api/health/ HTTP/1.1\r\nHost: x\r\n\r\n');
  expect([unknownMethod.status, unknownMethod.type, unknownMethod.body.code]).toEqual([400, 'application/json; charset=utf-8', 'parse_error']);
  const hugeHeader = await exchange(`GET /api/health/ HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
  expect([hugeHeader.status, hugeHeader.body.code]).toEqual([431, 'header_too_large']);
  const expectation = await exchange('POST /api/identities/ HTTP/1.1\r\nHost: x\r\nExpect: banana\r\nContent-Length: 2\r\n\r\n{}');
  expect([expectation.status, expectation.body.code]).toEqual([417, 'expectation_failed']);
  // RFC 9112 §3.2: HTTP/1.1 needs exactly one Host (1.0 may go without).
  const noHost = await exchange('GET /api/health/ HTTP/1.1\r\n\r\n');
  expect([noHost.status, noHost.type, noHost.body.code]).toEqual([400, 'application/json; charset=utf-8', 'parse_error']);
  const twoHosts = await exchange('GET /api/health/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n');
  expect([twoHosts.status, twoHosts.body.code]).toEqual([400, 'parse_error']);
  const http10 = await exchange('GET /api/health/ HTTP/1.0\r\n\r\n');
  expect(http10.status).toBe(200);
  // Two of a header that holds one value: which one counts would be a guess.
  const twoCredentials = await exchange('GET /api/auth/user/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n');
  expect([twoCredentials.status, twoCredentials.body.code, twoCredentials.body.detail]).toEqual([400, 'parse_error', 'The request has more than one Authorization header.']);
  const twoTypes = await exchange('POST /api/auth/login/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}');
  expect([twoTypes.status, twoTypes.body.code]).toEqual([400, 'parse_error']);
});

it('a body over 1 MiB sent without Content-Length is a 413 that closes its connection (the rest of the body is still on it)', async () => {
  const { port, hostname } = new URL(s.url);
  const socket = net.connect(Number(port), hostname);
  await new Promise((resolve) => socket.once('connect', resolve));
  let text = '';
  socket.setEncoding('latin1');
  socket.on('data', (chunk) => (text += chunk));
  const closed = new Promise((resolve) => socket.once('close', resolve));
  socket.on('error', () => {}); // the server may reset while this side still writes
  socket.write('POST /api/auth/login/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
  const chunk = 'a'.repeat(64 * 1024);
  for (let i = 0; i < 20 && !socket.destroyed && !text; i++) socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
  socket.write('0\r\n\r\n'); // the body's end: the server reads a refused body's rest before it answers (up to 10 s)
  await closed;
  expect(text).toMatch(/^HTTP\/1\.1 413 /);
  expect(text).toMatch(/\r\nconnection: close\r\n/i);
  expect((await s.api('GET', '/api/health/')).status).toBe(200);
});

it('a body over 1 MiB still being sent gets its 413, not a reset: JSON, form and multipart, with and without Content-Length', async () => {
  // The client is a process of its own (runClient says why).
  const client = `
    const url = process.argv[1];
    const big = 'y'.repeat(5 * 1024 * 1024);
    const form = new FormData();
    form.set('username', 'x');
    form.set('password', 'y'.repeat(1024 * 1024 + 10));
    const chunked = () => new ReadableStream({ start(c) { for (let i = 0; i < 48; i++) c.enqueue(new TextEncoder().encode('z'.repeat(64 * 1024))); c.close(); } });
    const bodies = {
      'JSON, 5 MiB': () => ({ headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'x', password: big }) }),
      'form, 5 MiB': () => ({ headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'username=x&password=' + big }),
      'multipart, 1 MiB + 10': () => ({ body: form }),
      'chunked JSON, 3 MiB': () => ({ headers: { 'content-type': 'application/json' }, body: chunked(), duplex: 'half' }),
    };
    const seen = {};
    for (const [what, init] of Object.entries(bodies)) {
      for (let i = 0; i < 4; i++) {
        const answer = await fetch(url, { method: 'POST', ...init() }).then(
          async (res) => res.status + ' ' + (await res.json()).code,
          (err) => String(err.cause?.code ?? err.message),
        );
        (seen[what] ??= []).push(answer);
      }
    }
    console.log(JSON.stringify(seen));
  `;
  const seen = await runClient<Record<string, string[]>>(client, `${s.url}/api/auth/login/`);
  const all413 = Array(4).fill('413 payload_too_large');
  expect(seen).toEqual({ 'JSON, 5 MiB': all413, 'form, 5 MiB': all413, 'multipart, 1 MiB + 10': all413, 'chunked JSON, 3 MiB': all413 });
});

it('form bodies: percent-escapes that are not UTF-8 are a 400 (never stored as U+FFFD); valid ones read as URLSearchParams reads them, a repeated name as a list', async () => {
  const post = (body: string) =>
    fetch(`${s.url}/api/identities/`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-www-form-urlencoded' }, body });
  for (const bad of ['name=%FF', 'name=ok%ED%A0%80', 'na%FFme=x']) {
    const res = await post(bad);
    expect([bad, res.status, ((await res.json()) as { code: string }).code]).toEqual([bad, 400, 'parse_error']);
  }
  const good = await post('name=Caf%C3%A9+%E2%98%95+100%25+%zz&ignored=1');
  expect([good.status, ((await good.json()) as { name: string }).name]).toEqual([201, 'Café ☕ 100% %zz']);
  // A name given twice is a list of its values (Django's QueryDict), not the last one alone.
  const twice = await post('name=First&name=Second');
  expect([twice.status, await twice.json()]).toEqual([400, { name: ['Not a valid string.'] }]);
});

it('form bodies: a number field takes decimal digits (as DRF\'s IntegerField), not every text JavaScript reads as a number', async () => {
  const own = (await s.api('POST', '/api/identities/', { token, body: { name: 'Numbers' } })).body.uuid; // the other tests delete theirs
  const presign = (size: string) => s.api('POST', '/api/email-attachments/presign/', { token, identity: own, form: { filename: 'a.txt', content_type: 'text/plain', size } });
  // Infinity was accepted and stored as null: an attachment nobody could upload.
  for (const bad of ['Infinity', '-Infinity', '1e400', '1e1', '0x10', '0b101', '0o7', '  ', 'NaN', '1_000']) {
    const res = await presign(bad);
    expect([bad, res.status, res.body]).toEqual([bad, 400, { size: ['A valid integer is required.'] }]);
  }
  for (const [text, size] of [['12', 12], [' 12 ', 12], ['+12', 12], ['012', 12], ['12.0', 12]] as const) {
    const res = await presign(text);
    expect([text, res.status, res.body.size]).toEqual([text, 201, size]);
  }
});

it('multipart bodies: a field that is not valid UTF-8 is a 400 too; valid UTF-8 reads as sent', async () => {
  const post = (value: Buffer) => {
    const body = Buffer.concat([Buffer.from('--B\r\nContent-Disposition: form-data; name="name"\r\n\r\n'), value, Buffer.from('\r\n--B--\r\n')]);
    return fetch(`${s.url}/api/identities/`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'multipart/form-data; boundary=B' }, body });
  };
  for (const bad of [[0x61, 0xff, 0xfe, 0x62], [0x42, 0x6f, 0x74, 0xed, 0xa0, 0x80], [0xc0, 0xaf]]) {
    const res = await post(Buffer.from(bad));
    expect([bad, res.status, ((await res.json()) as { code: string }).code]).toEqual([bad, 400, 'parse_error']);
  }
  const good = await post(Buffer.from('Multi ☕ part', 'utf8'));
  expect([good.status, ((await good.json()) as { name: string }).name]).toEqual([201, 'Multi ☕ part']);
});

it('a NUL character in any text field is a 400 naming the field (as DRF\'s CharField), also nested ones', async () => {
  const label = await s.api('POST', '/api/auth/keys/management/', { token, body: { label: 'a\u0000b' } });
  expect([label.status, label.body]).toEqual([400, { label: ['Null characters are not allowed.'] }]);
  const user = await s.api('PATCH', '/api/auth/user/', { token, body: { first_name: 'Ann\u0000', last_name: 'ok' } });
  expect([user.status, user.body]).toEqual([400, { first_name: ['Null characters are not allowed.'] }]);
  const fine = await s.api('POST', '/api/auth/keys/management/', { token, body: { label: 'a b' } });
  expect(fine.status).toBe(201);
});
