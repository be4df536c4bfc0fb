/** DECISIONS "Wire conventions": the OpenAPI 3.1 document, version 1.0.0, lists every endpoint the service has. */
import http from 'node:http';
import { gunzipSync } from 'node:zlib';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { startTestServer, type ApiResponse, type TestServer } from '../support/server.js';

let s: TestServer;
beforeAll(async () => (s = await startTestServer({ ADMIN_TOKEN: 'admin-secret', SMS_WEBHOOK_SECRET: 'hook' })));
afterAll(async () => s?.close());

describe('GET /api/schema/', () => {
  it('is OpenAPI 3.1 with info.version 1.0.0, served without credentials', async () => {
    const res = await s.api('GET', '/api/schema/');
    expect(res.status).toBe(200);
    expect(res.body.openapi).toBe('3.1.0');
    expect(res.body.info.version).toBe('1.0.0');
  });

  it('is one document for every caller: gzipped when the client takes it, revalidated by its ETag (304)', async () => {
    const get = (headers: Record<string, string>) =>
      new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
        http.get(`${s.url}/api/schema/`, { headers }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        }).on('error', reject);
      });
    const plain = await get({});
    expect([plain.status, plain.headers['content-encoding'], plain.headers['content-type']]).toEqual([200, undefined, 'application/json; charset=utf-8']);
    expect(JSON.parse(plain.body.toString('utf8')).openapi).toBe('3.1.0');
    const zipped = await get({ 'accept-encoding': 'gzip, deflate' });
    expect([zipped.headers['content-encoding'], zipped.headers.vary]).toEqual(['gzip', 'Accept-Encoding']);
    expect(gunzipSync(zipped.body).equals(plain.body)).toBe(true);
    expect(zipped.body.length).toBeLessThan(plain.body.length / 4);
    expect(zipped.headers.etag).toBe(plain.headers.etag);
    expect(plain.headers['cache-control']).toBe('no-cache');
    const again = await get({ 'if-none-match': plain.headers.etag! });
    expect([again.status, again.body.length]).toEqual([304, 0]);
    expect((await get({ 'if-none-match': 'W/"other"' })).status).toBe(200);
  });

  it('documents every /api/ and /.well-known/ route the gateway serves', async () => {
    const doc = (await s.api('GET', '/api/schema/')).body as { paths: Record<string, Record<string, unknown>> };
    const missing = s.runtime.routes
      .filter((r) => r.path.startsWith('/api/') || r.path.startsWith('/.well-known/'))
      .map((r) => ({ method: r.method, path: r.path.replace(/:(\w+)/g, '{$1}') }))
      .filter((r) => !doc.paths[r.path]?.[r.method])
      .map((r) => `${r.method.toUpperCase()} ${r.path}`);
    expect(missing).toEqual([]);
  });

  it('every documented $ref resolves to a component', async () => {
    const doc = (await s.api('GET', '/api/schema/')).body;
    const refs = JSON.stringify(doc).match(/"\$ref":"#\/components\/schemas\/(\w+)"/g) ?? [];
    const names = refs.map((r: string) => r.replace(/.*\//, '').replace(/"$/, ''));
    expect(names.filter((n: string) => !doc.components.schemas[n])).toEqual([]);
  });

  it('operations that refuse identity keys do not list identityKeyAuth, and do refuse one (403)', async () => {
    const doc = (await s.api('GET', '/api/schema/')).body as { paths: Record<string, Record<string, { security: Record<string, unknown>[] }>> };
    const owner = await s.signUp();
    const identity = (await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Fenced' } })).body.uuid;
    const key = (await s.api('POST', '/api/auth/keys/identity/', { token: owner.access, body: { label: 'sweep', identity_uuid: identity } })).body.key;
    const refusing = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.entries(ops)
        .filter(([, op]) => op.security.length > 0 && op.security.every((scheme) => !('identityKeyAuth' in scheme) && !('adminToken' in scheme)) && !op.security.every((scheme) => 'jwtAuth' in scheme))
        .map(([method]) => ({ method: method.toUpperCase(), path: path.replace(/\{\w+\}/g, identity) })),
    );
    expect(refusing.map((r) => `${r.method} ${r.path.replace(identity, '{uuid}')}`)).toEqual(
      expect.arrayContaining(['PUT /api/auth/user/', 'PATCH /api/auth/user/', 'POST /api/auth/password/change/', 'POST /api/identities/', 'POST /api/encryption/']),
    );
    for (const r of refusing) {
      const res = await s.api(r.method, r.path, { token: key, ...(['GET', 'DELETE'].includes(r.method) ? {} : { body: {} }) });
      expect([r.method, r.path, res.status]).toEqual([r.method, r.path, 403]);
    }
    const poll = (doc.paths['/api/auth/device/token/'] as unknown as Record<string, { responses: Record<string, unknown> }>).post.responses['400'];
    expect(JSON.stringify(poll)).toContain('DeviceDeviceTokenError');
  });

  it('real answers, successes and errors, match what the document declares for their operation and status', async () => {
    const doc = (await s.api('GET', '/api/schema/')).body as { paths: Record<string, Record<string, { responses: Record<string, { headers?: Record<string, unknown>; content?: Record<string, { schema: object }> }> }>>; components: object };
    const ajv = new (Ajv2020 as unknown as typeof Ajv2020.default)({ strict: false, allErrors: true });
    (addFormats as unknown as typeof addFormats.default)(ajv);
    // Fixed paths first (compose before {id}), as the router matches them.
    const params = (t: string) => (t.match(/\{/g) ?? []).length;
    const templates = Object.keys(doc.paths)
      .sort((x, y) => params(x) - params(y))
      .map((t) => ({ t, re: new RegExp(`^${t.replace(/\{\w+\}/g, '[^/]+')}$`) }));
    const problems: string[] = [];
    let checked = 0;
    const check = (method: string, path: string, res: ApiResponse) => {
      const template = templates.find((x) => x.re.test(path.split('?')[0]))?.t;
      const op = template ? doc.paths[template][method.toLowerCase()] : undefined;
      const declared = op?.responses[String(res.status)];
      if (!declared) return void problems.push(`${method} ${path}: ${res.status} not declared`);
      // A declared Location or Retry-After is sent (Link only when more items remain).
      for (const header of Object.keys(declared.headers ?? {}).filter((h) => h !== 'Link')) {
        if (!res.headers.get(header)) problems.push(`${method} ${path} ${res.status}: no ${header} header`);
      }
      const schema = declared.content?.['application/json']?.schema;
      if (!schema || !(res.headers.get('content-type') ?? '').includes('json')) return;
      const validate = ajv.compile({ ...schema, components: doc.components });
      checked += 1;
      if (!validate(res.body)) problems.push(`${method} ${path} ${res.status}: ${ajv.errorsText(validate.errors)}`);
    };
    const call = async (method: string, path: string, opts: Parameters<TestServer['api']>[2] = {}) => {
      const res = await s.api(method, path, opts);
      check(method, path, res);
      return res;
    };
    const raw = async (method: string, path: string, token: string, body: string, type: string) => {
      const res = await fetch(s.url + path, { method, headers: { authorization: `Bearer ${token}`, 'content-type': type }, body });
      const text = await res.text();
      const parsed = { status: res.status, headers: res.headers, text, body: text ? JSON.parse(text) : null } as ApiResponse;
      check(method, path, parsed);
    };

    const owner = await s.signUp();
    const token = owner.access;
    await s.api('PUT', `/api/admin/users/${owner.user.pk}/subscription/`, { token: 'admin-secret', body: { plan: 'developer', status: 'active' } });
    const a = (await call('POST', '/api/identities/', { token, body: { name: 'Doc A', provision_phone: true } })).body;
    const b = (await call('POST', '/api/identities/', { token, body: { name: 'Doc B' } })).body;
    await call('POST', '/api/auth/keys/identity/', { token, body: { label: 'doc', identity_uuid: a.uuid } });
    await call('POST', '/api/auth/keys/management/', { token, body: { label: 'doc' } });
    const e2e = 'e2e::AAAA';
    await call('POST', '/api/passwords/', { token, identity: a.uuid, body: { domain: 'example.com', username: e2e, password: e2e, notes: e2e } });
    await call('POST', '/api/vault/', { token, identity: a.uuid, body: { key: 'k', value: e2e } });
    await call('POST', '/api/vault/', { token, identity: a.uuid, body: { key: 'k', value: e2e } }); // the upsert's 200
    const sent = (await call('POST', '/api/email-messages/compose/', { token, identity: a.uuid, body: { to: b.inbox, subject: 'doc', body: '<p>hi</p>' } })).body;
    await call('POST', '/api/email-attachments/presign/', { token, identity: a.uuid, body: { filename: 'a.txt', content_type: 'text/plain', size: 3 } });
    await s.api('POST', '/api/webhooks/sms/', { form: { From: '+15550007777', To: a.phone, Body: 'hello', MessageSid: 'SMdoc1' }, headers: { 'x-webhook-secret': 'hook' } });
    for (const path of ['/api/identities/', '/api/auth/keys/identity/', '/api/auth/keys/management/', '/api/auth/user/', '/api/master/', '/api/subscription/', '/api/encryption/', '/api/health/whoami/', '/api/passwords/generate_password/']) {
      await call('GET', path, { token });
    }
    for (const path of ['/api/email-inbox/', '/api/email-messages/', '/api/sms-inbox/', '/api/messages/', '/api/phone/', '/api/passwords/', '/api/vault/', '/api/email-inbox/?limit=1', `/api/email-messages/${sent.uuid}/`, `/api/email-inbox/${sent.thread_id}/`]) {
      await call('GET', path, { token, identity: a.uuid });
    }
    // Errors: no identity, unknown identity, bad paging, bad JSON, wrong media type, too large, a validation error.
    await call('GET', '/api/passwords/', { token });
    await call('GET', '/api/vault/', { token, identity: '0190a000-0000-7000-8000-000000000000' });
    await call('GET', '/api/identities/?limit=abc', { token });
    await call('GET', '/api/phone/?cursor=nope', { token, identity: a.uuid });
    await call('POST', '/api/identities/', { token, body: {} });
    await raw('POST', '/api/vault/', token, '{bad', 'application/json');
    await raw('POST', '/api/identities/', token, '<x/>', 'application/xml');
    await raw('POST', '/api/identities/', token, JSON.stringify({ name: 'x'.repeat(1_100_000) }), 'application/json');
    // Credentials: an identity header naming no identity (404) or another account's (403) on an
    // account endpoint, an identity key on an account write (403), no credential (401).
    const stranger = (await s.api('POST', '/api/identities/', { token: (await s.signUp()).access, body: { name: 'Elsewhere' } })).body;
    await call('GET', '/api/auth/user/', { token, identity: '0190a000-0000-7000-8000-000000000000' });
    await call('GET', '/api/master/', { token, identity: stranger.uuid });
    const identityKey = (await s.api('POST', '/api/auth/keys/identity/', { token, body: { label: 'w', identity_uuid: b.uuid } })).body.key;
    await call('PATCH', '/api/auth/user/', { token: identityKey, body: { first_name: 'x' } });
    await call('GET', '/api/subscription/');
    // A plan refusal (402 with plan_required), an identity named twice (400), a query filter.
    await call('POST', '/api/identities/', { token: (await s.signUp()).access, body: { name: 'Wants a phone', provision_phone: true } });
    await call('GET', `/api/auth/user/?identity=${a.uuid}&identity=${a.uuid}`, { token });
    await call('GET', `/api/email-messages/?thread_id=${sent.thread_id}`, { token, identity: a.uuid });
    expect(problems).toEqual([]);
    expect(checked).toBeGreaterThan(25);
  });
});
