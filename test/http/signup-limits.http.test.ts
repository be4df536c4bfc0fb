/**
 * What an unauthenticated sign-up may cost (security audit): one refused for a taken
 * username or email does no Argon2 work and appends nothing, no hash outlives its answer,
 * and sign-ups that do the work are limited per client address (SIGNUP_LIMIT_PER_HOUR).
 */
import { jest } from '@jest/globals';
import argon2 from 'argon2';
import { startTestServer, type TestServer } from '../support/server.js';
import { RESERVED } from '../../services/kernel/reservations.js';
import { userStream } from '../../services/accounts/events.js';

let s: TestServer;

beforeAll(async () => {
  s = await startTestServer();
});
afterAll(async () => {
  await s?.close();
});

const uniq = () => `u${Date.now().toString(36)}${Math.random().toString(36).slice(2, 7)}`;

const signUpAs = (server: TestServer, username: string, email = `${username}@example.com`, headers: Record<string, string> = {}) =>
  server.api('POST', '/api/auth/social/', { body: { username, email, password1: 'x', password2: 'x' }, headers });

/**
 * Events appended while `work` runs, anywhere in the log but the stream of `aside` (an account
 * signed up just before, whose verification mail the mail reactor may record meanwhile).
 */
async function eventsDuring(aside: number, work: () => Promise<unknown>): Promise<string[]> {
  const before = (await s.runtime.events.readAll()).at(-1)?.position ?? null;
  await work();
  const appended = await s.runtime.events.readAll({ after: before });
  return appended.filter((e) => e.stream !== userStream(aside)).map((e) => `${e.type} ${e.stream}`);
}

/** Resolves once `ready()` holds, or after `timeoutMs` (a test that then fails says why). */
async function until(ready: () => boolean, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!ready() && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
}

/** Counts argon2.hash calls, and keeps which passwords are being hashed now (the service calls it through the same module object). */
function watchHashes() {
  const real = argon2.hash.bind(argon2);
  const seen = { started: 0, running: new Set<string>() };
  const spy = jest.spyOn(argon2, 'hash').mockImplementation(((password: string, options: Parameters<typeof argon2.hash>[1]) => {
    seen.started++;
    seen.running.add(password);
    return real(password, options).finally(() => seen.running.delete(password));
  }) as typeof argon2.hash);
  return { seen, restore: () => spy.mockRestore() };
}

describe('a sign-up refused for a taken name', () => {
  it('appends no event (no user number spent) for a taken username or email, and answers as before', async () => {
    const taken = await s.signUp();
    let byName: Awaited<ReturnType<typeof signUpAs>> | undefined;
    let byEmail: Awaited<ReturnType<typeof signUpAs>> | undefined;
    const appended = await eventsDuring(taken.user.pk, async () => {
      byName = await signUpAs(s, taken.user.username.toUpperCase(), `${uniq()}@example.com`);
      byEmail = await signUpAs(s, uniq(), taken.user.email);
    });
    expect(byName!.status).toBe(400);
    expect(byName!.body.username).toEqual(['A user with that username already exists.']);
    expect(byEmail!.status).toBe(400);
    expect(byEmail!.body.email).toEqual(['A user is already registered with this e-mail address.']);
    expect(appended).toEqual([]);
    // The next account still gets the next number.
    const next = await s.signUp();
    expect(next.user.pk).toBe(taken.user.pk + 1);
  });

  it('does no password hashing', async () => {
    const taken = await s.signUp();
    const hashes = watchHashes();
    try {
      expect((await signUpAs(s, taken.user.username)).status).toBe(400);
      expect((await signUpAs(s, uniq(), taken.user.email)).status).toBe(400);
      expect(hashes.seen.started).toBe(0);
    } finally {
      hashes.restore();
    }
  });

  it('leaves no hash of its own running once answered, when it lost a race for the name', async () => {
    const name = uniq();
    const racers = 4;
    const hashes = watchHashes();
    // Reservations wait until every racer is hashing: all pass the early look, and three lose
    // at the reservation (the race the look cannot settle).
    const append = s.runtime.events.append.bind(s.runtime.events);
    const gate = jest.spyOn(s.runtime.events, 'append').mockImplementation(async (stream, events, options) => {
      if (events.some((e) => e.type === RESERVED)) await until(() => hashes.seen.started >= racers, 3000);
      return append(stream, events, options);
    });
    try {
      const stillHashingAtLoss: boolean[] = [];
      const answers = await Promise.all(
        Array.from({ length: racers }, async (_, i) => {
          const password = `racer-${i}-${name}`;
          const res = await s.api('POST', '/api/auth/social/', { body: { username: name, email: `${uniq()}@example.com`, password1: password, password2: password } });
          if (res.status === 400) stillHashingAtLoss.push(hashes.seen.running.has(password));
          return res.status;
        }),
      );
      expect(answers.sort()).toEqual([201, 400, 400, 400]);
      expect(hashes.seen.started).toBe(racers);
      expect(stillHashingAtLoss).toEqual([false, false, false]);
    } finally {
      gate.mockRestore();
      hashes.restore();
    }
  });
});

