/**
 * `ais` run as a subprocess against a real spawned service (issue 8): device login approved
 * through the API in parallel (with the QR code), identities and keys, whoami, the vault
 * round trip (setup, secrets, passwords, pin change, pin_locked, recover), and every
 * client-reported condition provoked for real: not_authenticated, encryption_missing,
 * pin_locked, identity_not_found, token_expired, and device_code_expired (against a second
 * service whose device codes live one second). `--help` is checked on every command.
 * Mail and SMS commands: cli-messaging.e2e.test.ts.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { jest } from '@jest/globals';
import { runCli, runCliOnTerminal, type CliRun } from '../support/cli.js';
import { forTerminal, main, progressReporter } from '../../services/cli/main.js';
import { requestTimeoutMs } from '../../services/cli/context.js';
import { parseKdf, setupEncryption } from '../../services/sdk/crypto.js';
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

/** The vault's Argon2id at the OWASP floor instead of 64 MiB: the same code paths, faster. */
const FAST_KDF = 'argon2id:m=19456,t=2,p=1';

function ais(args: string[], opts: { env?: Record<string, string>; onStderr?: (s: string) => void; input?: string | Buffer; url?: string; readAfterMs?: number } = {}): Promise<CliRun> {
  return runCli(args, { url: opts.url ?? svc.url, home: xdg, env: opts.env, onStderr: opts.onStderr, input: opts.input, readAfterMs: opts.readAfterMs });
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
  // Every command the root help lists (in-process: the same `main` bin.js runs).
  const names = [...root.stdout.matchAll(/^ {2}([a-z-]+(?: [a-z-]+)?) {2,}/gm)].map((m) => m[1]);
  expect(names).toEqual(expect.arrayContaining(['login', 'send', 'reply-all', 'inbox watch', 'sms watch', 'phone', 'pin change', 'secrets rm']));
  for (const name of names) {
    for (const flag of ['--help', '-h']) {
      const out: string[] = [];
      const code = await main([...name.split(' '), flag], {}, { out: (s) => out.push(s), err: (s) => out.push(s) });
      expect([name, flag, code]).toEqual([name, flag, 0]);
      expect(out.join('\n')).toMatch(new RegExp(`^Usage: ais ${name}\\b`));
    }
  }
  const viaHelp: string[] = [];
  expect(await main(['help', 'pin', 'recover'], {}, { out: (s) => viaHelp.push(s), err: () => undefined })).toBe(0);
  // Every prompt names its non-interactive variable.
  expect(viaHelp.join('\n')).toMatch(/AIS_RECOVERY_KEY[\s\S]*AIS_NEW_PIN/);
  const groups: string[] = [];
  expect(await main(['inbox', '--help'], {}, { out: (s) => groups.push(s), err: () => undefined })).toBe(0);
  expect(groups.join('\n')).toMatch(/inbox watch/);
});

test('the root help names every environment variable the CLI reads', async () => {
  const dir = path.join(ROOT, 'services/cli');
  const sources = readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => /\.(ts|js)$/.test(f));
  const read = new Set(sources.flatMap((f) => [...readFileSync(path.join(dir, f), 'utf8').matchAll(/\bAIS_[A-Z_]+[A-Z]\b/g)].map((m) => m[0])));
  expect([...read]).toEqual(expect.arrayContaining(['AIS_SECRET_VALUE', 'AIS_ENTRY_PASSWORD', 'AIS_DEVICE_SECRET', 'AIS_API_KEY']));
  const root = await ais(['--help']);
  expect([...read].filter((name) => !root.stdout.includes(name))).toEqual([]);
  // Nor do the CLI's tests set one it does not read: a dead setting reads as if it took effect.
  const tests = readdirSync(path.join(ROOT, 'test/e2e')).filter((f) => /^cli.*\.e2e\.test\.ts$/.test(f));
  const set = new Set(tests.flatMap((f) => [...readFileSync(path.join(ROOT, 'test/e2e', f), 'utf8').matchAll(/\bAIS_[A-Z_]+[A-Z]\b/g)].map((m) => m[0])));
  expect([...set].filter((name) => !read.has(name))).toEqual([]);
});

test('output larger than a pipe holds reaches a slow reader whole: the CLI exits only once it is written', () => {
  // A real pipe (64 KiB) to a reader that starts late; Node's own child pipes are sockets with larger buffers.
  const script = `import { exitWhenWritten } from ${JSON.stringify(path.join(ROOT, 'services/cli/main.ts'))}; process.stdout.write('x'.repeat(300000)); await exitWhenWritten(0);`;
  const run = spawnSync('sh', ['-c', `"${process.execPath}" --import tsx --input-type=module -e "$SCRIPT" | (sleep 1; wc -c)`], { cwd: ROOT, env: { ...process.env, SCRIPT: script }, encoding: 'utf8' });
  expect(run.stdout.trim()).toBe('300000');
});

test('logout with the service out of reach says the session was not ended there, and forgets the tokens here', async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-offline-'));
  mkdirSync(path.join(home, 'agent-identity'), { recursive: true, mode: 0o755 }); // made looser by hand: tightened at the next write
  chmodSync(path.join(home, 'agent-identity'), 0o755);
  const file = path.join(home, 'agent-identity/config.json');
  // A login of that service (one stored without base_url is the default service's: it would be ended there).
  writeFileSync(file, JSON.stringify({ base_url: 'http://127.0.0.1:9', access: 'a.b.c', refresh: 'r.s.t', identity: 'keep-me' }), { mode: 0o600 });
  const run = await runCli(['logout', '--json'], { url: 'http://127.0.0.1:9', home });
  expect([run.code, run.json]).toEqual([0, { logged_out: true, session_ended: false }]);
  expect(run.stderr).toMatch(/could not be reached/);
  expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ base_url: 'http://127.0.0.1:9', identity: 'keep-me' });
  expect(statSync(path.join(home, 'agent-identity')).mode & 0o777).toBe(0o700);
  // A service answering 5xx did not end the session either.
  const failing = http.createServer((_req, res) => res.writeHead(500, { 'content-type': 'application/json' }).end('{"detail":"boom","code":"server_error"}'));
  await new Promise<void>((resolve) => failing.listen(0, '127.0.0.1', resolve));
  const failingUrl = `http://127.0.0.1:${(failing.address() as { port: number }).port}`;
  writeFileSync(file, JSON.stringify({ base_url: failingUrl, access: 'a.b.c', refresh: 'r.s.t' }), { mode: 0o600 });
  const broken = await runCli(['logout', '--json'], { url: failingUrl, home });
  failing.close();
  expect([broken.code, broken.json?.session_ended]).toEqual([0, false]);
  rmSync(home, { recursive: true, force: true });
});

test('human output shows control characters and bidi overrides from senders as escapes; line breaks and tabs stay', () => {
  const subject = 'Invoice\u001b[2J\u001b]0;pwned\u0007 due\tnow\nline 2\r\nline 3 \u202eevil\r';
  expect(forTerminal(subject)).toBe('Invoice\\u001b[2J\\u001b]0;pwned\\u0007 due\tnow\nline 2\r\nline 3 \\u202eevil\\u000d');
});

test('upload progress: redrawn bytes sent / total on a terminal, one final line otherwise', () => {
  const tty: string[] = [];
  const onTty = progressReporter({ json: false, errTTY: true, errWrite: (s) => tty.push(s), err: (s) => tty.push(s + '\n') });
  onTty('a.bin', 65536, 200000);
  onTty('a.bin', 131072, 200000); // within 100 ms: not redrawn
  onTty('a.bin', 200000, 200000);
  expect(tty[0]).toBe('\r\x1b[Kuploading a.bin: 64.0 KiB / 195.3 KiB (32%)');
  expect(tty.slice(1)).toEqual(['\r\x1b[Kuploading a.bin: 195.3 KiB / 195.3 KiB (100%)', '\r\x1b[Kuploaded a.bin (195.3 KiB)\n']);
  const plain: string[] = [];
  const onPlain = progressReporter({ json: false, errTTY: false, errWrite: (s) => plain.push(s), err: (s) => plain.push(s) });
  onPlain('a.bin', 65536, 200000);
  onPlain('a.bin', 200000, 200000);
  expect(plain).toEqual(['uploaded a.bin (200000 bytes)']);
});

test('errors say what is wrong: an unknown subcommand names its group, a key of another kind, a refused connection', async () => {
  const sub = await ais(['identities', 'bogus']);
  expect([sub.code, sub.stderr.trim()]).toEqual([2, 'error: Unknown command: identities bogus. Run `ais identities --help`.']);
  const notAKey = await ais(['whoami'], { env: { AIS_API_KEY: 'sk-live-123' } });
  expect([notAKey.code, notAKey.stderr]).toEqual([2, expect.stringMatching(/AIS_API_KEY is not a key of this service: keys start with svc_mgmt_ or svc_id_/)]);
  const idle = http.createServer();
  await new Promise<void>((resolve) => idle.listen(0, '127.0.0.1', resolve));
  const port = (idle.address() as { port: number }).port;
  await new Promise((resolve) => idle.close(resolve)); // a port nobody listens on
  const refused = await ais(['whoami'], { url: `http://127.0.0.1:${port}`, env: { AIS_API_KEY: 'svc_mgmt_x' } });
  expect(refused.stderr).toContain(`Cannot reach http://127.0.0.1:${port}: connection refused (is the service running?)`);
  // A service address that is no http(s) URL is a bad argument (it was tried, and failed as network_error, 21).
  const notAUrl = await ais(['whoami', '--json'], { url: 'notaurl', env: { AIS_API_KEY: 'svc_mgmt_x' } });
  expect([notAUrl.code, notAUrl.error?.message]).toEqual([2, expect.stringMatching(/^AIS_BASE_URL is not a service address: "notaurl"/)]);
  const ftp = await ais(['whoami', '--base-url', 'ftp://example.com', '--json'], { env: { AIS_API_KEY: 'svc_mgmt_x' } });
  expect([ftp.code, ftp.error?.message]).toEqual([2, expect.stringMatching(/^--base-url is not a service address/)]);
});

