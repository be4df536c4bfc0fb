/**
 * A clock set back (NTP stepping a fast clock, a VM restored from a snapshot) must not
 * reorder lists: what was written later is listed as later. The service runs under
 * libfaketime, whose offset this test moves back a day between writes.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnService, type ServiceProcess } from '../support/spawn.js';

const LIBFAKETIME = [
  process.env.LIBFAKETIME_PATH,
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/faketime/libfaketime.so.1',
].find((p): p is string => !!p && existsSync(p));

type Json = any;

let dir: string;
let clockFile: string;
let service: ServiceProcess;
let token: string;

async function api(method: string, p: string, o: { body?: unknown; identity?: string } = {}): Promise<{ status: number; body: Json }> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (o.identity) headers['x-service-identity'] = o.identity;
  if (o.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(service.url + p, { method, headers, body: o.body === undefined ? undefined : JSON.stringify(o.body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

const items = (body: Json): Json[] => (Array.isArray(body) ? body : body.results);

/** Moves the service's wall clock (libfaketime re-reads the file: FAKETIME_NO_CACHE). */
function setClock(offset: string): void {
  writeFileSync(clockFile, `${offset}\n`);
}

beforeAll(async () => {
  if (!LIBFAKETIME) throw new Error('libfaketime not found: apt-get install -y libfaketime (or set LIBFAKETIME_PATH)');
  dir = mkdtempSync(path.join(os.tmpdir(), 'clock-'));
  clockFile = path.join(dir, 'faketime');
  setClock('+0');
  service = await spawnService({
    DATA_DIR: path.join(dir, 'data'),
    PASSWORD_HASH_MEMORY_KIB: '1024',
    LD_PRELOAD: LIBFAKETIME,
    FAKETIME_TIMESTAMP_FILE: clockFile,
    FAKETIME_NO_CACHE: '1',
    FAKETIME_DONT_FAKE_MONOTONIC: '1', // timers and durations keep running forward
  });
  const signup = await fetch(`${service.url}/api/auth/social/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'clock', email: 'clock@example.com', password1: 'correct horse battery', password2: 'correct horse battery' }),
  });
  expect(signup.status).toBe(201);
  token = ((await signup.json()) as Json).access;
}, 60_000);

afterAll(async () => {
  setClock('+0');
  if (service) {
    service.child.kill('SIGTERM');
    await service.exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

test('after the clock went back a day, lists still show later writes as later: identities, keys, vault secrets, mail messages and threads', async () => {
  // given: one of each, written on the right clock
  const first = await api('POST', '/api/identities/', { body: { name: 'first' } });
  expect(first.status).toBe(201);
  const id = first.body.uuid ?? first.body.id;
  const key1 = await api('POST', '/api/auth/keys/identity/', { body: { label: 'before', identity_uuid: id } });
  expect(key1.status).toBe(201);
  const secret1 = await api('POST', '/api/vault/', { identity: id, body: { key: 'BEFORE', value: 'e2e::YmVmb3Jl' } });
  expect(secret1.status).toBe(201);
  const mail1 = await api('POST', '/api/email-messages/compose/', { identity: id, body: { to: 'someone@example.org', subject: 'Before', body: 'sent on time' } });
  expect(mail1.status).toBe(201);

  // when: the clock is set back a day, and the same again
  setClock('-1d');
  const second = await api('POST', '/api/identities/', { body: { name: 'second' } });
  expect(second.status).toBe(201);
  const key2 = await api('POST', '/api/auth/keys/identity/', { body: { label: 'after', identity_uuid: id } });
  expect(key2.status).toBe(201);
  const secret2 = await api('POST', '/api/vault/', { identity: id, body: { key: 'AFTER', value: 'e2e::YWZ0ZXI=' } });
  expect(secret2.status).toBe(201);
  const mail2 = await api('POST', '/api/email-messages/compose/', { identity: id, body: { to: 'someone@example.org', subject: 'After', body: 'sent a day "earlier"' } });
  expect(mail2.status).toBe(201);
  // (the clock really went back: the later mail carries the earlier time)
  expect(Date.parse(mail2.body.created_dt ?? mail2.body.created_at)).toBeLessThan(Date.parse(mail1.body.created_dt ?? mail1.body.created_at));

  // then: oldest-first lists end with the later write, newest-first lists start with it
  expect(items((await api('GET', '/api/identities/')).body).map((i: Json) => i.name)).toEqual(['first', 'second']);
  expect(items((await api('GET', '/api/auth/keys/identity/')).body).map((k: Json) => k.label)).toEqual(['before', 'after']);
  expect(items((await api('GET', '/api/vault/', { identity: id })).body).map((s: Json) => s.key)).toEqual(['BEFORE', 'AFTER']);
  expect(items((await api('GET', '/api/email-messages/', { identity: id })).body).map((m: Json) => m.subject)).toEqual(['After', 'Before']);
  expect(items((await api('GET', '/api/email-inbox/', { identity: id })).body).map((t: Json) => t.subject)).toEqual(['After', 'Before']);
  // and paging keeps that order
  const page1 = await fetch(`${service.url}/api/email-messages/?limit=1`, { headers: { authorization: `Bearer ${token}`, 'x-service-identity': id } });
  expect(items(await page1.json()).map((m: Json) => m.subject)).toEqual(['After']);
  setClock('+0');
}, 60_000);
