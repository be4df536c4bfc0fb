/**
 * The human step of RFC 8628 in a real browser (headless Chromium through playwright-core):
 * the agent polls while a person opens verification_uri_complete, signs in and approves.
 * Two sign-in paths: the local password, and a real external OpenID Provider
 * (`oidc-provider` on a random port, its dev login accepting any name) reached through
 * "Continue with ...": authorization code + PKCE + state + nonce, first approval creates
 * the account, the next one finds it by issuer + subject.
 *
 * Needs Debian's `chromium` (/usr/bin/chromium, or CHROMIUM_PATH). Without it the suite
 * fails loudly rather than passing silently. Screenshots go to test-artifacts/.
 */
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { jest } from '@jest/globals';
import type { TestServer } from '../support/server.js';
import { ARTIFACTS, localContext, startOidcTestServer, type OidcTestServer } from '../support/browser.js';

jest.setTimeout(120_000);

let s: TestServer;
let browser: Browser;
let env: OidcTestServer;
let issuer: string;

beforeAll(async () => {
  env = await startOidcTestServer('agent-identity-device', { DEVICE_POLL_INTERVAL: '1' });
  ({ server: s, browser } = env);
  issuer = env.idp.issuer;
});

const newContext = (): Promise<BrowserContext> => localContext(browser);

afterAll(async () => env?.close());

/** The agent's side: ask for codes, then long-poll (wait: true) until the code settles. */
async function agent() {
  const d = (await s.api('POST', '/api/auth/device/', { body: { client_id: 'e2e-agent' } })).body;
  const result = (async () => {
    for (;;) {
      const res = await s.api('POST', '/api/auth/device/token/', { body: { device_code: d.device_code, wait: true } });
      if (res.status === 400 && (res.body.error === 'authorization_pending' || res.body.error === 'slow_down')) continue;
      return res;
    }
  })();
  result.catch(() => undefined); // a failed test must not leave an unhandled rejection behind
  return { ...d, result } as { device_code: string; user_code: string; verification_uri_complete: string; result: Promise<{ status: number; body: any }> };
}

async function shot(page: Page, name: string) {
  await page.screenshot({ path: path.join(ARTIFACTS, `device-${name}.png`), fullPage: true });
}

async function approveOnPage(page: Page, userCode: string, prefix: string) {
  await page.locator('#approve').waitFor();
  await shot(page, `${prefix}-3-approve`);
  await expectText(page, '.code [aria-hidden="true"]', userCode);
  await page.click('#approve');
  await page.getByRole('heading', { name: 'Device approved' }).waitFor();
  await shot(page, `${prefix}-4-approved`);
}

async function expectText(page: Page, selector: string, text: string) {
  expect((await page.locator(selector).first().textContent())?.trim()).toBe(text);
}

async function whoami(key: string) {
  return s.api('GET', '/api/health/whoami/', { token: key });
}

