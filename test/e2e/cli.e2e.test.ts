/**
 * `ais` run as a subprocess against a real spawned service (issue 8): device login approved
 * through the API in parallel, identities and keys, whoami, and the conditions
 * not_authenticated, identity_not_found and token_expired provoked for real.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { jest } from '@jest/globals';
import { ROOT, spawnService, type ServiceProcess } from '../support/spawn.js';

jest.setTimeout(120_000);

let svc: ServiceProcess;
let dataDir: string;
let xdg: string;

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-data-'));
  xdg = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-xdg-'));
  // A 3-second access token makes every later command exercise the automatic refresh.
  svc = await spawnService({ DATA_DIR: dataDir, LOG_LEVEL: 'warn', ACCESS_TOKEN_TTL: '3', PASSWORD_HASH_MEMORY_KIB: '19456' });
});

afterAll(async () => {
  svc?.child.kill('SIGTERM');
  await svc?.exited;
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(xdg, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  json: any;
  error: any;
}

function ais(args: string[], opts: { env?: Record<string, string>; onStderr?: (s: string) => void } = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'services/cli/bin.js'), ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: xdg, XDG_CONFIG_HOME: xdg, AIS_BASE_URL: svc.url, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => {
      stderr += d;
      opts.onStderr?.(stderr);
    });
    child.on('exit', (code) => {
      const parse = (s: string) => {
        try {
          return JSON.parse(s);
        } catch {
          return undefined;
        }
      };
      const lastErr = stderr.trim().split('\n').pop() ?? '';
      resolve({ code, stdout, stderr, json: parse(stdout), error: parse(lastErr)?.error });
    });
  });
}

async function api(method: string, p: string, body?: unknown, token?: string) {
  const res = await fetch(svc.url + p, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

const config = () => JSON.parse(readFileSync(path.join(xdg, 'agent-identity/config.json'), 'utf8'));

test('--help works on the root and on every command', async () => {
  const root = await ais(['--help']);
  expect(root.code).toBe(0);
  expect(root.stdout).toMatch(/identities create/);
  const sub = await ais(['keys', 'create', '--help']);
  expect(sub.code).toBe(0);
  expect(sub.stdout).toMatch(/Usage: ais keys create/);
});

test('not_authenticated: no stored credential', async () => {
  const r = await ais(['whoami', '--json']);
  expect(r.code).toBe(10);
  expect(r.error.code).toBe('not_authenticated');
});

describe('a logged-in agent', () => {
  let identity: string;

  test('login: device flow approved through the API while the CLI long-polls', async () => {
    let approved: Promise<unknown> | undefined;
    const run = ais(['login', '--json'], {
      onStderr: (s) => {
        const m = /"user_code":"([A-Z-]+)"/.exec(s);
        if (!m || approved) return;
        approved = (async () => {
          const u = `cli${Date.now() % 1e6}`;
          const reg = await api('POST', '/api/auth/social/', { username: u, email: `${u}@example.com`, password1: 'Secret-pass-1', password2: 'Secret-pass-1' });
          expect(reg.status).toBe(201);
          const ok = await api('POST', '/api/auth/device/approve/', { user_code: m[1] }, reg.body.access);
          expect(ok.status).toBe(200);
        })();
      },
    });
    const r = await run;
    await approved;
    expect(r.stderr).toMatch(/verification_uri/);
    expect(r.code).toBe(0);
    const file = path.join(xdg, 'agent-identity/config.json');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(config().management_key).toMatch(/^svc_mgmt_/);
    expect(config().refresh).toBeTruthy();
  });

  test('whoami (after the access token expired: refreshed transparently)', async () => {
    await new Promise((r) => setTimeout(r, 3100));
    const before = config().refresh;
    const r = await ais(['whoami', '--json']);
    expect(r.code).toBe(0);
    expect(r.json.kind).toBe('jwt');
    expect(config().refresh).not.toBe(before); // the rotated pair was saved
  });

  test('identities create / list / use', async () => {
    const c = await ais(['identities', 'create', 'scout', '--json']);
    expect(c.code).toBe(0);
    identity = c.json.uuid;
    expect(c.json.inbox).toMatch(/@/);
    expect(config().identity).toBe(identity);
    const l = await ais(['identities', 'list']);
    expect(l.code).toBe(0);
    expect(l.stdout).toMatch(/scout/);
    const u = await ais(['identities', 'use', 'scout', '--json']);
    expect(u.json).toEqual({ identity });
  });

  test('keys create / list / revoke', async () => {
    const k = await ais(['keys', 'create', 'runner', '--json']);
    expect(k.code).toBe(0);
    expect(k.json.key).toMatch(/^svc_id_/);
    const list = await ais(['keys', 'list', '--json']);
    expect(list.json.identity.map((x: any) => x.uuid)).toContain(k.json.uuid);
    expect(JSON.stringify(list.json)).not.toContain(k.json.key);
    // The new key works for the agent (AIS_API_KEY) ...
    const who = await ais(['whoami', '--json'], { env: { AIS_API_KEY: k.json.key } });
    expect(who.json.kind).toBe('identity_key');
    const rv = await ais(['keys', 'revoke', k.json.uuid, '--json']);
    expect(rv.code).toBe(0);
    // ... and not once revoked.
    const after = await ais(['whoami', '--json'], { env: { AIS_API_KEY: k.json.key } });
    expect(after.code).not.toBe(0);
  });

  test('vault round trip: encryption_missing, pin setup, secrets and passwords, pin_locked, pin recover', async () => {
    const missing = await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '123456' } });
    expect(missing.error?.code).toBe('encryption_missing');
    expect(missing.code).toBe(15);
    const setup = await ais(['pin', 'setup', '--json'], { env: { AIS_PIN: '123456' } });
    expect(setup.code).toBe(0);
    expect(setup.json.recovery_key).toMatch(/^RK1-/);
    const set = await ais(['secrets', 'set', 'api-token', 's3cr3t-value', '--json'], { env: { AIS_PIN: '123456' } });
    expect(set.code).toBe(0);
    const get = await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '123456' } });
    expect(get.json.value).toBe('s3cr3t-value');
    const list = await ais(['secrets', 'list', '--json']);
    expect(list.stdout).not.toContain('s3cr3t-value');
    const add = await ais(['passwords', 'add', 'github.com', '--username', 'bob', '--password', 'hunter2', '--json'], { env: { AIS_PIN: '123456' } });
    expect(add.code).toBe(0);
    const pw = await ais(['passwords', 'get', 'github.com', '--json'], { env: { AIS_PIN: '123456' } });
    expect(pw.json).toMatchObject({ domain: 'github.com', username: 'bob', password: 'hunter2' });
    // The server holds ciphertext only.
    const raw = await api('GET', `/api/passwords/${pw.json.uuid}/?identity=${identity}`, undefined, config().management_key);
    expect(raw.body.password).toMatch(/^e2e::/);
    const wrong1 = await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '000000' } });
    expect(wrong1.error.code).toBe('wrong_pin');
    await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '000000' } });
    const locked = await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '000000' } });
    expect(locked.code).toBe(14);
    expect(locked.error.code).toBe('pin_locked');
    // Locked even with the right PIN, until recovery.
    expect((await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '123456' } })).error.code).toBe('pin_locked');
    const rec = await ais(['pin', 'recover', '--json'], { env: { AIS_RECOVERY_KEY: setup.json.recovery_key, AIS_NEW_PIN: '654321' } });
    expect(rec.code).toBe(0);
    const again = await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '654321' } });
    expect(again.json.value).toBe('s3cr3t-value');
  });

  test('identity_not_found: the configured identity was deleted', async () => {
    const d = await api('DELETE', `/api/identities/${identity}/`, undefined, config().management_key);
    expect(d.status).toBe(204);
    const r = await ais(['sms', 'list', '--json']);
    expect(r.code).toBe(12);
    expect(r.error.code).toBe('identity_not_found');
  });

  test('token_expired: the refresh token was invalidated elsewhere (logout)', async () => {
    const fresh = await api('POST', '/api/auth/token/refresh/', { refresh: config().refresh });
    expect(fresh.status).toBe(200);
    // The CLI still holds the pre-rotation refresh token: reusing it is refused too.
    expect((await api('POST', '/api/auth/logout/', undefined, fresh.body.access)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 3100)); // let the stored access token expire
    const r = await ais(['whoami', '--json']);
    expect(r.code).toBe(11);
    expect(r.error.code).toBe('token_expired');
    expect(r.error.message).toMatch(/log ?in/i);
  });
});
