/**
 * SPEC "Sign-up and tokens" and DECISIONS "Auth" / "Wire conventions", through a real
 * server on port 0 and a real SMTP relay sink for the mails.
 */
import { createLocalJWKSet, jwtVerify, SignJWT } from 'jose';
import { startTestServer, type TestServer } from '../support/server.js';
import { startSmtpSink, type SmtpSink } from '../support/smtp-sink.js';
import { freePort } from '../support/spawn.js';
import { eventually } from '../support/eventually.js';
import { whileReadModelsFull } from '../support/read-models-full.js';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig } from '../../infra/config.js';
import { startRuntime } from '../../infra/runtime.js';

let s: TestServer;
let sink: SmtpSink;

beforeAll(async () => {
  sink = await startSmtpSink();
  s = await startTestServer({ SMTP_RELAY_URL: sink.url });
});
afterAll(async () => {
  await s?.close();
  await sink?.close();
});

const uniq = () => `u${Date.now().toString(36)}${Math.random().toString(36).slice(2, 7)}`;

describe('registration (POST /api/auth/social/)', () => {
  it('creates an account and answers 201 with a token pair and the user', async () => {
    const name = uniq();
    const res = await s.api('POST', '/api/auth/social/', { body: { username: name, email: `${name}@Example.com`, password1: 'correct horse', password2: 'correct horse' } });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      access: expect.any(String),
      refresh: expect.any(String),
      user: { pk: expect.any(Number), username: name, email: `${name}@Example.com`, first_name: '', last_name: '' },
    });
  });

  it('rejects a taken username, case-insensitively, with a field error', async () => {
    const { user } = await s.signUp();
    const res = await s.api('POST', '/api/auth/social/', { body: { username: user.username.toUpperCase(), email: `${uniq()}@example.com`, password1: 'p', password2: 'p' } });
    expect(res.status).toBe(400);
    expect(res.body.username).toEqual([expect.stringContaining('already exists')]);
  });

  it('rejects a taken email', async () => {
    const { user } = await s.signUp();
    const res = await s.api('POST', '/api/auth/social/', { body: { username: uniq(), email: user.email.toUpperCase(), password1: 'p', password2: 'p' } });
    expect(res.status).toBe(400);
    expect(res.body.email).toHaveLength(1);
  });

  it('validates every field: required, pattern, max length, email format, matching passwords', async () => {
    let res = await s.api('POST', '/api/auth/social/', { body: {} });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      username: ['This field is required.'],
      email: ['This field is required.'],
      password1: ['This field is required.'],
      password2: ['This field is required.'],
    });
    res = await s.api('POST', '/api/auth/social/', { body: { username: 'bad name!', email: 'nope', password1: 'a', password2: 'b' } });
    expect(res.status).toBe(400);
    expect(Object.keys(res.body).sort()).toEqual(['email', 'username']);
    res = await s.api('POST', '/api/auth/social/', { body: { username: 'x'.repeat(151), email: 'a@b.co', password1: 'a', password2: 'a' } });
    expect(res.body.username).toEqual(['Ensure this field has no more than 150 characters.']);
    res = await s.api('POST', '/api/auth/social/', { body: { username: uniq(), email: `${uniq()}@example.com`, password1: 'a', password2: 'b' } });
    expect(res.status).toBe(400);
    expect(res.body.non_field_errors).toHaveLength(1);
  });

  it('JSON values of the wrong type are refused, not turned into text (a username normalised first made them text: password 1 became "1")', async () => {
    const name = uniq();
    const base = { username: name, email: `${name}@example.com`, password1: 'long enough', password2: 'long enough' };
    for (const [field, value] of [['password1', 1], ['password2', true], ['first_name', 123], ['last_name', false], ['first_name', null]] as const) {
      const res = await s.api('POST', '/api/auth/social/', { body: { ...base, [field]: value } });
      expect([field, res.status, res.body]).toEqual([field, 400, { [field]: [value === null ? 'This field may not be null.' : 'Not a valid string.'] }]);
    }
    const login = await s.api('POST', '/api/auth/login/', { body: { username: name, password: 1 } });
    expect([login.status, login.body]).toEqual([400, { password: ['Not a valid string.'] }]);
    const u = await s.signUp();
    for (const method of ['PUT', 'PATCH']) {
      const res = await s.api(method, '/api/auth/user/', { token: u.access, body: { username: u.user.username, first_name: 42, last_name: null } });
      expect([method, res.status, res.body]).toEqual([method, 400, { first_name: ['Not a valid string.'], last_name: ['This field may not be null.'] }]);
    }
    expect((await s.api('GET', '/api/auth/user/', { token: u.access })).body).toMatchObject({ first_name: '', last_name: '' });
  });

  it('first and last names with a line break or another control character are 400 (a name may end up in a mail header), at sign-up and on the user', async () => {
    const name = uniq();
    const base = { username: name, email: `${name}@example.com`, password1: 'long enough', password2: 'long enough' };
    const signup = await s.api('POST', '/api/auth/social/', { body: { ...base, first_name: 'A\r\nBcc: z@evil.example' } });
    expect([signup.status, Object.keys(signup.body)]).toEqual([400, ['first_name']]);
    const u = await s.signUp();
    for (const [method, value] of [['PATCH', 'L\nX: y'], ['PUT', 'tab\there'], ['PATCH', 'bell\u0007'], ['PATCH', 'sep\u2028']] as const) {
      const res = await s.api(method, '/api/auth/user/', { token: u.access, body: { username: u.user.username, last_name: value } });
      expect([method, value, res.status, res.body.last_name]).toEqual([method, value, 400, [expect.stringMatching(/control characters/)]]);
    }
    // NUL keeps Django REST framework's message, as in every text field (bad-input suite).
    expect((await s.api('PATCH', '/api/auth/user/', { token: u.access, body: { last_name: 'nul\u0000' } })).body).toEqual({ last_name: ['Null characters are not allowed.'] });
    const fine = await s.api('PATCH', '/api/auth/user/', { token: u.access, body: { first_name: 'Zoë-Ann', last_name: "O'Brien 李" } });
    expect([fine.status, fine.body.first_name, fine.body.last_name]).toEqual([200, 'Zoë-Ann', "O'Brien 李"]);
  });

  it('an email is trimmed, as Django REST framework\'s EmailField does: at sign-up, login, resend and reset', async () => {
    const name = uniq();
    const email = `${name}@example.com`;
    const res = await s.api('POST', '/api/auth/social/', { body: { username: name, email: ` ${email}\t`, password1: 'long enough', password2: 'long enough' } });
    expect([res.status, res.body.user?.email]).toEqual([201, email]);
    const login = await s.api('POST', '/api/auth/login/', { body: { email: `  ${email} `, password: 'long enough' } });
    expect([login.status, login.body.user?.pk]).toEqual([200, res.body.user.pk]);
    expect((await s.api('POST', '/api/auth/social/resend-email/', { body: { email: ` ${email}` } })).status).toBe(201);
    expect((await s.api('POST', '/api/auth/password/reset/', { body: { email: `${email} ` } })).status).toBe(200);
  });

  it('usernames take letters of any script and digits, as Django\'s validator does', async () => {
    for (const username of [`josé_${uniq()}`, `Юлия.${uniq()}`, `李${uniq()}`]) {
      const res = await s.api('POST', '/api/auth/social/', { body: { username, email: `${uniq()}@example.com`, password1: 'pw', password2: 'pw' } });
      expect([username, res.status]).toEqual([username, 201]);
      expect(res.body.user.username).toBe(username);
    }
    const bad = await s.api('POST', '/api/auth/social/', { body: { username: 'emoji🙂', email: `${uniq()}@example.com`, password1: 'pw', password2: 'pw' } });
    expect(bad.status).toBe(400);
  });

  it('usernames are NFKC-normalised (as Django): full-width or decomposed spellings are the same name, taken once, and sign in', async () => {
    const base = uniq();
    const wide = [...base].map((c) => String.fromCodePoint(c.codePointAt(0)! + 0xfee0)).join(''); // ｕ１２… (full-width forms)
    const first = await s.api('POST', '/api/auth/social/', { body: { username: `${wide}X`, email: `${uniq()}@example.com`, password1: 'pw', password2: 'pw' } });
    expect([first.status, first.body.user?.username]).toEqual([201, `${base}X`]);
    const again = await s.api('POST', '/api/auth/social/', { body: { username: `${base}x`, email: `${uniq()}@example.com`, password1: 'pw', password2: 'pw' } });
    expect([again.status, again.body.username]).toEqual([400, [expect.stringContaining('already exists')]]);
    for (const login of [`${base}X`, `${wide}X`]) expect((await s.api('POST', '/api/auth/login/', { body: { username: login, password: 'pw' } })).status).toBe(200);
    // A decomposed é (e + U+0301) fails no letters-only check: it is é.
    const nfd = `jose\u0301${uniq()}`;
    const decomposed = await s.api('POST', '/api/auth/social/', { body: { username: nfd, email: `${uniq()}@example.com`, password1: 'pw', password2: 'pw' } });
    expect([decomposed.status, decomposed.body.user?.username]).toEqual([201, nfd.normalize('NFKC')]);
    expect((await s.api('POST', '/api/auth/login/', { body: { username: nfd, password: 'pw' } })).status).toBe(200);
    expect((await s.api('POST', '/api/auth/login/', { body: { username: nfd.normalize('NFC'), password: 'pw' } })).status).toBe(200);
    // NFKC comes before case folding at login too: a mathematical bold 𝐀 is A.
    const ann = `Ann${uniq()}`;
    expect((await s.api('POST', '/api/auth/social/', { body: { username: ann, email: `${uniq()}@example.com`, password1: 'pw', password2: 'pw' } })).status).toBe(201);
    expect((await s.api('POST', '/api/auth/login/', { body: { username: `\u{1D400}${ann.slice(1)}`, password: 'pw' } })).status).toBe(200);
  });

  it('accepts form-urlencoded and multipart bodies on the auth endpoints', async () => {
    const name = uniq();
    let res = await s.api('POST', '/api/auth/social/', { form: { username: name, email: `${name}@example.com`, password1: 'pw', password2: 'pw' } });
    expect(res.status).toBe(201);
    const fd = new FormData();
    fd.set('username', name);
    fd.set('password', 'pw');
    const r = await fetch(`${s.url}/api/auth/login/`, { method: 'POST', body: fd });
    expect(r.status).toBe(200);
    expect(((await r.json()) as { user: { username: string } }).user.username).toBe(name);
    // A field given twice is a list, never a silent pick of one (it was the last): a 400 where one value is taken.
    const twice = await fetch(`${s.url}/api/auth/login/`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `username=nobody&username=${name}&password=pw` });
    expect([twice.status, await twice.json()]).toEqual([400, { username: ['Not a valid string.'] }]);
    const repeated = new FormData();
    repeated.append('username', name);
    repeated.append('password', 'wrong');
    repeated.append('password', 'pw');
    const multi = await fetch(`${s.url}/api/auth/login/`, { method: 'POST', body: repeated });
    expect([multi.status, await multi.json()]).toEqual([400, { password: ['Not a valid string.'] }]);
  });
});

