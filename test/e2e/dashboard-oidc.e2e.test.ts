/**
 * "Continue with <provider>" on the dashboard's sign-in page, in headless Chromium against a
 * real OpenID Provider (`oidc-provider` on a random port; its dev login accepts any name):
 * authorization code + PKCE + state + nonce through the device context's openid-client code,
 * the first sign-in creates the account (accounts.findOrCreateExternal), the next one finds it,
 * and the validated return path brings the person back to the page they asked for.
 * Screenshots go to test-artifacts/dashboard-oidc-*.png.
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
  env = await startOidcTestServer('agent-identity-dashboard');
  ({ server: s, browser } = env);
  issuer = env.idp.issuer;
});

const newContext = (): Promise<BrowserContext> => localContext(browser);

afterAll(async () => env?.close());


async function shot(page: Page, name: string) {
  await page.screenshot({ path: path.join(ARTIFACTS, `dashboard-oidc-${name}.png`), fullPage: true });
}

async function signInAtIdp(page: Page, login: string, prefix: string) {
  await page.click('#oidc-continue');
  await page.waitForURL((u) => u.href.startsWith(issuer), { waitUntil: 'domcontentloaded' });
  await page.locator('input[name="login"]').waitFor();
  await page.fill('input[name="login"]', login);
  await page.fill('input[name="password"]', 'anything');
  await page.click('button[type="submit"]');
  await page.waitForURL((u) => u.href.startsWith(s.runtime.config.publicUrl) || /interaction/.test(u.pathname), { waitUntil: 'domcontentloaded' });
  if (page.url().startsWith(issuer)) {
    const consent = page.locator('button[type="submit"]');
    if (await consent.count()) {
      await shot(page, `${prefix}-idp-consent`);
      await consent.first().click();
    }
  }
  await page.waitForURL((u) => u.href.startsWith(s.runtime.config.publicUrl) && !u.pathname.startsWith('/device/oidc'), { waitUntil: 'load' });
}

describe('dashboard sign-in through the external OpenID provider', () => {
  it('first sign-in creates the account and lands on the dashboard; the next one finds the same account and honours the return path', async () => {
    const context = await newContext();
    let pk = 0;
    try {
      const page = await context.newPage();
      const cspViolations: string[] = [];
      page.on('console', (m) => m.type() === 'error' && /Content Security Policy/i.test(m.text()) && cspViolations.push(m.text()));
      const res = await page.goto(`${s.runtime.config.publicUrl}/login`);
      // The provider's authorization origin is an allowed form target (the POST redirects there).
      expect(res!.headers()['content-security-policy']).toContain(`form-action 'self' ${issuer}`);
      expect(await page.getByRole('button', { name: 'Continue with 127.0.0.1' + issuer.slice(issuer.lastIndexOf(':')) }).count()).toBe(1);
      await shot(page, '1-login');
      await signInAtIdp(page, 'grace', 'first');
      expect(new URL(page.url()).pathname).toBe('/');
      expect(await page.textContent('h1')).toBe('Identities');
      expect(await page.textContent('header')).toContain('Sign out (grace)');
      await shot(page, '2-home');
      const session = (await context.cookies()).find((c) => c.name === 'ais_session')!;
      expect(session.httpOnly).toBe(true);
      expect(session.sameSite).toBe('Lax');
      const me = await fetch(`${s.url}/api/auth/user/`, { headers: { cookie: `ais_session=${session.value}` } });
      const user = (await me.json()) as { pk: number; username: string; email: string; first_name: string; last_name: string };
      expect(user).toMatchObject({ username: 'grace', email: 'grace@idp.example', first_name: 'Ada', last_name: 'Lovelace' });
      pk = user.pk;
      const registered = await s.runtime.events.readStream(`user-${pk}`);
      expect(registered[0].data.external).toEqual({ issuer, subject: 'grace' });
      expect(cspViolations).toEqual([]);
    } finally {
      await context.close();
    }

    // Another browser: asks for /keys, signs in through the provider, comes back to /keys as the same account.
    const again = await newContext();
    try {
      const page = await again.newPage();
      await page.goto(`${s.runtime.config.publicUrl}/keys`);
      expect(new URL(page.url()).pathname).toBe('/login');
      await signInAtIdp(page, 'grace', 'again');
      expect(new URL(page.url()).pathname).toBe('/keys');
      expect(await page.textContent('h1')).toBe('API keys');
      const session = (await again.cookies()).find((c) => c.name === 'ais_session')!;
      const me = await fetch(`${s.url}/api/auth/user/`, { headers: { cookie: `ais_session=${session.value}` } });
      expect(((await me.json()) as { pk: number }).pk).toBe(pk);
      await shot(page, '3-keys');
    } finally {
      await again.close();
    }
  });

  it('a callback without the browser-bound state is refused and signs nobody in', async () => {
    const context = await newContext();
    try {
      const page = await context.newPage();
      const resp = await page.goto(`${s.runtime.config.publicUrl}/device/oidc/callback?code=forged&state=forged`);
      expect(resp?.status()).toBe(400);
      expect(await page.getByRole('alert').textContent()).toContain('expired or was started in another browser');
      expect(await context.cookies()).not.toContainEqual(expect.objectContaining({ name: 'ais_session' }));
    } finally {
      await context.close();
    }
  });

  it('the provider button is CSRF-protected', async () => {
    const res = await fetch(`${s.url}/login/oidc`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'csrf=forged', redirect: 'manual' });
    expect(res.status).toBe(403);
    expect(res.headers.get('location')).toBeNull();
  });
});
