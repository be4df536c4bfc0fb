/**
 * Accessibility of the server-rendered human pages (dashboard and /device), checked by hand
 * in an audit and kept here, in headless Chromium against a real server: a long HTML mail can
 * be read with the keyboard, the device code is spelled out to screen readers, form errors
 * are tied to their fields and announced, field borders have contrast in both colour schemes,
 * unread rows say so in text, and the pages reflow at 320 px wide without sideways scrolling.
 * Also: signing up from /device comes back to the approval, revoking a key asks first (no
 * script needed), the Copy button shows only with script, a duplicate name is one error on
 * its field, the menu marks the current page, error pages say so in their title, and each
 * message of a thread has a heading.
 */
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { jest } from '@jest/globals';
import { mailedResetLink, signedInBrowser, submit } from '../support/browser.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { MAIL_FRAME_CSP } from '../../services/dashboard/html.js';

jest.setTimeout(120_000);

let s: TestServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let me: Awaited<ReturnType<TestServer['signUp']>>;
let reader: { uuid: string; inbox: string; name: string };
let sender: { token: string; identity: string };

async function mail(subject: string, body: string) {
  await s.compose(sender.token, sender.identity, { to: reader.inbox, subject, body });
}

/** The reader's identity page, once its thread list shows a thread whose link is named `name`. */
async function untilThread(p: Page, name: string | RegExp) {
  for (let i = 0; i < 50; i++) {
    await p.goto(`${s.url}/identities/${reader.uuid}`);
    const link = p.locator('section[aria-labelledby="mail-h"]').getByRole('link', { name });
    if (await link.count()) return link;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`no thread ${name}`);
}