describe('login (POST /api/auth/login/)', () => {
  it('signs in by username or by email', async () => {
    const u = await s.signUp();
    const byName = await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } });
    expect(byName.status).toBe(200);
    expect(byName.body.user.pk).toBe(u.user.pk);
    const byEmail = await s.api('POST', '/api/auth/login/', { body: { email: u.user.email, password: u.password } });
    expect(byEmail.status).toBe(200);
    // A blank email beside the username is no email (dj-rest-auth's clients send one), in JSON and in a form.
    const blankEmail = await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, email: '', password: u.password } });
    expect([blankEmail.status, blankEmail.body.user?.pk]).toEqual([200, u.user.pk]);
    const form = await fetch(`${s.url}/api/auth/login/`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ username: u.user.username, email: ' ', password: u.password }),
    });
    expect(form.status).toBe(200);
  });

  it('a username spelling another account\'s email cannot capture its logins, and cannot be taken', async () => {
    const victim = await s.signUp();
    const password = 'attacker-pass-1';
    // The victim's email as a username: refused at registration and at rename.
    const squat = await s.api('POST', '/api/auth/social/', { body: { username: victim.user.email.toUpperCase(), email: `${uniq()}@example.com`, password1: password, password2: password } });
    expect(squat.status).toBe(400);
    expect(squat.body.username).toEqual([expect.stringMatching(/e-mail/)]);
    const attacker = await s.signUp();
    const rename = await s.api('PATCH', '/api/auth/user/', { token: attacker.access, body: { username: victim.user.email } });
    expect(rename.status).toBe(400);
    // An email spelling another account's username is refused too.
    const owner = await s.api('POST', '/api/auth/social/', { body: { username: `${uniq()}@names.example`, email: `${uniq()}@example.com`, password1: password, password2: password } });
    expect(owner.status).toBe(201);
    const clash = await s.api('POST', '/api/auth/social/', { body: { username: uniq(), email: owner.body.user.username, password1: password, password2: password } });
    expect(clash.status).toBe(400);
    expect(clash.body.email).toBeDefined();
    // The email field matches emails only; the victim signs in by email in either field.
    for (const body of [{ email: victim.user.email, password: victim.password }, { username: victim.user.email, password: victim.password }]) {
      const res = await s.api('POST', '/api/auth/login/', { body });
      expect([res.status, res.body.user?.pk]).toEqual([200, victim.user.pk]);
    }
    expect((await s.api('POST', '/api/auth/login/', { body: { email: owner.body.user.username, password } })).status).toBe(400);
  });

  it('parallel PATCHes each answer the user as their own write left it', async () => {
    const u = await s.signUp();
    const answers = await Promise.all(Array.from({ length: 15 }, (_, i) => s.api('PATCH', '/api/auth/user/', { token: u.access, body: { last_name: `Last ${i}` } })));
    expect(answers.map((r) => r.body.last_name)).toEqual(Array.from({ length: 15 }, (_, i) => `Last ${i}`));
  });

  it('concurrent renames release every name they replaced', async () => {
    const u = await s.signUp();
    const [a, b] = [uniq(), uniq()];
    const answers = await Promise.all([a, b].map((username) => s.api('PATCH', '/api/auth/user/', { token: u.access, body: { username } })));
    expect(answers.map((r) => r.status)).toEqual([200, 200]);
    const final = (await s.api('GET', '/api/auth/user/', { token: u.access })).body.username;
    const lost = final === a ? b : a;
    // The name that lost (and the original) can be registered again by someone else.
    for (const username of [lost, u.user.username]) {
      const res = await s.api('POST', '/api/auth/social/', { body: { username, email: `${uniq()}@example.com`, password1: 'pw-123456', password2: 'pw-123456' } });
      expect(res.status).toBe(201);
    }
  });

  it('a rename answered 503 while the read models are behind was made: the new name stays its own, the old one is free', async () => {
    const u = await s.signUp();
    const renamed = uniq();
    await whileReadModelsFull(s, async () => {
      const res = await s.api('PATCH', '/api/auth/user/', { token: u.access, body: { username: renamed } });
      expect([res.status, res.body.code]).toEqual([503, 'projection_lag']);
    });
    await eventually(async () => (await s.api('GET', '/api/auth/user/', { token: u.access })).body.username === renamed);
    const signUp = (username: string) => s.api('POST', '/api/auth/social/', { body: { username, email: `${uniq()}@example.com`, password1: 'pw-123456', password2: 'pw-123456' } });
    const taken = await signUp(renamed);
    expect([taken.status, taken.body.username]).toEqual([400, ['A user with that username already exists.']]);
    expect((await signUp(u.user.username)).status).toBe(201);
  }, 30_000);

  it('a sign-up while the read models are behind is answered all the same: its tokens work once they catch up', async () => {
    const name = uniq();
    const res = await whileReadModelsFull(s, () =>
      s.api('POST', '/api/auth/social/', { body: { username: name, email: `${name}@example.com`, password1: 'pw-123456', password2: 'pw-123456' } }),
    );
    // A 503 here lost the tokens, and the retry it invites said the username exists.
    expect([res.status, res.body.user]).toEqual([201, { pk: expect.any(Number), username: name, email: `${name}@example.com`, first_name: '', last_name: '' }]);
    await eventually(async () => (await s.api('GET', '/api/auth/user/', { token: res.body.access })).body.username === name);
    const refreshed = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: res.body.refresh } });
    expect(refreshed.status).toBe(200);
  }, 30_000);

  it('renames racing each other and sign-ups never leave two accounts with one username', async () => {
    const signUp = (username: string) => s.api('POST', '/api/auth/social/', { body: { username, email: `${uniq()}@example.com`, password1: 'pw-123456', password2: 'pw-123456' } });
    for (let trial = 0; trial < 6; trial++) {
      const u = await s.signUp();
      const [b, c] = [uniq(), uniq()];
      // Away and back, away twice, and a sign-up for a name being taken (an audit found each duplicating a name).
      const [, , , joined, rejoined] = await Promise.all([
        s.api('PATCH', '/api/auth/user/', { token: u.access, body: { username: c } }),
        s.api('PATCH', '/api/auth/user/', { token: u.access, body: { username: b } }),
        s.api('PATCH', '/api/auth/user/', { token: u.access, body: { username: u.user.username } }),
        signUp(b),
        signUp(u.user.username),
      ]);
      const final = (await s.api('GET', '/api/auth/user/', { token: u.access })).body.username;
      const owners = (name: string) => [final === name, joined.status === 201 && name === b, rejoined.status === 201 && name === u.user.username].filter(Boolean).length;
      for (const name of [b, c, u.user.username]) expect([trial, name, owners(name)]).toEqual([trial, name, Math.min(owners(name), 1)]);
      // Whoever holds a name signs in with it; nobody else's password works for it.
      if (joined.status === 201) expect((await s.api('POST', '/api/auth/login/', { body: { username: b, password: 'pw-123456' } })).status).toBe(200);
    }
  });

  it('a username spelling an email and a sign-up with that email, at once: only one of them gets it', async () => {
    for (let trial = 0; trial < 6; trial++) {
      const address = `${uniq()}@cross.example`;
      const [byName, byEmail] = await Promise.all([
        s.api('POST', '/api/auth/social/', { body: { username: address, email: `${uniq()}@example.com`, password1: 'pw-123456', password2: 'pw-123456' } }),
        s.api('POST', '/api/auth/social/', { body: { username: uniq(), email: address, password1: 'pw-234567', password2: 'pw-234567' } }),
      ]);
      expect([trial, [byName.status, byEmail.status].filter((x) => x === 201).length]).toEqual([trial, 1]);
    }
  });

  it('a sign-up refused after reserving (its email taken) refuses no other meanwhile for the username it gave back', async () => {
    // A {X, E}, B {X, F}, C {Z, F} at once: taken one by one, either A and C or B alone get an
    // account. B holding X while it lost F to C once refused A as well: C alone.
    const signUp = (username: string, email: string) => s.api('POST', '/api/auth/social/', { body: { username, email, password1: 'pw-123456', password2: 'pw-123456' } });
    for (let trial = 0; trial < 30; trial++) {
      const [x, z, e, f] = [uniq(), uniq(), `${uniq()}@example.com`, `${uniq()}@example.com`];
      const results = await Promise.all([signUp(x, e), signUp(x, f), signUp(z, f)]);
      const won = results.map((r) => (r.status === 201 ? 'ABC'[results.indexOf(r)] : '')).join('');
      expect([trial, ['AC', 'B'].includes(won) ? 'serial' : won]).toEqual([trial, 'serial']);
    }
  }, 60_000);

  it('refuses a wrong password without saying which part was wrong', async () => {
    const u = await s.signUp();
    const res = await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: 'wrong' } });
    expect(res.status).toBe(400);
    expect(res.body.non_field_errors).toEqual(['Unable to log in with provided credentials.']);
    const unknown = await s.api('POST', '/api/auth/login/', { body: { username: 'nobody-here', password: 'wrong' } });
    expect(unknown.body).toEqual(res.body);
  });

  it('requires username or email', async () => {
    const res = await s.api('POST', '/api/auth/login/', { body: { password: 'x' } });
    expect(res.status).toBe(400);
    expect(res.body.non_field_errors).toHaveLength(1);
    const blank = await s.api('POST', '/api/auth/login/', { body: { username: '', email: '', password: 'x' } });
    expect([blank.status, blank.body.non_field_errors]).toEqual([400, ['Must include "username" or "email" and "password".']]);
    const notAnEmail = await s.api('POST', '/api/auth/login/', { body: { email: 'not an email', password: 'x' } });
    expect([notAnEmail.status, notAnEmail.body]).toEqual([400, { email: ['Enter a valid email address.'] }]);
  });

  it('slows brute force per account: 429 with Retry-After after 10 failures', async () => {
    const u = await s.signUp();
    for (let i = 0; i < 10; i++) {
      const r = await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: `bad${i}` } });
      expect(r.status).toBe(400);
    }
    const blocked = await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } });
    expect(blocked.status).toBe(429);
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(blocked.body.code).toBe('throttled');
    // The budget is the account's, whichever name reaches it.
    expect((await s.api('POST', '/api/auth/login/', { body: { email: u.user.email, password: u.password } })).status).toBe(429);
  });

  it('a stranger guessing from one address locks that address out, not the owner signing in from another; guesses from many addresses meet the account budget of 100; IPv6 by /64', async () => {
    const t = await startTestServer({ TRUST_PROXY: '1' });
    try {
      const u = await t.signUp();
      const login = (from: string, password: string) =>
        fetch(`${t.url}/api/auth/login/`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': from }, body: JSON.stringify({ username: u.user.username, password }) });
      for (let i = 0; i < 10; i++) expect((await login('10.0.0.66', `bad${i}`)).status).toBe(400);
      expect((await login('10.0.0.66', u.password)).status).toBe(429);
      expect((await login('10.0.0.1', u.password)).status).toBe(200); // the owner, elsewhere
      // Spread over ten more addresses, 90 more failures reach the account's 100.
      for (let a = 2; a <= 10; a++) for (let i = 0; i < 10; i++) expect((await login(`10.0.0.${a}`, `bad${i}`)).status).toBe(400);
      expect((await login('10.0.0.11', u.password)).status).toBe(429);
      // IPv6 counts by /64: a client walking its own prefix is one address.
      const v = await t.signUp();
      const login6 = (from: string, password: string) =>
        fetch(`${t.url}/api/auth/login/`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': from }, body: JSON.stringify({ username: v.user.username, password }) });
      for (let i = 1; i <= 10; i++) expect((await login6(`2001:db8:0:7::${i.toString(16)}`, `bad${i}`)).status).toBe(400);
      expect((await login6('2001:db8:0:7::99', v.password)).status).toBe(429);
      expect((await login6('2001:db8:0:8::1', v.password)).status).toBe(200);
    } finally {
      await t.close();
    }
  });

  it('a burst of parallel guesses gets no more than the budget checked: 10 wrong answers, the rest 429', async () => {
    const u = await s.signUp();
    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: `guess${i}` } })));
    const counts = answers.reduce<Record<number, number>>((acc, r) => ({ ...acc, [r.status]: (acc[r.status] ?? 0) + 1 }), {});
    expect(counts).toEqual({ 400: 10, 429: 20 });
  });

  it('parallel sign-ins with the right password all succeed (checks beyond the free budget wait, they are not refused)', async () => {
    const u = await s.signUp();
    const answers = await Promise.all(Array.from({ length: 14 }, () => s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } })));
    expect(answers.map((r) => r.status)).toEqual(Array(14).fill(200));
  });
});

