/**
 * Which stored state a run of `ais` may use, run as subprocesses against a real spawned
 * service: the default identity is the stored login's (a run with another account's
 * AIS_API_KEY / AIS_TOKEN does not send it), and a login stored without base_url is the
 * default service's (its credentials are not sent to whatever service a run addresses).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { jest } from '@jest/globals';
import { runCli } from '../support/cli.js';
import { fakeHttp, json } from '../support/fake-http.js';
import { apiClient } from '../support/server.js';
import { spawnService, type ServiceProcess } from '../support/spawn.js';

jest.setTimeout(120_000);

let svc: ServiceProcess;
let dataDir: string;

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-clicred-data-'));
  svc = await spawnService({ DATA_DIR: dataDir, LOG_LEVEL: 'warn', PASSWORD_HASH_MEMORY_KIB: '19456' });
});

afterAll(async () => {
  svc?.child.kill('SIGTERM');
  await svc?.exited;
  rmSync(dataDir, { recursive: true, force: true });
});

const call = apiClient(() => svc.url);
const api = (method: string, p: string, body?: unknown, token?: string) => call(method, p, { body, token }) as Promise<{ status: number; body: any }>;

/** A new account: its management key, an access token, its user (as whoami names it) and one identity. */
async function newAccount(prefix: string) {
  const u = `${prefix}${Date.now() % 1e6}${Math.floor(Math.random() * 1000)}`;
  const reg = (await api('POST', '/api/auth/social/', { username: u, email: `${u}@example.com`, password1: 'Secret-pass-1', password2: 'Secret-pass-1' })).body;
  const key = (await api('POST', '/api/auth/keys/management/', { label: 'cli' }, reg.access)).body.key as string;
  const user = (await api('GET', '/api/health/whoami/', undefined, key)).body.user as { pk: number; username: string; email: string };
  const identity = (await api('POST', '/api/identities/', { name: `${prefix}-bot` }, key)).body as { uuid: string; name: string };
  return { key, access: reg.access as string, user, identity };
}

/** A config home holding `config`. */
function home(config: Record<string, unknown>): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ais-clicred-'));
  mkdirSync(path.join(dir, 'agent-identity'), { recursive: true, mode: 0o700 });
  writeFileSync(path.join(dir, 'agent-identity/config.json'), JSON.stringify(config), { mode: 0o600 });
  return dir;
}

/** Another service, as far as the CLI can tell: it records the Authorization header of every request. */
async function otherService(): Promise<{ url: string; heard: string[]; close: () => Promise<void> }> {
  const heard: string[] = [];
  const service = await fakeHttp((req, _body, res) => {
    heard.push(req.headers.authorization ?? '');
    json(res, 200, { kind: 'management_key', user: { pk: 1, username: 'elsewhere', email: 'e@example.com' } });
  });
  return { ...service, heard };
}

