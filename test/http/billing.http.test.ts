/** Plans, subscription, admin API and phone provisioning (DECISIONS "Plans and admin"; SPEC 402). */
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';
import { eventually } from '../support/eventually.js';
import { whileReadModelsFull } from '../support/read-models-full.js';
import { holderOf } from '../../services/kernel/reservations.js';

const ADMIN = 'admin-token-for-tests-0123456789';
let s: TestServer;

const admin = (pk: number, body: unknown, token = ADMIN) =>
  s.api('PUT', `/api/admin/users/${pk}/subscription/`, { body, headers: token ? { authorization: `Bearer ${token}` } : {} });

beforeAll(async () => {
  s = await startTestServer({ ADMIN_TOKEN: ADMIN });
});
afterAll(async () => {
  await s?.close();
});

describe('subscription', () => {
  it('a new account is on free, active, with no phone and the email limits', async () => {
    const u = await s.signUp();
    const res = await s.api('GET', '/api/subscription/', { token: u.access });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ plan: 'free', status: 'active', phone_limit: 0, phones_used: 0, phones_available: 0, email_limit_hour: 60, email_limit_day: 500 });
  });

  it('401 without a credential', async () => {
    expect((await s.api('GET', '/api/subscription/')).status).toBe(401);
  });
});

describe('admin API', () => {
  it('PUT sets plan and status (200 with the subscription); every change is a SubscriptionChanged event', async () => {
    const u = await s.signUp();
    const res = await admin(u.user.pk, { plan: 'team', status: 'past_due' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual(expect.objectContaining({ plan: 'team', status: 'past_due', phone_limit: 25, phones_available: 0 }));
    expect((await s.api('GET', '/api/subscription/', { token: u.access })).body.plan).toBe('team');
    const events = await s.runtime.events.readStream(`subscription-${u.user.pk}`);
    expect(events.map((e) => [e.type, e.data.plan, e.data.status, e.data.previousPlan])).toEqual([['SubscriptionChanged', 'team', 'past_due', 'free']]);
  });

  it('PUT without status keeps the account\'s own (a plan change does not reactivate a canceled customer); a new account gets active', async () => {
    const fresh = await s.signUp();
    expect((await admin(fresh.user.pk, { plan: 'developer' })).body).toMatchObject({ plan: 'developer', status: 'active' });
    const u = await s.signUp();
    expect((await admin(u.user.pk, { plan: 'team', status: 'canceled' })).status).toBe(200);
    expect((await admin(u.user.pk, { plan: 'developer' })).body).toMatchObject({ plan: 'developer', status: 'canceled' });
  });

  it('401 without a token or with a bad one (token_not_valid), 403 for a valid user credential', async () => {
    const u = await s.signUp();
    expect((await admin(u.user.pk, { plan: 'team' }, '')).status).toBe(401);
    const wrong = await admin(u.user.pk, { plan: 'team' }, 'wrong');
    expect([wrong.status, wrong.body.code]).toEqual([401, 'token_not_valid']);
    expect((await admin(u.user.pk, { plan: 'team' }, u.access)).status).toBe(403);
    // The user's credential in another form (HTTP basic) lacks the scope as much.
    const basic = await s.api('PUT', `/api/admin/users/${u.user.pk}/subscription/`, { body: { plan: 'team' }, headers: { authorization: `Basic ${Buffer.from(`${u.user.username}:${u.password}`).toString('base64')}` } });
    expect([basic.status, basic.body.code]).toEqual([403, 'permission_denied']);
    // The `Token` scheme, as the rest of the API reads it, is Bearer here too.
    const token = await s.api('PUT', `/api/admin/users/${u.user.pk}/subscription/`, { body: { plan: 'team' }, headers: { authorization: `Token ${ADMIN}` } });
    expect([token.status, token.body.plan]).toEqual([200, 'team']);
  });

  it('the same change sent twice at once: both answers show it (the one that changed nothing waited for the read models too)', async () => {
    const plans = ['team', 'developer'] as const;
    for (let i = 0; i < 12; i++) {
      const u = await s.signUp();
      const plan = plans[i % 2]!;
      const answers = await Promise.all([admin(u.user.pk, { plan }), admin(u.user.pk, { plan })]);
      expect(answers.map((a) => [a.status, a.body.plan])).toEqual([
        [200, plan],
        [200, plan],
      ]);
    }
  });

  it('404 for an unknown user; 400 for an unknown plan or status', async () => {
    const u = await s.signUp();
    expect((await admin(999999, { plan: 'team' })).status).toBe(404);
    expect((await admin(u.user.pk, { plan: 'platinum' })).body.plan).toEqual(expect.any(Array));
    expect((await admin(u.user.pk, { plan: 'team', status: 'bogus' })).body.status).toEqual(expect.any(Array));
  });
});

describe('admin API disabled', () => {
  it('answers 404 for every /api/admin/ path when ADMIN_TOKEN is unset', async () => {
    const off = await startTestServer();
    try {
      const u = await off.signUp();
      const put = await off.api('PUT', `/api/admin/users/${u.user.pk}/subscription/`, { body: { plan: 'team' }, headers: { authorization: 'Bearer anything' } });
      expect(put.status).toBe(404);
      expect((await off.api('GET', `/api/admin/users/${u.user.pk}/subscription/`)).status).toBe(404);
      expect((await off.api('POST', '/api/admin/anything/')).status).toBe(404);
      // Every method of the admin paths: none tells that they exist (a 405 or an OPTIONS 200 did).
      for (const method of ['POST', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD']) {
        const res = await fetch(`${off.url}/api/admin/users/${u.user.pk}/subscription/`, { method });
        expect([method, res.status, res.headers.get('allow')]).toEqual([method, 404, null]);
      }
    } finally {
      await off.close();
    }
  });
});

describe('phone provisioning', () => {
  it('plan upgrade, then provision_phone succeeds: the identity shows an E.164 number', async () => {
    const u = await s.signUp();
    expect((await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'early', provision_phone: true } })).status).toBe(402);
    // BooleanField's other spellings of true ask for a phone too.
    for (const provision_phone of [1, '1', 'yes', 'on', 'True', 'TRUE', 'YES', 't', 'Y']) {
      expect([provision_phone, (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'early', provision_phone } })).status]).toEqual([provision_phone, 402]);
    }
    expect((await admin(u.user.pk, { plan: 'developer', status: 'active' })).status).toBe(200);
    const res = await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'Caller', provision_phone: 'true' } });
    expect(res.status).toBe(201);
    expect(res.body.phone).toMatch(/^\+1[2-9]\d{2}55501\d{2}$/);
    expect((await s.api('GET', `/api/identities/${res.body.uuid}/`, { token: u.access })).body.phone).toBe(res.body.phone);
    expect((await s.api('GET', '/api/subscription/', { token: u.access })).body).toEqual(expect.objectContaining({ phones_used: 1, phones_available: 2 }));
  });

  it('3 phones max on developer: the 4th is 402 naming team; PUT provision_phone counts too', async () => {
    const u = await s.signUp();
    await admin(u.user.pk, { plan: 'developer' });
    const phones = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const res = await s.api('POST', '/api/identities/', { token: u.access, body: { name: `p${i}`, provision_phone: true } });
      expect(res.status).toBe(201);
      phones.add(res.body.phone);
    }
    expect(phones.size).toBe(3);
    const fourth = await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'p3', provision_phone: true } });
    expect(fourth.status).toBe(402);
    expect(fourth.body).toEqual({ detail: expect.any(String), code: 'payment_required', plan_required: 'team' });
    const plain = await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'p3' } });
    expect(plain.status).toBe(201);
    expect((await s.api('PATCH', `/api/identities/${plain.body.uuid}/`, { token: u.access, body: { provision_phone: true } })).status).toBe(402);
  });

  it('25 phones on team, the largest plan: the 26th is 402 without a plan to name', async () => {
    const u = await s.signUp();
    await admin(u.user.pk, { plan: 'team' });
    const created = await Promise.all(
      Array.from({ length: 25 }, (_, i) => s.api('POST', '/api/identities/', { token: u.access, body: { name: `t${i}`, provision_phone: true } })),
    );
    expect(created.map((r) => r.status)).toEqual(Array(25).fill(201));
    const beyond = await s.api('POST', '/api/identities/', { token: u.access, body: { name: 't25', provision_phone: true } });
    expect(beyond.status).toBe(402);
    expect(beyond.body).toEqual({ detail: expect.stringMatching(/no plan/i), code: 'payment_required' });
  });

  it('concurrent provisioning never exceeds the plan', async () => {
    const u = await s.signUp();
    await admin(u.user.pk, { plan: 'developer' });
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => s.api('POST', '/api/identities/', { token: u.access, body: { name: `race${i}`, provision_phone: true } })));
    expect(results.filter((r) => r.status === 201)).toHaveLength(3);
    expect(results.filter((r) => r.status === 402)).toHaveLength(5);
    expect((await s.api('GET', '/api/subscription/', { token: u.access })).body.phones_used).toBe(3);
  });

  it('parallel requests for a phone on one identity: one phone, one slot, every answer shows it; the plan still holds', async () => {
    const u = await s.signUp();
    await admin(u.user.pk, { plan: 'developer' });
    for (let i = 0; i < 4; i++) {
      const id = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: `same${i}` } })).body.uuid;
      const answers = await Promise.all(Array.from({ length: 6 }, () => s.api('PATCH', `/api/identities/${id}/`, { token: u.access, body: { provision_phone: true } })));
      if (i < 3) {
        expect(answers.map((r) => r.status)).toEqual(Array(6).fill(200));
        expect(new Set(answers.map((r) => r.body.phone)).size).toBe(1);
        expect(answers[0].body.phone).toMatch(/^\+\d+$/);
      } else {
        expect(answers.map((r) => r.status)).toEqual(Array(6).fill(402)); // the 4th phone: the losers freed nobody's slot
      }
      expect((await s.api('GET', '/api/subscription/', { token: u.access })).body.phones_used).toBe(Math.min(i + 1, 3));
    }
  });

  it('phones requested while an admin downgrades: none is kept that the new plan has no room for', async () => {
    for (let round = 0; round < 8; round++) {
      const u = await s.signUp();
      await admin(u.user.pk, { plan: 'developer', status: 'active' });
      const creates = Array.from({ length: 3 }, (_, i) => s.api('POST', '/api/identities/', { token: u.access, body: { name: `racer${round}-${i}`, provision_phone: true } }));
      await new Promise((r) => setTimeout(r, round % 4)); // the downgrade lands among the claims
      const downgrade = await admin(u.user.pk, { plan: 'free', status: 'active' });
      const answers = await Promise.all(creates);
      expect(answers.every((r) => r.status === 201 || r.status === 402)).toBe(true);
      // The downgrade's answer counts every phone claimed before it; none may be claimed after it.
      const after = (await s.api('GET', '/api/subscription/', { token: u.access })).body;
      expect([round, after.phones_used <= downgrade.body.phones_used]).toEqual([round, true]);
      expect(answers.filter((r) => r.status === 201 && r.body.phone).length).toBe(after.phones_used);
    }
  });

  it('a subscription that is not active → 402 even with room in the plan', async () => {
    const u = await s.signUp();
    await admin(u.user.pk, { plan: 'team', status: 'past_due' });
    const res = await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'late payer', provision_phone: true } });
    expect(res.status).toBe(402);
    expect(res.body.code).toBe('payment_required');
    expect(res.body.detail).toMatch(/past_due/);
    expect(res.body).not.toHaveProperty('plan_required'); // the plan it is on already: the status is what to fix
  });

  it('statuses in a billing system\'s usual words are taken as given: trialing provisions like active; cancelled, unpaid, inactive... add no phone', async () => {
    const u = await s.signUp();
    expect((await admin(u.user.pk, { plan: 'developer', status: 'trialing' })).body).toMatchObject({ status: 'trialing', phones_available: 3 });
    expect((await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'on trial', provision_phone: true } })).status).toBe(201);
    for (const status of ['cancelled', 'canceled', 'unpaid', 'inactive', 'suspended', 'expired', 'paused', 'incomplete', 'incomplete_expired']) {
      expect((await admin(u.user.pk, { plan: 'developer', status })).body).toMatchObject({ status, phones_used: 1, phones_available: 0 });
      expect((await s.api('GET', '/api/subscription/', { token: u.access })).body.status).toBe(status);
      const res = await s.api('POST', '/api/identities/', { token: u.access, body: { name: `${status} one`, provision_phone: true } });
      expect([status, res.status, res.body.detail]).toEqual([status, 402, `Your subscription is ${status}; phone numbers need an active subscription.`]);
    }
  });

  it('deleting an identity releases its phone slot; PATCH provision_phone then works', async () => {
    const u = await s.signUp();
    await admin(u.user.pk, { plan: 'developer' });
    const made = [];
    for (let i = 0; i < 3; i++) made.push((await s.api('POST', '/api/identities/', { token: u.access, body: { name: `d${i}`, provision_phone: true } })).body);
    expect((await s.api('DELETE', `/api/identities/${made[0].uuid}/`, { token: u.access })).status).toBe(204);
    expect((await s.api('GET', '/api/subscription/', { token: u.access })).body.phones_used).toBe(2);
    const plain = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'later' } })).body;
    const patched = await s.api('PATCH', `/api/identities/${plain.uuid}/`, { token: u.access, body: { provision_phone: true } });
    expect(patched.status).toBe(200);
    expect(patched.body.phone).toMatch(/^\+1\d{10}$/);
    expect(patched.body.name).toBe('later');
  });

  it('DELETE /api/identities/{uuid}/phone/ releases the number (204): the slot goes back to the plan, SMS to it are refused, the identity keeps its history and may take a phone again', async () => {
    const u = await s.signUp();
    await admin(u.user.pk, { plan: 'developer' });
    const caller = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'releaser', provision_phone: true } })).body;
    const sms = (body: string) => s.api('POST', '/api/webhooks/sms/', { form: { From: '+15550001111', To: caller.phone, Body: body, MessageSid: `SM${Date.now()}${body.length}` } });
    expect((await sms('before')).status).toBe(200);
    // PATCH provision_phone false is no release (a client sending its defaults would lose the number).
    expect((await s.api('PATCH', `/api/identities/${caller.uuid}/`, { token: u.access, body: { provision_phone: false } })).body.phone).toBe(caller.phone);
    const key = (await s.api('POST', '/api/auth/keys/identity/', { token: u.access, body: { label: 'agent', identity_uuid: caller.uuid } })).body.key;
    expect((await s.api('DELETE', `/api/identities/${caller.uuid}/phone/`, { token: key })).status).toBe(403); // account management
    expect((await s.api('DELETE', `/api/identities/${caller.uuid}/phone/`, { token: u.access })).status).toBe(204);
    expect((await s.api('GET', `/api/identities/${caller.uuid}/`, { token: u.access })).body.phone).toBeNull();
    expect((await s.api('GET', '/api/subscription/', { token: u.access })).body).toMatchObject({ phones_used: 0, phones_available: 3 });
    expect((await s.api('GET', '/api/phone/', { token: u.access, identity: caller.uuid })).body).toEqual([]);
    expect((await sms('after')).status).toBe(404);
    expect((await s.api('GET', '/api/messages/', { token: u.access, identity: caller.uuid })).body.map((m: { body: string }) => m.body)).toEqual(['before']);
    const again = await s.api('DELETE', `/api/identities/${caller.uuid}/phone/`, { token: u.access });
    expect([again.status, again.body.detail]).toEqual([404, 'This identity has no phone number.']);
    const other = await s.signUp();
    expect((await s.api('DELETE', `/api/identities/${caller.uuid}/phone/`, { token: other.access })).status).toBe(403);
    expect((await s.api('PATCH', `/api/identities/${caller.uuid}/`, { token: u.access, body: { provision_phone: true } })).body.phone).toMatch(/^\+1\d{10}$/);
  });
});

