/**
 * What a new user's walkthrough of the dashboard found, fixed and kept fixed, in headless
 * Chromium against a real server: the thread list names who a thread is with (not the
 * identity itself); /device is a page of the dashboard for a signed-in person, with a way back
 * after the decision; a plan without phone numbers says so instead of offering them; a dead
 * verification link offers a new one; the password reset answers its POST with a redirect; a
 * one-line mail gets a small frame; at 360 px the tables' buttons stay in view.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { jest } from '@jest/globals';
import { launchBrowser, mailedResetLink, signIn, submit } from '../support/browser.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { MAIL_FRAME_CSP } from '../../services/dashboard/html.js';

jest.setTimeout(120_000);

let s: TestServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let me: Awaited<ReturnType<TestServer['signUp']>>;
let reader: { uuid: string; inbox: string; name: string };

/** The reader's thread row whose subject link is `subject`, once it has `messages` messages. */
async function threadRow(p: Page, subject: string, messages: string) {
  for (let i = 0; i < 50; i++) {
    await p.goto(`${s.url}/identities/${reader.uuid}`);
    const row = p.locator('#mail-h + .table-wrap tbody tr', { has: p.getByRole('link', { name: subject }) });
    if ((await row.count()) && (await row.locator('td').nth(2).textContent()) === messages) return row;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`no thread "${subject}" with ${messages} message(s)`);
}

/** Files of the outbox (the account mails: no relay in the test server). */
function outboxFiles(): string[] {
  const outbox = path.join(s.dataDir, 'outbox');
  try {
    return (readdirSync(outbox, { recursive: true }) as string[]).filter((f) => statSync(path.join(outbox, f)).isFile());
  } catch {
    return [];
  }
}