describe('tokens', () => {
  it('access tokens are EdDSA JWTs verifiable with /.well-known/jwks.json', async () => {
    const u = await s.signUp();
    const jwks = await s.api('GET', '/.well-known/jwks.json');
    expect(jwks.status).toBe(200);
    const { payload, protectedHeader } = await jwtVerify(u.access, createLocalJWKSet(jwks.body));
    expect(protectedHeader.alg).toBe('EdDSA');
    expect(payload.sub).toBe(String(u.user.pk));
    expect(payload.user_id).toBe(u.user.pk);
    expect((payload.exp as number) - (payload.iat as number)).toBe(3600);
  });

  it('GET /api/auth/user/ needs a credential: 401 not_authenticated, token_not_valid for garbage', async () => {
    let res = await s.api('GET', '/api/auth/user/');
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ detail: expect.any(String), code: 'not_authenticated' });
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="api"'); // RFC 6750 §3
    res = await s.api('GET', '/api/auth/user/', { token: 'garbage' });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('token_not_valid');
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="api", error="invalid_token"');
    // "Bearer " with nothing after it carries no credential.
    res = await s.api('GET', '/api/auth/user/', { headers: { authorization: 'Bearer ' } });
    expect([res.status, res.body.code]).toEqual([401, 'not_authenticated']);
  });

  it('a refresh token is not accepted as an access token', async () => {
    const u = await s.signUp();
    const res = await s.api('GET', '/api/auth/user/', { token: u.refresh });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('token_not_valid');
  });

  it('refresh rotates: new access + refresh; the old refresh is spent and reusing it revokes the family (RFC 9700)', async () => {
    const u = await s.signUp();
    const first = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ access: expect.any(String), refresh: expect.any(String) });
    expect((await s.api('GET', '/api/auth/user/', { token: first.body.access })).status).toBe(200);
    const reuse = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } });
    expect(reuse.status).toBe(401);
    // The whole family is dead now, including the token minted by the first refresh.
    const after = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: first.body.refresh } });
    expect(after.status).toBe(401);
    expect(after.body.code).toBe('token_expired');
  });

  it('refresh validates its body', async () => {
    const res = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: '' } });
    expect(res.status).toBe(400);
    expect(res.body.refresh).toHaveLength(1);
    const bad = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: 'nope' } });
    expect(bad.status).toBe(401);
    expect(bad.body.code).toBe('token_not_valid');
  });

  it('verify answers 200 with no body for a valid token and 401 otherwise', async () => {
    const u = await s.signUp();
    for (const token of [u.access, u.refresh]) {
      const ok = await s.api('POST', '/api/auth/token/verify/', { body: { token } });
      expect(ok.status).toBe(200);
      expect(ok.text).toBe('');
    }
    const bad = await s.api('POST', '/api/auth/token/verify/', { body: { token: `${u.access}x` } });
    expect(bad.status).toBe(401);
    expect(bad.body.code).toBe('token_not_valid');
    expect((await s.api('POST', '/api/auth/token/verify/', { body: {} })).status).toBe(400);
  });

  it('a token signed with the service\'s own key but without an expiry (or issue time) is not one of ours: 401 token_not_valid', async () => {
    const u = await s.signUp();
    const { keys } = s.runtime.shared;
    const claims = JSON.parse(Buffer.from(u.access.split('.')[1]!, 'base64url').toString()) as Record<string, unknown>;
    for (const left of ['exp', 'iat']) {
      const { [left]: _gone, ...rest } = claims;
      const token = await new SignJWT(rest).setProtectedHeader({ alg: 'EdDSA', kid: keys.kid, typ: 'JWT' }).sign(keys.signingKey);
      const res = await s.api('GET', '/api/auth/user/', { token });
      expect([left, res.status, res.body.code]).toEqual([left, 401, 'token_not_valid']);
    }
    // The same claims with both, signed the same way, are accepted: the test is about the claims.
    const whole = await new SignJWT(claims).setProtectedHeader({ alg: 'EdDSA', kid: keys.kid, typ: 'JWT' }).sign(keys.signingKey);
    expect((await s.api('GET', '/api/auth/user/', { token: whole })).status).toBe(200);
  });

  it('verify refuses the dashboard\'s session cookie (a browser session, no refresh token of the API; refresh refuses it too)', async () => {
    const u = await s.signUp();
    const user = await s.runtime.shared.accounts.getUser(u.user.pk);
    const cookie = await s.runtime.shared.accounts.startSession(user, { via: 'test', kind: 'cookie' });
    for (const [p, body] of [['/api/auth/token/verify/', { token: cookie.refresh }], ['/api/auth/token/refresh/', { refresh: cookie.refresh }]] as const) {
      const res = await s.api('POST', p, { body });
      expect([p, res.status, res.body.code]).toEqual([p, 401, 'token_not_valid']);
    }
    expect((await s.api('GET', '/api/auth/user/', { headers: { cookie: `ais_session=${cookie.refresh}` } })).status).toBe(200); // still the browser's session
  });

  it('verify refuses a rotated (spent) refresh token without revoking its family', async () => {
    const u = await s.signUp();
    const next = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } });
    expect(next.status).toBe(200);
    const spent = await s.api('POST', '/api/auth/token/verify/', { body: { token: u.refresh } });
    expect([spent.status, spent.body.code]).toEqual([401, 'token_not_valid']);
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: next.body.refresh } })).status).toBe(200);
  });

  it('an expired access token answers 401 token_expired', async () => {
    // 3 s: times are whole seconds, so a token is valid for at least 2 s after it is issued
    // (with 1 s, one issued late in a second expired within milliseconds on a busy machine).
    const short = await startTestServer({ ACCESS_TOKEN_TTL: '3' });
    try {
      const u = await short.signUp();
      // Used once while valid: the gateway keeps verified tokens, and must still see expiry.
      expect((await short.api('GET', '/api/auth/user/', { token: u.access })).status).toBe(200);
      await new Promise((r) => setTimeout(r, 4100));
      const res = await short.api('GET', '/api/auth/user/', { token: u.access });
      expect(res.status).toBe(401);
      expect(res.body.code).toBe('token_expired');
      // ...and the refresh token still gets a new one.
      const refreshed = await short.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } });
      expect(refreshed.status).toBe(200);
    } finally {
      await short.close();
    }
  });
});