test("the default identity is the stored login's: a run with another account's AIS_API_KEY or AIS_TOKEN does not use it, and says to pass --identity", async () => {
  const a = await newAccount('deflt');
  const b = await newAccount('other');
  const dir = home({ base_url: svc.url, management_key: a.key, user: a.user, identity: a.identity.uuid });
  const run = (args: string[], env: Record<string, string> = {}) => runCli(args, { url: svc.url, home: dir, env });
  try {
    const expected = (credential: string) =>
      `No identity selected: ${credential} is of another account than the login stored here (${a.user.username} at ${svc.url}), and the default identity here belongs to that login. Pass --identity <uuid|name> (or set AIS_IDENTITY).`;
    // B's key and B's token: the condition of no identity selected, not A's identity sent with B's credential (a 404 read as "no longer exists").
    for (const [credential, env] of [
      ['AIS_API_KEY', { AIS_API_KEY: b.key }],
      ['AIS_TOKEN', { AIS_TOKEN: b.access }],
    ] as const) {
      const r = await run(['inbox', 'list', '--json'], env);
      expect([credential, r.code, r.error?.code, r.error?.message]).toEqual([credential, 20, 'identity_required', expected(credential)]);
    }
    const human = await run(['keys', 'create', 'runner'], { AIS_API_KEY: b.key });
    expect([human.code, human.stderr.trim()]).toEqual([20, `error: ${expected('AIS_API_KEY')}`]);
    // whoami says which identity B's run uses (none), and that the default is not used.
    const who = await run(['whoami'], { AIS_API_KEY: b.key });
    expect(who.stdout).toMatch(/^identity: none selected: /m);
    expect(who.stdout).toContain(`default_identity: ${a.identity.uuid}  [not used in this run: AIS_API_KEY is of another account than the login stored here (${a.user.username} at ${svc.url})]`);
    // Named, B's own identity works.
    expect((await run(['inbox', 'list', '--json', '--identity', b.identity.name], { AIS_API_KEY: b.key })).code).toBe(0);
    // A's own runs use the default: the stored login, and another key of A's account.
    const keyA2 = (await api('POST', '/api/auth/keys/management/', { label: 'second' }, a.key)).body.key as string;
    expect((await run(['inbox', 'list', '--json'])).code).toBe(0);
    const own = await run(['whoami'], { AIS_API_KEY: keyA2 });
    expect(own.stdout).toContain(`identity: ${a.identity.name} (${a.identity.uuid})  [used by identity commands: the default, set by \`ais identities use\`]`);
    expect((await run(['inbox', 'list', '--json'], { AIS_API_KEY: keyA2 })).code).toBe(0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a login stored without base_url is the default service\'s: its credentials are not sent to another, and the message says why', async () => {
  const a = await newAccount('nourl');
  const other = await otherService();
  const dirs: string[] = [];
  try {
    const notHere = (url: string) =>
      `Not logged in at ${url}: the login stored here names no service (no base_url in the config), so it is taken for the default one, http://localhost:8000, and its credentials go only there. Run \`ais login --base-url ${url}\` (it replaces that login), or set AIS_API_KEY.`;
    for (const stored of [{ management_key: a.key, user: a.user, identity: a.identity.uuid }, { access: 'a.b.c', refresh: 'r.s.t' }]) {
      const dir = home(stored);
      dirs.push(dir);
      const elsewhere = await runCli(['whoami', '--json'], { url: other.url, home: dir });
      expect([elsewhere.code, elsewhere.error?.code, elsewhere.error?.message]).toEqual([10, 'not_authenticated', notHere(other.url)]);
      // Not at the service it was written beside either: nothing says it was made there.
      const real = await runCli(['identities', 'list'], { url: svc.url, home: dir });
      expect([real.code, real.stderr.trim()]).toEqual([10, `error: ${notHere(svc.url)}`]);
    }
    // logout ends the session and revokes the key at the default service only, never at the one this run addresses.
    dirs.push(home({ access: 'a.b.c', refresh: 'r.s.t', management_key: 'svc_mgmt_kept' }));
    const logout = await runCli(['logout', '--json'], { url: other.url, home: dirs[2], env: { AIS_TIMEOUT: '5' } });
    expect(logout.json?.logged_out).toBe(true);
    expect(other.heard).toEqual([]); // nothing at all was sent there
    // A key given for the run goes where the run goes.
    const given = await runCli(['whoami', '--json'], { url: other.url, home: dirs[0], env: { AIS_API_KEY: 'svc_mgmt_given' } });
    expect([given.code, other.heard]).toEqual([0, ['Bearer svc_mgmt_given']]);
  } finally {
    await other.close();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
});

test("a running process keeps to its own login: one stored meanwhile for another service or account is never sent where the process talks", async () => {
  const jwt = (name: string, exp: number) => ['e30', Buffer.from(JSON.stringify({ name, exp })).toString('base64url'), 'sig'].join('.');
  const identity = '11111111-1111-4111-8111-111111111111';
  // Service A: the watch's first stream ends, and every next one needs a refresh, which A refuses.
  const heard: string[] = [];
  let streams = 0;
  const serviceA = await fakeHttp((req, body, res) => {
    heard.push(`${req.headers.authorization ?? ''} ${body}`);
    if (req.url!.startsWith('/api/identities/')) return json(res, 200, { uuid: identity, name: 'bot', inbox: 'bot@x', phone: null });
    if (req.url!.startsWith('/api/events/stream/')) {
      if (streams++ > 0) return json(res, 401, { code: 'token_expired', detail: 'Token is expired' });
      res.writeHead(200, { 'content-type': 'text/event-stream' }).write('retry: 100\n\n');
      return void setTimeout(() => res.end(), 1500);
    }
    if (req.url!.startsWith('/api/auth/token/refresh/')) return json(res, 401, { code: 'token_not_valid', detail: 'Token is invalid' });
    json(res, 404, { detail: 'Not found.' });
  });
  const urlA = serviceA.url;
  const a = { base_url: urlA, access: jwt('A_ACCESS', Date.now() / 1000 + 3600), refresh: 'A_REFRESH', user: { pk: 1, username: 'alice', email: 'a@x' }, identity };
  const replacements = [
    { base_url: 'https://service-b.example', access: jwt('B_ACCESS', Date.now() / 1000 + 3600), refresh: 'B_REFRESH', user: { pk: 7, username: 'bob', email: 'b@x' } },
    { ...a, access: jwt('C_ACCESS', Date.now() / 1000 + 3600), refresh: 'C_REFRESH', user: { pk: 8, username: 'carol', email: 'c@x' } },
  ];
  try {
    for (const replacement of replacements) {
      heard.length = 0;
      streams = 0;
      const dir = home(a);
      try {
        // Another terminal's `ais login` replaces the stored login while the watch runs.
        let watching!: () => void;
        const started = new Promise<void>((resolve) => (watching = resolve));
        const watch = runCli(['inbox', 'watch'], { url: urlA, home: dir, env: { AIS_TIMEOUT: '5' }, onStderr: (e) => /watching email/.test(e) && watching() });
        await Promise.race([started, watch]); // its stream is open: the login it runs with is A's
        writeFileSync(path.join(dir, 'agent-identity/config.json'), JSON.stringify(replacement), { mode: 0o600 });
        const ended = await watch;
        expect([replacement.user.username, ended.code]).toEqual([replacement.user.username, 11]); // token_expired: its own session at A has ended
        expect(heard.filter((h) => h.includes(replacement.access) || h.includes(replacement.refresh))).toEqual([]);
        expect(heard.some((h) => h.includes('A_REFRESH'))).toBe(true); // its own refresh, refused
        // The other login stays as it was stored.
        expect(JSON.parse(readFileSync(path.join(dir, 'agent-identity/config.json'), 'utf8'))).toMatchObject({ refresh: replacement.refresh, user: replacement.user });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  } finally {
    await serviceA.close();
  }
});

test('a base URL where something else answers (a web page, another JSON API) is said as such (unexpected_response, exit 21), and changes nothing stored', async () => {
  const a = await newAccount('wrong');
  const page = await fakeHttp((_req, _body, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<html><body>Sign in to the proxy</body></html>');
  });
  const other = await fakeHttp((_req, _body, res) => json(res, 200, { ok: true, items: {} }));
  const dir = home({});
  const config = () => readFileSync(path.join(dir, 'agent-identity/config.json'), 'utf8');
  const before = config();
  try {
    for (const [service, what] of [
      [page, 'an HTML page'],
      [other, 'JSON of another shape (an object with "uuid" expected)'],
    ] as const) {
      // `identities create` made the first identity the default from what came back: undefined fields.
      const r = await runCli(['identities', 'create', 'scout', '--json'], { url: service.url, home: dir, env: { AIS_API_KEY: a.key } });
      expect([r.code, r.stdout]).toEqual([21, '']);
      expect(r.error).toEqual({
        code: 'unexpected_response',
        message: `${service.url} answered POST /api/identities/ with ${what}, not with this service's API: is ${service.url} the service's address?`,
        exit_code: 21,
      });
    }
    const list = await runCli(['inbox', 'list', '--identity', a.identity.uuid], { url: page.url, home: dir, env: { AIS_API_KEY: a.key } });
    expect([list.code, list.stderr]).toEqual([21, `error: ${page.url} answered GET /api/email-inbox/ with an HTML page, not with this service's API: is ${page.url} the service's address?\n`]);
    expect(config()).toBe(before);
    // The same commands at the service itself work as ever.
    const real = await runCli(['identities', 'create', 'scout', '--json'], { url: svc.url, home: dir, env: { AIS_API_KEY: a.key } });
    expect([real.code, real.json.name]).toEqual([0, 'scout']);
  } finally {
    await page.close();
    await other.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
