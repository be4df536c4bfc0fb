/**
 * Deleting an identity records the revocation of its keys in the log (ApiKeyRevoked, reason
 * identity_deleted), once; the reactor that does it resumes from its checkpoint after a
 * restart instead of re-reading every deletion in the log.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig } from '../../infra/config.js';
import { startRuntime, type Runtime } from '../../infra/runtime.js';
import { eventually } from '../support/eventually.js';

const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-keyrev-'));
const config = loadConfig({ DATA_DIR: dataDir, PORT: '0', SMTP_PORT: '0', LOG_LEVEL: 'silent' });
const start = () => startRuntime(config, { logger: pino({ level: 'silent' }) });
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

async function call(rt: Runtime, method: string, p: string, token?: string, body?: unknown) {
  const res = await fetch(rt.url + p, { method, headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: (await res.json().catch(() => null)) as any };
}

const revocations = async (rt: Runtime, keyId: string) => (await rt.events.readStream(`apikey-${keyId}`)).filter((e) => e.type === 'ApiKeyRevoked');

it('records ApiKeyRevoked once for each key of a deleted identity, and resumes from its checkpoint', async () => {
  let rt = await start();
  const reg = await call(rt, 'POST', '/api/auth/social/', undefined, { username: 'revoker', email: 'revoker@example.com', password1: 'pw', password2: 'pw' });
  const token = reg.body.access;
  const identity = (await call(rt, 'POST', '/api/identities/', token, { name: 'Doomed' })).body.uuid;
  const key = (await call(rt, 'POST', '/api/auth/keys/identity/', token, { label: 'k', identity_uuid: identity })).body.uuid;
  expect((await call(rt, 'DELETE', `/api/identities/${identity}/`, token)).status).toBe(204);

  const [revoked] = await eventually(async () => (await revocations(rt, key)).length > 0 && revocations(rt, key));
  expect(revoked.data).toMatchObject({ keyId: key, reason: 'identity_deleted' });
  // The reactor follows revocations too (a revoked key's device sessions end): its checkpoint
  // passes the deletion and reaches the revocation it recorded.
  const [deleted] = (await rt.events.readStream(`identity-${identity}`)).filter((e) => e.type === 'IdentityDeleted');
  expect(BigInt(revoked.position)).toBeGreaterThan(BigInt(deleted.position));
  await eventually(async () => (await rt.reads.getCheckpoint('reactor:key-revocation')) === revoked.position);
  await rt.close();

  rt = await start();
  try {
    await new Promise((r) => setTimeout(r, 200));
    expect(await revocations(rt, key)).toHaveLength(1);
    expect(await rt.reads.getCheckpoint('reactor:key-revocation')).toBe(revoked.position);
  } finally {
    await rt.close();
  }
}, 30_000);