describe('user record (GET/PUT/PATCH /api/auth/user/, GET /api/master/)', () => {
  it('reads the user; only username, first_name and last_name are writable', async () => {
    const u = await s.signUp();
    const got = await s.api('GET', '/api/auth/user/', { token: u.access });
    expect(got.body).toEqual(u.user);
    const newName = uniq();
    const put = await s.api('PUT', '/api/auth/user/', { token: u.access, body: { username: newName, first_name: 'Ada', last_name: 'Lovelace', email: 'evil@example.com', pk: 999 } });
    expect(put.status).toBe(200);
    expect(put.body).toEqual({ pk: u.user.pk, username: newName, email: u.user.email, first_name: 'Ada', last_name: 'Lovelace' });
    const patch = await s.api('PATCH', '/api/auth/user/', { token: u.access, body: { last_name: 'Byron' } });
    expect(patch.body).toMatchObject({ username: newName, first_name: 'Ada', last_name: 'Byron' });
    const master = await s.api('GET', '/api/master/', { token: u.access });
    expect(master.body).toEqual({ first_name: 'Ada', last_name: 'Byron', email: u.user.email });
    // The old username is free again; the new one is taken.
    const again = await s.api('POST', '/api/auth/social/', { body: { username: u.user.username, email: `${uniq()}@example.com`, password1: 'p', password2: 'p' } });
    expect(again.status).toBe(201);
    const taken = await s.api('PATCH', '/api/auth/user/', { token: again.body.access, body: { username: newName } });
    expect(taken.status).toBe(400);
  });

  it('PUT requires username; limits are 150 characters', async () => {
    const u = await s.signUp();
    expect((await s.api('PUT', '/api/auth/user/', { token: u.access, body: { first_name: 'x' } })).body.username).toEqual(['This field is required.']);
    const long = await s.api('PATCH', '/api/auth/user/', { token: u.access, body: { first_name: 'x'.repeat(151) } });
    expect(long.status).toBe(400);
    expect(long.body.first_name).toHaveLength(1);
  });
});