test('what cannot work is refused before anything is sent (exit 2), never quoting a credential: a key with a line break, a base URL with a password, query or fragment, an AIS_TIMEOUT no timer holds, a word too many, a config that holds no JSON object', async () => {
  const pasted = await ais(['whoami', '--json'], { env: { AIS_API_KEY: 'svc_mgmt_ABCDEF0123456789\nGHIJ' } });
  expect([pasted.code, pasted.error?.code]).toEqual([2, 'usage']); // network_error (21), the key in its message
  expect(pasted.stderr + pasted.stdout).not.toContain('ABCDEF0123456789');
  const withPassword = await ais(['whoami', '--json'], { url: 'http://user:s3cretpass@127.0.0.1:1', env: { AIS_API_KEY: 'svc_mgmt_x' } });
  expect([withPassword.code, withPassword.error?.code]).toEqual([2, 'usage']);
  expect(withPassword.stderr + withPassword.stdout).not.toContain('s3cretpass');
  for (const url of [`${svc.url}/?x=1`, `${svc.url}#frag`]) {
    const r = await ais(['whoami', '--json'], { url, env: { AIS_API_KEY: 'svc_mgmt_x' } });
    expect([url, r.code, r.error?.code]).toEqual([url, 2, 'usage']); // "Cannot read properties of undefined" before
  }
  const timeout = await ais(['whoami', '--json'], { env: { AIS_API_KEY: 'svc_mgmt_x', AIS_TIMEOUT: '2147484' } });
  expect([timeout.code, timeout.error?.message]).toEqual([2, expect.stringMatching(/^AIS_TIMEOUT takes at most 2147483 seconds/)]); // Node made it 1 ms
  const extra = await ais(['identities', 'create', 'my', 'agent']);
  expect([extra.code, extra.stderr.trim()]).toEqual([2, 'error: Unexpected argument: "agent" (quote a value that has spaces).\nUsage: ais identities create <name> [--email-identifier LOCAL] [--phone] [--use]']); // created "my"
  // Two ways of saying one thing, or an empty value: which was meant is not guessed (the file was sent; the device login started).
  // A file without end (/dev/zero) was read forever.
  const endless = [['send', '--to', 'x@example.com', '--subject', 's', '--body', 'b', '--attach', '/dev/zero'], ['send', '--to', 'x@example.com', '--subject', 's', '--body-file', '/dev/zero']];
  for (const args of [['send', '--to', 'x@example.com', '--subject', 's', '--body', 'b', '--body-file', '/etc/hostname'], ['login', '--username=', '--no-wait'], ['login', '--username', 'u', '--email', 'e@example.com'], ...endless]) {
    const r = await ais([...args, '--json'], { env: { AIS_API_KEY: 'svc_mgmt_x', AIS_IDENTITY: '01900000-0000-7000-8000-000000000000' } });
    expect([args.join(' '), r.code, r.error?.code]).toEqual([args.join(' '), 2, 'usage']);
  }
  const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-broken-'));
  try {
    mkdirSync(path.join(home, 'agent-identity'));
    for (const [content, why] of [['null', 'it holds no JSON object'], ['{"identity": {"a": 1}}', 'its identity is not text'], ['{"base_url": "http://x', 'Unterminated string']]) {
      writeFileSync(path.join(home, 'agent-identity/config.json'), content);
      const r = await runCli(['whoami', '--json'], { url: svc.url, home });
      expect([content, r.code, r.error?.message]).toEqual([content, 2, expect.stringContaining(why)]);
      expect(r.error?.message).toContain('Repair it, or remove it and log in again');
    }
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

test('a service that accepts the connection but never answers: network_error (exit 21) once AIS_TIMEOUT has passed, not minutes per attempt', async () => {
  const sockets = new Set<net.Socket>();
  const silent = net.createServer((socket) => sockets.add(socket)); // reads nothing, answers nothing
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
  try {
    const started = Date.now();
    const r = await ais(['whoami', '--json'], { url, env: { AIS_API_KEY: 'svc_mgmt_x', AIS_TIMEOUT: '0.5' } });
    expect([r.code, r.error?.code]).toEqual([21, 'network_error']);
    expect(r.error.message).toBe(`Cannot reach ${url}: no answer in time (waited 0.5 s for each attempt; AIS_TIMEOUT sets how long)`);
    expect(Date.now() - started).toBeLessThan(20_000); // 4 attempts of 0.5 s and their backoff
    expect(sockets.size).toBeGreaterThan(0); // it was connected, not refused
  } finally {
    for (const socket of sockets) socket.destroy();
    silent.close();
  }
  // 30 s unless set; 0: no limit; anything else is a usage error.
  expect([requestTimeoutMs({}), requestTimeoutMs({ AIS_TIMEOUT: '0' }), requestTimeoutMs({ AIS_TIMEOUT: '2.5' })]).toEqual([30_000, undefined, 2_500]);
  const bad = await ais(['whoami', '--json'], { url, env: { AIS_API_KEY: 'svc_mgmt_x', AIS_TIMEOUT: 'soon' } });
  expect([bad.code, bad.error?.message]).toEqual([2, 'AIS_TIMEOUT takes a number of seconds (0: no limit), not soon.']);
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
    const run = ais(['login', '--json', '--qr'], {
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
    // --qr: the complete verification URI as a terminal QR code (half-block characters).
    expect(r.stderr).toMatch(/[▀▄█]{5,}/);
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

  test('several ais processes sharing the config refresh one at a time: none reuses a rotated refresh token', async () => {
    await new Promise((r) => setTimeout(r, 3100)); // the stored access token has expired
    const runs = await Promise.all(Array.from({ length: 4 }, () => ais(['whoami', '--json'])));
    expect(runs.map((r) => r.code)).toEqual([0, 0, 0, 0]);
    expect((await ais(['whoami', '--json'])).code).toBe(0); // the session is alive
  });

  test('a config lock left by a killed ais process is taken over at once (its pid is gone), not waited out', async () => {
    const dead = spawn(process.execPath, ['-e', '0']);
    await new Promise((resolve) => dead.on('exit', resolve));
    writeFileSync(path.join(xdg, 'agent-identity/config.json.lock'), `${dead.pid}\n`, { mode: 0o600 });
    await new Promise((r) => setTimeout(r, 3100)); // the access token expires: the next command refreshes under the lock
    const started = Date.now();
    const r = await ais(['whoami', '--json']);
    expect(r.code).toBe(0);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(existsSync(path.join(xdg, 'agent-identity/config.json.lock'))).toBe(false);
    // Killed between creating the lock and writing its pid: an empty lock, a few seconds old.
    const lock = path.join(xdg, 'agent-identity/config.json.lock');
    writeFileSync(lock, '', { mode: 0o600 });
    await new Promise((r) => setTimeout(r, 3100));
    const again = Date.now();
    expect((await ais(['whoami', '--json'])).code).toBe(0);
    expect(Date.now() - again).toBeLessThan(10_000); // not the 60 s of a hung holder
    expect(existsSync(lock)).toBe(false);
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
    // By name and uuid, not a uuid alone.
    expect((await ais(['identities', 'use', identity])).stdout.trim()).toBe(`Default identity: scout (${identity}).`);
    const who = await ais(['whoami']);
    expect(who.stdout).toContain(`\nidentity: scout (${identity})  [used by identity commands: the default, set by \`ais identities use\`]`);
    expect(who.stdout).not.toContain('default_identity');
  });

  test('global options also go before the command, and --identity / AIS_IDENTITY take a name', async () => {
    const other = (await ais(['identities', 'create', 'ranger', '--json'])).json.uuid;
    // `keys create` mints an identity key for the selected identity and names it.
    const before = await ais(['--json', '--identity', 'ranger', 'keys', 'create', 'probe-flag']);
    expect([before.code, before.json?.identity_uuid]).toEqual([0, other]);
    const byEnv = await ais(['keys', 'create', 'probe-env', '--json'], { env: { AIS_IDENTITY: 'Ranger' } });
    expect(byEnv.json.identity_uuid).toBe(other);
    expect((await ais(['keys', 'create', 'probe-default', '--json'])).json.identity_uuid).toBe(identity); // the default is untouched
    const unknown = await ais(['--identity', 'nobody-by-that-name', 'inbox', 'list', '--json']);
    expect(unknown.code).toBe(12); // identity_not_found
    // whoami says which identity commands use, and that the default is not the one this run.
    const who = await ais(['--identity', 'ranger', 'whoami']);
    expect(who.stdout).toContain(`\nidentity: ranger (${other})  [used by identity commands: from --identity, this run only]`);
    expect(who.stdout).toContain(`\ndefault_identity: scout (${identity})  [not used in this run]`);
    expect((await ais(['whoami', '--json'])).json.default_identity).toBe(identity); // --json: unchanged
    // An empty AIS_IDENTITY selects none, not even the default (docs/CLI.md).
    const none = await ais(['whoami'], { env: { AIS_IDENTITY: '' } });
    expect(none.stdout).toMatch(/\nidentity: none selected: identity commands need --identity/);
    // A name no header can carry (a line break) names no identity: said so (exit 12), not a network error.
    const unsendable = await ais(['--identity', 'a\nb', 'inbox', 'list', '--json']);
    expect([unsendable.code, unsendable.error?.message]).toEqual([12, 'No identity is named "a\\nb": see `ais identities list`.']);
  });

  test('a name that names no identity is told as such by every command, never as one that "no longer exists"', async () => {
    const runs = await Promise.all([['phone'], ['sms', 'watch'], ['inbox', 'watch'], ['identities', 'use', 'pager']].map((args) => ais(['--identity', 'pager', ...args, '--json'])));
    for (const r of runs) expect([r.code, r.error?.message]).toEqual([12, 'No identity is named pager: see `ais identities list`.']);
    const stranger = '01900000-0000-7000-8000-000000000000';
    const byUuid = await Promise.all([['phone'], ['sms', 'watch']].map((args) => ais(['--identity', stranger, ...args, '--json'])));
    for (const r of byUuid) expect([r.code, r.error?.message]).toEqual([12, `No identity ${stranger} in this account: see \`ais identities list\`.`]);
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
    const whoHuman = await ais(['whoami'], { env: { AIS_API_KEY: k.json.key } });
    expect(whoHuman.stdout).toMatch(new RegExp(`^kind: identity_key\nuser: \\S+ <\\S+@example\\.com> \\(pk \\d+\\)\nkey: runner svc_id_\\S+ \\(${k.json.uuid}\\)\nidentity: scout \\(${identity}\\)  \\[used by identity commands: the identity key's own\\]\n?$`));
    // The list names each identity key's identity, not only its uuid.
    const human = await ais(['keys', 'list', '--kind', 'identity']);
    expect(human.stdout).toMatch(/KIND\s+UUID\s+LABEL\s+MASKED_KEY\s+IDENTITY\s+IDENTITY_UUID/);
    expect(human.stdout.split('\n').find((l) => l.includes(k.json.uuid))).toMatch(new RegExp(`\\srunner\\s+svc_id_\\S+\\s+scout\\s+${identity}\\s`));
    const rv = await ais(['keys', 'revoke', k.json.uuid, '--json']);
    expect(rv.code).toBe(0);
    // ... and not once revoked.
    const after = await ais(['whoami', '--json'], { env: { AIS_API_KEY: k.json.key } });
    expect(after.code).not.toBe(0);
  });

  test("sessions list marks this login; sessions end ends another (the sign-up's)", async () => {
    const list = await ais(['sessions', 'list', '--json']);
    expect(list.code).toBe(0);
    const mine = list.json.find((x: any) => x.current);
    expect(mine).toMatchObject({ kind: 'token', via: 'device' });
    expect(mine.key_uuid).toMatch(/^[0-9a-f-]{36}$/); // the management key the device login got
    // The device login's management key (AIS_API_KEY) sees the same session as its own.
    const byKey = await ais(['sessions', 'list', '--json'], { env: { AIS_API_KEY: config().management_key } });
    expect(byKey.json.filter((x: any) => x.current).map((x: any) => x.uuid)).toEqual([mine.uuid]);
    const signUp = list.json.find((x: any) => x.via === 'register');
    expect(signUp).toBeDefined();
    const human = await ais(['sessions', 'list']);
    expect(human.stdout).toMatch(/CURRENT\s+UUID\s+KIND\s+VIA/);
    expect((await ais(['sessions', 'end', signUp.uuid])).stdout).toContain(`Ended session ${signUp.uuid}.`);
    const after = await ais(['sessions', 'list', '--json']);
    expect(after.json.map((x: any) => x.uuid)).not.toContain(signUp.uuid);
    expect(after.json.map((x: any) => x.uuid)).toContain(mine.uuid);
    expect((await ais(['sessions', 'end', signUp.uuid])).code).toBe(20); // 404 (already over): an API error
  });

  test('bad arguments are usage errors (exit 2), never a hang or a raw stack: --count abc, a missing --body-file', async () => {
    for (const args of [
      ['inbox', 'watch', '--count', 'abc'],
      ['sms', 'watch', '--count', '0'],
      ['send', '--to', 'x@example.com', '--subject', 's', '--body-file', '/no/such/file'],
      ['sms', 'watch', '--since', 'abc'], // was the service's 400: exit 20
      ['inbox', 'watch', '--since', '-1'],
      ['keys', 'list', '--kind', 'bogus'], // listed every key, exit 0
      ['passwords', 'add', 'x.example', '--username', 'u', '--password', 'given', '--generate'], // stored the generated one, dropped the given one
    ]) {
      const r = await ais([...args, '--json']);
      expect([args.join(' '), r.code, r.error?.code]).toEqual([args.join(' '), 2, 'usage']);
    }
    expect((await ais(['keys', 'list', '--kind', 'bogus'])).stderr.trim()).toBe('error: --kind takes management or identity, not "bogus".\nUsage: ais keys list [--kind management|identity]');
    // A missing argument names the command it is missing from.
    for (const sub of ['delete', 'use']) {
      const r = await ais(['identities', sub]);
      expect([r.code, r.stderr.trim()]).toEqual([2, `error: Usage: ais identities ${sub} <uuid|name>`]);
    }
  });

  test('vault round trip: encryption_missing, pin setup, secrets and passwords, pin_locked, pin recover', async () => {
    const missing = await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '123456' } });
    expect(missing.error?.code).toBe('encryption_missing');
    expect(missing.code).toBe(15);
    const setup = await ais(['pin', 'setup', '--json'], { env: { AIS_PIN: '123456', AIS_PIN_KDF: FAST_KDF } });
    expect(setup.code).toBe(0);
    expect(setup.json.recovery_key).toMatch(/^RK1-/);
    expect(config()).toMatchObject({ device_secret: setup.json.device_secret });
    expect(config().pending_setup).toBeUndefined(); // kept only while the upload was under way
    expect((await api('GET', '/api/encryption/', undefined, config().management_key)).body.kdf).toBe(FAST_KDF);
    // Below the floor is refused, not silently used.
    const weak = await ais(['pin', 'setup', '--json'], { env: { AIS_PIN: '123456', AIS_PIN_KDF: 'argon2id:m=1024,t=1,p=1' } });
    expect(weak.code).not.toBe(0);
    // Agents without AIS_PIN and nothing on stdin get a usage error naming the variable.
    const noPin = await ais(['secrets', 'get', 'api-token', '--no-input', '--json']);
    expect(noPin.code).toBe(2);
    expect(noPin.error.message).toMatch(/AIS_PIN/);
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
    // A generated password is shown once (the agent types it into the site's sign-up form).
    const generated = await ais(['passwords', 'add', 'example.org', '--username', 'bot', '--generate'], { env: { AIS_PIN: '123456' } });
    const shownPassword = /^Password: (\S+)$/m.exec(generated.stdout)?.[1];
    expect(shownPassword?.length).toBeGreaterThanOrEqual(12);
    expect((await ais(['passwords', 'get', 'example.org', '--json'], { env: { AIS_PIN: '123456' } })).json.password).toBe(shownPassword);
    // The server holds ciphertext only.
    const raw = await api('GET', `/api/passwords/${pw.json.uuid}/?identity=${identity}`, undefined, config().management_key);
    expect(raw.body.password).toMatch(/^e2e::/);
    // rm takes a domain as get does (no PIN: domains are stored in the clear); two entries of one domain need the uuid.
    const twice = await ais(['passwords', 'add', 'dup.example', '--username', 'a', '--password', 'p1', '--json'], { env: { AIS_PIN: '123456' } });
    await ais(['passwords', 'add', 'dup.example', '--username', 'b', '--password', 'p2', '--json'], { env: { AIS_PIN: '123456' } });
    const ambiguous = await ais(['passwords', 'rm', 'dup.example', '--json']);
    expect([ambiguous.code, ambiguous.error?.message]).toEqual([2, expect.stringMatching(/2 entries are for dup\.example: give the uuid/)]);
    expect((await ais(['passwords', 'rm', twice.json.uuid, '--json'])).json).toEqual({ deleted: twice.json.uuid });
    const byDomain = await ais(['passwords', 'rm', 'dup.example', '--json']);
    expect([byDomain.code, typeof byDomain.json?.deleted]).toEqual([0, 'string']);
    expect((await ais(['passwords', 'rm', 'dup.example', '--json'])).error?.code).toBe('not_found');
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

    // pin change, the agent way: current and new PIN as two stdin lines.
    const changed = await ais(['pin', 'change', '--json'], { input: '654321\n111222\n' });
    expect(changed.code).toBe(0);
    expect(changed.json).toEqual({ changed: true });
    // Entries written under the old PIN open under the new one (the vault key is re-wrapped) ...
    expect((await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '111222' } })).json.value).toBe('s3cr3t-value');
    const pw2 = await ais(['passwords', 'get', 'github.com', '--json'], { input: '111222\n' });
    expect(pw2.json).toMatchObject({ username: 'bob', password: 'hunter2' });
    // ... and the old PIN no longer does.
    expect((await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '654321' } })).error.code).toBe('wrong_pin');

    // Values to store are kept exactly: padding from the environment, a multi-line PEM as the rest of stdin.
    expect((await ais(['secrets', 'set', 'padded', '--json'], { env: { AIS_PIN: '111222', AIS_SECRET_VALUE: '  padded\tvalue  ' } })).code).toBe(0);
    expect((await ais(['secrets', 'get', 'padded', '--json'], { env: { AIS_PIN: '111222' } })).json.value).toBe('  padded\tvalue  ');
    const pem = '-----BEGIN KEY-----\nAAAA\nBBBB\n-----END KEY-----';
    expect((await ais(['secrets', 'set', 'pem', '--json'], { input: `111222\n${pem}\n` })).code).toBe(0);
    expect((await ais(['secrets', 'get', 'pem', '--json'], { env: { AIS_PIN: '111222' } })).json.value).toBe(pem);
    // CRLF line ends are part of the value (only the final line break is dropped).
    expect((await ais(['secrets', 'set', 'crlf', '--json'], { input: '111222\nline1\r\nline2\r\n' })).code).toBe(0);
    expect((await ais(['secrets', 'get', 'crlf', '--json'], { env: { AIS_PIN: '111222' } })).json.value).toBe('line1\r\nline2');
    // Bytes that are not UTF-8 are refused, not stored as U+FFFD.
    const binary = await ais(['secrets', 'set', 'bin', '--json'], { input: Buffer.concat([Buffer.from('111222\n'), Buffer.from([0xff, 0xfe, 0x00, 0x80])]) });
    expect([binary.code, binary.error?.message]).toEqual([2, expect.stringMatching(/not UTF-8/)]);
    // A large value comes back whole through a pipe (output over 64 KiB was cut short at exit).
    const large = 'x'.repeat(190_000);
    expect((await ais(['secrets', 'set', 'large', '--json'], { input: `111222\n${large}\n` })).code).toBe(0);
    const back = await ais(['secrets', 'get', 'large', '--json'], { env: { AIS_PIN: '111222' }, readAfterMs: 1000 });
    expect([back.code, back.json?.value?.length]).toEqual([0, large.length]);
    // A reader that stops early (`| head -c 10`) ends the output quietly: exit 0, no EPIPE stack.
    const early = spawnSync('bash', ['-c', `set -o pipefail; "${process.execPath}" services/cli/bin.js secrets get large --json 2>"$ERR" | head -c 10 >/dev/null`], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: xdg, XDG_CONFIG_HOME: xdg, AIS_BASE_URL: svc.url, AIS_PIN: '111222', ERR: path.join(xdg, 'epipe.err') },
    });
    expect([early.status, readFileSync(path.join(xdg, 'epipe.err'), 'utf8')]).toEqual([0, '']);

    // pin recover on another machine: with AIS_DEVICE_SECRET the others keep working; without
    // one, the new device secret is announced (the others need it).
    // (Another machine signs in on its own; here it uses the management key: a copied refresh
    // token would be shared by two configs without a common lock.)
    const { device_secret: deviceSecret, access: _access, refresh: _refresh, ...withoutSecret } = config();
    const machine = (name: string) => {
      const home = mkdtempSync(path.join(os.tmpdir(), `ais-cli-${name}-`));
      mkdirSync(path.join(home, 'agent-identity'), { recursive: true, mode: 0o700 });
      writeFileSync(path.join(home, 'agent-identity/config.json'), JSON.stringify(withoutSecret), { mode: 0o600 });
      return home;
    };
    const second = machine('second');
    const kept = await runCli(['pin', 'recover', '--json'], { url: svc.url, home: second, env: { AIS_RECOVERY_KEY: setup.json.recovery_key, AIS_NEW_PIN: '333444', AIS_DEVICE_SECRET: deviceSecret } });
    expect(kept.json).toMatchObject({ recovered: true, new_device_secret: false, device_secret: deviceSecret });
    expect((await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '333444' } })).json.value).toBe('s3cr3t-value');
    const third = machine('third');
    const fresh = await runCli(['pin', 'recover'], { url: svc.url, home: third, env: { AIS_RECOVERY_KEY: setup.json.recovery_key, AIS_NEW_PIN: '333444' } });
    expect(fresh.code).toBe(0);
    expect(fresh.stdout).toMatch(/NEW device secret[\s\S]*SK1-[\s\S]*AIS_DEVICE_SECRET/);
    // The first machine's saved secret is now stale: the right PIN fails as a wrong one would,
    // and the message says why ...
    const stale = await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '333444' } });
    expect([stale.error?.code, stale.error?.message]).toEqual(['wrong_pin', expect.stringMatching(/device secret is stale/)]);
    // ... and the new secret, given once, is kept beside the login: the next run needs no variable.
    const newSecret = /SK1-[A-Za-z0-9-]+/.exec(fresh.stdout)![0];
    expect((await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '333444', AIS_DEVICE_SECRET: newSecret } })).json?.value).toBe('s3cr3t-value');
    expect(config().device_secret).toBe(newSecret);
    expect((await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '333444' } })).json?.value).toBe('s3cr3t-value');
    // This machine takes the vault back under its own device secret (the next tests use PIN 111222).
    expect((await ais(['pin', 'recover', '--json'], { env: { AIS_RECOVERY_KEY: setup.json.recovery_key, AIS_NEW_PIN: '111222' } })).code).toBe(0);
    for (const home of [second, third]) rmSync(home, { recursive: true, force: true });

    // An agent with only its identity key (and the device secret): the key names its identity.
    const key = (await api('POST', '/api/auth/keys/identity/', { label: 'agent runtime', identity_uuid: identity }, config().management_key)).body.key;
    const agentHome = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-agent-'));
    mkdirSync(path.join(agentHome, 'agent-identity'), { recursive: true, mode: 0o700 });
    writeFileSync(path.join(agentHome, 'agent-identity/config.json'), JSON.stringify({ device_secret: config().device_secret }), { mode: 0o600 });
    const asAgent = await runCli(['secrets', 'get', 'api-token', '--json'], { url: svc.url, home: agentHome, env: { AIS_API_KEY: key, AIS_PIN: '111222' } });
    expect([asAgent.code, asAgent.json?.value]).toEqual([0, 's3cr3t-value']);
    rmSync(agentHome, { recursive: true, force: true });
  });

  test('pin setup cut off after its upload: the next run shows the recovery key it kept, instead of leaving a vault nobody can open', async () => {
    // A fresh account whose setup was uploaded by a run that then died (what it kept is in its config).
    const pw = 'pw-interrupted-1';
    const user = (await api('POST', '/api/auth/social/', { username: 'interrupted', email: 'interrupted@example.com', password1: pw, password2: pw })).body;
    const mgmt = (await api('POST', '/api/auth/keys/management/', { label: 'cli' }, user.access)).body.key;
    const meta = (await api('GET', '/api/encryption/', undefined, mgmt)).body;
    const s = await setupEncryption({ pin: '123456', salt: meta.salt, kdf: parseKdf(FAST_KDF) });
    expect((await api('POST', '/api/encryption/', s.upload, mgmt)).status).toBe(201);
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-cut-'));
    mkdirSync(path.join(home, 'agent-identity'), { recursive: true, mode: 0o700 });
    const file = path.join(home, 'agent-identity/config.json');
    writeFileSync(file, JSON.stringify({ device_secret: s.deviceSecret, pending_setup: { recovery_key: s.recoveryKey, public_key: s.upload.public_key } }), { mode: 0o600 });
    const resumed = await runCli(['pin', 'setup', '--json'], { url: svc.url, home, env: { AIS_API_KEY: mgmt } });
    expect([resumed.code, resumed.json]).toEqual([0, { recovery_key: s.recoveryKey, device_secret: s.deviceSecret, device_secret_saved: true, resumed: true }]);
    expect(JSON.parse(readFileSync(file, 'utf8')).pending_setup).toBeUndefined();
    // Shown once: a second run is the usual refusal.
    expect((await runCli(['pin', 'setup', '--json'], { url: svc.url, home, env: { AIS_API_KEY: mgmt } })).error?.code).toBe('already_set_up');
    rmSync(home, { recursive: true, force: true });
  });

  test('with AIS_API_KEY, each account has its own wrong-PIN counter; a setup by another client (no wrapped key) is named, not looped on', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-two-'));
    mkdirSync(path.join(home, 'agent-identity'), { recursive: true, mode: 0o700 });
    const deviceSecret = (await setupEncryption({ pin: '000000', salt: 'AAAAAAAAAAAAAAAAAAAAAA==', kdf: parseKdf(FAST_KDF) })).deviceSecret;
    writeFileSync(path.join(home, 'agent-identity/config.json'), JSON.stringify({ device_secret: deviceSecret }), { mode: 0o600 });
    const account = async (name: string, upload: 'full' | 'minimal') => {
      const pw = `pw-${name}-1`;
      const user = (await api('POST', '/api/auth/social/', { username: name, email: `${name}@example.com`, password1: pw, password2: pw })).body;
      const mgmt = (await api('POST', '/api/auth/keys/management/', { label: 'cli' }, user.access)).body.key;
      const id = (await api('POST', '/api/identities/', { name: `${name} bot` }, mgmt)).body.uuid;
      const meta = (await api('GET', '/api/encryption/', undefined, mgmt)).body;
      const s = await setupEncryption({ pin: '246802', salt: meta.salt, deviceSecret, kdf: parseKdf(FAST_KDF) });
      const body = upload === 'full' ? s.upload : { public_key: s.upload.public_key, verifier: s.upload.verifier };
      expect((await api('POST', '/api/encryption/', body, mgmt)).status).toBe(201);
      return { AIS_API_KEY: mgmt, AIS_IDENTITY: id };
    };
    const x = await account('lockx', 'full');
    const y = await account('locky', 'full');
    for (let i = 0; i < 3; i++) await runCli(['secrets', 'get', 'k', '--json'], { url: svc.url, home, env: { ...x, AIS_PIN: '999999' } });
    expect((await runCli(['secrets', 'get', 'k', '--json'], { url: svc.url, home, env: { ...x, AIS_PIN: '246802' } })).error?.code).toBe('pin_locked');
    expect((await runCli(['secrets', 'set', 'k', 'v-of-y', '--json'], { url: svc.url, home, env: { ...y, AIS_PIN: '246802' } })).code).toBe(0);
    expect((await runCli(['secrets', 'get', 'k', '--json'], { url: svc.url, home, env: { ...y, AIS_PIN: '246802' } })).json?.value).toBe('v-of-y');

    const z = await account('foreignz', 'minimal');
    expect((await runCli(['secrets', 'get', 'k', '--json'], { url: svc.url, home, env: { ...z, AIS_PIN: '246802' } })).error?.code).toBe('encryption_foreign');
    expect((await runCli(['pin', 'setup', '--json'], { url: svc.url, home, env: { ...z, AIS_PIN: '246802' } })).error?.code).toBe('encryption_foreign');
    expect((await runCli(['pin', 'recover', '--json'], { url: svc.url, home, env: { ...z, AIS_RECOVERY_KEY: 'RK1-x', AIS_NEW_PIN: '246802' } })).error?.code).toBe('encryption_foreign');
    rmSync(home, { recursive: true, force: true });
  });

  test('passwords list leaves out (and names) an entry that does not decrypt; a secret named like a uuid is read and removed by its name', async () => {
    const env = { AIS_PIN: '111222' };
    expect((await ais(['passwords', 'add', 'good.example', '--username', 'u', '--password', 'pg', '--json'], { env })).code).toBe(0);
    const bad = await ais(['passwords', 'add', 'bad.example', '--username', 'u', '--password', 'pb', '--json'], { env });
    // An API client edits the domain without re-sealing the fields (they are bound to it).
    const patched = await api('PATCH', `/api/passwords/${bad.json.uuid}/?identity=${identity}`, { domain: 'moved.example' }, config().management_key);
    expect(patched.status).toBe(200);
    const list = await ais(['passwords', 'list', '--json'], { env });
    expect(list.code).toBe(0);
    expect(list.json.map((e: { domain: string }) => e.domain)).toContain('good.example');
    expect(list.json.map((e: { domain: string }) => e.domain)).not.toContain('moved.example');
    expect(list.stderr).toContain(`entry ${bad.json.uuid} (moved.example) does not decrypt`);
    expect((await ais(['passwords', 'get', 'good.example', '--json'], { env })).json?.password).toBe('pg');
    expect((await ais(['passwords', 'get', 'moved.example', '--json'], { env })).error?.code).toBe('decrypt_failed');
    const name = 'deadbeef-0000-4000-8000-000000000000';
    expect((await ais(['secrets', 'set', name, 'uuid-named', '--json'], { env })).code).toBe(0);
    expect((await ais(['secrets', 'get', name, '--json'], { env })).json?.value).toBe('uuid-named');
    expect((await ais(['secrets', 'rm', name, '--json'])).code).toBe(0);
    expect((await ais(['secrets', 'get', name, '--json'], { env })).error?.code).toBe('not_found');
  });

  test('identity_not_found: the configured identity was deleted', async () => {
    const d = await api('DELETE', `/api/identities/${identity}/`, undefined, config().management_key);
    expect(d.status).toBe(204);
    const r = await ais(['sms', 'list', '--json']);
    expect(r.code).toBe(12);
    expect(r.error.code).toBe('identity_not_found');
    // The same words from every command, the watch included.
    const gone = `The default identity ${identity} no longer exists: pick another with \`ais identities use <uuid|name>\` (see \`ais identities list\`).`;
    expect(r.error.message).toBe(gone);
    expect((await ais(['sms', 'watch', '--json'])).error?.message).toBe(gone);
    expect((await ais(['keys', 'create', 'late', '--json'])).error?.message).toBe(gone);
    const secret = await ais(['secrets', 'get', 'api-token', '--json'], { env: { AIS_PIN: '111222' } });
    expect([secret.code, secret.error?.code]).toEqual([12, 'identity_not_found']);
    // A name that names nothing is told as such, not as an identity that "no longer exists".
    const typo = await ais(['sms', 'list', '--identity', 'nosuch', '--json']);
    expect([typo.code, typo.error?.message]).toEqual([12, expect.stringMatching(/^No identity is named nosuch/)]);
    // No identity selected at all: the API's condition and exit code.
    const none = await ais(['sms', 'list', '--json'], { env: { AIS_IDENTITY: '' } });
    expect([none.code, none.error?.code]).toEqual([20, 'identity_required']);
  });

  test('a refused AIS_API_KEY says so (`ais login` would not help while it is set)', async () => {
    const key = (await api('POST', '/api/auth/keys/management/', { label: 'short-lived' }, config().management_key)).body;
    expect((await api('DELETE', `/api/auth/keys/management/${key.uuid}/`, undefined, config().management_key)).status).toBe(204);
    const r = await ais(['whoami', '--json'], { env: { AIS_API_KEY: key.key } });
    expect([r.code, r.error?.message]).toEqual([10, expect.stringMatching(/^AIS_API_KEY was refused .*unset AIS_API_KEY/)]);
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

describe('prompts on a terminal', () => {
  test('a new PIN typed on a terminal is asked twice; two that differ change nothing', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-pin-tty-'));
    try {
      const post = async (p: string, body: unknown, token?: string) => (await api('POST', p, body, token)).body;
      const u = `pintty${Date.now() % 1e6}`;
      const reg = await post('/api/auth/social/', { username: u, email: `${u}@example.com`, password1: 'Secret-pass-1', password2: 'Secret-pass-1' });
      const key = (await post('/api/auth/keys/management/', { label: 'tty' }, reg.access)).key as string;
      const env = { AIS_API_KEY: key, AIS_PIN_KDF: FAST_KDF };
      const differ = await runCliOnTerminal(['pin', 'setup'], { url: svc.url, home, env, typing: [{ when: /New 6-digit PIN: /, keys: '123456\r' }, { when: /\(again\): /, keys: '654321\r' }] });
      expect([differ.code, differ.output]).toEqual([2, expect.stringMatching(/the two entries differ, nothing was changed/)]);
      const same = await runCliOnTerminal(['pin', 'setup'], { url: svc.url, home, env, typing: [{ when: /New 6-digit PIN: /, keys: '123456\r' }, { when: /\(again\): /, keys: '123456\r' }] });
      expect([same.code, same.output]).toEqual([0, expect.stringMatching(/recovery key/i)]);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  test('Ctrl-C at a password or PIN prompt exits 130 (Interrupted.), Ctrl-D a usage error: never 0 with nothing read', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-tty-'));
    try {
      const interrupted = await runCliOnTerminal(['login', '--username', 'someone'], { url: 'http://127.0.0.1:9', home, typing: [{ when: /Password: /, keys: '\x03' }] });
      expect([interrupted.code, interrupted.output]).toEqual([130, expect.stringContaining('Interrupted.')]);
      const ended = await runCliOnTerminal(['login', '--username', 'someone'], { url: 'http://127.0.0.1:9', home, typing: [{ when: /Password: /, keys: '\x04' }] });
      expect([ended.code, ended.output]).toEqual([2, expect.stringMatching(/Password needed/)]);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

describe('options without a command', () => {
  test('--version prints the version; options alone are a usage error (as JSON with --json); help of an unknown command names it', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-opts-'));
    try {
      const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
      expect(await runCli(['--version'], { url: svc.url, home })).toMatchObject({ code: 0, stdout: `ais ${version}\n` });
      expect((await runCli(['--json', '-V'], { url: svc.url, home })).json).toEqual({ version });
      const alone = await runCli(['--json'], { url: svc.url, home });
      expect([alone.code, alone.stdout, alone.error?.code, alone.error?.message]).toEqual([2, '', 'usage', expect.stringMatching(/No command given/)]);
      const flagged = await runCli(['--identity', 'scout'], { url: svc.url, home });
      expect([flagged.code, flagged.stdout, flagged.stderr]).toEqual([2, '', expect.stringMatching(/^error: No command given \(only --identity scout\)/)]);
      const unknown = await runCli(['help', 'nonexist'], { url: svc.url, home });
      expect([unknown.code, unknown.stderr]).toEqual([2, expect.stringMatching(/Unknown command: nonexist/)]);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

describe('what a refusal says', () => {
  test('a denied device login says it was denied (exit 20, access_denied); a refused AIS_TOKEN names AIS_TOKEN, not `ais login`', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-denied-'));
    try {
      let denied: Promise<unknown> | undefined;
      const r = await runCli(['login', '--json', '--no-qr'], {
        url: svc.url,
        home,
        onStderr: (err) => {
          const m = /"user_code":"([A-Z-]+)"/.exec(err);
          if (!m || denied) return;
          denied = (async () => {
            const post = async (p: string, body: unknown, token?: string) => (await api('POST', p, body, token)).body;
            const u = `deny${Date.now() % 1e6}`;
            const reg = await post('/api/auth/social/', { username: u, email: `${u}@example.com`, password1: 'Secret-pass-1', password2: 'Secret-pass-1' });
            await post('/api/auth/device/deny/', { user_code: m[1] }, reg.access);
          })();
        },
      });
      await denied;
      expect([r.code, r.error?.code, r.error?.message]).toEqual([20, 'access_denied', expect.stringMatching(/denied.*ais login/)]);
      const garbage = await runCli(['whoami', '--json'], { url: svc.url, home, env: { AIS_TOKEN: 'garbage' } });
      expect([garbage.code, garbage.error?.code, garbage.error?.message]).toEqual([10, 'not_authenticated', expect.stringMatching(/^AIS_TOKEN was refused .*unset AIS_TOKEN/)]);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

describe('logout', () => {
  /** `ais login` through the device flow, approved through the API by a new account, in `home`. */
  async function deviceLogin(home: string, url = svc.url, opts: { env?: Record<string, string>; approveAfterMs?: number } = {}): Promise<CliRun> {
    const post = async (p: string, body: unknown, token?: string) => {
      const res = await fetch(url + p, { method: 'POST', headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) });
      return { status: res.status, body: (await res.json()) as any };
    };
    let approved: Promise<unknown> | undefined;
    const r = await runCli(['login', '--json', '--no-qr'], {
      url,
      home,
      env: opts.env,
      onStderr: (s) => {
        const m = /"user_code":"([A-Z-]+)"/.exec(s);
        if (!m || approved) return;
        approved = (async () => {
          await new Promise((resolve) => setTimeout(resolve, opts.approveAfterMs ?? 0));
          const u = `out${Date.now() % 1e6}${Math.floor(Math.random() * 1000)}`;
          const reg = await post('/api/auth/social/', { username: u, email: `${u}@example.com`, password1: 'Secret-pass-1', password2: 'Secret-pass-1' });
          expect((await post('/api/auth/device/approve/', { user_code: m[1] }, reg.body.access)).status).toBe(200);
        })();
      },
    });
    await approved;
    expect(r.code).toBe(0);
    return r;
  }

  /** Signs in to the dashboard with a password, as a browser does (the form's CSRF token and cookies); the cookie header. */
  async function dashboardSignIn(login: string, password: string): Promise<string> {
    const cookiesOf = (res: Response) => res.headers.getSetCookie().map((c) => c.split(';')[0]);
    const page = await fetch(`${svc.url}/login`);
    const csrf = /name="csrf" value="([^"]+)"/.exec(await page.text())![1];
    const cookies = cookiesOf(page);
    const res = await fetch(`${svc.url}/login`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: cookies.join('; ') },
      body: new URLSearchParams({ csrf, login, password }).toString(),
    });
    await res.arrayBuffer(); // read to the end: no socket left open
    expect(res.status).toBe(303);
    return [...cookies, ...cookiesOf(res)].join('; ');
  }
  /** 200 while the dashboard session is alive; 303 to the sign-in page once it ended. */
  const dashboard = async (cookie: string) => {
    const res = await fetch(`${svc.url}/`, { redirect: 'manual', headers: { cookie } });
    await res.arrayBuffer();
    return res.status;
  };

  test("logout ends this login's session only (the human's dashboard goes on); --all ends every session of the account", async () => {
    for (const all of [false, true]) {
      const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-sessions-'));
      const login = await deviceLogin(home);
      const browser = await dashboardSignIn(login.json.user.username, 'Secret-pass-1');
      expect(await dashboard(browser)).toBe(200);
      const mine = (await runCli(['sessions', 'list', '--json'], { url: svc.url, home })).json.find((x: any) => x.current).uuid;
      // --keep-key: the session must be ended by logout itself, not by the key's revocation (which ends the sessions bound to it).
      const key = JSON.parse(readFileSync(path.join(home, 'agent-identity/config.json'), 'utf8')).management_key as string;
      // The stored access token has expired (3 s here): logout still ends the session(s) (the
      // API's logout skips an expired access token: the refresh token is what counts).
      await new Promise((resolve) => setTimeout(resolve, 3100));
      const r = await runCli(['logout', '--keep-key', ...(all ? ['--all'] : [])], { url: svc.url, home });
      expect([all, r.code, r.stdout.trim()]).toEqual([
        all,
        0,
        all ? "Logged out: every session of the account ended (the dashboard's too)." : "Logged out (this login's session ended; the account's other sessions, the dashboard's included, go on).",
      ]);
      const left = (await runCli(['sessions', 'list', '--json'], { url: svc.url, home, env: { AIS_API_KEY: key } })).json;
      expect(left.map((x: any) => x.uuid)).not.toContain(mine);
      expect([all, left.some((x: any) => x.via === 'dashboard'), await dashboard(browser)]).toEqual(all ? [all, false, 303] : [all, true, 200]);
      rmSync(home, { recursive: true, force: true });
    }
  });

  test('logout --all with no login saved fails rather than claim it; with a management key or user token of this run it ends every session of that account', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-logout-all-'));
    try {
      const login = await deviceLogin(home);
      const username = login.json.user.username as string;
      expect((await runCli(['logout'], { url: svc.url, home })).code).toBe(0);
      const again = await runCli(['logout', '--all', '--json'], { url: svc.url, home });
      expect([again.code, again.error?.code, again.error?.message]).toEqual([10, 'not_authenticated', expect.stringMatching(/no session was ended.*AIS_TOKEN or AIS_API_KEY/)]);
      // Not logged in, no --all: nothing to end, said as such.
      expect((await runCli(['logout'], { url: svc.url, home })).stdout.trim()).toBe('Not logged in here: no session to end.');
      const post = async (p: string, body: unknown, token?: string) => (await api('POST', p, body, token)).body;
      const { access } = await post('/api/auth/login/', { username, password: 'Secret-pass-1' });
      const key = (await post('/api/auth/keys/management/', { label: 'ops' }, access)).key as string;
      const identity = (await post('/api/identities/', { name: `Agent ${Date.now()}` }, access)).uuid as string;
      const idKey = (await post('/api/auth/keys/identity/', { label: 'agent', identity_uuid: identity }, access)).key as string;
      const fenced = await runCli(['logout', '--all'], { url: svc.url, home, env: { AIS_API_KEY: idKey } });
      expect([fenced.code, fenced.stderr]).toEqual([2, expect.stringMatching(/identity key cannot sign out/)]);
      const refused = await runCli(['logout', '--all', '--json'], { url: svc.url, home, env: { AIS_TOKEN: `${access}x` } });
      expect([refused.code, refused.error?.code]).toEqual([10, 'not_authenticated']);
      const browser = await dashboardSignIn(username, 'Secret-pass-1');
      expect(await dashboard(browser)).toBe(200);
      const ended = await runCli(['logout', '--all', '--json'], { url: svc.url, home, env: { AIS_API_KEY: key } });
      expect([ended.code, ended.json?.session_ended]).toEqual([0, true]);
      expect(await dashboard(browser)).toBe(303);
      // An access token lives until it expires (the sessions it refreshes from are over); here
      // ACCESS_TOKEN_TTL is 3 s, which the CLI runs above may have outlived: then it says so.
      const user = await fetch(`${svc.url}/api/auth/user/`, { headers: { authorization: `Bearer ${access}` } });
      expect(user.status === 200 ? 'valid' : ((await user.json()) as { code: string }).code).toMatch(/^(valid|token_expired)$/);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  test('a login to another service revokes the earlier key at its own service (it is never sent to the other)', async () => {
    const otherData = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-other-'));
    const other = await spawnService({ DATA_DIR: otherData, LOG_LEVEL: 'warn', PASSWORD_HASH_MEMORY_KIB: '1024' });
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-switch-'));
    try {
      await deviceLogin(home);
      const first = JSON.parse(readFileSync(path.join(home, 'agent-identity/config.json'), 'utf8')).management_key as string;
      const moved = await deviceLogin(home, other.url);
      expect(moved.json?.previous_key_revoked).toBe(true);
      expect((await fetch(`${svc.url}/api/identities/`, { headers: { authorization: `Bearer ${first}` } })).status).toBe(401);
    } finally {
      other.child.kill('SIGTERM');
      await other.exited;
      for (const d of [otherData, home]) rmSync(d, { recursive: true, force: true });
    }
  });

  test('a login as another account, or at another service, carries nothing of the stored login over: its session and key end at their own service', async () => {
    const otherData = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-other-'));
    const other = await spawnService({ DATA_DIR: otherData, LOG_LEVEL: 'warn', PASSWORD_HASH_MEMORY_KIB: '1024' });
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-switch-'));
    const file = path.join(home, 'agent-identity/config.json');
    const stored = () => JSON.parse(readFileSync(file, 'utf8'));
    const run = (args: string[], url = svc.url, env: Record<string, string> = {}) => runCli(args, { url, home, env });
    const password = { AIS_PASSWORD: 'Secret-pass-1' };
    const register = async (url: string) => {
      const u = `sw${Date.now() % 1e6}${Math.floor(Math.random() * 1000)}`;
      const res = await fetch(`${url}/api/auth/social/`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: u, email: `${u}@example.com`, password1: 'Secret-pass-1', password2: 'Secret-pass-1' }) });
      expect(res.status).toBe(201);
      await res.arrayBuffer();
      return u;
    };
    const probe = (url: string, key: string) => fetch(`${url}/api/identities/`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.status);
    const refreshes = (refresh: string) => api('POST', '/api/auth/token/refresh/', { refresh }).then((r) => r.status);
    try {
      const a = (await deviceLogin(home)).json.user.username as string;
      expect((await run(['identities', 'create', 'a-bot', '--json'])).code).toBe(0);
      // A device secret, as `pin setup` keeps it (its value does not matter here).
      writeFileSync(file, JSON.stringify({ ...stored(), device_secret: 'SK1-of-a' }), { mode: 0o600 });
      const { management_key: keyA, identity: botA } = stored();
      // The same account again, with its password: what this machine holds for it stays.
      expect((await run(['login', '--username', a, '--json'], svc.url, password)).code).toBe(0);
      expect(stored()).toMatchObject({ management_key: keyA, identity: botA, device_secret: 'SK1-of-a' });
      const refreshA = stored().refresh as string;

      // Another account at the same service: A's session ends and its key is revoked, at their
      // service; A's default identity and device secret are not B's.
      const b = await register(svc.url);
      const toB = await run(['login', '--username', b, '--json'], svc.url, password);
      expect(toB.code).toBe(0);
      expect(stored()).toEqual({ base_url: svc.url, access: expect.any(String), refresh: expect.any(String), user: expect.objectContaining({ username: b }) });
      expect([await probe(svc.url, keyA), await refreshes(refreshA)]).toEqual([401, 401]);
      expect([toB.json?.previous_session_ended, toB.json?.previous_key_revoked]).toEqual([true, true]);
      // The forgotten device secret is said, without its value (an agent's output ends up in logs).
      expect(toB.stderr).toMatch(/no longer keeps the vault's device secret of the previous login/);
      expect(toB.stderr).not.toContain('SK1-of-a');
      // B's first identity becomes its default, and identity commands work (A's default failed them all).
      const botB = (await run(['identities', 'create', 'b-bot', '--json'])).json.uuid;
      expect(stored().identity).toBe(botB);
      expect((await run(['inbox', 'list', '--json'])).code).toBe(0);

      // A device login of another account: B's default identity does not carry over either.
      await deviceLogin(home);
      expect(stored().identity).toBeUndefined();
      const keyC = stored().management_key as string;
      // Another service: C's key is revoked at its own service (it is never sent to the other),
      // and is not kept, so `logout` there has no other service's key to send.
      const d = await register(other.url);
      const moved = await run(['login', '--username', d, '--json'], other.url, password);
      expect([moved.code, stored().management_key]).toEqual([0, undefined]);
      const out = await run(['logout', '--json'], other.url);
      expect([out.code, out.json]).toEqual([0, { logged_out: true, session_ended: true }]);
      expect([await probe(svc.url, keyC), moved.json?.previous_key_revoked]).toEqual([401, true]);
    } finally {
      other.child.kill('SIGTERM');
      await other.exited;
      for (const d of [otherData, home]) rmSync(d, { recursive: true, force: true });
    }
  });

  test('a short AIS_TIMEOUT does not cut the device login\'s waiting poll (held by the service until approval)', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-longpoll-'));
    const r = await deviceLogin(home, svc.url, { env: { AIS_TIMEOUT: '1' }, approveAfterMs: 2500 });
    expect(r.json?.management_key_saved).toBe(true);
    rmSync(home, { recursive: true, force: true });
  });

  test('a second login on the machine revokes the key of the first (replaced in the config, not left valid)', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-relogin-'));
    const file = path.join(home, 'agent-identity/config.json');
    await deviceLogin(home);
    const first = JSON.parse(readFileSync(file, 'utf8')).management_key as string;
    const again = await deviceLogin(home);
    expect(again.json?.previous_key_revoked).toBe(true);
    const second = JSON.parse(readFileSync(file, 'utf8')).management_key as string;
    const probe = (key: string) => fetch(`${svc.url}/api/identities/`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.status);
    expect([await probe(first), await probe(second)]).toEqual([401, 200]);
    rmSync(home, { recursive: true, force: true });
  });

  test('a new login of the same account ends the session it replaces (its refresh token is not left valid), and keeps its key', async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-same-'));
    const file = path.join(home, 'agent-identity/config.json');
    const stored = () => JSON.parse(readFileSync(file, 'utf8'));
    const refreshes = (refresh: string) => api('POST', '/api/auth/token/refresh/', { refresh }).then((r) => r.status);
    const probe = (key: string) => fetch(`${svc.url}/api/identities/`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.status);
    const relogin = (username: string) => runCli(['login', '--username', username, '--json'], { url: svc.url, home, env: { AIS_PASSWORD: 'Secret-pass-1' } });
    try {
      const username = (await deviceLogin(home)).json.user.username as string;
      const { refresh: deviceRefresh, management_key: key } = stored();
      const again = await relogin(username);
      expect([again.code, again.json?.previous_session_ended, again.json?.previous_key_revoked]).toEqual([0, true, undefined]);
      expect([await refreshes(deviceRefresh), stored().management_key, await probe(key)]).toEqual([401, key, 200]);
      // And once more: the password login's session ends in its turn.
      const passwordRefresh = stored().refresh as string;
      expect((await relogin(username)).json?.previous_session_ended).toBe(true);
      expect(await refreshes(passwordRefresh)).toBe(401);
      expect((await runCli(['whoami', '--json'], { url: svc.url, home })).code).toBe(0); // the new login works
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  test('revokes the management key the device flow saved (a live key nobody holds otherwise); --keep-key keeps it, valid', async () => {
    for (const keep of [false, true]) {
      const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-logout-'));
      await deviceLogin(home);
      const file = path.join(home, 'agent-identity/config.json');
      const key = JSON.parse(readFileSync(file, 'utf8')).management_key as string;
      // Its label tells this machine's key apart: the minute and the CLI's client_id with the host name.
      expect((await api('GET', '/api/health/whoami/', undefined, key)).body.key.label).toMatch(
        new RegExp(`^Device sign-up \\d{4}-\\d{2}-\\d{2} \\d{2}:\\d{2} UTC \\(ais-cli \\(${os.hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\)\\)$`),
      );
      const r = await runCli(['logout', '--json', ...(keep ? ['--keep-key'] : [])], { url: svc.url, home });
      expect([r.code, r.json]).toEqual([0, keep ? { logged_out: true, session_ended: true } : { logged_out: true, session_ended: true, key_revoked: true }]);
      expect(JSON.parse(readFileSync(file, 'utf8')).management_key).toBe(keep ? key : undefined);
      const probe = await fetch(`${svc.url}/api/identities/`, { headers: { authorization: `Bearer ${key}` } });
      expect([keep, probe.status]).toEqual([keep, keep ? 200 : 401]);
      rmSync(home, { recursive: true, force: true });
    }
  });
});

test("a device secret is saved only beside the stored login of its own account: another account's (AIS_API_KEY) never replaces it", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-secrets-'));
  const file = path.join(home, 'agent-identity/config.json');
  const stored = () => JSON.parse(readFileSync(file, 'utf8'));
  const run = (args: string[], env: Record<string, string> = {}) => runCli(args, { url: svc.url, home, env });
  const account = async (name: string) => {
    const u = `${name}${Date.now() % 1e6}`;
    const reg = (await api('POST', '/api/auth/social/', { username: u, email: `${u}@example.com`, password1: 'Secret-pass-1', password2: 'Secret-pass-1' })).body;
    const key = (await api('POST', '/api/auth/keys/management/', { label: 'cli' }, reg.access)).body.key as string;
    return { key, user: (await api('GET', '/api/health/whoami/', undefined, key)).body.user };
  };
  try {
    // A: the login stored here (its management key), its vault set up here by `pin setup`.
    const a = await account('seca');
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(file, JSON.stringify({ base_url: svc.url, management_key: a.key, user: a.user }), { mode: 0o600 });
    expect((await run(['identities', 'create', 'a-vault', '--json'])).code).toBe(0);
    const secretA = (await run(['pin', 'setup', '--json'], { AIS_PIN: '135790', AIS_PIN_KDF: FAST_KDF })).json.device_secret as string;
    expect(stored().device_secret).toBe(secretA);
    // B: another account, its vault set up elsewhere (its own device secret), used here by its key.
    const b = await account('secb');
    const idB = (await api('POST', '/api/identities/', { name: 'b vault' }, b.key)).body.uuid as string;
    const meta = (await api('GET', '/api/encryption/', undefined, b.key)).body;
    const vaultB = await setupEncryption({ pin: '246813', salt: meta.salt, kdf: parseKdf(FAST_KDF) });
    expect((await api('POST', '/api/encryption/', vaultB.upload, b.key)).status).toBe(201);
    const asB = { AIS_API_KEY: b.key, AIS_IDENTITY: idB, AIS_DEVICE_SECRET: vaultB.deviceSecret };
    expect((await run(['secrets', 'set', 'k', 'of-b', '--json'], { ...asB, AIS_PIN: '246813' })).code).toBe(0);
    expect(stored().device_secret).toBe(secretA);
    // A's right PIN still opens A's vault (with B's secret saved, it failed as wrong_pin, towards pin_locked).
    expect((await run(['secrets', 'set', 'k', 'of-a', '--json'], { AIS_PIN: '135790' })).code).toBe(0);
    // `pin recover` of B here does not save B's secret either.
    const recovered = await run(['pin', 'recover', '--json'], { ...asB, AIS_RECOVERY_KEY: vaultB.recoveryKey, AIS_NEW_PIN: '246813' });
    expect([recovered.code, recovered.json?.device_secret_saved]).toEqual([0, false]);
    expect(stored().device_secret).toBe(secretA);
    expect((await run(['secrets', 'get', 'k', '--json'], { AIS_PIN: '135790' })).json?.value).toBe('of-a');
    // With only AIS_API_KEY (no login stored), nothing is saved: no config file is made.
    const bare = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-bare-'));
    const lone = await runCli(['pin', 'recover', '--json'], { url: svc.url, home: bare, env: { ...asB, AIS_RECOVERY_KEY: vaultB.recoveryKey, AIS_NEW_PIN: '246813' } });
    expect([lone.code, existsSync(path.join(bare, 'agent-identity/config.json'))]).toEqual([0, false]);
    rmSync(bare, { recursive: true, force: true });
    // Another key of A's own account: the secret that opened A's vault is kept beside A's login.
    const { device_secret: _gone, ...withoutSecret } = stored();
    writeFileSync(file, JSON.stringify(withoutSecret), { mode: 0o600 });
    const keyA2 = (await api('POST', '/api/auth/keys/management/', { label: 'second' }, a.key)).body.key as string;
    const own = await run(['secrets', 'get', 'k', '--json'], { AIS_API_KEY: keyA2, AIS_DEVICE_SECRET: secretA, AIS_PIN: '135790' });
    expect([own.json?.value, stored().device_secret]).toEqual(['of-a', secretA]);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

/** A new account at the test service: its management key and user (as whoami names it). */
async function newAccount(prefix: string): Promise<{ key: string; user: { pk: number; username: string; email: string } }> {
  const u = `${prefix}${Date.now() % 1e6}${Math.floor(Math.random() * 1000)}`;
  const reg = (await api('POST', '/api/auth/social/', { username: u, email: `${u}@example.com`, password1: 'Secret-pass-1', password2: 'Secret-pass-1' })).body;
  const key = (await api('POST', '/api/auth/keys/management/', { label: 'cli' }, reg.access)).body.key as string;
  return { key, user: (await api('GET', '/api/health/whoami/', undefined, key)).body.user };
}

/** Another service, as far as the CLI can tell: it records the Authorization header of every request and answers `answer(path)`. */
async function otherService(answer: (path: string) => unknown): Promise<{ url: string; heard: string[]; close: () => void }> {
  const heard: string[] = [];
  const server = http.createServer((req, res) => {
    heard.push(req.headers.authorization ?? '');
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer(req.url ?? '')));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, heard, close: () => server.close() };
}

test("the stored login's tokens and key go only to its own service: --base-url / AIS_BASE_URL naming another is not logged in there", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-elsewhere-'));
  const file = path.join(home, 'agent-identity/config.json');
  const a = await newAccount('home');
  const login = await runCli(['login', '--username', a.user.username, '--json'], { url: svc.url, home, env: { AIS_PASSWORD: 'Secret-pass-1' } });
  expect(login.code).toBe(0);
  writeFileSync(file, JSON.stringify({ ...JSON.parse(readFileSync(file, 'utf8')), management_key: a.key }), { mode: 0o600 });
  const other = await otherService(() => ({ kind: 'management_key', user: { pk: 1, username: 'elsewhere', email: 'e@example.com' } }));
  try {
    const notHere = `Not logged in at ${other.url}: the login stored here is for ${svc.url}, and its credentials go only there. Run \`ais login --base-url ${other.url}\` (it replaces that login), or set AIS_API_KEY.`;
    const byEnv = await runCli(['whoami', '--json'], { url: other.url, home });
    expect([byEnv.code, byEnv.error?.code, byEnv.error?.message]).toEqual([10, 'not_authenticated', notHere]);
    const byFlag = await runCli(['identities', 'list', '--base-url', other.url], { url: svc.url, home });
    expect([byFlag.code, byFlag.stderr.trim()]).toEqual([10, `error: ${notHere}`]);
    expect(other.heard).toEqual([]); // nothing at all was sent there
    // A key given for the run goes where the run goes.
    const given = await runCli(['whoami', '--json'], { url: other.url, home, env: { AIS_API_KEY: 'svc_mgmt_given' } });
    expect([given.code, given.json?.user?.username, other.heard]).toEqual([0, 'elsewhere', ['Bearer svc_mgmt_given']]);
    // At its own service the stored login goes on working.
    expect((await runCli(['whoami', '--json'], { url: svc.url, home })).json?.user?.pk).toBe(a.user.pk);
  } finally {
    other.close();
    rmSync(home, { recursive: true, force: true });
  }
});

test("the default identity is the stored login's: another account's AIS_API_KEY (or one at another service) never sets it", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-default-'));
  const file = path.join(home, 'agent-identity/config.json');
  const stored = () => JSON.parse(readFileSync(file, 'utf8'));
  const run = (args: string[], env: Record<string, string> = {}, url = svc.url) => runCli(args, { url, home, env });
  const a = await newAccount('defa');
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  writeFileSync(file, JSON.stringify({ base_url: svc.url, management_key: a.key, user: a.user }), { mode: 0o600 });
  const asB = { AIS_API_KEY: (await newAccount('defb')).key };
  const other = await otherService(() => [{ uuid: '01900000-0000-7000-8000-00000000000f', name: 'far', inbox: 'far@example.com', phone: null, created_dt: '2025-01-01T00:00:00Z' }]);
  try {
    // B's first identity while A's login has no default: not taken for A's default.
    const first = await run(['identities', 'create', 'b-first', '--json'], asB);
    expect([first.code, stored().identity]).toEqual([0, undefined]);
    // --use: made, and said why it is not the default (a failure would have it created again).
    const used = await run(['identities', 'create', 'b-used', '--use', '--json'], asB);
    expect([used.code, stored().identity]).toEqual([0, undefined]);
    // With --json, a warning is a JSON line on stderr too (as an error is).
    expect(used.stderr.trim().split('\n').map((line) => JSON.parse(line))).toContainEqual({ warning: expect.stringContaining(`AIS_API_KEY is of another account than the login stored here (${a.user.username} at ${svc.url}), and the default identity belongs to that login: b-used (${used.json.uuid}) is not made the default.`) });
    const plain = await run(['identities', 'create', 'b-used-plain', '--use'], asB);
    expect(plain.stderr).toMatch(/^warning: AIS_API_KEY is of another account than the login stored here .*: b-used-plain \(\S+\) is not made the default\. /m);
    // `identities use`: refused, with what to do instead.
    const refused = await run(['identities', 'use', 'b-first', '--json'], asB);
    expect([refused.code, refused.error?.code, stored().identity]).toEqual([1, 'other_account', undefined]);
    expect(refused.error?.message).toMatch(new RegExp(`^AIS_API_KEY is of another account .* Pass --identity ${first.json.uuid} \\(or set AIS_IDENTITY\\) in the runs that use AIS_API_KEY\\.$`));
    // A key used at another service: refused too, whatever its account.
    const far = await run(['identities', 'use', 'far', '--json'], { AIS_API_KEY: 'svc_mgmt_far' }, other.url);
    expect([far.code, far.error?.message, stored().identity]).toEqual([1, expect.stringMatching(/^AIS_API_KEY is of another service than the login stored here/), undefined]);
    // Another key of A's own account sets A's default as the login itself does.
    const keyA2 = (await api('POST', '/api/auth/keys/management/', { label: 'second' }, a.key)).body.key as string;
    const own = await run(['identities', 'create', 'a-own', '--json'], { AIS_API_KEY: keyA2 });
    expect(stored().identity).toBe(own.json.uuid);
    expect((await run(['identities', 'create', 'a-next', '--json'])).code).toBe(0);
    expect((await run(['identities', 'use', 'a-next', '--json'], { AIS_API_KEY: keyA2 })).json).toEqual({ identity: expect.any(String) });
    expect(stored().identity).not.toBe(own.json.uuid);
  } finally {
    other.close();
    rmSync(home, { recursive: true, force: true });
  }
});

test("pin setup keeps its device secret only beside the stored login of its own account: another account's setup is printed to keep, and made without the login's secret", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-pinsetup-'));
  const file = path.join(home, 'agent-identity/config.json');
  const stored = () => JSON.parse(readFileSync(file, 'utf8'));
  const run = (args: string[], env: Record<string, string> = {}) => runCli(args, { url: svc.url, home, env: { AIS_PIN_KDF: FAST_KDF, ...env } });
  const a = await newAccount('pina');
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  writeFileSync(file, JSON.stringify({ base_url: svc.url, management_key: a.key, user: a.user }), { mode: 0o600 });
  try {
    // B's setup, while A's login here has no device secret: not saved beside A's login.
    const b = await newAccount('pinb');
    const idB = (await api('POST', '/api/identities/', { name: 'b vault' }, b.key)).body.uuid as string;
    const setupB = await run(['pin', 'setup', '--json'], { AIS_API_KEY: b.key, AIS_PIN: '246813' });
    expect([setupB.code, setupB.json?.device_secret_saved]).toEqual([0, false]);
    expect(setupB.json.device_secret).toMatch(/^SK1-/);
    expect([stored().device_secret, stored().pending_setup]).toEqual([undefined, undefined]);
    // The secret printed is the one that opens B's vault.
    const asB = { AIS_API_KEY: b.key, AIS_IDENTITY: idB, AIS_PIN: '246813', AIS_DEVICE_SECRET: setupB.json.device_secret };
    expect((await run(['secrets', 'set', 'k', 'of-b', '--json'], asB)).code).toBe(0);
    // A's own setup: saved beside A's login.
    const setupA = await run(['pin', 'setup', '--json'], { AIS_PIN: '135790' });
    expect([setupA.json?.device_secret_saved, stored().device_secret]).toEqual([true, setupA.json?.device_secret]);
    // C's setup is not made with A's saved secret (which C's output would hand out), nor kept.
    const c = await newAccount('pinc');
    const setupC = await run(['pin', 'setup'], { AIS_API_KEY: c.key, AIS_PIN: '112233' });
    expect(setupC.stdout).toMatch(/Device secret \(needed with the PIN on other machines; not saved here \(no login of this account is stored here\): keep it, and give it as AIS_DEVICE_SECRET\):\n\n {2}SK1-/);
    expect(setupC.stdout).not.toContain(setupA.json.device_secret);
    expect(stored().device_secret).toBe(setupA.json.device_secret);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

describe('device_code_expired, provoked for real', () => {
  let short: ServiceProcess;
  let shortData: string;

  beforeAll(async () => {
    shortData = mkdtempSync(path.join(os.tmpdir(), 'ais-cli-dev-'));
    short = await spawnService({ DATA_DIR: shortData, LOG_LEVEL: 'warn', DEVICE_CODE_TTL: '1', DEVICE_POLL_INTERVAL: '1' });
  });
  afterAll(async () => {
    short?.child.kill('SIGTERM');
    await short?.exited;
    rmSync(shortData, { recursive: true, force: true });
  });

  test('nobody approves: long-polling and interval-polling logins both end with device_code_expired', async () => {
    const [waiting, polling] = await Promise.all([
      ais(['login', '--json'], { url: short.url }),
      ais(['login', '--no-wait', '--no-qr'], { url: short.url }),
    ]);
    expect(waiting.code).toBe(13);
    expect(waiting.error).toMatchObject({ code: 'device_code_expired', exit_code: 13 });
    expect(waiting.error.message).toMatch(/ais login/);
    expect(polling.code).toBe(13);
    expect(polling.stderr).toMatch(/enter the code: [A-Z]{4}-[A-Z]{4}/);
    expect(polling.stderr).toMatch(/error: The login code expired/);
  });
});
