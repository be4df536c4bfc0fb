/**
 * User text on the dashboard, in headless Chromium against a real server: the thread list
 * shows who a thread is with as the API gives it, control characters in user text never reach
 * the page, bidi overrides in user text cannot reorder the page text around them, and an
 * identity is deleted when its name is typed as the API compares names (NFC, any case).
 */
import type { Browser, Page, BrowserContext } from 'playwright-core';
import { signedInBrowser, submit } from '../support/browser.js';
import { jest } from '@jest/globals';
import { startTestServer, type TestServer } from '../support/server.js';

jest.setTimeout(120_000);

let s: TestServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let me: Awaited<ReturnType<TestServer['signUp']>>;

/** C0 controls but tab and newline, DEL, C1 controls. */
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

/** The page's HTML as the server sends it (with the browser's session cookie). */
async function rawHtml(pathname: string): Promise<string> {
  const cookie = (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
  const res = await fetch(`${s.url}${pathname}`, { headers: { cookie } });
  expect(res.status).toBe(200);
  return res.text();
}

/** A mail to `to` from an identity named `senderName` of another account; that identity. */
async function mailFromStranger(senderName: string, to: string, subject: string, body: string): Promise<{ uuid: string; inbox: string; name: string }> {
  const other = await s.signUp();
  const peer = await s.createIdentity(other.access, senderName);
  await s.compose(other.access, peer.uuid, { to, subject, body });
  return peer;
}

/** Opens the identity page until its thread list has a row whose subject link is `subject`. */
async function threadRow(identity: string, subject: string | RegExp, messages: string) {
  for (let i = 0; i < 50; i++) {
    await page.goto(`${s.url}/identities/${identity}`);
    const row = page.locator('#mail-h + .table-wrap tbody tr', { has: page.getByRole('link', { name: subject }) });
    if ((await row.count()) && (await row.locator('td').nth(2).textContent()) === messages) return row;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`no thread "${subject}" with ${messages} message(s)`);
}

/**
 * Where each character of `text` inside the element `selector` (a text node of the page's
 * own, following user text) is on screen: [x, y] of its box.
 */
async function positionsOf(selector: string, text: string): Promise<Array<[number, number]>> {
  return page.locator(selector).first().evaluate((el, wanted) => {
    const d = (el as unknown as { ownerDocument: any }).ownerDocument;
    const walker = d.createTreeWalker(el, 4 /* NodeFilter.SHOW_TEXT */);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const at = (n.data as string).indexOf(wanted);
      if (at < 0) continue;
      const xy: Array<[number, number]> = [];
      for (let i = at; i < at + wanted.length; i++) {
        const r = d.createRange();
        r.setStart(n, i);
        r.setEnd(n, i + 1);
        const box = r.getBoundingClientRect();
        xy.push([box.x, box.y]);
      }
      return xy;
    }
    throw new Error(`"${wanted}" not found`);
  }, text);
}

/** Read in order: each character right of the one before on its line, or on a line below (wrapped). */
const leftToRight = (xy: Array<[number, number]>) =>
  xy.every(([x, y], i) => i === 0 || y > xy[i - 1][1] + 1 || (Math.abs(y - xy[i - 1][1]) <= 1 && x > xy[i - 1][0]));

beforeAll(async () => {
  s = await startTestServer({});
  me = await s.signUp();
  ({ browser, context, page } = await signedInBrowser(s.url, { username: me.user.username, password: me.password }));
});
afterAll(async () => {
  await browser?.close();
  await s?.close();
});