describe('password change, logout and reset', () => {
  it('password change invalidates refresh tokens (401 token_expired) and the new password works', async () => {
    const u = await s.signUp();
    const res = await s.api('POST', '/api/auth/password/change/', { token: u.access, body: { new_password1: 'brand-new', new_password2: 'brand-new' } });
    expect(res.status).toBe(200);
    expect(res.body.detail).toEqual(expect.any(String));
    const refresh = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } });
    expect(refresh.status).toBe(401);
    expect(refresh.body.code).toBe('token_expired');
    expect((await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } })).status).toBe(400);
    expect((await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: 'brand-new' } })).status).toBe(200);
  });

  it('a password change is mailed to the owner (a stolen token takes no old password), without the password', async () => {
    const u = await s.signUp();
    expect((await s.api('POST', '/api/auth/password/change/', { token: u.access, body: { new_password1: 'changed-Pass-1', new_password2: 'changed-Pass-1' } })).status).toBe(200);
    const mail = await sink.waitFor((m) => m.envelope.to.includes(u.user.email) && m.parsed.subject === 'Your password was changed');
    const text = mail.parsed.text ?? '';
    expect(text).toContain(`The password of ${u.user.username} was changed`);
    expect(text).toContain('by a signed-in client');
    expect(text).toContain(`${s.runtime.config.publicUrl}/forgot-password`);
    expect(text).not.toContain('changed-Pass-1');
    expect(mail.raw.toString()).not.toMatch(/argon2/);
  });

  it('GET /api/auth/sessions/ lists the live sessions (this one marked); DELETE ends one, its refresh token dies, the others live', async () => {
    const u = await s.signUp(); // session 1: the sign-up
    const second = (await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } })).body;
    const list = await s.api('GET', '/api/auth/sessions/', { token: second.access });
    expect(list.status).toBe(200);
    expect(list.body).toHaveLength(2);
    const [latest, first] = list.body as Array<Record<string, unknown>>;
    expect(latest).toMatchObject({ kind: 'token', via: 'password', current: true, key_uuid: null, refreshed_dt: null });
    expect(first).toMatchObject({ kind: 'token', via: 'register', current: false });
    for (const k of ['started_dt', 'expires_dt']) expect(latest[k]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    // Pages like every list (DECISIONS: limit, cursor, Link rel="next").
    const page = await s.api('GET', '/api/auth/sessions/?limit=1', { token: second.access });
    expect(page.body).toHaveLength(1);
    expect(page.headers.get('link')).toMatch(/rel="next"/);

    expect((await s.api('DELETE', `/api/auth/sessions/${first.uuid}/`, { token: second.access })).status).toBe(204);
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } })).body.code).toBe('token_expired');
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: second.refresh } })).status).toBe(200);
    const after = await s.api('GET', '/api/auth/sessions/', { token: second.access });
    expect(after.body.map((x: { uuid: string }) => x.uuid)).toEqual([latest.uuid]);
    // Ended already, another account's, or no uuid at all: 404 alike.
    expect((await s.api('DELETE', `/api/auth/sessions/${first.uuid}/`, { token: second.access })).status).toBe(404);
    const stranger = await s.signUp();
    const theirs = (await s.api('GET', '/api/auth/sessions/', { token: stranger.access })).body[0].uuid as string;
    expect((await s.api('DELETE', `/api/auth/sessions/${theirs}/`, { token: second.access })).status).toBe(404);
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: stranger.refresh } })).status).toBe(200);
    expect((await s.api('DELETE', '/api/auth/sessions/not-a-uuid/', { token: second.access })).status).toBe(404);
    expect((await s.api('GET', '/api/auth/sessions/')).status).toBe(401);
  });

  it('sessions: a management key (an account credential) lists and ends them, upper-case uuid too; an identity key may not (403)', async () => {
    const u = await s.signUp();
    const mgmt = (await s.api('POST', '/api/auth/keys/management/', { token: u.access, body: { label: 'ops' } })).body.key as string;
    const identity = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'Runtime' } })).body;
    const idKey = (await s.api('POST', '/api/auth/keys/identity/', { token: u.access, body: { label: 'rt', identity_uuid: identity.uuid } })).body.key as string;
    expect((await s.api('GET', '/api/auth/sessions/', { token: idKey })).status).toBe(403);
    const listed = await s.api('GET', '/api/auth/sessions/', { token: mgmt });
    expect(listed.status).toBe(200);
    expect(listed.body).toHaveLength(1);
    expect(listed.body[0].current).toBe(false); // a key is no session
    expect((await s.api('DELETE', `/api/auth/sessions/${listed.body[0].uuid}/`, { token: idKey })).status).toBe(403);
    expect((await s.api('DELETE', `/api/auth/sessions/${String(listed.body[0].uuid).toUpperCase()}/`, { token: mgmt })).status).toBe(204);
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } })).body.code).toBe('token_expired');
  });

  it('password change validates: both required, 1 to 128, matching', async () => {
    const u = await s.signUp();
    expect((await s.api('POST', '/api/auth/password/change/', { body: { new_password1: 'a', new_password2: 'a' } })).status).toBe(401);
    const long = await s.api('POST', '/api/auth/password/change/', { token: u.access, body: { new_password1: 'x'.repeat(129), new_password2: 'x'.repeat(129) } });
    expect(long.status).toBe(400);
    const mismatch = await s.api('POST', '/api/auth/password/change/', { token: u.access, body: { new_password1: 'a', new_password2: 'b' } });
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.new_password2).toHaveLength(1);
    expect(mismatch.body.non_field_errors).toEqual(["The two password fields didn't match."]); // a cross-field rule (DECISIONS)
  });

  it('logout answers {detail} and invalidates the user\'s refresh tokens', async () => {
    const u = await s.signUp();
    const res = await s.api('POST', '/api/auth/logout/', { token: u.access });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ detail: expect.any(String) });
    const refresh = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } });
    expect(refresh.status).toBe(401);
    expect(refresh.body.code).toBe('token_expired');
    expect((await s.api('POST', '/api/auth/logout/')).status).toBe(200); // anonymous is fine
  });

  it('logout with only a refresh token in the body ends that user\'s sessions', async () => {
    const u = await s.signUp();
    const other = await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } });
    expect((await s.api('POST', '/api/auth/logout/', { body: { refresh: u.refresh } })).status).toBe(200);
    for (const refresh of [u.refresh, other.body.refresh]) {
      const res = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh } });
      expect([res.status, res.body.code]).toEqual([401, 'token_expired']);
    }
  });

  it('logout ends the sessions even when the request names an identity that is gone', async () => {
    const u = await s.signUp();
    const identity = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'soon gone' } })).body;
    expect((await s.api('DELETE', `/api/identities/${identity.uuid}/`, { token: u.access })).status).toBe(204);
    const res = await s.api('POST', '/api/auth/logout/', { token: u.access, identity: identity.uuid });
    expect(res.status).toBe(200);
    const refresh = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } });
    expect([refresh.status, refresh.body.code]).toEqual([401, 'token_expired']);
  });

  it('a spent refresh token in the logout body ends nothing', async () => {
    const u = await s.signUp();
    const rotated = await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } });
    const current = await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } });
    expect((await s.api('POST', '/api/auth/logout/', { body: { refresh: u.refresh } })).status).toBe(200);
    for (const refresh of [rotated.body.refresh, current.body.refresh]) {
      expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh } })).status).toBe(200);
    }
  });

  it('password reset: the mailed uid/token set a new password once; old sessions end', async () => {
    const u = await s.signUp();
    const res = await s.api('POST', '/api/auth/password/reset/', { body: { email: u.user.email } });
    expect(res.status).toBe(200);
    const mail = await sink.waitFor((m) => m.envelope.to.includes(u.user.email) && /reset/i.test(m.parsed.subject ?? ''));
    const text = mail.parsed.text ?? '';
    const uid = /uid=([\w-]+)/.exec(text)![1];
    const token = /token=([\w-]+)/.exec(text)![1];
    const bad = await s.api('POST', '/api/auth/password/reset/confirm/', { body: { uid, token: `${token}x`, new_password1: 'n', new_password2: 'n' } });
    expect(bad.status).toBe(400);
    const differ = await s.api('POST', '/api/auth/password/reset/confirm/', { body: { uid, token, new_password1: 'one-pass', new_password2: 'other-pass' } });
    expect([differ.status, Object.keys(differ.body).sort()]).toEqual([400, ['new_password2', 'non_field_errors']]);
    const ok = await s.api('POST', '/api/auth/password/reset/confirm/', { body: { uid, token, new_password1: 'after-reset', new_password2: 'after-reset' } });
    expect(ok.status).toBe(200);
    const again = await s.api('POST', '/api/auth/password/reset/confirm/', { body: { uid, token, new_password1: 'x', new_password2: 'x' } });
    expect(again.status).toBe(400); // single use
    expect((await s.api('POST', '/api/auth/token/refresh/', { body: { refresh: u.refresh } })).body.code).toBe('token_expired');
    expect((await s.api('POST', '/api/auth/login/', { body: { email: u.user.email, password: 'after-reset' } })).status).toBe(200);
    const notice = await sink.waitFor((m) => m.envelope.to.includes(u.user.email) && m.parsed.subject === 'Your password was changed');
    expect(notice.parsed.text).toContain('with a password reset link');
  });

  it('password reset answers the same for an unknown address (no enumeration)', async () => {
    const res = await s.api('POST', '/api/auth/password/reset/', { body: { email: 'nobody@example.com' } });
    expect(res.status).toBe(200);
    expect((await s.api('POST', '/api/auth/password/reset/', { body: { email: 'not-an-email' } })).status).toBe(400);
  });

  it('email verification: the mailed key verifies; resend answers 201', async () => {
    const u = await s.signUp();
    const mail = await sink.waitFor((m) => m.envelope.to.includes(u.user.email) && /confirm/i.test(m.parsed.subject ?? ''));
    const key = /verify-email\/:\n(\S+)/.exec(mail.parsed.text ?? '')![1];
    expect((await s.api('POST', '/api/auth/social/verify-email/', { body: { key: 'bogus' } })).status).toBe(400);
    // A key whose (unsigned) payload is any JSON at all: `null` was a 500, on the page too.
    for (const payload of ['null', '1', '"s"', '[]', '{}', '{"pk":"1","exp":1}']) {
      const forged = `${Buffer.from(payload).toString('base64url')}.abc`;
      const res = await s.api('POST', '/api/auth/social/verify-email/', { body: { key: forged } });
      expect([payload, res.status, res.body]).toEqual([payload, 400, { key: ['Invalid or expired verification key.'] }]);
      expect([payload, (await fetch(`${s.url}/verify-email?key=${forged}`)).status]).toEqual([payload, 400]);
    }
    const ok = await s.api('POST', '/api/auth/social/verify-email/', { body: { key } });
    expect(ok.status).toBe(200);
    expect(ok.body.detail).toEqual(expect.any(String));
    const resend = await s.api('POST', '/api/auth/social/resend-email/', { body: { email: u.user.email } });
    expect(resend.status).toBe(201);
    expect(resend.body.detail).toEqual(expect.any(String));
  });
});