describe('/device in a browser: local password sign-in', () => {
  let context: BrowserContext;
  afterAll(async () => context?.close());

  it('opens verification_uri_complete, signs in, approves; the polling agent gets tokens and a working management key', async () => {
    const user = await s.signUp();
    const a = await agent();
    context = await newContext();
    const page = await context.newPage();
    const cspViolations: string[] = [];
    page.on('console', (m) => m.type() === 'error' && /Content Security Policy/i.test(m.text()) && cspViolations.push(m.text()));

    await page.goto(a.verification_uri_complete);
    await expectText(page, '.code [aria-hidden="true"]', a.user_code); // RFC 8628 §3.3.1: shown back to compare
    expect(await page.locator(`text=Continue with 127.0.0.1`).count()).toBe(1);
    // The one sign-in of the service (the dashboard's), shown in place, coming back here afterwards.
    expect(await page.getAttribute('form[action="/login"] input[name="next"]', 'value')).toBe(`/device?user_code=${a.user_code}`);
    expect(await page.getAttribute('form[action="/login/oidc"] input[name="next"]', 'value')).toBe(`/device?user_code=${a.user_code}`);
    await shot(page, 'local-1-sign-in');

    await page.fill('#login', user.user.username);
    await page.fill('#password', 'wrong password');
    await page.click('#sign-in');
    await page.getByRole('alert').waitFor();
    await shot(page, 'local-2-wrong-password');
    await page.fill('#password', user.password);
    await page.click('#sign-in');

    await page.locator('#approve').waitFor();
    // RFC 8628 §5.4: the person sees what asks, in the device's own (unchecked) words, and when.
    const facts = (await page.innerText('.facts')).replace(/\s+/g, ' ');
    expect(facts).toContain('The device calls itself e2e-agent (its own word, not checked)');
    expect(facts).toContain('Asked less than a minute ago');
    expect(facts).toMatch(/The code ends in (9|10) minutes/);
    await approveOnPage(page, a.user_code, 'local');
    const res = await a.result;
    expect(res.status).toBe(200);
    expect(res.body.user.pk).toBe(user.user.pk);
    const who = await whoami(res.body.management_key);
    expect(who.status).toBe(200);
    expect(who.body).toMatchObject({ kind: 'management_key', user: { pk: user.user.pk } });

    const cookies = await context.cookies();
    const session = cookies.find((c) => c.name === 'ais_session')!;
    expect(session.httpOnly).toBe(true);
    expect(session.sameSite).toBe('Lax');
    expect(cspViolations).toEqual([]);
  });

  it('typing the code by hand works too, and denying refuses the agent', async () => {
    const a = await agent();
    const page = await context.newPage(); // still signed in from the previous test
    await page.goto(`${s.runtime.config.publicUrl}/device`);
    await page.fill('#user_code', a.user_code.toLowerCase().replace('-', ' '));
    await page.press('#user_code', 'Enter');
    await page.locator('#deny').waitFor();
    await expectText(page, '.code [aria-hidden="true"]', a.user_code);
    await page.click('#deny');
    await page.getByRole('heading', { name: 'Device denied' }).waitFor();
    await shot(page, 'local-5-denied');
    const res = await a.result;
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('access_denied');
  });

  it('says at once when a code cannot be approved: unknown, already decided, already used', async () => {
    const page = await context.newPage(); // signed in
    const url = (code: string) => `${s.runtime.config.publicUrl}/device?user_code=${code}`;
    let res = await page.goto(url('BCDF-GHJK'));
    expect(res!.status()).toBe(404);
    expect(await page.textContent('[role="alert"]')).toContain('Unknown code');
    expect(await page.locator('#approve').count()).toBe(0);
    expect(await page.inputValue('#user_code')).toBe('BCDF-GHJK'); // kept, to correct a typo
    expect(await page.getAttribute('#user_code', 'aria-invalid')).toBe('true');

    const d = (await s.api('POST', '/api/auth/device/')).body; // a device that has not polled yet
    await page.goto(url(d.user_code));
    expect(await page.locator('.facts').innerText()).not.toContain('calls itself'); // it sent no client_id
    await page.click('#approve');
    await page.getByRole('heading', { name: 'Device approved' }).waitFor();
    res = await page.goto(url(d.user_code)); // back to it, before the device has collected its tokens
    expect(res!.status()).toBe(200);
    expect(await page.textContent('[role="status"]')).toContain('You already approved this device');
    expect((await s.api('POST', '/api/auth/device/token/', { body: { device_code: d.device_code } })).status).toBe(200);
    res = await page.goto(url(d.user_code)); // and after
    expect(res!.status()).toBe(409);
    expect(await page.textContent('[role="alert"]')).toContain('already used');
    expect(await page.locator('#approve').count()).toBe(0);
    await page.close();
  });

  it('answers approve and deny with a redirect to their outcome: a reload posts nothing, and still says approved once the device has its tokens', async () => {
    const page = await context.newPage(); // signed in
    const posts: string[] = [];
    page.on('response', (r) => r.request().method() === 'POST' && posts.push(`${new URL(r.url()).pathname} ${r.status()}`));
    for (const [button, title, collected] of [['#approve', 'Device approved', 200], ['#deny', 'Device denied', 400]] as const) {
      const d = (await s.api('POST', '/api/auth/device/')).body;
      posts.length = 0;
      await page.goto(`${s.runtime.config.publicUrl}/device?user_code=${d.user_code}`);
      await Promise.all([page.waitForLoadState('load'), page.click(button)]);
      expect(posts).toEqual([`/device/${button.slice(1)} 303`]);
      expect(new URL(page.url()).pathname).toBe('/device/done');
      expect(new URL(page.url()).searchParams.get('user_code')).toBe(d.user_code);
      expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe(title);
      // The device collects its tokens (or its refusal); the outcome page says the same, posting nothing.
      expect((await s.api('POST', '/api/auth/device/token/', { body: { device_code: d.device_code } })).status).toBe(collected);
      const again = await page.reload();
      expect(again!.status()).toBe(200);
      expect(again!.headers()['content-security-policy']).toMatch(/^default-src 'none'/); // still no script
      expect(posts).toEqual([`/device/${button.slice(1)} 303`]);
      expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe(title);
      expect(await page.getByRole('alert').count()).toBe(0);
      expect(await page.title()).not.toMatch(/^Error/);
      await expectText(page, '.code [aria-hidden="true"]', d.user_code);
    }
    await page.close();
  });
});