describe('admin changes while the read models are behind', () => {
  it('a plan change without a status keeps the status the log has (one set just before is not undone)', async () => {
    const u = await s.signUp();
    await whileReadModelsFull(s, async () => {
      expect((await admin(u.user.pk, { plan: 'team', status: 'canceled' })).status).toBe(503); // made, not yet readable
      expect((await admin(u.user.pk, { plan: 'developer' })).status).toBe(503);
      expect((await s.api('PATCH', `/api/admin/users/${u.user.pk}/subscription/`, { body: { plan: 'email' }, headers: { authorization: `Bearer ${ADMIN}` } })).status).toBe(503);
    });
    const view = await eventually(async () => {
      const v = (await s.api('GET', '/api/subscription/', { token: u.access })).body;
      return v.plan === 'email' && v;
    });
    expect(view.status).toBe('canceled');
  }, 40_000);
});

describe('a release answered 503 while the read models are behind', () => {
  it('gives the number back all the same (a retry finds no phone, so nothing else would)', async () => {
    const u = await s.signUp();
    await admin(u.user.pk, { plan: 'developer' });
    const caller = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'lagging releaser', provision_phone: true } })).body;
    await whileReadModelsFull(s, async () => {
      const released = await s.api('DELETE', `/api/identities/${caller.uuid}/phone/`, { token: u.access });
      expect([released.status, released.body.code]).toEqual([503, 'projection_lag']);
    });
    expect(await holderOf(s.runtime.events, 'phonenumber', caller.phone)).toBeNull();
    await eventually(async () => (await s.api('GET', `/api/identities/${caller.uuid}/`, { token: u.access })).body.phone === null);
    expect((await s.api('GET', '/api/subscription/', { token: u.access })).body).toMatchObject({ phones_used: 0, phones_available: 3 });
  }, 30_000);

  it('a deletion answered 503 gives the number and the name back all the same', async () => {
    const u = await s.signUp();
    await admin(u.user.pk, { plan: 'developer' });
    const doomed = (await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'lagging deletion', provision_phone: true } })).body;
    await whileReadModelsFull(s, async () => {
      const deleted = await s.api('DELETE', `/api/identities/${doomed.uuid}/`, { token: u.access });
      expect([deleted.status, deleted.body.code]).toEqual([503, 'projection_lag']);
    });
    expect(await holderOf(s.runtime.events, 'phonenumber', doomed.phone)).toBeNull();
    await eventually(async () => (await s.api('GET', `/api/identities/${doomed.uuid}/`, { token: u.access })).status === 404);
    expect((await s.api('GET', '/api/subscription/', { token: u.access })).body).toMatchObject({ phones_used: 0, phones_available: 3 });
    expect((await s.api('POST', '/api/identities/', { token: u.access, body: { name: 'lagging deletion' } })).status).toBe(201);
  }, 30_000);
});

