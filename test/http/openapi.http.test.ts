/** DECISIONS "Wire conventions": the OpenAPI 3.1 document, version 1.0.0, lists every endpoint the service has. */
import { startTestServer, type TestServer } from '../support/server.js';

let s: TestServer;
beforeAll(async () => (s = await startTestServer({ ADMIN_TOKEN: 'admin-secret' })));
afterAll(async () => s?.close());

describe('GET /api/schema/', () => {
  it('is OpenAPI 3.1 with info.version 1.0.0, served without credentials', async () => {
    const res = await s.api('GET', '/api/schema/');
    expect(res.status).toBe(200);
    expect(res.body.openapi).toBe('3.1.0');
    expect(res.body.info.version).toBe('1.0.0');
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
});