describe('SIGNUP_LIMIT_PER_HOUR', () => {
  it('answers 429 with Retry-After past the limit for one address; sign-ups refused before hashing do not count; another address is not held up', async () => {
    const t = await startTestServer({ SIGNUP_LIMIT_PER_HOUR: '3', TRUST_PROXY: '1' });
    try {
      const from = (address: string) => ({ 'x-forwarded-for': address });
      const first = uniq();
      expect((await signUpAs(t, first, undefined, from('10.0.0.7'))).status).toBe(201);
      // A taken name is refused before any work: it does not spend the budget.
      for (let i = 0; i < 5; i++) expect((await signUpAs(t, first, `${uniq()}@example.com`, from('10.0.0.7'))).status).toBe(400);
      expect((await signUpAs(t, uniq(), undefined, from('10.0.0.7'))).status).toBe(201);
      expect((await signUpAs(t, uniq(), undefined, from('10.0.0.7'))).status).toBe(201);

      const refused = await signUpAs(t, uniq(), undefined, from('10.0.0.7'));
      expect(refused.status).toBe(429);
      expect(refused.body.code).toBe('throttled');
      expect(refused.body.detail).toMatch(/^Too many sign-ups from this address\. Try again in \d+ seconds\.$/);
      const wait = Number(refused.headers.get('retry-after'));
      expect(wait).toBeGreaterThan(3500);
      expect(wait).toBeLessThanOrEqual(3600);
      // The dashboard's sign-up form counts the same, and answers as the API does: 429 with Retry-After.
      const page = await fetch(`${t.url}/register`, { headers: from('10.0.0.7') });
      const cookie = page.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
      const csrf = /name="csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? '';
      const name = uniq();
      const form = new URLSearchParams({ csrf, username: name, email: `${name}@example.com`, password1: 'a fine password', password2: 'a fine password' });
      const web = await fetch(`${t.url}/register`, { method: 'POST', headers: { ...from('10.0.0.7'), cookie, 'content-type': 'application/x-www-form-urlencoded' }, body: form, redirect: 'manual' });
      expect([web.status, Number(web.headers.get('retry-after')) > 3500]).toEqual([429, true]);
      expect(await web.text()).toMatch(/Too many sign-ups from this address\. Try again in \d+ seconds\./);

      expect((await signUpAs(t, uniq(), undefined, from('10.0.0.8'))).status).toBe(201);
      // IPv6 counts by its /64, as every throttle by address.
      for (let i = 1; i <= 3; i++) expect((await signUpAs(t, uniq(), undefined, from(`2001:db8:0:7::${i}`))).status).toBe(201);
      expect((await signUpAs(t, uniq(), undefined, from('2001:db8:0:7::99'))).status).toBe(429);
    } finally {
      await t.close();
    }
  });

  it('is validated at start like the other limits', async () => {
    await expect(startTestServer({ SIGNUP_LIMIT_PER_HOUR: '0' })).rejects.toThrow(/SIGNUP_LIMIT_PER_HOUR must be an integer from 1 to 10000000 \(got "0"\)/);
  });
});
