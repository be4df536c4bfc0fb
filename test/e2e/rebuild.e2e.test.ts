/**
 * Issue 2 "Rebuild": `npm run rebuild` drops every read model and replays the event log
 * from position 0; the result must equal the read models built live. The scenario touches
 * every context, so every projection is checked (and each must be a pure function of the
 * events: no clock, no randomness, idempotent by position).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { openDatabase } from '../../infra/sqlite/driver.js';
import { spawnService, ROOT } from '../support/spawn.js';

type Json = Record<string, any>;

async function call(base: string, method: string, p: string, o: { token?: string; body?: unknown; identity?: string; form?: Record<string, string>; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...(o.headers ?? {}) };
  if (o.token) headers.authorization = `Bearer ${o.token}`;
  if (o.identity) headers['x-service-identity'] = o.identity;
  let body: string | undefined;
  if (o.form) {
    headers['content-type'] = 'application/x-www-form-urlencoded';
    body = new URLSearchParams(o.form).toString();
  } else if (o.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(o.body);
  }
  const res = await fetch(base + p, { method, headers, body });
  const text = await res.text();
  return { status: res.status, body: (text && res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text) as Json };
}

/** Every read-model table, sorted, except checkpoints (bookkeeping, not a read model). */
function snapshot(file: string): Record<string, unknown[]> {
  const db = openDatabase(file, { readonly: true });
  const out: Record<string, unknown[]> = {};
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' ORDER BY name").all() as { name: string }[];
  for (const { name } of tables) {
    out[name] = (db.prepare(`SELECT id, doc FROM "${name}" ORDER BY id`).all() as { id: string; doc: string }[]).map((r) => ({ id: r.id, doc: JSON.parse(r.doc) }));
  }
  db.close();
  return out;
}

const eventually = async <T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 10_000): Promise<T> => {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > until) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
};