/** WCAG 2 contrast ratio of two computed colours (`rgb(r, g, b)`). */
function contrast(a: string, b: string): number {
  const lum = (c: string) => {
    const [r, g, bl] = (c.match(/\d+(\.\d+)?/g) ?? []).slice(0, 3).map((x) => Number(x) / 255).map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

const LONG_MAIL = `<h2 style="color: #333">Report</h2>${Array.from({ length: 120 }, (_, i) => `<p>Line ${i + 1} of a long report without a single link.</p>`).join('')}<p id="last">The end.</p><script>document.title="pwned"</script>`;

beforeAll(async () => {
  s = await startTestServer({ ADMIN_TOKEN: 'a11y-admin', SMS_WEBHOOK_SECRET: 'a11y-hook' });
  me = await s.signUp();
  const upgraded = await s.api('PUT', `/api/admin/users/${me.user.pk}/subscription/`, { headers: { authorization: 'Bearer a11y-admin' }, body: { plan: 'developer', status: 'active' } });
  expect(upgraded.status).toBe(200);
  reader = await s.createIdentity(me.access, 'Reader', { provision_phone: true });
  const other = await s.signUp();
  sender = { token: other.access, identity: (await s.createIdentity(other.access, 'Sender')).uuid };
  const key = await s.api('POST', '/api/auth/keys/management/', { token: me.access, body: { label: 'ci runner' } });
  expect(key.status).toBe(201);
  const idKey = await s.api('POST', '/api/auth/keys/identity/', { token: me.access, body: { label: 'reader agent', identity_uuid: reader.uuid } });
  expect(idKey.status).toBe(201);

  ({ browser, context, page } = await signedInBrowser(s.url, { username: me.user.username, password: me.password }));
});
afterAll(async () => {
  await browser?.close();
  await s?.close();
});

describe('pages: accessibility', () => {
  it('a long HTML mail without links can be read with the keyboard: it opens on its own, sandboxed the same way', async () => {
    await mail('Long report', LONG_MAIL);
    const link = await untilThread(page, 'Long report');
    await Promise.all([page.waitForLoadState('load'), link.click()]);
    const frameSrc = await page.locator('iframe.mail-html').getAttribute('src');
    const open = page.getByRole('link', { name: 'Open this message on its own' });
    expect(await open.count()).toBe(1);
    expect(await open.getAttribute('href')).toBe(frameSrc);

    // Keyboard only: Tab to the link, Enter, then scroll the message with the keyboard.
    const focused = () => page.evaluate(() => (globalThis as unknown as { document: { activeElement: { textContent: string | null } | null } }).document.activeElement?.textContent ?? '');
    for (let i = 0; i < 40 && (await focused()) !== 'Open this message on its own'; i++) await page.keyboard.press('Tab');
    expect(await focused()).toBe('Open this message on its own');
    const [res] = await Promise.all([page.waitForNavigation(), page.keyboard.press('Enter')]);
    expect(new URL(page.url()).pathname).toBe(frameSrc);
    expect(res!.status()).toBe(200);
    // A top-level navigation gets the frame's CSP: a sandbox (no script), nothing loads.
    expect(res!.headers()['content-security-policy']).toBe(MAIL_FRAME_CSP);
    expect(await page.title()).toBe('Long report'); // titled by its subject; its script never ran
    expect(await page.locator('#last').textContent()).toBe('The end.');
    const scrollY = () => page.evaluate(() => (globalThis as unknown as { scrollY: number }).scrollY);
    expect(await scrollY()).toBe(0);
    await page.keyboard.press('PageDown');
    for (let i = 0; i < 20 && (await scrollY()) === 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await scrollY()).toBeGreaterThan(0);
  });

  it('marks unread threads and SMS conversations in text, not only in bold', async () => {
    await mail('Fresh news', '<p>Fresh.</p>');
    const link = await untilThread(page, /Fresh news/);
    expect(await link.textContent()).toBe('Fresh news (unread)');
    expect(await page.getByRole('link', { name: 'Fresh news (unread)', exact: true }).count()).toBe(1); // its accessible name
    const row = page.locator('tr', { has: page.getByRole('link', { name: /Fresh news/ }) });
    expect(await row.getAttribute('class')).toBe('unread');
    // Visually hidden: the row still looks as before (bold), the text is for screen readers.
    const box = await row.locator('.sr-only').boundingBox();
    expect(box!.width).toBeLessThanOrEqual(1);
    // Read, it is no longer marked, in bold or in text.
    await Promise.all([page.waitForLoadState('load'), link.click()]);
    await page.goto(`${s.url}/identities/${reader.uuid}`);
    const read = page.locator('section[aria-labelledby="mail-h"]').getByRole('link', { name: /Fresh news/ });
    expect(await read.textContent()).toBe('Fresh news');
    expect(await page.locator('tr.unread', { has: page.getByRole('link', { name: /Fresh news/ }) }).count()).toBe(0);

    // An inbound SMS: the conversation row says it is unread.
    const hook = await fetch(`${s.url}/api/webhooks/sms/`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-webhook-secret': 'a11y-hook' },
      body: new URLSearchParams({ From: '+15550142', To: (await s.api('GET', `/api/identities/${reader.uuid}/`, { token: me.access })).body.phone, Body: 'Hello there', MessageSid: `SM${Date.now()}` }),
    });
    expect(hook.status).toBe(200);
    let sms = page.locator('section[aria-labelledby="sms-h"]').getByRole('link', { name: /\+15550142/ });
    for (let i = 0; i < 50 && !(await sms.count()); i++) {
      await new Promise((r) => setTimeout(r, 200));
      await page.goto(`${s.url}/identities/${reader.uuid}`);
      sms = page.locator('section[aria-labelledby="sms-h"]').getByRole('link', { name: /\+15550142/ });
    }
    expect(await sms.textContent()).toBe('+15550142 (unread)');
    expect(await page.getByRole('link', { name: '+15550142 (unread)', exact: true }).count()).toBe(1);
    expect(await page.locator('tr.unread', { has: page.getByRole('link', { name: /\+15550142/ }) }).count()).toBe(1);
  });

  it('shows the device code to the eye and spells it out to screen readers (no aria-label on a paragraph), signed in or not', async () => {
    const started = await s.api('POST', '/api/auth/device/');
    expect(started.status).toBe(200);
    const code = started.body.user_code as string; // e.g. WRNR-LKPP
    const spelled = `Code: ${code.split('-').map((g) => g.split('').join(' ')).join(', ')}`;
    expect(spelled).toMatch(/^Code: [A-Z] [A-Z] [A-Z] [A-Z], [A-Z] [A-Z] [A-Z] [A-Z]$/);

    const anonymous = await browser.newContext();
    try {
      // Not signed in: the sign-in page shown in place (dashboard CSS); signed in: the approve page (device CSS).
      for (const p of [await anonymous.newPage(), page]) {
        await p.goto(`${s.url}/device?user_code=${encodeURIComponent(code)}`);
        const shown = p.locator('p.code');
        expect(await shown.count()).toBe(1);
        expect(await shown.getAttribute('aria-label')).toBeNull();
        expect(await shown.locator('[aria-hidden="true"]').textContent()).toBe(code);
        expect(await shown.locator('.sr-only').textContent()).toBe(spelled);
        expect((await shown.locator('.sr-only').boundingBox())!.width).toBeLessThanOrEqual(1);
        expect(await p.getByText(spelled).count()).toBe(1);
      }
    } finally {
      await anonymous.close();
    }
  });

  it('ties /device code errors to the input: aria-invalid, described by the alert and the help', async () => {
    const res = await page.goto(`${s.url}/device?user_code=ZZ`);
    expect(res!.status()).toBe(400);
    const input = page.locator('#user_code');
    expect(await input.getAttribute('aria-invalid')).toBe('true');
    const ids = (await input.getAttribute('aria-describedby'))!.split(' ');
    expect(ids).toHaveLength(2);
    expect(await page.locator(`#${ids[0]}`).getAttribute('role')).toBe('alert');
    expect(await page.locator(`#${ids[0]}`).textContent()).toContain('not a valid code');
    expect(ids[1]).toBe('code-help');
    // Without an error the field is only described by its help.
    await page.goto(`${s.url}/device`);
    expect(await input.getAttribute('aria-invalid')).toBeNull();
    expect(await input.getAttribute('aria-describedby')).toBe('code-help');
  });

  it('gives the /device code field a border of at least 3:1 against the card, light and dark', async () => {
    for (const colorScheme of ['light', 'dark'] as const) {
      const ctx = await browser.newContext({ colorScheme });
      try {
        const p = await ctx.newPage();
        await p.goto(`${s.url}/device`);
        const colours = await p.evaluate(() => {
          const g = globalThis as unknown as { document: any; getComputedStyle(e: unknown): any };
          return {
            border: g.getComputedStyle(g.document.querySelector('#user_code')).borderTopColor as string,
            field: g.getComputedStyle(g.document.querySelector('#user_code')).backgroundColor as string,
            card: g.getComputedStyle(g.document.querySelector('main')).backgroundColor as string,
          };
        });
        expect({ colorScheme, card: contrast(colours.border, colours.card) >= 3, field: contrast(colours.border, colours.field) >= 3 }).toEqual({ colorScheme, card: true, field: true });
      } finally {
        await ctx.close();
      }
    }
  });

  it('ties /reset-password errors to their fields and announces them; a dead link leads to /forgot-password instead of a form', async () => {
    const ctx = await browser.newContext();
    try {
      const p = await ctx.newPage();
      const link = await mailedResetLink(s, me.user);
      await p.goto(`${s.url}${link}`);
      await p.getByLabel('New password', { exact: true }).fill('first-Secret-11');
      await p.getByLabel('New password again').fill('other-Secret-22');
      await submit(p, 'Set password');
      expect(await p.getByRole('alert').count()).toBe(1);
      expect(await p.getByRole('alert').textContent()).toContain('Please correct the errors below.');
      const again = p.getByLabel('New password again');
      expect(await again.getAttribute('aria-invalid')).toBe('true');
      expect(await again.getAttribute('aria-describedby')).toBe('new_password2-error');
      expect(await p.locator('#new_password2-error').textContent()).toContain("didn't match");
      expect(await p.getByLabel('New password', { exact: true }).getAttribute('aria-invalid')).toBeNull();

      // The token is wrong: no form that can never succeed, but the way to a new link.
      const wrong = await p.goto(`${s.url}${link.replace(/token=[\w-]+/, 'token=not-a-token')}`);
      expect(wrong!.status()).toBe(400);
      expect(await p.getByRole('alert').textContent()).toContain('invalid or has expired');
      expect(await p.locator('input[type=password]').count()).toBe(0);
      expect(await p.getByRole('link', { name: 'Ask for a new reset link' }).getAttribute('href')).toBe('/forgot-password');

      // A link without its token or uid: the same.
      const bare = await p.goto(`${s.url}/reset-password`);
      expect(bare!.status()).toBe(400);
      expect(await p.getByRole('alert').textContent()).toContain('invalid or has expired');
      expect(await p.locator('input[type=password]').count()).toBe(0);
      expect(await p.getByRole('link', { name: 'Ask for a new reset link' }).count()).toBe(1);
    } finally {
      await ctx.close();
    }
  });

  it('reflows at 320 px wide, with ordinary data and a 124-character unbroken subject: the page never scrolls sideways', async () => {
    const narrow = await browser.newContext({ viewport: { width: 320, height: 640 }, storageState: await context.storageState() });
    try {
      const p = await narrow.newPage();
      /** Opens `where` and checks the page is no wider than the viewport (the failure names the page and its width). */
      const fits = async (where: string) => {
        const res = await p.goto(`${s.url}${where}`);
        expect(res!.status()).toBe(200);
        const width = await p.evaluate(() => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth);
        expect({ where, width, fits: width <= 320 }).toEqual({ where, width, fits: true });
      };
      const pages = ['/', `/identities/${reader.uuid}`, '/keys', '/device'];

      // Ordinary data.
      for (const where of pages) await fits(where);
      // A wide table scrolls inside its region instead.
      await p.goto(`${s.url}/keys`);
      const wide = await p.getByRole('region', { name: 'Management keys table' }).evaluate((el) => [el.scrollWidth, el.clientWidth]);
      expect(wide[0]).toBeGreaterThan(wide[1]);

      // A 124-character unbroken subject, in the list and as the thread's heading.
      const subject = 'A'.repeat(62) + 'B'.repeat(62);
      expect(subject).toHaveLength(124);
      await mail(subject, '<p>Long subject.</p>');
      for (let i = 0; i < 50; i++) {
        await p.goto(`${s.url}/identities/${reader.uuid}`);
        if (await p.getByRole('link', { name: new RegExp(subject) }).count()) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      const threadPath = await p.getByRole('link', { name: new RegExp(subject) }).getAttribute('href');
      for (const where of [...pages, threadPath!]) await fits(where);
    } finally {
      await narrow.close();
    }
  });

  it('puts each data table in a focusable scroll region named after its heading', async () => {
    // In the section of its heading, the table sits in a region of its own that scrolls sideways (overflow-x) and takes focus (the keyboard scrolls it).
    const regions: Record<string, string[]> = { '/': ['Your identities'], [`/identities/${reader.uuid}`]: ['Email threads', 'SMS conversations'], '/keys': ['Management keys', 'Identity keys'] };
    for (const [where, names] of Object.entries(regions)) {
      await page.goto(`${s.url}${where}`);
      expect(await page.locator('table').count()).toBe(names.length);
      expect(await page.locator('.table-wrap > table').count()).toBe(names.length);
      for (const heading of names) {
        // Named after the table's heading; not the same name as the section's region around it.
        expect(await page.getByRole('region', { name: heading, exact: true }).count()).toBe(1);
        const region = page.getByRole('region', { name: `${heading} table`, exact: true });
        expect({ heading, regions: await region.count() }).toEqual({ heading, regions: 1 });
        expect(await region.getAttribute('tabindex')).toBe('0');
        expect(await region.evaluate((el) => (globalThis as unknown as { getComputedStyle(e: unknown): { overflowX: string } }).getComputedStyle(el).overflowX)).toBe('auto');
        expect(await region.locator('table').count()).toBe(1);
      }
    }
  });
  it('the dashboard\'s sign-up normalises usernames as the API does (NFKC): a full-width twin of a taken name is refused', async () => {
    const plain = `twin${Date.now() % 1_000_000}`;
    expect((await s.api('POST', '/api/auth/social/', { body: { username: plain, email: `${plain}@example.com`, password1: 'pw-1', password2: 'pw-1' } })).status).toBe(201);
    const wide = [...plain].map((c) => String.fromCodePoint(c.codePointAt(0)! + 0xfee0)).join('');
    const anonymous = await browser.newContext();
    try {
      const p = await anonymous.newPage();
      await p.goto(`${s.url}/register`);
      await p.getByLabel('Username').fill(wide);
      await p.getByLabel('Email').fill(`wide-${plain}@example.com`);
      await p.getByLabel('Password', { exact: true }).fill('first-Secret-11');
      await p.getByLabel('Password again').fill('first-Secret-11');
      await submit(p, 'Create account');
      expect(new URL(p.url()).pathname).toBe('/register');
      expect(await p.getByLabel('Username').getAttribute('aria-invalid')).toBe('true');
      expect(await p.locator('main').textContent()).toContain('already exists');
    } finally {
      await anonymous.close();
    }
  });

  it('signing up from the device sign-in keeps the code: after registering, the person is back at the approval', async () => {
    const started = await s.api('POST', '/api/auth/device/');
    expect(started.status).toBe(200);
    const code = started.body.user_code as string;
    const anonymous = await browser.newContext();
    try {
      const p = await anonymous.newPage();
      await p.goto(`${s.url}/device?user_code=${encodeURIComponent(code)}`);
      await Promise.all([p.waitForLoadState('load'), p.getByRole('link', { name: 'Create an account' }).click()]);
      expect(new URL(p.url()).pathname).toBe('/register');
      const name = `newcomer${Date.now() % 1_000_000}`;
      await p.getByLabel('Username').fill(name);
      await p.getByLabel('Email').fill(`${name}@example.com`);
      await p.getByLabel('Password', { exact: true }).fill('first-Secret-11');
      // A mistake first: the return path survives the form shown again.
      await p.getByLabel('Password again').fill('other-Secret-22');
      await submit(p, 'Create account');
      expect(await p.getByLabel('Password again').getAttribute('aria-invalid')).toBe('true');
      await p.getByLabel('Password', { exact: true }).fill('first-Secret-11');
      await p.getByLabel('Password again').fill('first-Secret-11');
      await submit(p, 'Create account');
      const landed = new URL(p.url());
      expect(landed.pathname).toBe('/device');
      expect(landed.searchParams.get('user_code')).toBe(code);
      expect(await p.getByRole('heading', { level: 1 }).textContent()).toBe('Approve this device?');
      expect(await p.locator('p.code [aria-hidden="true"]').textContent()).toBe(code);

      // An off-site return path is not carried: the register form has none.
      const other = await browser.newContext();
      try {
        const q = await other.newPage();
        await q.goto(`${s.url}/register?next=${encodeURIComponent('//evil.example/x')}`);
        expect(await q.locator('input[name=next]').count()).toBe(0);
        await q.goto(`${s.url}/register?next=${encodeURIComponent('/keys')}`);
        expect(await q.locator('input[name=next]').getAttribute('value')).toBe('/keys');
      } finally {
        await other.close();
      }
    } finally {
      await anonymous.close();
    }
  });

  it('asks before revoking a key, without JavaScript: a confirmation page with Revoke and Cancel', async () => {
    const minted = await s.api('POST', '/api/auth/keys/management/', { token: me.access, body: { label: 'nightly job' } });
    expect(minted.status).toBe(201);
    const works = async () => (await fetch(`${s.url}/api/health/whoami/`, { headers: { authorization: `Bearer ${minted.body.key}` } })).status;
    const noScript = await browser.newContext({ javaScriptEnabled: false, storageState: await context.storageState() });
    try {
      const p = await noScript.newPage();
      await p.goto(`${s.url}/keys`);
      await submit(p, 'Revoke management key nightly job');
      // Nothing revoked yet: a page that asks.
      expect(await p.getByRole('heading', { level: 1 }).textContent()).toBe('Revoke management key nightly job?');
      expect(await p.textContent('main')).toContain('Requests with this key fail at once, and an agent that got it by signing in through the device flow is signed out');
      expect(await works()).toBe(200);
      // Cancel: back to the list, the key still there and working.
      const cancel = p.getByRole('link', { name: 'Cancel' });
      expect(await cancel.getAttribute('href')).toBe('/keys');
      await Promise.all([p.waitForLoadState('load'), cancel.click()]);
      expect(new URL(p.url()).pathname).toBe('/keys');
      expect(await p.getByRole('button', { name: 'Revoke management key nightly job' }).count()).toBe(1);
      // Two keys of one label are told apart by their masked key (a screen reader hears each button's name alone).
      expect(await p.getByRole('button', { name: /^Revoke management key nightly job \(svc_mgmt_…\w{4}\)$/ }).count()).toBe(1);
      expect(await works()).toBe(200);
      // Confirmed: revoked (a POST with the CSRF token, as every form).
      await submit(p, 'Revoke management key nightly job');
      expect(await p.locator('main form[method=post] input[name=csrf]').count()).toBe(1);
      await submit(p, /^Revoke$/);
      expect(new URL(p.url()).pathname).toBe('/keys');
      expect(await p.getByRole('status').textContent()).toContain('Key revoked');
      expect(await p.getByRole('button', { name: 'Revoke management key nightly job' }).count()).toBe(0);
      expect(await works()).toBe(401);
      // Already revoked: the confirmation page says so.
      const gone = await p.goto(`${s.url}/keys/management/${minted.body.uuid}/revoke`);
      expect(gone!.status()).toBe(404);
      expect(await p.getByRole('alert').textContent()).toContain('already revoked');
    } finally {
      await noScript.close();
    }
  });

  it('shows the Copy button of a new key only when it works: with JavaScript; without, only the selectable key', async () => {
    for (const javaScriptEnabled of [false, true]) {
      const ctx = await browser.newContext({ javaScriptEnabled, storageState: await context.storageState() });
      try {
        const p = await ctx.newPage();
        await p.goto(`${s.url}/keys`);
        await p.getByLabel('Label of the new management key').fill(`copy ${javaScriptEnabled}`);
        await submit(p, 'Create management key');
        expect(await p.locator('#new-key').inputValue()).toMatch(/^svc_mgmt_/);
        const copy = p.getByRole('button', { name: 'Copy', exact: true });
        expect({ javaScriptEnabled, buttons: await copy.count() }).toEqual({ javaScriptEnabled, buttons: javaScriptEnabled ? 1 : 0 });
        if (javaScriptEnabled) expect(await copy.isVisible()).toBe(true);
        else expect(await p.locator('button[data-copy]').isVisible()).toBe(false);
      } finally {
        await ctx.close();
      }
    }
  });

  it('ties a duplicate identity name (409) to the Name field, said once; rename errors show no API field key', async () => {
    const once = async (text: string) => ((await page.textContent('main'))!.split(text).length - 1);
    // Create: "Reader" exists.
    await page.goto(`${s.url}/`);
    await page.getByLabel('Name', { exact: true }).fill('Reader');
    await submit(page, 'Create identity');
    const name = page.getByLabel('Name', { exact: true });
    expect(await name.getAttribute('aria-invalid')).toBe('true');
    expect(await name.getAttribute('aria-describedby')).toBe('name-error');
    expect(await page.locator('#name-error').textContent()).toContain('already exists');
    expect(await once('already exists')).toBe(1);
    expect(await page.getByRole('alert').textContent()).toContain('Please correct the errors below.');
    expect(await page.title()).toMatch(/^Error: Identities/);
    // A taken address: on its field likewise.
    await page.getByLabel('Name', { exact: true }).fill(`Twin ${Date.now() % 100000}`);
    await page.getByLabel(/Email identifier/).fill(reader.inbox.split('@')[0]);
    await submit(page, 'Create identity');
    expect(await page.getByLabel(/Email identifier/).getAttribute('aria-describedby')).toBe('email_identifier-error');
    expect(await page.getByLabel('Name', { exact: true }).getAttribute('aria-invalid')).toBeNull();
    expect(await once('already taken')).toBe(1);

    // Rename another identity to "Reader".
    const other = await s.createIdentity(me.access, `Spare ${Date.now() % 100000}`);
    await page.goto(`${s.url}/identities/${other.uuid}`);
    await page.getByLabel('New name').fill('reader');
    await submit(page, 'Rename');
    const newName = page.getByLabel('New name');
    expect(await newName.getAttribute('aria-invalid')).toBe('true');
    expect(await newName.getAttribute('aria-describedby')).toBe('name-error');
    expect(await page.locator('#name-error').textContent()).toContain('already exists');
    expect(await once('already exists')).toBe(1);

    // A blank name (spaces pass `required`; the API refuses the trimmed name): the message, not "name: …".
    await page.getByLabel('New name').fill('   ');
    await submit(page, 'Rename');
    expect(await page.getByLabel('New name').getAttribute('aria-invalid')).toBe('true');
    const shown = (await page.textContent('main'))!;
    expect(shown).not.toMatch(/\bname: /);
    expect(await page.locator('#name-error').textContent()).toMatch(/blank|empty|at least/i);
  });

  it('announces password-change errors on /account and ties them to their fields', async () => {
    await page.goto(`${s.url}/account`);
    await page.getByLabel('New password', { exact: true }).fill('first-Secret-11');
    await page.getByLabel('New password again').fill('other-Secret-22');
    await submit(page, 'Change password');
    expect(await page.getByRole('alert').count()).toBe(1);
    expect(await page.getByRole('alert').textContent()).toContain('Please correct the errors below.');
    expect(await page.title()).toMatch(/^Error: Account/);
    const again = page.getByLabel('New password again');
    expect(await again.getAttribute('aria-invalid')).toBe('true');
    expect(await again.getAttribute('aria-describedby')).toBe('new_password2-error');
    expect(await page.locator('#new_password2-error').textContent()).toContain("didn't match");
    // The profile form above is not marked.
    expect(await page.locator('#username').getAttribute('aria-invalid')).toBeNull();
    // Still signed in with the old password: nothing changed.
    await page.goto(`${s.url}/account`);
    expect(await page.title()).toMatch(/^Account/);
  });

  it('marks the current page in the menu (aria-current), signed in or not', async () => {
    for (const [where, current] of [['/', 'Identities'], ['/keys', 'API keys'], ['/account', 'Account']]) {
      await page.goto(`${s.url}${where}`);
      const nav = page.getByRole('navigation', { name: 'Main' });
      expect({ where, current: await nav.locator('[aria-current="page"]').allTextContents() }).toEqual({ where, current: [current] });
    }
    await page.goto(`${s.url}/identities/${reader.uuid}`);
    expect(await page.locator('[aria-current]').count()).toBe(0);
    const anonymous = await browser.newContext();
    try {
      const p = await anonymous.newPage();
      for (const [where, current] of [['/login', 'Sign in'], ['/register', 'Register']]) {
        await p.goto(`${s.url}${where}`);
        expect({ where, current: await p.locator('nav [aria-current="page"]').allTextContents() }).toEqual({ where, current: [current] });
      }
    } finally {
      await anonymous.close();
    }
  });

  it('prefixes the title of a page that shows an error with "Error: ", dashboard and /device', async () => {
    await page.goto(`${s.url}/keys`);
    expect(await page.title()).toBe('API keys · Agent Identity Service');
    const anonymous = await browser.newContext();
    try {
      const p = await anonymous.newPage();
      await p.goto(`${s.url}/register`);
      await p.getByLabel('Username').fill(me.user.username); // taken
      await p.getByLabel('Email').fill(`someone${Date.now() % 100000}@example.com`);
      await p.getByLabel('Password', { exact: true }).fill('first-Secret-11');
      await p.getByLabel('Password again').fill('first-Secret-11');
      await submit(p, 'Create account');
      expect(await p.getByLabel('Username').getAttribute('aria-invalid')).toBe('true');
      expect(await p.title()).toBe('Error: Create an account · Agent Identity Service');
      expect(await p.getByRole('heading', { level: 1 }).textContent()).toBe('Create an account'); // the heading stays
      await p.goto(`${s.url}/device?user_code=ZZ`);
      expect(await p.title()).toBe('Error: Connect a device · Agent Identity');
      await p.goto(`${s.url}/device`);
      expect(await p.title()).toBe('Connect a device · Agent Identity');
    } finally {
      await anonymous.close();
    }
  });

  it('gives each message of a thread a heading (sender and date), to move through a thread by headings', async () => {
    await mail('Two headings', '<p>Hello.</p>');
    const link = await untilThread(page, /Two headings/);
    await Promise.all([page.waitForLoadState('load'), link.click()]);
    const articles = page.locator('article.message');
    expect(await articles.count()).toBeGreaterThan(0);
    for (let i = 0; i < (await articles.count()); i++) {
      const h = articles.nth(i).getByRole('heading', { level: 2 });
      expect(await h.count()).toBe(1);
      expect(await h.textContent()).toMatch(/Sender.*\d{4}-\d{2}-\d{2}/);
    }
  });
});