describe('admin token guessing', () => {
  it('20 wrong admin tokens from one address, then 429 with Retry-After (even for the right one, until the window passes)', async () => {
    const t = await startTestServer({ ADMIN_TOKEN: 'the-admin-token' });
    try {
      const u = await t.signUp();
      const put = (token: string) => t.api('PUT', `/api/admin/users/${u.user.pk}/subscription/`, { token, body: { plan: 'team' } });
      for (let i = 0; i < 20; i++) expect((await put(`guess-${i}`)).status).toBe(401);
      const blocked = await put('guess-21');
      expect([blocked.status, blocked.body.code]).toEqual([429, 'throttled']);
      expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
      expect((await put('the-admin-token')).status).toBe(429);
    } finally {
      await t.close();
    }
  });

  it('a burst of parallel guesses is held to the same 20: the rest are 429', async () => {
    const t = await startTestServer({ ADMIN_TOKEN: 'the-admin-token' });
    try {
      const u = await t.signUp();
      const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => t.api('PUT', `/api/admin/users/${u.user.pk}/subscription/`, { token: `guess-${i}`, body: { plan: 'team' } })));
      expect(answers.filter((a) => a.status === 401).length).toBe(20);
      expect(answers.filter((a) => a.status === 429).length).toBe(40);
    } finally {
      await t.close();
    }
  });
});