describe('npm run rebuild', () => {
  let dataDir: string;
  beforeAll(() => (dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-rebuild-'))));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('rebuilds every read model from the log to exactly the live state', async () => {
    const env = { DATA_DIR: dataDir, ADMIN_TOKEN: 'admin-token', SMS_WEBHOOK_SECRET: 'hook-secret' };
    const svc = await spawnService(env);
    const b = svc.url;
    try {
      const reg = await call(b, 'POST', '/api/auth/social/', { body: { username: 'rebuilder', email: 'rebuilder@example.com', password1: 'pw', password2: 'pw' } });
      expect(reg.status).toBe(201);
      const token = reg.body.access as string;
      await call(b, 'PATCH', '/api/auth/user/', { token, body: { first_name: 'Re', last_name: 'Builder' } });
      await call(b, 'POST', '/api/auth/token/refresh/', { body: { refresh: reg.body.refresh } });

      const a = await call(b, 'POST', '/api/identities/', { token, body: { name: 'Alpha', email_identifier: 'alpha' } });
      const c = await call(b, 'POST', '/api/identities/', { token, body: { name: 'Charlie' } });
      expect([a.status, c.status]).toEqual([201, 201]);
      await call(b, 'PUT', `/api/identities/${c.body.uuid}/`, { token, body: { name: 'Charlie Two' } });
      const ik = await call(b, 'POST', '/api/auth/keys/identity/', { token, body: { label: 'runtime', identity: a.body.uuid } });
      const mk = await call(b, 'POST', '/api/auth/keys/management/', { token, body: { label: 'ops' } });
      await call(b, 'GET', '/api/health/whoami/', { token: ik.body.key });
      await call(b, 'DELETE', `/api/auth/keys/management/${mk.body.uuid}/`, { token });

      // Mail both ways between two inboxes of the service (internal delivery), an attachment, read marks.
      const file = Buffer.from('attached bytes');
      const presign = await call(b, 'POST', '/api/email-attachments/presign/', { token: ik.body.key, body: { filename: 'a.txt', content_type: 'text/plain', size: file.length } });
      const upload = await fetch(new URL(presign.body.upload_url, b), { method: 'PUT', headers: presign.body.headers, body: file });
      expect(upload.status).toBeLessThan(300);
      const sent = await call(b, 'POST', '/api/email-messages/compose/', { token: ik.body.key, body: { to: c.body.inbox, subject: 'Plan', body: '<p>hello</p>', attachment_uuids: [presign.body.uuid] } });
      expect(sent.status).toBe(201);
      const inbox = await eventually(() => call(b, 'GET', '/api/email-messages/', { token, identity: c.body.uuid }), (r) => (r.body as unknown as unknown[]).length > 0);
      const received = (inbox.body as unknown as Json[])[0];
      await call(b, 'POST', `/api/email-messages/${received.uuid}/reply/`, { token, identity: c.body.uuid, body: { body: '<p>ok</p>' } });
      await call(b, 'PATCH', `/api/email-messages/${received.uuid}/`, { token, identity: c.body.uuid, body: { read: false } });
      await eventually(() => call(b, 'GET', '/api/email-inbox/', { token: ik.body.key }), (r) => (r.body as unknown as Json[])[0]?.message_count >= 2);

      // Vault and encryption metadata.
      await call(b, 'POST', '/api/encryption/', { token, body: { public_key: 'cHVibGlj', verifier: 'dmVyaWZpZXI=' } });
      await call(b, 'POST', '/api/vault/', { token: ik.body.key, body: { key: 'API_TOKEN', value: 'e2e::YQ==' } });
      await call(b, 'POST', '/api/vault/', { token: ik.body.key, body: { key: 'API_TOKEN', value: 'e2e::Yg==' } });
      const pw = await call(b, 'POST', '/api/passwords/', { token: ik.body.key, body: { domain: 'example.com', username: 'e2e::dQ==', password: 'e2e::cA==' } });
      await call(b, 'PUT', `/api/passwords/${pw.body.uuid}/`, { token: ik.body.key, body: { domain: 'example.org', password: 'e2e::cQ==' } });

      // Plans, phones and SMS.
      await call(b, 'PUT', `/api/admin/users/${reg.body.user.pk}/subscription/`, { token: 'admin-token', body: { plan: 'developer', status: 'active' } });
      const p = await call(b, 'POST', '/api/identities/', { token, body: { name: 'Phone', provision_phone: true } });
      const kept = await call(b, 'POST', '/api/identities/', { token, body: { name: 'Kept phone', provision_phone: true } });
      expect([p.status, kept.status]).toEqual([201, 201]);
      const hook = await fetch(`${b}/api/webhooks/sms/`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-webhook-secret': 'hook-secret' },
        body: new URLSearchParams({ From: '+15550001111', To: p.body.phone, Body: 'code 1234', MessageSid: 'SM-rebuild-1' }),
      });
      expect(hook.status).toBe(200);
      const conv = await call(b, 'GET', '/api/sms-inbox/', { token, identity: p.body.uuid });
      await call(b, 'GET', `/api/sms-inbox/${(conv.body as unknown as Json[])[0].conversation_id}/`, { token, identity: p.body.uuid });

      // Device flow: requested, approved, redeemed.
      const dev = await call(b, 'POST', '/api/auth/device/');
      await call(b, 'POST', '/api/auth/device/approve/', { token, body: { user_code: dev.body.user_code } });
      const redeemed = await call(b, 'POST', '/api/auth/device/token/', { body: { device_code: dev.body.device_code } });
      expect(redeemed.status).toBe(200);

      await call(b, 'DELETE', `/api/identities/${p.body.uuid}/`, { token });
      await call(b, 'POST', '/api/auth/logout/', { token });
    } finally {
      svc.child.kill('SIGTERM');
      expect(await svc.exited).toBe(0);
    }

    const file = path.join(dataDir, 'read-models.sqlite');
    const live = snapshot(file);
    expect(Object.keys(live).length).toBeGreaterThanOrEqual(10);
    for (const [table, rows] of Object.entries(live)) expect([table, rows.length > 0]).toEqual([table, true]);

    // Damage the read models: the rebuild must restore them from the log alone.
    const db = openDatabase(file);
    db.exec(`DELETE FROM identities; UPDATE users SET doc = json_set(doc, '$.firstName', 'tampered');`);
    db.close();
    expect(snapshot(file)).not.toEqual(live);

    const child = spawn(process.execPath, ['--import', 'tsx', 'services/rebuild.ts'], { cwd: ROOT, env: { ...process.env, ...env, LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const code = await new Promise((resolve) => child.on('exit', resolve));
    expect([code, out]).toEqual([0, out]);

    expect(snapshot(file)).toEqual(live);
  }, 120_000);
});