describe('dashboard: user text', () => {
  it('lists who a thread is with, name and address as the API gives them; not the identity itself once it answered', async () => {
    const reader = await s.createIdentity(me.access, 'Reader');
    const peer = await mailFromStranger('Peer Sender', reader.inbox, 'Quarterly report', 'Numbers attached.');

    let row = await threadRow(reader.uuid, 'Quarterly report', '1');
    expect(await row.locator('td').nth(1).textContent()).toBe(`Peer Sender <${peer.inbox}>`);

    // The reader answers in the same thread: the last sender is now the reader, the thread is
    // still with the peer (its address: the thread list names only its last sender).
    const inbound = await s.api('GET', '/api/email-messages/', { token: me.access, identity: reader.uuid });
    expect(inbound.status).toBe(200);
    const replied = await s.api('POST', `/api/email-messages/${inbound.body[0].uuid}/reply/`, {
      token: me.access,
      identity: reader.uuid,
      body: { body: 'Thanks.', cc: '', bcc: '', attachment_uuids: [] },
    });
    expect(replied.status).toBe(201);
    row = await threadRow(reader.uuid, 'Quarterly report', '2');
    expect(await row.locator('td').nth(1).textContent()).toBe(peer.inbox);
  });

  it('never writes control characters of user text into the page (U+FFFD instead)', async () => {
    const controls = '\r\u001b[31m\u007f\u0085\u009b'; // (NUL never gets in: the API refuses it)
    const key = await s.api('POST', '/api/auth/keys/management/', { token: me.access, body: { label: `label${controls} end` } });
    expect(key.status).toBe(201);
    const ident = await s.createIdentity(me.access, 'Control reader');
    await mailFromStranger('Control sender', ident.inbox, 'Controls inside', `Body${controls} end`);
    const thread = await threadRow(ident.uuid, 'Controls inside', '1');
    const threadPath = await thread.getByRole('link').getAttribute('href');

    for (const where of ['/keys', `/identities/${ident.uuid}`, threadPath!]) {
      const text = await rawHtml(where);
      expect({ where, control: text.match(CONTROL)?.[0] ?? null }).toEqual({ where, control: null });
    }
    await page.goto(`${s.url}/keys`);
    // CR LF would be a newline; a lone CR, like every other control, is U+FFFD.
    expect(await page.locator('#mk-h ~ .table-wrap tbody td').first().textContent()).toBe('label\uFFFD\uFFFD[31m\uFFFD\uFFFD\uFFFD end');
    expect(await page.getByRole('button', { name: /^Revoke management key label/ }).getAttribute('aria-label')).toMatch(/^Revoke management key label\uFFFD\uFFFD\[31m\uFFFD\uFFFD\uFFFD end \(svc_mgmt_…\w{4}\)$/);
  });

  it('keeps bidi overrides in user text from reordering the page text around it', async () => {
    // An override, and one that first closes an isolate it never opened (that would close the
    // isolation around the name and let the override run on).
    for (const name of ['Evil \u202Eeman', 'Worse \u2069\u202Eeman']) {
      const ident = await s.createIdentity(me.access, name);
      await page.goto(`${s.url}/identities/${ident.uuid}`);
      // "Type the identity's name (<name>) to confirm"
      expect(leftToRight(await positionsOf('label[for=confirm]', ') to confirm'))).toBe(true);

      // A mail whose sender is named with an override: the address after the name stays in order.
      const subject = `Bidi ${name.length} \u202Ereversed`;
      const peer = await mailFromStranger(`Sender \u202Eeman`, ident.inbox, subject, 'x');
      const row = await threadRow(ident.uuid, subject, '1');
      expect(await row.locator('td').nth(1).textContent()).toBe(`Sender \u202Eeman <${peer.inbox}>`);
      expect(leftToRight(await positionsOf('#mail-h + .table-wrap tbody tr td:nth-child(2)', `${peer.inbox}>`))).toBe(true);

      // Deleted: "Identity “<name>” deleted."
      await page.getByLabel(/to confirm/).fill(name);
      await submit(page, 'Delete identity');
      expect(leftToRight(await positionsOf('.flash.ok', '” deleted.'))).toBe(true);
    }
  });

  it('a 900-character subject is cut in the thread list (the other columns keep their room); a bidi override leaves the tab title in order', async () => {
    const ident = await s.createIdentity(me.access, 'Long \u202Eeman');
    const subject = `Long ${'word '.repeat(180)}end`; // about 900 characters
    await mailFromStranger('Partner', ident.inbox, subject, 'x');
    const row = await threadRow(ident.uuid, subject, '1');
    const widths = await row.locator('td').evaluateAll((cells) => cells.map((c) => (c as unknown as { getBoundingClientRect(): { width: number } }).getBoundingClientRect().width));
    expect(widths[0]).toBeLessThan(600);
    const lastLine = await row.locator('td').nth(3).evaluate((c) => (c as unknown as { getClientRects(): unknown[] }).getClientRects().length);
    expect(lastLine).toBe(1); // the date on one line
    // The <title> holds the name without its override: the site's name after it reads in order.
    expect(await page.title()).toBe('Identity Long eman · Agent Identity Service');
  });

  it('deletes an identity when its name is typed as the API compares names (Unicode NFC, any case)', async () => {
    const nfd = 'Cafe\u0301 agent';
    const ident = await s.createIdentity(me.access, nfd);
    expect(ident.name).toBe(nfd);
    await page.goto(`${s.url}/identities/${ident.uuid}`);
    await page.getByLabel(/to confirm/).fill('Another name');
    await submit(page, 'Delete identity');
    expect(await page.textContent('main')).toContain("The name typed is not this identity's name.");

    await page.getByLabel(/to confirm/).fill('CAF\u00c9 Agent'); // NFC, other case
    await submit(page, 'Delete identity');
    expect(await page.locator('.flash.ok').count()).toBe(1);
    expect(await page.textContent('.flash.ok')).toContain('deleted');
    const gone = await s.api('GET', `/api/identities/${ident.uuid}/`, { token: me.access });
    expect(gone.status).toBe(404);
  });
});