describe('behind a proxy (TRUST_PROXY)', () => {
  it('the throttles count the client address the proxy appended, not a forged earlier entry; X-Forwarded-Proto https gives HSTS', async () => {
    const guess = (t: TestServer, xff?: string, proto?: string) =>
      fetch(`${t.url}/api/admin/users/1/subscription/`, {
        method: 'PUT',
        headers: { authorization: 'Bearer wrong', 'content-type': 'application/json', ...(xff ? { 'x-forwarded-for': xff } : {}), ...(proto ? { 'x-forwarded-proto': proto } : {}) },
        body: '{"plan":"team"}',
      });
    const t = await startTestServer({ ADMIN_TOKEN: 'the-admin-token', TRUST_PROXY: '1' });
    try {
      for (let i = 0; i < 20; i++) expect((await guess(t, `10.0.0.1`)).status).toBe(401);
      expect((await guess(t, '10.0.0.1')).status).toBe(429);
      // Another client behind the same proxy is not throttled; a client forging an entry is
      // still the address the proxy saw.
      expect((await guess(t, '10.0.0.2')).status).toBe(401);
      expect((await guess(t, '10.0.0.2, 10.0.0.1')).status).toBe(429);
      expect((await guess(t, '10.0.0.1, 10.0.0.3')).status).toBe(401);
      expect((await guess(t, '10.0.0.3', 'https')).headers.get('strict-transport-security')).toMatch(/max-age=/);
    } finally {
      await t.close();
    }
    // Without TRUST_PROXY the header is the client's claim: ignored, every guess is the socket's.
    const plain = await startTestServer({ ADMIN_TOKEN: 'the-admin-token' });
    try {
      for (let i = 0; i < 20; i++) await guess(plain, `10.1.0.${i}`);
      expect((await guess(plain, '10.1.0.99')).status).toBe(429);
      expect((await guess(plain, '10.1.0.99', 'https')).headers.get('strict-transport-security')).toBeNull();
    } finally {
      await plain.close();
    }
  });
});

describe('the phone provider is down', () => {
  it('503 phone_unavailable with Retry-After and a detail that says why (a deliberate 5xx is not the generic one); nothing is taken', async () => {
    const closed = await freePort(); // nothing listens there: every Twilio call fails
    const t = await startTestServer({ ADMIN_TOKEN: ADMIN, SMS_PROVIDER: 'twilio', TWILIO_ACCOUNT_SID: 'AC0', TWILIO_AUTH_TOKEN: 'tok', TWILIO_API_URL: `http://127.0.0.1:${closed}` });
    try {
      const u = await t.signUp();
      expect((await t.api('PUT', `/api/admin/users/${u.user.pk}/subscription/`, { token: ADMIN, body: { plan: 'developer' } })).status).toBe(200);
      const res = await t.api('POST', '/api/identities/', { token: u.access, body: { name: 'no carrier', provision_phone: true } });
      expect([res.status, res.body.code, res.headers.get('retry-after')]).toEqual([503, 'phone_unavailable', '30']);
      expect(res.body.detail).toMatch(/No phone number could be provisioned/);
      expect((await t.api('GET', '/api/subscription/', { token: u.access })).body.phones_used).toBe(0);
    } finally {
      await t.close();
    }
  });
});
