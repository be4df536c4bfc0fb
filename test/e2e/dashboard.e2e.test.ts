/**
 * The web dashboard (issue 9) end to end in headless Chromium against a real server:
 * register, sign out and in, create identities (and see the plan's 402), mint keys and use
 * them with the API, revoke and see them fail, approve a device code for a polling agent,
 * read a received mail with its HTML sandboxed. Screenshots go to test-artifacts/.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page, type BrowserContext } from 'playwright-core';
import { jest } from '@jest/globals';
import { startTestServer, type TestServer } from '../support/server.js';


jest.setTimeout(120_000);

const ARTIFACTS = path.resolve('test-artifacts');
let s: TestServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;

const username = `human${Date.now() % 1_000_000}`;
const password = 'correct-Horse-battery-9';
const shot = (name: string) => page.screenshot({ path: path.join(ARTIFACTS, `dashboard-${name}.png`), fullPage: true });

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  s = await startTestServer();
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
  context = await browser.newContext();
  page = await context.newPage();
});
afterAll(async () => {
  await browser?.close();
  await s?.close();
});

async function submit(p: Page, buttonName: string | RegExp) {
  await Promise.all([p.waitForLoadState('load'), p.getByRole('button', { name: buttonName }).click()]);
}

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

  it('creates an identity; a phone beyond the plan shows the plan message', async () => {
    await page.getByLabel('Name', { exact: true }).fill('Research agent');
    await page.getByLabel(/Email identifier/).fill(`research${Date.now() % 100000}`);
    await submit(page, 'Create identity');
    expect(new URL(page.url()).pathname).toMatch(/^\/identities\/[0-9a-f-]{36}$/);
    expect(await page.textContent('main')).toContain('Identity created.');
    identityId = new URL(page.url()).pathname.split('/')[2];
    inbox = (await page.locator('dl.kv dd').first().textContent())!.trim();
    expect(inbox).toMatch(/^research\d+@/);
    await shot('identity');

    await page.goto(`${s.url}/`);
    await page.getByLabel('Name', { exact: true }).fill('Phone agent');
    await page.getByLabel(/Provision a phone number/).check();
    await submit(page, 'Create identity');
    expect(await page.textContent('.flash.error')).toContain('Your plan does not allow this');
    expect(await page.locator('tbody tr').count()).toBe(1);
    await shot('home-plan-402');
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
    expect(await page.textContent('main')).toContain('Type the exact name');
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
    const res = await fetch(`${s.url}/api/identities/`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as Array<{ uuid: string }>).map((i: { uuid: string }) => i.uuid)).toEqual([identityId]);
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

  it('shows a received mail, its HTML sandboxed and never executed', async () => {
    const other = await s.signUp();
    const sender = await s.api('POST', '/api/identities/', { token: other.access, body: { name: 'Sender' } });
    expect(sender.status).toBe(201);
    const sent = await s.api('POST', '/api/email-messages/compose/', {
      token: other.access,
      identity: sender.body.uuid,
      body: { to: inbox, subject: 'Hello from a peer', body: '<p id="p">Quarterly <b>numbers</b></p><script>document.title="pwned"</script><img src="https://tracker.example/x.png">', cc: '', bcc: '', attachment_uuids: [] },
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
    expect(await frame.getAttribute('sandbox')).toBe('');
    const inner = page.frameLocator('iframe.mail-html');
    expect(await inner.locator('#p').textContent()).toBe('Quarterly numbers');
    expect(await page.title()).not.toBe('pwned');
    expect(await inner.locator('html').evaluate((el) => el.ownerDocument.title)).not.toBe('pwned');
    await shot('mail-thread');
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
    await p.goto(`${s.url}/forgot-password`);
    await p.getByLabel('Email of your account').fill(`${username}@example.com`);
    await submit(p, 'Send a reset link');
    expect(await p.textContent('main')).toContain('a reset link is on its way');
    // The link the mail carries (same signing as the mail: accounts' reset token).
    const { readdirSync, readFileSync } = await import('node:fs');
    const outbox = path.join(s.dataDir, 'outbox');
    let linkPath = '';
    for (let i = 0; i < 50 && !linkPath; i++) {
      for (const f of readdirSync(outbox, { recursive: true }) as string[]) {
        const text = readFileSync(path.join(outbox, f), 'utf8').replace(/=\r?\n/g, '').replace(/=3D/g, '=');
        const m = text.match(/\/reset-password\?uid=[\w-]+&token=[\w-]+/);
        if (m && text.includes(username)) linkPath = m[0];
      }
      if (!linkPath) await new Promise((r) => setTimeout(r, 100));
    }
    expect(linkPath).not.toBe('');
    await p.goto(`${s.url}${linkPath}`);
    await p.getByLabel('New password', { exact: true }).fill('reset-Secret-77');
    await p.getByLabel('New password again').fill('reset-Secret-77');
    await submit(p, 'Set password');
    expect(await p.textContent('main')).toContain('Your password was reset');
    const login = await s.api('POST', '/api/auth/login/', { body: { username, password: 'reset-Secret-77' } });
    expect(login.status).toBe(200);
    // The link is single-use.
    await p.goto(`${s.url}${linkPath}`);
    await p.getByLabel('New password', { exact: true }).fill('again-Secret-88');
    await p.getByLabel('New password again').fill('again-Secret-88');
    await submit(p, 'Set password');
    expect(await p.textContent('main')).toContain('invalid or has expired');
    await fresh.close();
  });
});