/** The verification link (path and query) of a mail to `email` that is not among `seen`. */
async function newVerifyLink(email: string, seen: Set<string>): Promise<string> {
  for (let i = 0; i < 50; i++) {
    for (const f of outboxFiles().filter((x) => !seen.has(x))) {
      const text = readFileSync(path.join(s.dataDir, 'outbox', f), 'utf8').replace(/=\r?\n/g, '').replace(/=3D/g, '=');
      const m = text.match(/\/verify-email\?key=[\w.%-]+/);
      if (m && text.includes(email)) return m[0];
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no verification mail to ${email}`);
}

beforeAll(async () => {
  s = await startTestServer({});
  me = await s.signUp();
  reader = await s.createIdentity(me.access, 'Reader');
  browser = await launchBrowser();
  context = await browser.newContext();
  page = await context.newPage();
  await signIn(page, s.url, { username: me.user.username, password: me.password });
});
afterAll(async () => {
  await browser?.close();
  await s?.close();
});

describe('dashboard: the walkthrough', () => {
  it('names who a thread is with: the other party, also after the identity answered and on threads it started', async () => {
    const other = await s.signUp();
    const peer = await s.createIdentity(other.access, 'Peer Sender');
    await s.compose(other.access, peer.uuid, { to: reader.inbox, subject: 'Quarterly report', body: 'Numbers attached.' });
    let row = await threadRow(page, 'Quarterly report', '1');
    expect(await page.locator('#mail-h + .table-wrap thead th').allTextContents()).toEqual(['Subject', 'With', 'Messages', 'Last']);
    expect(await row.locator('td').nth(1).textContent()).toBe(`Peer Sender <${peer.inbox}>`);

    // The reader answers: the last sender is the reader, the thread is still with the peer.
    const inbound = await s.api('GET', '/api/email-messages/', { token: me.access, identity: reader.uuid });
    const replied = await s.api('POST', `/api/email-messages/${inbound.body[0].uuid}/reply/`, { token: me.access, identity: reader.uuid, body: { body: 'Thanks.' } });
    expect(replied.status).toBe(201);
    row = await threadRow(page, 'Quarterly report', '2');
    expect(await row.locator('td').nth(1).textContent()).toBe(peer.inbox);

    // A thread the reader started, with four others: three named, the rest counted.
    const others = [peer, ...(await Promise.all(['Second', 'Third', 'Fourth'].map((n) => s.createIdentity(other.access, n))))];
    await s.compose(me.access, reader.uuid, { to: others.map((o) => o.inbox).join(', '), subject: 'Kick-off', body: 'Hello all.' });
    row = await threadRow(page, 'Kick-off', '1');
    expect(await row.locator('td').nth(1).textContent()).toBe(`${others.slice(0, 3).map((o) => o.inbox).join(', ')} and 1 more`);
    expect(await row.locator('td').nth(1).textContent()).not.toContain(reader.inbox);
  });

  it('shows /device in the dashboard layout when signed in, and links back to the dashboard after approving or denying', async () => {
    const cspViolations: string[] = [];
    page.on('console', (m) => m.type() === 'error' && /Content Security Policy/i.test(m.text()) && cspViolations.push(m.text()));
    await page.goto(`${s.url}/`);
    await Promise.all([page.waitForLoadState('load'), page.getByRole('link', { name: 'Device approvals' }).click()]);
    expect(await page.title()).toBe('Connect a device · Agent Identity Service');
    const nav = page.getByRole('navigation', { name: 'Main' });
    expect(await nav.locator('[aria-current="page"]').allTextContents()).toEqual(['Device approvals']);
    expect(await nav.getByRole('button', { name: `Sign out (${me.user.username})` }).count()).toBe(1);
    expect(await page.locator('link[rel=stylesheet]').getAttribute('href')).toBe('/static/dashboard.css');
    expect(await page.getByRole('heading', { level: 1 }).allTextContents()).toEqual(['Connect a device']);
    // The same look as the other pages: the dashboard's button colour, the header's background.
    const look = async () => page.evaluate(() => {
      const d = (globalThis as any).document;
      const css = (sel: string, prop: string) => (globalThis as any).getComputedStyle(d.querySelector(sel))[prop];
      return { button: css('main button[type=submit]', 'backgroundColor'), header: css('header.top', 'backgroundColor') };
    });
    const onDevice = await look();
    await page.goto(`${s.url}/keys`);
    expect(onDevice).toEqual(await look());

    // A code error is still the page's one alert, and the title says so.
    const bad = await page.goto(`${s.url}/device?user_code=ZZ`);
    expect(bad!.status()).toBe(400);
    expect(await page.title()).toBe('Error: Connect a device · Agent Identity Service');
    expect(await page.getByRole('alert').count()).toBe(1);
    expect(bad!.headers()['content-security-policy']).toMatch(/^default-src 'none'/); // still no script

    for (const [decision, title] of [['Approve', 'Device approved'], ['Deny', 'Device denied']] as const) {
      const started = await s.api('POST', '/api/auth/device/');
      expect(started.status).toBe(200);
      await page.goto(`${s.url}/device?user_code=${encodeURIComponent(started.body.user_code)}`);
      expect(await page.getByRole('navigation', { name: 'Main' }).count()).toBe(1);
      await submit(page, decision);
      expect(await page.getByRole('heading', { level: 1 }).allTextContents()).toEqual([title]);
      expect(await page.title()).toBe(`${title} · Agent Identity Service`);
      expect(await page.getByRole('navigation', { name: 'Main' }).count()).toBe(1);
      const back = page.getByRole('link', { name: 'Back to the dashboard' });
      expect(await back.getAttribute('href')).toBe('/');
      await Promise.all([page.waitForLoadState('load'), back.click()]);
      expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Identities');
    }
    expect(cspViolations).toEqual([]);

    // Not signed in: the page's own layout, as before.
    const anonymous = await browser.newContext();
    try {
      const p = await anonymous.newPage();
      await p.goto(`${s.url}/device`);
      expect(await p.title()).toBe('Connect a device · Agent Identity');
      expect(await p.locator('link[rel=stylesheet]').getAttribute('href')).toBe('/device/device.css');
    } finally {
      await anonymous.close();
    }
  });

  it('on a plan without phone numbers, says so instead of a 0-of-0 bar, and offers no phone that cannot be had', async () => {
    const why = "Your plan (free) includes no phone numbers; plans are changed by the service's operator.";
    await page.goto(`${s.url}/`);
    expect(await page.locator('#phone-usage').textContent()).toBe('Not included in the free plan');
    expect(await page.locator('#sub-h + dl meter').count()).toBe(0);
    expect(await page.getByLabel(/Provision a phone number/).count()).toBe(0);
    expect(await page.locator('#new-h ~ form #phone-note').textContent()).toContain(why);
    // The create form still works.
    await page.getByLabel('Name', { exact: true }).fill('No phone');
    await submit(page, 'Create identity');
    expect(await page.textContent('.flash.ok')).toContain('Identity created.');
    // The identity page: no button that can only be refused, and why.
    expect(await page.getByRole('button', { name: 'Get a phone number' }).count()).toBe(0);
    expect(await page.locator('#phone-note').textContent()).toBe(`This identity has no phone number. ${why}`);
  });

  it('a dead verification link offers a new one: a button when signed in, a form by address otherwise; an already verified address is told so', async () => {
    // Signed in, not verified: one button sends a new link.
    let res = await page.goto(`${s.url}/verify-email?key=not-a-key`);
    expect(res!.status()).toBe(400);
    expect(await page.getByRole('alert').textContent()).toContain('invalid or has expired');
    await submit(page, 'Send a new verification link');
    expect(new URL(page.url()).pathname).toBe('/account');
    expect(await page.getByRole('status').textContent()).toContain('A new verification link is on its way.');

    // Not signed in: by address, answered by a redirect; the new link works.
    const anonymous = await browser.newContext();
    try {
      const p = await anonymous.newPage();
      res = await p.goto(`${s.url}/verify-email?key=not-a-key`);
      expect(res!.status()).toBe(400);
      expect(await p.locator('main').getByRole('link', { name: 'sign in', exact: true }).getAttribute('href')).toBe('/login?next=%2Faccount');
      const seen = new Set(outboxFiles());
      await p.getByLabel('Email of your account').fill(me.user.email);
      const posted = p.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/verify-email/resend');
      await submit(p, 'Send a new verification link');
      expect((await posted).status()).toBe(303);
      expect(await p.getByRole('status').textContent()).toContain('a new verification link is on its way');
      const link = await newVerifyLink(me.user.email, seen);
      await p.goto(`${s.url}${link}`);
      expect(await p.getByRole('status').textContent()).toBe(`The email address ${me.user.email} is verified.`); // named: whoever opens a link learns whose it was
      // An address nobody uses gets the same answer.
      await p.goto(`${s.url}/verify-email/resend`);
      await p.getByLabel('Email of your account').fill('nobody@example.com');
      await submit(p, 'Send a new verification link');
      expect(await p.getByRole('status').textContent()).toContain('a new verification link is on its way');
      // Something that is no address (past the browser's own check) is refused, the form shown
      // again; the forgotten-password form takes its address the same way.
      for (const [page, button] of [['/verify-email/resend', 'Send a new verification link'], ['/forgot-password', 'Send a reset link']]) {
        await p.goto(`${s.url}${page}`);
        await p.getByLabel('Email of your account').evaluate((el) => el.setAttribute('type', 'text'));
        await p.getByLabel('Email of your account').fill('not an address');
        const refused = p.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === page);
        await submit(p, button);
        expect([page, (await refused).status()]).toEqual([page, 400]);
        expect(await p.getByRole('alert').textContent()).toMatch(/valid email/i);
        await expect(p.getByLabel('Email of your account').count()).resolves.toBe(1);
      }
    } finally {
      await anonymous.close();
    }

    // Signed in and verified now: an old link says there is nothing left to do.
    res = await page.goto(`${s.url}/verify-email?key=not-a-key`);
    expect(res!.status()).toBe(200);
    expect(await page.getByRole('status').textContent()).toBe('Your email address is already verified.');
  });

  it('answers the password reset with a redirect: reloading the success page posts nothing', async () => {
    const other = await s.signUp();
    const ctx = await browser.newContext();
    try {
      const p = await ctx.newPage();
      const posts: number[] = [];
      p.on('response', (r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/reset-password' && posts.push(r.status()));
      await p.goto(`${s.url}${await mailedResetLink(s, other.user)}`);
      await p.getByLabel('New password', { exact: true }).fill('reset-Secret-77');
      await p.getByLabel('New password again').fill('reset-Secret-77');
      await submit(p, 'Set password');
      expect(posts).toEqual([303]);
      expect(new URL(p.url()).pathname + new URL(p.url()).search).toBe('/login?reset=1');
      expect(await p.getByRole('status').textContent()).toBe('Your password was reset. Sign in with the new one.');
      const again = await p.reload();
      expect(again!.status()).toBe(200);
      expect(posts).toEqual([303]); // nothing posted again
      expect(await p.getByRole('status').textContent()).toBe('Your password was reset. Sign in with the new one.');
      expect((await s.api('POST', '/api/auth/login/', { body: { username: other.user.username, password: 'reset-Secret-77' } })).status).toBe(200);
    } finally {
      await ctx.close();
    }
  });

  it('sizes the mail frame to the mail: small for one line, tall for a long one, and draggable; the sandbox stays', async () => {
    const other = await s.signUp();
    const peer = await s.createIdentity(other.access, 'Framer');
    await s.compose(other.access, peer.uuid, { to: reader.inbox, subject: 'One line', body: '<p>See you at noon.</p>' });
    await s.compose(other.access, peer.uuid, { to: reader.inbox, subject: 'Long one', body: Array.from({ length: 60 }, (_, i) => `<p>Line ${i + 1} of a long report.</p>`).join('') });

    const open = async (subject: string) => {
      const row = await threadRow(page, subject, '1');
      await Promise.all([page.waitForLoadState('load'), row.getByRole('link').click()]);
      const frame = page.locator('iframe.mail-html');
      expect(await frame.getAttribute('sandbox')).toBe('allow-popups allow-popups-to-escape-sandbox');
      await page.frameLocator('iframe.mail-html').locator('p').first().waitFor();
      return frame;
    };
    let frame = await open('One line');
    const small = (await frame.boundingBox())!;
    expect(small.height).toBeLessThan(130); // it was 256 px for any mail
    const inner = await page.frameLocator('iframe.mail-html').locator('html').evaluate((el) => el.scrollHeight);
    expect(inner).toBeLessThanOrEqual(small.height); // the line is whole, no scrolling inside
    // The box around it can be dragged taller.
    const box = (await page.locator('.mail-frame').boundingBox())!;
    await page.mouse.move(box.x + box.width - 3, box.y + box.height - 3);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width - 3, box.y + box.height + 200, { steps: 5 });
    await page.mouse.up();
    expect((await frame.boundingBox())!.height).toBeGreaterThan(small.height + 150);
    // Its document is still sandboxed by its own CSP.
    const cookie = (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
    const direct = await fetch(`${s.url}${await frame.getAttribute('src')}`, { headers: { cookie } });
    expect(direct.headers.get('content-security-policy')).toBe(MAIL_FRAME_CSP);

    frame = await open('Long one');
    expect((await frame.boundingBox())!.height).toBeGreaterThan(500);
  });

  it('keeps every Revoke and Sign out button in view at 360 px wide; wide tables scroll inside their region, not the page', async () => {
    for (const label of ['ci runner', 'nightly job']) {
      expect((await s.api('POST', '/api/auth/keys/management/', { token: me.access, body: { label } })).status).toBe(201);
    }
    expect((await s.api('POST', '/api/auth/keys/identity/', { token: me.access, body: { label: 'reader agent', identity_uuid: reader.uuid } })).status).toBe(201);
    const narrow = await browser.newContext({ viewport: { width: 360, height: 740 }, storageState: await context.storageState() });
    try {
      const p = await narrow.newPage();
      /** Each button named `name` is on screen, and what is under its middle is the button itself. */
      const inView = async (where: string, name: RegExp) => {
        await p.goto(`${s.url}${where}`);
        expect(await p.evaluate(() => (globalThis as any).document.documentElement.scrollWidth)).toBeLessThanOrEqual(360);
        const buttons = p.getByRole('button', { name });
        expect(await buttons.count()).toBeGreaterThan(0);
        for (const b of await buttons.all()) {
          // Scrolled to vertically only (scrollIntoView would scroll its table region sideways too).
          await b.evaluate((el) => (globalThis as any).scrollTo(0, el.getBoundingClientRect().top + (globalThis as any).scrollY - 200));
          const r = (await b.boundingBox())!;
          const hit = await b.evaluate((el, [x, y]) => el.contains((globalThis as any).document.elementFromPoint(x, y)), [r.x + r.width / 2, r.y + r.height / 2]);
          expect({ where, name: await b.getAttribute('aria-label'), left: r.x >= 0, right: r.x + r.width <= 360, hit }).toEqual({ where, name: await b.getAttribute('aria-label'), left: true, right: true, hit: true });
        }
      };
      await inView('/keys', /^Revoke /);
      await inView('/account', /^Sign out (?!\()/);

      // The identities table: its last column is reached by scrolling its own region.
      await p.goto(`${s.url}/`);
      const region = p.getByRole('region', { name: 'Your identities table' });
      await region.evaluate((el) => el.scrollTo({ left: el.scrollWidth }));
      const created = (await region.locator('tbody tr').first().locator('td').last().boundingBox())!;
      expect(created.x + created.width).toBeLessThanOrEqual(360);
      expect(await p.evaluate(() => (globalThis as any).scrollX)).toBe(0);
    } finally {
      await narrow.close();
    }
  });
});