describe('/device in a browser: external OpenID Provider (oidc-provider)', () => {
  async function signInAtIdp(page: Page, login: string, prefix: string) {
    await page.click('#oidc-continue');
    await page.waitForURL((u) => u.href.startsWith(issuer), { waitUntil: 'domcontentloaded' });
    await page.locator('input[name="login"]').waitFor();
    await shot(page, `${prefix}-2-idp-login`);
    await page.fill('input[name="login"]', login);
    await page.fill('input[name="password"]', 'anything');
    await page.click('button[type="submit"]');
    // The provider asks for consent the first time this client is used by the account.
    await page.waitForURL((u) => u.href.startsWith(s.runtime.config.publicUrl) || /interaction/.test(u.pathname), { waitUntil: 'domcontentloaded' });
    if (page.url().startsWith(issuer)) {
      const consent = page.locator('button[type="submit"]');
      if (await consent.count()) {
        await shot(page, `${prefix}-2b-idp-consent`);
        await consent.first().click();
      }
    }
    await page.waitForURL((u) => u.href.startsWith(`${s.runtime.config.publicUrl}/device`), { waitUntil: 'domcontentloaded' });
  }

  it('continue with the provider → sign in there → approve: the first approval creates the account; the agent gets a working management key', async () => {
    const a = await agent();
    const context = await newContext();
    try {
      const page = await context.newPage();
      await page.goto(a.verification_uri_complete);
      await expectText(page, '.code [aria-hidden="true"]', a.user_code);
      await shot(page, 'oidc-1-choose');
      await signInAtIdp(page, 'ada', 'oidc');
      // Back from the provider through a cross-site redirect chain: the code is confirmed with
      // a CSRF-checked form before it is looked up (a link on another site comes the same way).
      expect(await page.inputValue('#user_code')).toBe(a.user_code);
      await shot(page, 'oidc-2c-confirm');
      await page.getByRole('button', { name: 'Continue' }).click();
      await page.locator('#approve').waitFor();
      expect((await page.innerText('.facts')).replace(/\s+/g, ' ')).toContain('The device calls itself e2e-agent');
      await approveOnPage(page, a.user_code, 'oidc');
    } finally {
      await context.close();
    }
    const res = await a.result;
    expect(res.status).toBe(200);
    expect(res.body.user).toMatchObject({ username: 'ada', email: 'ada@idp.example', first_name: 'Ada', last_name: 'Lovelace' });
    expect(res.body.management_key).toMatch(/^svc_mgmt_/);
    const who = await whoami(res.body.management_key);
    expect(who.status).toBe(200);
    expect(who.body.user.pk).toBe(res.body.user.pk);
    const registered = await s.runtime.events.readStream(`user-${res.body.user.pk}`);
    expect(registered[0].data.external).toEqual({ issuer, subject: 'ada' });

    // A later approval through the provider finds the same account by issuer + subject.
    const b = await agent();
    const again = await newContext();
    try {
      const page = await again.newPage();
      await page.goto(b.verification_uri_complete);
      await signInAtIdp(page, 'ada', 'oidc-again');
      await page.getByRole('button', { name: 'Continue' }).click();
      await approveOnPage(page, b.user_code, 'oidc-again');
    } finally {
      await again.close();
    }
    const second = await b.result;
    expect(second.status).toBe(200);
    expect(second.body.user.pk).toBe(res.body.user.pk);
    expect(second.body.management_key).not.toBe(res.body.management_key);
  });

  it('a callback without the browser-bound state is refused', async () => {
    const context = await newContext();
    try {
      const page = await context.newPage();
      const resp = await page.goto(`${s.runtime.config.publicUrl}/device/oidc/callback?code=forged&state=forged`);
      expect(resp?.status()).toBe(400);
      await page.getByRole('alert').waitFor();
      expect(await context.cookies()).not.toContainEqual(expect.objectContaining({ name: 'ais_session' }));
    } finally {
      await context.close();
    }
  });
});