describe('account mails while the relay is down', () => {
  it('on a new install, a mail still waiting for the relay at a restart goes out after it (the first start is not repeated)', async () => {
    let accept = false;
    const relay = await startSmtpSink(0, { refuseRcpt: () => (accept ? null : { code: 451, message: '4.3.0 not yet' }) });
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-first-start-'));
    const config = loadConfig({ PORT: '0', SMTP_PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'silent', PASSWORD_HASH_MEMORY_KIB: '19456', SMTP_RELAY_URL: relay.url });
    try {
      // An empty log: the sign-up is the first event there is.
      const warned: string[] = [];
      const first = await startRuntime(config, { logger: pino({ level: 'warn' }, { write: (line: string) => void warned.push(JSON.parse(line).msg) }) });
      const res = await fetch(`${first.url}/api/auth/social/`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ username: 'firstcomer', email: 'firstcomer@example.com', password1: 'pw-Secret-1', password2: 'pw-Secret-1' }),
      });
      expect(res.status).toBe(201);
      // Its mail deferred once (the relay said 451; the job waits out its backoff): a fixed
      // 500 ms could be too short on a loaded machine.
      await eventually(() => warned.includes('account mail deferred'));
      await first.close();
      accept = true;
      const second = await startRuntime(config, { logger: pino({ level: 'silent' }) });
      try {
        await relay.waitFor((m) => m.envelope.to.includes('firstcomer@example.com'), 15_000).catch(() => null);
        expect(relay.messages.map((m) => [m.envelope.to, m.parsed.subject])).toEqual([[['firstcomer@example.com'], 'Confirm your email address']]);
      } finally {
        await second.close();
      }
    } finally {
      await relay.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('an address the relay keeps deferring (450) holds up no other account\'s mail', async () => {
    const relay = await startSmtpSink(0, { refuseRcpt: (address) => (address.endsWith('@blocked.test') ? { code: 450, message: '4.1.2 try later' } : null) });
    const svc = await startTestServer({ SMTP_RELAY_URL: relay.url });
    try {
      const stuck = uniq();
      expect((await svc.api('POST', '/api/auth/social/', { body: { username: stuck, email: `${stuck}@blocked.test`, password1: 'pw-Secret-1', password2: 'pw-Secret-1' } })).status).toBe(201);
      const u = await svc.signUp();
      expect((await svc.api('POST', '/api/auth/password/reset/', { body: { email: u.user.email } })).status).toBe(200);
      // Two jobs of their own (the sign-up's confirmation, the reset): either may land first.
      for (const subject of ['Reset your password', 'Confirm your email address']) {
        await relay.waitFor((m) => m.envelope.to.includes(u.user.email) && m.parsed.subject === subject);
      }
    } finally {
      await svc.close();
      await relay.close();
    }
  }, 60_000);

  it('reset and resend answer as for an unknown address (no 500, no oracle); the mails go out once the relay is back', async () => {
    const port = await freePort(); // nothing listens there yet
    const down = await startTestServer({ SMTP_RELAY_URL: `smtp://127.0.0.1:${port}` });
    let late: SmtpSink | null = null;
    try {
      const u = await down.signUp(); // its verification mail is due too
      const known = await down.api('POST', '/api/auth/password/reset/', { body: { email: u.user.email } });
      const unknown = await down.api('POST', '/api/auth/password/reset/', { body: { email: `nobody-${uniq()}@example.com` } });
      expect([known.status, known.body]).toEqual([unknown.status, unknown.body]);
      expect(known.status).toBe(200);
      const resend = await down.api('POST', '/api/auth/social/resend-email/', { body: { email: u.user.email } });
      expect(resend.status).toBe(201);
      late = await startSmtpSink(port);
      const reset = await late.waitFor((m) => m.envelope.to.includes(u.user.email) && /reset/i.test(m.parsed.subject ?? ''), 20_000);
      const [, uid, token] = /uid=(\S+) and token=(\S+) to/.exec(reset.parsed.text ?? '')!;
      const ok = await down.api('POST', '/api/auth/password/reset/confirm/', { body: { uid, token, new_password1: 'after-outage', new_password2: 'after-outage' } });
      expect(ok.status).toBe(200);
      const verify = await late.waitFor((m) => m.envelope.to.includes(u.user.email) && /confirm/i.test(m.parsed.subject ?? ''), 20_000);
      const key = /verify-email\/:\n(\S+)/.exec(verify.parsed.text ?? '')![1];
      expect((await down.api('POST', '/api/auth/social/verify-email/', { body: { key } })).status).toBe(200);
    } finally {
      await down.close();
      await late?.close();
    }
  }, 60_000);
});

