/**
 * The web dashboard (issue 9) end to end in headless Chromium against a real server:
 * register, sign out and in, create identities (on the free plan no phone number is offered,
 * and the pages say why), mint keys and use them with the API, revoke and see them fail, approve a device code for a polling agent,
 * read a received mail with its HTML sandboxed. Screenshots go to test-artifacts/.
 */
import path from 'node:path';
import type { Browser, Page, BrowserContext } from 'playwright-core';
import { ARTIFACTS, launchBrowser, mailedResetLink, submit } from '../support/browser.js';
import { jest } from '@jest/globals';
import { startTestServer, type TestServer } from '../support/server.js';


jest.setTimeout(120_000);

let s: TestServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;

const username = `human${Date.now() % 1_000_000}`;
const password = 'correct-Horse-battery-9';
const shot = (name: string) => page.screenshot({ path: path.join(ARTIFACTS, `dashboard-${name}.png`), fullPage: true });

beforeAll(async () => {
  s = await startTestServer({ ADMIN_TOKEN: 'x', SMS_WEBHOOK_SECRET: 'y' });
  browser = await launchBrowser();
  context = await browser.newContext();
  page = await context.newPage();
});
afterAll(async () => {
  await browser?.close();
  await s?.close();
});

describe('dashboard', () => {
  let identityId = '';
  let inbox = '';

  it('serves the sign-in page with a strict CSP and redirects anonymous visitors there', async () => {
    const res = await page.goto(`${s.url}/`);
    expect(new URL(page.url()).pathname).toBe('/login');
    const csp = res!.headers()['content-security-policy'];
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).toContain("form-action 'self'");
    expect(csp).not.toContain('unsafe-inline');
    expect(res!.headers()['cache-control']).toBe('no-store');
    await expect(page.getByLabel('Username or email')).toBeDefined();
    await shot('login');
    // The redirect itself (303, not stored) keeps the page asked for, for HEAD as for GET.
    for (const method of ['GET', 'HEAD']) {
      const hop = await fetch(`${s.url}/keys`, { method, redirect: 'manual' });
      expect([method, hop.status, hop.headers.get('location'), hop.headers.get('cache-control')]).toEqual([method, 303, '/login?next=%2Fkeys', 'no-store']);
    }
  });

  it('registers a user, who is then signed in with an HttpOnly SameSite=Lax session cookie', async () => {
    await page.goto(`${s.url}/register`);
    await page.getByLabel('Username').fill(username);
    await page.getByLabel('Email').fill(`${username}@example.com`);
    await page.getByLabel('Password', { exact: true }).fill(password);
    await page.getByLabel('Password again').fill(password + 'x');
    await submit(page, 'Create account');
    expect(await page.textContent('main')).toContain("didn't match");
    await page.getByLabel('Password', { exact: true }).fill(password);
    await page.getByLabel('Password again').fill(password);
    await submit(page, 'Create account');
    expect(new URL(page.url()).pathname).toBe('/');
    expect(await page.textContent('h1')).toBe('Identities');
    const cookie = (await context.cookies()).find((c) => c.name === 'ais_session')!;
    expect(cookie.httpOnly).toBe(true);
    expect(cookie.sameSite).toBe('Lax');
    expect(cookie.path).toBe('/');
    // Subscription and usage are shown (GET /api/subscription/).
    expect(await page.textContent('#sub-h')).toContain('Subscription');
    await shot('home-empty');
  });

  it('signs out (the session is revoked) and signs back in; wrong passwords are refused', async () => {
    const old = (await context.cookies()).find((c) => c.name === 'ais_session')!.value;
    await submit(page, /Sign out/);
    expect(await page.textContent('main')).toContain('You are signed out.');
    expect(new URL(page.url()).pathname).toBe('/login'); // redirected: a reload does not post again
    expect((await fetch(`${s.url}/favicon.ico`)).status).toBe(204);
    expect((await context.cookies()).find((c) => c.name === 'ais_session')).toBeUndefined();
    // The old cookie no longer authenticates anything.
    const reuse = await fetch(`${s.url}/api/auth/user/`, { headers: { cookie: `ais_session=${old}` } });
    expect(reuse.status).toBe(401);

    await page.getByLabel('Username or email').fill(username);
    await page.getByLabel('Password').fill('wrong-password');
    await submit(page, 'Sign in');
    expect(await page.textContent('main')).toContain('Wrong username/email or password.');
    await page.getByLabel('Password').fill(password);
    await submit(page, 'Sign in');
    expect(new URL(page.url()).pathname).toBe('/');
  });

  it('refuses a POST without a valid CSRF token', async () => {
    const cookie = (await context.cookies()).find((c) => c.name === 'ais_session')!;
    const res = await fetch(`${s.url}/identities`, {
      method: 'POST',
      headers: { cookie: `ais_session=${cookie.value}`, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'name=forged&csrf=AAAA',
    });
    expect(res.status).toBe(403);
    const list = await fetch(`${s.url}/api/identities/`, { headers: { cookie: `ais_session=${cookie.value}` } });
    expect(await list.json()).toEqual([]);
  });

  it('refuses a cross-origin cookie write to the API, whatever the case of its path', async () => {
    const cookie = (await context.cookies()).find((c) => c.name === 'ais_session')!;
    const forged = (path: string) =>
      fetch(`${s.url}${path}`, {
        method: 'POST',
        headers: { cookie: `ais_session=${cookie.value}`, origin: 'http://evil.example', 'content-type': 'text/plain' },
        body: JSON.stringify({ name: 'csrf' }),
      });
    const lower = await forged('/api/identities/');
    expect(lower.status).toBe(403);
    expect(((await lower.json()) as { code: string }).code).toBe('csrf_failed');
    // Paths are case-sensitive (as Django's are): another spelling is no route at all, so it
    // cannot slip past the checks made on `/api/` (it once reached the route without them).
    for (const path of ['/API/identities/', '/Api/identities/', '/api/IDENTITIES/']) {
      const res = await forged(path);
      expect(res.status).toBe(404);
    }
    const list = await fetch(`${s.url}/api/identities/`, { headers: { cookie: `ais_session=${cookie.value}` } });
    expect(await list.json()).toEqual([]);
  });

  it('creates an identity; on the free plan no phone number is offered, and the pages say why', async () => {
    await page.getByLabel('Name', { exact: true }).fill('Research agent');
    await page.getByLabel(/Email identifier/).fill(`research${Date.now() % 100000}`);
    await submit(page, 'Create identity');
    expect(new URL(page.url()).pathname).toMatch(/^\/identities\/[0-9a-f-]{36}$/);
    expect(await page.textContent('main')).toContain('Identity created.');
    identityId = new URL(page.url()).pathname.split('/')[2];
    inbox = (await page.locator('dl.kv dd').first().textContent())!.trim();
    expect(inbox).toMatch(/^research\d+@/);
    await shot('identity');

    // No phone on the free plan, and no way to upgrade from here (plans change through the
    // admin API): no checkbox nor button that can only be refused, but the reason.
    const why = "Your plan (free) includes no phone numbers; plans are changed by the service's operator.";
    await page.goto(`${s.url}/`);
    expect(await page.textContent('#phone-usage')).toBe('Not included in the free plan');
    expect(await page.getByLabel(/Provision a phone number/).count()).toBe(0);
    expect(await page.textContent('#phone-note')).toContain(why);
    expect(await page.locator('tbody tr').count()).toBe(1);
    await shot('home-free-plan');
    await page.goto(`${s.url}/identities/${identityId}`);
    expect(await page.getByRole('button', { name: 'Get a phone number' }).count()).toBe(0);
    expect(await page.textContent('#phone-note')).toContain(why);
  });

  it('after a plan upgrade (admin API), creates an identity with a phone and shows its SMS conversation', async () => {
    const me = await s.api('POST', '/api/auth/login/', { body: { username, password } });
    expect(me.status).toBe(200);
    const upgraded = await s.api('PUT', `/api/admin/users/${me.body.user.pk}/subscription/`, { headers: { authorization: 'Bearer x' }, body: { plan: 'developer', status: 'active' } });
    expect(upgraded.status).toBe(200);

    await page.goto(`${s.url}/`);
    const usage = await page.textContent('#sub-h + dl');
    expect(usage).toContain('developer');
    expect(usage).toContain('0 of 3 used');
    await page.getByLabel('Name', { exact: true }).fill('Phone agent');
    await page.getByLabel(/Provision a phone number/).check();
    await submit(page, 'Create identity');
    expect(await page.textContent('main')).toContain('Identity created.');
    const phoneId = new URL(page.url()).pathname.split('/')[2];
    const phone = (await page.locator('dl.kv dd').nth(1).textContent())!.trim();
    expect(phone).toMatch(/^\+\d{8,15}$/);
    // The identity made earlier gets a number from its page.
    await page.goto(`${s.url}/identities/${identityId}`);
    await submit(page, 'Get a phone number');
    expect(await page.textContent('.flash.ok')).toContain('Phone number added.');
    expect((await page.locator('dl.kv dd').nth(1).textContent())!.trim()).toMatch(/^\+\d{8,15}$/);
    expect(await page.getByRole('button', { name: 'Get a phone number' }).count()).toBe(0);

    const hook = await fetch(`${s.url}/api/webhooks/sms/`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-webhook-secret': 'y' },
      body: new URLSearchParams({ From: '+15550199', To: phone, Body: 'Your code is 4711 <b>not bold</b>\nSecond line', MessageSid: `SM${Date.now()}` }),
    });
    expect(hook.status).toBe(200);

    // The identity page lists the conversation (peer, preview, count)...
    let link = page.getByRole('link', { name: '+15550199' });
    for (let i = 0; i < 50; i++) {
      await page.goto(`${s.url}/identities/${phoneId}`);
      link = page.getByRole('link', { name: '+15550199' });
      if (await link.count()) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const row = page.locator('#sms-h + .table-wrap tbody tr').first();
    expect(await row.textContent()).toContain('Your code is 4711');
    await shot('identity-sms');
    // ...and the conversation page shows the message, escaped, with its numbers.
    await Promise.all([page.waitForLoadState('load'), link.click()]);
    expect(await page.textContent('h1')).toBe('SMS with +15550199');
    const message = page.locator('ol.sms li').first();
    expect(await message.locator('.sms-body').textContent()).toBe('Your code is 4711 <b>not bold</b>\nSecond line');
    expect(await message.locator('.sms-body').innerText()).toBe('Your code is 4711 <b>not bold</b>\nSecond line'); // the line break shows
    expect(await message.locator('.meta').textContent()).toContain(`+15550199 → ${phone}`);
    expect(await page.locator('ol.sms b').count()).toBe(0);
    await shot('sms-conversation');

    // The subscription now counts the phones (this identity's and the earlier one's).
    await page.goto(`${s.url}/`);
    expect(await page.textContent('#sub-h + dl')).toContain('2 of 3 used');
    const del = await s.api('DELETE', `/api/identities/${phoneId}/`, { token: me.body.access });
    expect(del.status).toBe(204);
  });

  it('renames an identity, and deletes one only after confirmation', async () => {
    await page.goto(`${s.url}/`);
    await page.getByLabel('Name', { exact: true }).fill('Temporary');
    await submit(page, 'Create identity');
    const tempPath = new URL(page.url()).pathname;
    await page.getByLabel('New name').fill('Temporary two');
    await submit(page, 'Rename');
    expect(await page.textContent('h1')).toBe('Identity Temporary two');
    await page.getByLabel(/to confirm/).fill('wrong name');
    await submit(page, 'Delete identity');
    expect(await page.textContent('main')).toContain("The name typed is not this identity's name.");
    await page.getByLabel(/to confirm/).fill('Temporary two');
    await submit(page, 'Delete identity');
    expect(await page.textContent('main')).toContain('deleted');
    const gone = await page.goto(`${s.url}${tempPath}`);
    expect(gone!.status()).toBe(404);
  });

  it('mints an identity key shown once, which works with the API, then revokes it (401)', async () => {
    await page.goto(`${s.url}/keys`);
    await page.getByLabel('Label of the new identity key').fill('agent runtime');
    await page.getByLabel('Identity', { exact: true }).selectOption(identityId);
    await submit(page, 'Create identity key');
    const key = await page.locator('#new-key').inputValue();
    expect(key).toMatch(/^svc_id_/);
    expect(await page.textContent('.warning')).toContain('shown only once');
    await shot('keys-minted');

    // Never stored in the browser.
    const cookies = JSON.stringify(await context.cookies());
    expect(cookies).not.toContain(key);
    const storage = await page.evaluate(() => { const w = globalThis as unknown as { localStorage: object; sessionStorage: object }; return JSON.stringify({ ...w.localStorage }) + JSON.stringify({ ...w.sessionStorage }); });
    expect(storage).not.toContain(key);

    const who = await fetch(`${s.url}/api/health/whoami/`, { headers: { authorization: `Bearer ${key}` } });
    expect(who.status).toBe(200);
    expect(((await who.json()) as { kind: string }).kind).toBe('identity_key');

    // Listed masked; the full key is not on the list page.
    await page.goto(`${s.url}/keys`);
    const listed = await page.textContent('main');
    expect(listed).not.toContain(key);
    expect(listed).toContain('agent runtime');
    await submit(page, 'Revoke identity key agent runtime');
    expect(await page.textContent('h1')).toBe('Revoke identity key agent runtime?'); // asks first
    await submit(page, /^Revoke$/);
    expect(await page.textContent('main')).toContain('Key revoked');
    const after = await fetch(`${s.url}/api/health/whoami/`, { headers: { authorization: `Bearer ${key}` } });
    expect(after.status).toBe(401);
    await shot('keys');
  });

  it('mints a management key that manages the account through the API', async () => {
    await page.goto(`${s.url}/keys`);
    await page.getByLabel('Label of the new management key').fill('ci');
    await submit(page, 'Create management key');
    const key = await page.locator('#new-key').inputValue();
    expect(key).toMatch(/^svc_mgmt_/);
    // Post/redirect/get: the key is on a GET page; a reload mints nothing and no longer shows it.
    expect(new URL(page.url()).pathname).toBe('/keys');
    expect((await context.cookies()).map((c) => c.name)).not.toContain('ais_minted'); // read once, cleared
    await page.reload();
    expect(await page.locator('#new-key').count()).toBe(0);
    expect(await page.textContent('main')).not.toContain(key);
    const listed = await page.locator('table').first().locator('tbody tr', { hasText: /^ci/ }).count();
    expect(listed).toBe(1);
    const res = await fetch(`${s.url}/api/identities/`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as Array<{ uuid: string }>).map((i: { uuid: string }) => i.uuid)).toEqual([identityId]);
  });

  it('shows every key of a double submit once, and a minted key to no other session', async () => {
    await page.goto(`${s.url}/keys`);
    const csrf = await page.locator('form[action="/keys/management"] input[name="csrf"]').inputValue();
    // Two POSTs before any page shows a key (a double click): both keys are shown, once.
    for (const label of ['twice-a', 'twice-b']) {
      const res = await context.request.post(`${s.url}/keys/management`, { form: { csrf, label }, maxRedirects: 0 });
      expect(res.status()).toBe(303);
    }
    const sealed = (await context.cookies()).find((c) => c.name === 'ais_minted')!;
    expect(sealed).toBeDefined();
    await page.goto(`${s.url}/keys`);
    const shown = [await page.locator('#new-key').inputValue(), await page.locator('#new-key-2').inputValue()];
    expect(shown.every((k) => k.startsWith('svc_mgmt_'))).toBe(true);
    expect(await page.textContent('main')).toContain('2 keys created.');
    // A double click: the browser usually sends the form once; on a busy machine Chromium may
    // send it twice and drop the first answer (its cookie too). Either way the page shows one
    // key, and it is one that was minted.
    await page.goto(`${s.url}/keys`);
    await page.getByLabel('Label of the new management key').fill('double-click');
    await Promise.all([page.waitForURL(`${s.url}/keys`), page.getByRole('button', { name: 'Create management key' }).dblclick()]);
    await page.locator('#new-key').waitFor();
    expect(await page.locator('input.secret').count()).toBe(1);
    const shownKey = await page.locator('#new-key').inputValue();
    const listed = await s.api('GET', '/api/auth/keys/management/', { token: (await s.api('POST', '/api/auth/login/', { body: { username, password } })).body.access });
    const minted = listed.body.filter((k: { label: string }) => k.label === 'double-click') as { masked_key: string }[];
    expect(minted.length === 1 || minted.length === 2).toBe(true);
    expect(minted.map((k) => k.masked_key.split('…')[1])).toContain(shownKey.slice(-4));
    // The same sealed cookie in another session's browser (the same person, signed in again) shows nothing.
    const other = await browser.newContext();
    try {
      const p2 = await other.newPage();
      await p2.goto(`${s.url}/login`);
      await p2.getByLabel('Username or email').fill(username);
      await p2.getByLabel('Password').fill(password);
      await submit(p2, 'Sign in');
      await other.addCookies([{ name: 'ais_minted', value: sealed.value, url: `${s.url}/keys` }]);
      await p2.goto(`${s.url}/keys`);
      expect(await p2.locator('input.secret').count()).toBe(0);
      expect(await p2.textContent('main')).not.toContain(shown[0]);
    } finally {
      await other.close();
    }
  });

  it('approves a device code for a polling agent at /device (linked from the dashboard)', async () => {
    const started = await s.api('POST', '/api/auth/device/');
    expect(started.status).toBe(200);
    const code = started.body.user_code as string;
    await page.goto(`${s.url}/`);
    await Promise.all([page.waitForLoadState('load'), page.getByRole('link', { name: 'Device approvals' }).click()]);
    expect(new URL(page.url()).pathname).toBe('/device');
    await page.goto(`${s.url}/device?user_code=${encodeURIComponent(code)}`);
    await shot('device');
    await submit(page, /^Approve/);
    const polled = await s.api('POST', '/api/auth/device/token/', { body: { device_code: started.body.device_code } });
    expect(polled.status).toBe(200);
    expect(polled.body.management_key).toMatch(/^svc_mgmt_/);
    expect(polled.body.user.username).toBe(username);
  });

  it('shows a received mail, its HTML sandboxed and never executed, its links opening a tab of their own, its attachments downloadable', async () => {
    const other = await s.signUp();
    const sender = await s.api('POST', '/api/identities/', { token: other.access, body: { name: 'Sender' } });
    expect(sender.status).toBe(201);
    const bytes = Buffer.from('%PDF-1.4 quarterly numbers');
    const presigned = await s.api('POST', '/api/email-attachments/presign/', { token: other.access, identity: sender.body.uuid, body: { filename: 'numbers.pdf', content_type: 'application/pdf', size: bytes.length } });
    expect(presigned.status).toBe(201);
    expect((await fetch(presigned.body.upload_url, { method: 'PUT', headers: presigned.body.headers, body: bytes })).ok).toBe(true);
    const sent = await s.api('POST', '/api/email-messages/compose/', {
      token: other.access,
      identity: sender.body.uuid,
      body: { to: inbox, subject: 'Hello from a peer', body: `<style>b { font-style: italic }</style><p id="p" style="color: rgb(200, 0, 0)">Quarterly <b>numbers</b> <a id="go" href="${s.url}/api/health/">next</a></p><script>document.title="pwned"</script><img src="https://tracker.example/x.png">`, cc: '', bcc: '', attachment_uuids: [presigned.body.uuid] },
    });
    expect(sent.status).toBe(201);

    let link = page.getByRole('link', { name: 'Hello from a peer' });
    for (let i = 0; i < 50; i++) {
      await page.goto(`${s.url}/identities/${identityId}`);
      link = page.getByRole('link', { name: 'Hello from a peer' });
      if (await link.count()) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    await Promise.all([page.waitForLoadState('load'), link.click()]);
    expect(await page.textContent('h1')).toBe('Hello from a peer');
    const frame = page.locator('iframe.mail-html');
    expect(await frame.getAttribute('sandbox')).toBe('allow-popups allow-popups-to-escape-sandbox'); // no scripts, no same origin
    const inner = page.frameLocator('iframe.mail-html');
    expect(await inner.locator('#p').textContent()).toBe('Quarterly numbers next');
    // The mail's own styles apply (inline and <style>); nothing else does.
    expect(await inner.locator('#p').evaluate((el) => (globalThis as any).getComputedStyle(el).color)).toBe('rgb(200, 0, 0)');
    expect(await inner.locator('#p b').evaluate((el) => (globalThis as any).getComputedStyle(el).fontStyle)).toBe('italic');
    const bodyUrl = await frame.getAttribute('src');
    const direct = await fetch(`${s.url}${bodyUrl}`, { headers: { cookie: (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ') } });
    expect(direct.headers.get('content-security-policy')).toMatch(/^sandbox allow-popups allow-popups-to-escape-sandbox; default-src 'none'/);
    expect(direct.headers.get('referrer-policy')).toBe('no-referrer');
    // Links in the mail may open a tab of their own (they did nothing: the sandbox had no
    // allow-popups); the frame still runs no script and has no origin (flags checked above).
    // The attachment is a download link.
    const attachment = page.getByRole('link', { name: /numbers\.pdf/ });
    const download = await fetch(`${s.url}${await attachment.getAttribute('href')}`, { headers: { cookie: (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ') } });
    expect([download.status, Buffer.from(await download.arrayBuffer()).equals(bytes)]).toEqual([200, true]);
    expect(await page.title()).not.toBe('pwned');
    expect(await inner.locator('html').evaluate((el) => el.ownerDocument.title)).not.toBe('pwned');
    // A reply sent from this identity shows how far it got (here: delivered, to the peer's inbox).
    const access = (await s.api('POST', '/api/auth/login/', { body: { username, password } })).body.access as string;
    const received = (await s.api('GET', `/api/email-inbox/${new URL(page.url()).pathname.split('/').pop()}/`, { token: access, identity: identityId })).body.messages[0];
    expect((await s.api('POST', `/api/email-messages/${received.uuid}/reply/`, { token: access, identity: identityId, body: { body: '<p>Thanks</p>' } })).status).toBe(201);
    await page.reload();
    expect((await page.innerText('article.message:last-of-type dl')).replace(/\s+/g, ' ')).toContain('Delivery Sent');
    await shot('mail-thread');
  });

  it('edits the profile (username, first and last name) and resends the verification email', async () => {
    await page.goto(`${s.url}/account`);
    await page.getByLabel('Username').fill('bad name!');
    await submit(page, 'Save profile');
    expect(await page.locator('#username-error').textContent()).toContain('Enter a valid username');
    expect(await page.getByLabel('Username').getAttribute('aria-describedby')).toBe('username-error');
    await page.getByLabel('Username').fill(`${username}x`);
    await page.getByLabel('First name').fill('Grace');
    await page.getByLabel('Last name').fill('Hopper');
    await submit(page, 'Save profile');
    expect(await page.textContent('.flash.ok')).toContain('Profile saved.');
    const me = await s.api('POST', '/api/auth/login/', { body: { username: `${username}x`, password } });
    expect(me.status).toBe(200);
    expect(me.body.user).toMatchObject({ username: `${username}x`, first_name: 'Grace', last_name: 'Hopper' });
    // Back to the original name (later tests sign in with it).
    await page.getByLabel('Username').fill(username);
    await submit(page, 'Save profile');
    expect(await page.textContent('main')).toContain(`${username}`);

    const { readdirSync } = await import('node:fs');
    const outbox = path.join(s.dataDir, 'outbox');
    const count = () => (readdirSync(outbox, { recursive: true }) as string[]).filter((f) => f.endsWith('.eml')).length;
    const before = count();
    await submit(page, 'Resend verification email');
    expect(await page.textContent('.flash.ok')).toContain('verification link is on its way');
    let after = count();
    for (let i = 0; i < 50 && after === before; i++) {
      await new Promise((r) => setTimeout(r, 100));
      after = count();
    }
    expect(after).toBe(before + 1);
    await shot('account-profile');
  });

  it('lists the signed-in sessions; signs one out, then everywhere else (this browser stays signed in)', async () => {
    const refreshOf = async () => (await s.api('POST', '/api/auth/login/', { body: { username, password } })).body.refresh as string;
    const stillWorks = async (refresh: string) => (await s.api('POST', '/api/auth/token/refresh/', { body: { refresh } })).status;
    const agent = await refreshOf();
    await page.goto(`${s.url}/account`);
    const rows = page.locator('section[aria-labelledby="sessions-h"] tbody tr');
    expect(await rows.filter({ hasText: '(this browser)' }).count()).toBe(1);
    // The agent approved at /device earlier is named by the key it got.
    expect(await rows.filter({ hasText: /Agent or device, approved at \/device \(key “Device sign-up \d{4}-\d\d-\d\d \d\d:\d\d UTC”\)/ }).count()).toBe(1);
    const apiRow = rows.filter({ hasText: 'API: signed in with the password' });
    expect(await apiRow.count()).toBeGreaterThanOrEqual(1);
    await shot('account-sessions');
    await Promise.all([page.waitForLoadState('load'), apiRow.first().getByRole('button', { name: /^Sign out API: signed in with the password, started/ }).click()]);
    expect(await page.textContent('main')).toContain('The session was signed out.');
    // The most recently active API session was the agent's: its refresh token is dead now.
    expect(await stillWorks(agent)).toBe(401);

    const other = await refreshOf();
    await page.goto(`${s.url}/account`);
    await submit(page, 'Sign out everywhere else');
    expect(new URL(page.url()).pathname).toBe('/account');
    expect(await page.textContent('main')).toContain('Every other session was signed out.');
    expect(await stillWorks(other)).toBe(401);
    expect(await rows.count()).toBe(1); // this browser only, under a fresh session
    expect(await rows.first().textContent()).toContain('(this browser)');

    // Another account's session id (its refresh token's `sid`), posted with this session's form: nothing ends.
    const stranger = await s.signUp();
    const sid = JSON.parse(Buffer.from(stranger.refresh.split('.')[1], 'base64url').toString()).sid as string;
    const formCsrf = await page.locator('form[action="/account/sessions/end-others"] input[name="csrf"]').inputValue();
    const res = await context.request.post(`${s.url}/account/sessions/${sid}/end`, { form: { csrf: formCsrf }, maxRedirects: 0 });
    expect([res.status(), res.headers().location]).toEqual([303, '/account?ended=none']);
    expect(await stillWorks(stranger.refresh)).toBe(200);
    await page.goto(`${s.url}/account?ended=none`);
    expect(await page.textContent('main')).toContain('Nothing to sign out');
  });

  it('changes the password: the old one stops working, the dashboard stays signed in', async () => {
    await page.goto(`${s.url}/account`);
    await page.getByLabel('New password', { exact: true }).fill('another-Secret-42');
    await page.getByLabel('New password again').fill('another-Secret-42');
    await submit(page, 'Change password');
    expect(new URL(page.url()).pathname).toBe('/account');
    expect(await page.textContent('h1')).toBe('Account');
    await shot('account');
    const oldLogin = await s.api('POST', '/api/auth/login/', { body: { username, password } });
    expect(oldLogin.status).toBe(400);
    const newLogin = await s.api('POST', '/api/auth/login/', { body: { username, password: 'another-Secret-42' } });
    expect(newLogin.status).toBe(200);
  });

  it('resets a forgotten password through the mailed link', async () => {
    const fresh = await browser.newContext();
    const p = await fresh.newPage();
    const linkPath = await mailedResetLink(s, { username, email: `${username}@example.com` }, async () => {
      await p.goto(`${s.url}/forgot-password`);
      await p.getByLabel('Email of your account').fill(`${username}@example.com`);
      await submit(p, 'Send a reset link');
      expect(await p.textContent('main')).toContain('a reset link is on its way');
    });
    await p.goto(`${s.url}${linkPath}`);
    await p.getByLabel('New password', { exact: true }).fill('reset-Secret-77');
    await p.getByLabel('New password again').fill('reset-Secret-77');
    await submit(p, 'Set password');
    expect(await p.textContent('main')).toContain('Your password was reset');
    const login = await s.api('POST', '/api/auth/login/', { body: { username, password: 'reset-Secret-77' } });
    expect(login.status).toBe(200);
    // The link is single-use, and its page says so before asking for a password.
    const spent = await p.goto(`${s.url}${linkPath}`);
    expect(spent!.status()).toBe(400);
    expect(await p.textContent('main')).toContain('invalid or has expired');
    expect(await p.getByLabel('New password', { exact: true }).count()).toBe(0);
    expect((await p.goto(`${s.url}/reset-password?uid=x&token=y`))!.status()).toBe(400);
    await fresh.close();
  });
  it('is usable with the keyboard only: Tab through the sign-in form in order, submit with Enter, land on the return path', async () => {
    const kb = await browser.newContext();
    const p = await kb.newPage();
    const res = await p.goto(`${s.url}/keys`);
    // Anonymous: sent to the sign-in page with a validated return path.
    expect(new URL(p.url()).pathname).toBe('/login');
    expect(new URL(p.url()).searchParams.get('next')).toBe('/keys');
    expect(res!.status()).toBe(200);
    expect(await p.getAttribute('html', 'lang')).toBe('en');
    expect(await p.locator('h1').count()).toBe(1);

    const order: string[] = [];
    for (let i = 0; i < 12; i++) {
      await p.keyboard.press('Tab');
      const focused = await p.evaluate(() => {
        const el = (globalThis as unknown as { document: { activeElement: { id: string; tagName: string; textContent: string } | null } }).document.activeElement;
        return el ? el.id || `${el.tagName.toLowerCase()}:${(el.textContent ?? '').trim()}` : '';
      });
      order.push(focused);
      if (focused === 'sign-in') break;
    }
    expect(order[0]).toBe('a:Skip to content');
    const [iLogin, iPassword, iSubmit] = ['login', 'password', 'sign-in'].map((id) => order.indexOf(id));
    expect(iLogin).toBeGreaterThan(0);
    expect(iPassword).toBe(iLogin + 1);
    expect(iSubmit).toBe(iPassword + 1);
    // Focus is visible (an outline on the focused control).
    const outline = await p.locator('#sign-in').evaluate((el) => {
      const g = globalThis as unknown as { getComputedStyle(e: unknown): { outlineStyle: string; outlineWidth: string } };
      const st = g.getComputedStyle(el);
      return `${st.outlineStyle} ${st.outlineWidth}`;
    });
    expect(outline).toMatch(/^solid [1-9]/);

    // Back to the login field, type, and submit with Enter from the password field.
    await p.keyboard.press('Shift+Tab');
    await p.keyboard.press('Shift+Tab');
    await p.keyboard.type(username);
    await p.keyboard.press('Tab');
    await p.keyboard.type('reset-Secret-77');
    await Promise.all([p.waitForURL((u) => u.pathname === '/keys'), p.keyboard.press('Enter')]);
    expect(await p.textContent('h1')).toBe('API keys');
    await p.screenshot({ path: path.join(ARTIFACTS, 'dashboard-keyboard-keys.png'), fullPage: true });

    // Every visible form control has an accessible label on the main pages.
    for (const where of ['/', '/keys', '/account', `/identities/${identityId}`]) {
      await p.goto(`${s.url}${where}`);
      const unlabeled = await p.$$eval('input:not([type=hidden]), select, textarea', (els) =>
        els.filter((el) => {
          const e = el as unknown as { id: string; labels: { length: number } | null; getAttribute(n: string): string | null };
          return !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.getAttribute('aria-labelledby');
        }).map((el) => (el as unknown as { id: string; name: string }).name),
      );
      expect({ where, unlabeled }).toEqual({ where, unlabeled: [] });
      expect(await p.locator('h1').count()).toBe(1);
    }
    await kb.close();
  });

  it('never follows a return path off the site', async () => {
    const other = await browser.newContext();
    const p = await other.newPage();
    for (const next of ['//evil.example/x', 'https://evil.example/', '/\\evil.example', 'javascript:alert(1)', '/..//evil.example', '/a/../..//evil.example']) {
      await p.goto(`${s.url}/login?next=${encodeURIComponent(next)}`);
      expect(await p.locator('input[name="next"]').count()).toBe(0);
    }
    // A forged next posted with the form is ignored too.
    await p.goto(`${s.url}/login`);
    await p.evaluate(() => {
      const d = (globalThis as unknown as { document: { querySelector(s: string): { insertAdjacentHTML(w: string, h: string): void } } }).document;
      d.querySelector('form[action="/login"]').insertAdjacentHTML('beforeend', '<input type="hidden" name="next" value="//evil.example/">');
    });
    await p.getByLabel('Username or email').fill(username);
    await p.getByLabel('Password').fill('reset-Secret-77');
    await submit(p, 'Sign in');
    expect(new URL(p.url()).origin).toBe(s.url);
    expect(new URL(p.url()).pathname).toBe('/');
    await other.close();
  });
});
