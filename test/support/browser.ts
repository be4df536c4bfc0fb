/**
 * Real-browser test support: Debian's Chromium through playwright-core, and a real external
 * OpenID Provider (`oidc-provider` on a random port; its dev login accepts any name, which
 * becomes the account). Without Chromium the suites fail loudly rather than pass silently.
 */
import http from 'node:http';
import { expect } from '@jest/globals';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { freePort } from './spawn.js';
import type { TestServer } from './server.js';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
/** Screenshots (gitignored). */
export const ARTIFACTS = path.resolve('test-artifacts');

export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`Chromium not found at ${CHROMIUM}: apt-get install -y chromium (or set CHROMIUM_PATH)`);
  mkdirSync(ARTIFACTS, { recursive: true });
  return chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
}

/** Clicks the button named `buttonName` and waits for the page it leads to. */
export async function submit(p: Page, buttonName: string | RegExp): Promise<void> {
  await Promise.all([p.waitForLoadState('load'), p.getByRole('button', { name: buttonName }).click()]);
}

/** Signs `user` in through the dashboard's sign-in form; the page ends on `/`. */
export async function signIn(p: Page, baseUrl: string, user: { username: string; password: string }): Promise<void> {
  await p.goto(`${baseUrl}/login`);
  await p.getByLabel('Username or email').fill(user.username);
  await p.getByLabel('Password').fill(user.password);
  await submit(p, 'Sign in');
  if (new URL(p.url()).pathname !== '/') throw new Error(`sign-in of ${user.username} ended on ${p.url()}`);
}

/** A browser with one page signed in to the dashboard at `baseUrl` as `user`. */
export async function signedInBrowser(baseUrl: string, user: { username: string; password: string }): Promise<{ browser: Browser; context: BrowserContext; page: Page }> {
  const browser = await launchBrowser();
  const context = await browser.newContext();
  const page = await context.newPage();
  await signIn(page, baseUrl, user);
  return { browser, context, page };
}

/** A browser context that stays on this machine (the IdP's dev pages import a web font). */
export async function localContext(browser: Browser): Promise<BrowserContext> {
  const context = await browser.newContext();
  await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, (route) => route.abort());
  return context;
}

export interface TestIdp {
  issuer: string;
  clientId: string;
  clientSecret: string;
  close(): Promise<void>;
}

/** An OpenID Provider with one confidential client whose redirect URI is `redirectUri`. */
export async function startOidcProvider(clientId: string, redirectUri: string): Promise<TestIdp> {
  // oidc-provider announces its development defaults (in-memory adapter, dev keys, dev
  // interactions) on the console; they are what the tests want, so keep the output clean.
  const quiet = { warn: console.warn, info: console.info };
  const fromIdp = (args: unknown[]) => typeof args[0] === 'string' && args[0].startsWith('oidc-provider');
  console.warn = (...args: unknown[]) => (fromIdp(args) ? undefined : quiet.warn(...args));
  console.info = (...args: unknown[]) => (fromIdp(args) ? undefined : quiet.info(...args));

  const port = await freePort();
  const issuer = `http://127.0.0.1:${port}`;
  const clientSecret = `${clientId}-secret-0123456789abcdef`;
  const { default: Provider } = await import('oidc-provider'); // after the console filter is in place
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: [redirectUri],
        grant_types: ['authorization_code'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['given_name', 'family_name', 'preferred_username'] },
    // The dev login accepts any name: the account is that name.
    findAccount: async (_ctx: unknown, id: string) => ({
      accountId: id,
      claims: async () => ({ sub: id, email: `${id}@idp.example`, email_verified: true, given_name: 'Ada', family_name: 'Lovelace', preferred_username: id }),
    }),
    cookies: { keys: ['e2e-idp-cookie-key'] },
    features: { devInteractions: { enabled: true } },
  });
  const server = http.createServer(provider.callback());
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    issuer,
    clientId,
    clientSecret,
    close: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      Object.assign(console, quiet);
    },
  };
}

export interface OidcTestServer {
  server: import('./server.js').TestServer;
  idp: TestIdp;
  browser: Browser;
  close(): Promise<void>;
}

/**
 * The service (at a fixed PUBLIC_URL, so the IdP knows its callback) wired to a fresh
 * external OpenID Provider, plus a browser: the setup of the OIDC browser suites.
 */
export async function startOidcTestServer(clientId: string, env: Record<string, string> = {}): Promise<OidcTestServer> {
  const { startTestServer } = await import('./server.js');
  const port = await freePort();
  const publicUrl = `http://127.0.0.1:${port}`;
  const idp = await startOidcProvider(clientId, `${publicUrl}/device/oidc/callback`);
  const server = await startTestServer({
    PORT: String(port),
    HOST: '127.0.0.1',
    PUBLIC_URL: publicUrl,
    OIDC_ISSUER: idp.issuer,
    OIDC_CLIENT_ID: idp.clientId,
    OIDC_CLIENT_SECRET: idp.clientSecret,
    ...env,
  });
  const browser = await launchBrowser();
  return {
    server,
    idp,
    browser,
    close: async () => {
      await browser.close();
      await server.close();
      await idp.close();
    },
  };
}

/**
 * A fresh password reset link of `user` (path and query): `ask` asks for one (through the
 * API unless given), then it is read from the new outbox mail (no relay in the test server).
 */
export async function mailedResetLink(s: TestServer, user: { username: string; email: string }, ask?: () => Promise<void>): Promise<string> {
  const outbox = path.join(s.dataDir, 'outbox');
  const seen = new Set<string>();
  try {
    for (const f of readdirSync(outbox, { recursive: true }) as string[]) seen.add(f);
  } catch {
    /* no outbox yet */
  }
  if (ask) await ask();
  else expect((await s.api('POST', '/api/auth/password/reset/', { body: { email: user.email } })).status).toBe(200);
  for (let i = 0; i < 50; i++) {
    let files: string[] = [];
    try {
      files = (readdirSync(outbox, { recursive: true }) as string[]).filter((f) => !seen.has(f) && statSync(path.join(outbox, f)).isFile());
    } catch {
      /* not yet */
    }
    for (const f of files) {
      const text = readFileSync(path.join(outbox, f), 'utf8').replace(/=\r?\n/g, '').replace(/=3D/g, '=');
      const m = text.match(/\/reset-password\?uid=[\w-]+&token=[\w-]+/);
      if (m && text.includes(user.username)) return m[0];
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no reset mail for ${user.username} in ${outbox}`);
}
