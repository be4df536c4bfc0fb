/**
 * HTTP basic (SPEC "Authentication"): a client may send its username and password with every
 * request. The service verifies a credential with argon2id once and then remembers it for as
 * long as the account keeps that password (services/accounts/remembered-credentials.ts);
 * `ais_password_checks_total` (GET /metrics) says which path each check took. A password
 * change, a rename, a wrong password and a locked-out account must be seen at once.
 */
import { startTestServer, type TestServer } from '../support/server.js';

const TOKEN = 'metrics-token-basic';
let s: TestServer;

beforeAll(async () => {
  s = await startTestServer({ METRICS_TOKEN: TOKEN });
});
afterAll(async () => s?.close());

const basic = (login: string, password: string) => ({ authorization: `Basic ${Buffer.from(`${login}:${password}`).toString('base64')}` });

async function checks(): Promise<Record<string, number>> {
  const text = await (await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
  const out: Record<string, number> = { verified: 0, refused: 0, remembered: 0 };
  for (const m of text.matchAll(/^ais_password_checks_total\{result="(\w+)"\} (\S+)$/gm)) out[m[1]] = Number(m[2]);
  return out;
}

/** What `work` added to each result. */
async function counted(work: () => Promise<void>): Promise<Record<string, number>> {
  const before = await checks();
  await work();
  const after = await checks();
  return Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - (before[k] ?? 0)]));
}

describe('HTTP basic', () => {
  it('verifies a credential once (argon2id) and takes it again without; a wrong password is still refused', async () => {
    const u = await s.signUp();
    const delta = await counted(async () => {
      for (let i = 0; i < 6; i++) {
        const res = await s.api('GET', '/api/auth/user/', { headers: basic(u.user.username, u.password) });
        expect([res.status, res.body.pk]).toEqual([200, u.user.pk]);
      }
      const wrong = await s.api('GET', '/api/auth/user/', { headers: basic(u.user.username, `${u.password}x`) });
      expect([wrong.status, wrong.body.code]).toEqual([401, 'token_not_valid']);
    });
    expect(delta).toEqual({ verified: 1, remembered: 5, refused: 1 });
  });

  it('a password change is seen on the next request: the old password 401, the new one verified', async () => {
    const u = await s.signUp();
    const old = basic(u.user.username, u.password);
    expect((await s.api('GET', '/api/auth/user/', { headers: old })).status).toBe(200);
    const changed = await s.api('POST', '/api/auth/password/change/', { headers: old, body: { new_password1: 'a-new-secret-42', new_password2: 'a-new-secret-42' } });
    expect(changed.status).toBe(200);
    const delta = await counted(async () => {
      const refused = await s.api('GET', '/api/auth/user/', { headers: old });
      expect([refused.status, refused.body.code]).toEqual([401, 'token_not_valid']);
      expect((await s.api('GET', '/api/auth/user/', { headers: basic(u.user.username, 'a-new-secret-42') })).status).toBe(200);
    });
    expect(delta).toEqual({ verified: 1, remembered: 0, refused: 1 });
  });

  it('a rename is seen on the next request: the old username 401, even when another account takes it', async () => {
    const u = await s.signUp();
    const old = basic(u.user.username, u.password);
    expect((await s.api('GET', '/api/auth/user/', { headers: old })).status).toBe(200);
    const renamed = await s.api('PATCH', '/api/auth/user/', { headers: old, body: { username: `${u.user.username}r` } });
    expect(renamed.status).toBe(200);
    expect((await s.api('GET', '/api/auth/user/', { headers: old })).status).toBe(401);
    expect((await s.api('GET', '/api/auth/user/', { headers: basic(`${u.user.username}r`, u.password) })).body.pk).toBe(u.user.pk);
    // Another account under the old name, with the same password: its own account, verified anew.
    const taker = await s.api('POST', '/api/auth/social/', { body: { username: u.user.username, email: `${u.user.username}@taker.example`, password1: u.password, password2: u.password } });
    expect(taker.status).toBe(201);
    const delta = await counted(async () => {
      const res = await s.api('GET', '/api/auth/user/', { headers: old });
      expect([res.status, res.body.pk]).toEqual([200, taker.body.user.pk]);
    });
    expect(delta).toEqual({ verified: 1, remembered: 0, refused: 0 });
  });

  it('an account locked out by failed guesses refuses its remembered credential too (429)', async () => {
    const u = await s.signUp();
    const right = basic(u.user.username, u.password);
    expect((await s.api('GET', '/api/auth/user/', { headers: right })).status).toBe(200);
    for (let i = 0; i < 10; i++) expect((await s.api('GET', '/api/auth/user/', { headers: basic(u.user.username, `guess${i}`) })).status).toBe(401);
    const locked = await s.api('GET', '/api/auth/user/', { headers: right });
    expect(locked.status).toBe(429);
    expect(Number(locked.headers.get('retry-after'))).toBeGreaterThan(0);
  });
});