describe('wire conventions', () => {
  it('GET /api/health/ answers {status: ok} without credentials, with or without the trailing slash', async () => {
    expect((await s.api('GET', '/api/health/')).body).toEqual({ status: 'ok' });
    expect((await s.api('GET', '/api/health')).body).toEqual({ status: 'ok' });
  });

  it('unknown paths answer 404 {detail, code}; wrong methods 405', async () => {
    const nf = await s.api('GET', '/api/does-not-exist/');
    expect(nf.status).toBe(404);
    expect(nf.body).toEqual({ detail: expect.any(String), code: 'not_found' });
    const na = await s.api('DELETE', '/api/health/');
    expect(na.status).toBe(405);
    expect(na.body.code).toBe('method_not_allowed');
    expect(na.headers.get('allow')).toMatch(/\bGET\b/); // RFC 9110 §15.5.6
    // OPTIONS answers every known path with its methods, OPTIONS among them (as DRF's Allow);
    // no Access-Control-* header: the API grants no cross-origin access.
    const options = await fetch(`${s.url}/api/identities/`, { method: 'OPTIONS', headers: { origin: 'http://elsewhere.example', 'access-control-request-method': 'POST' } });
    expect(options.status).toBe(200);
    expect(options.headers.get('allow')!.split(', ').sort()).toEqual(['GET', 'HEAD', 'OPTIONS', 'POST']);
    expect([...options.headers.keys()].filter((h) => h.startsWith('access-control-'))).toEqual([]);
    expect([options.headers.get('content-length'), options.headers.get('content-type')]).toEqual(['0', null]); // no content, no type
    expect(na.headers.get('allow')).toContain('OPTIONS');
  });

  it('malformed JSON is a 400, not a 500; bodies over 1 MiB are 413', async () => {
    const bad = await s.api('POST', '/api/auth/login/', { body: '{"username":', headers: { 'content-type': 'application/json' } });
    expect(bad.status).toBe(400);
    expect(bad.body.detail).toMatch(/JSON/);
    const big = await s.api('POST', '/api/auth/login/', { body: JSON.stringify({ username: 'x'.repeat(1024 * 1024 + 10), password: 'x' }) });
    expect(big.status).toBe(413);
    const arr = await s.api('POST', '/api/auth/login/', { body: '[1,2]' });
    expect(arr.status).toBe(400);
  });

  it('answers carry a request id and security headers, errors included; API answers are not cached', async () => {
    for (const res of [await s.api('GET', '/api/health/'), await s.api('GET', '/api/auth/user/')]) {
      expect(res.headers.get('x-request-id')).toBeTruthy();
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('cache-control')).toBe('no-store');
    }
    const echoed = await s.api('GET', '/api/health/', { headers: { 'x-request-id': 'trace-123' } });
    expect(echoed.headers.get('x-request-id')).toBe('trace-123');
  });
});
