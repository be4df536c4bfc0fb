/**
 * The dashboard's forms and page answers, in a real browser (headless Chromium against a real
 * server; each case was found by an outside audit of the pages): a refused form keeps what was typed (identity rename,
 * forgotten password, key label); the forgotten password and the identity deletion answer
 * their POST with a redirect (a reload posts nothing); an identity name as long as the API
 * takes can be edited; the CSRF refusal is an error page leading back to its form; a
 * malformed id, or another account's identity, is answered as an unknown one; the sign-in
 * pages carry no script; a mail without subject says so; the revoke confirmation's address
 * ends without a bare "?".
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { jest } from '@jest/globals';
import { mailedResetLink, signedInBrowser, submit } from '../support/browser.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { runClient } from '../support/client-process.js';

jest.setTimeout(120_000);

let s: TestServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let me: Awaited<ReturnType<TestServer['signUp']>>;

/** The API's longest identity name (schemas/identities.json, Name). */
const NAME_MAX: number = JSON.parse(readFileSync(new URL('../../schemas/identities.json', import.meta.url), 'utf8')).$defs.Name.maxLength;

/** The statuses of the POSTs `p` makes to `pathname` from now on. */
function postsTo(p: Page, pathname: string | RegExp): number[] {
  const seen: number[] = [];
  p.on('response', (r) => {
    const at = new URL(r.url()).pathname;
    if (r.request().method() === 'POST' && (typeof pathname === 'string' ? at === pathname : pathname.test(at))) seen.push(r.status());
  });
  return seen;
}

/** The status of the next POST the page sends. */
const nextPost = (p: Page) => p.waitForResponse((r) => r.request().method() === 'POST').then((r) => r.status());

beforeAll(async () => {
  s = await startTestServer({ ADMIN_TOKEN: 'admin' });
  me = await s.signUp();
  ({ browser, context, page } = await signedInBrowser(s.url, { username: me.user.username, password: me.password }));
});
afterAll(async () => {
  await browser?.close();
  await s?.close();
});

describe('dashboard forms and page answers', () => {
  it('answers an address with no page with a page (the menu, a way home), and a form\'s address re-opened (Enter in the address bar after a refusal) with the page the form is on; the API keeps its JSON', async () => {
    const ident = await s.createIdentity(me.access, 'Address bar');
    const missing = await page.goto(`${s.url}/no-such-page`);
    expect(missing?.status()).toBe(404);
    expect(await page.textContent('h1')).toBe('Page not found');
    expect(await page.getByRole('link', { name: 'Go to the dashboard' }).count()).toBe(1);
    expect(await page.getByRole('button', { name: 'Sign out' }).count()).toBe(1); // the menu of a signed-in page
    for (const [form, lands] of [
      [`/identities/${ident.uuid}/rename`, `/identities/${ident.uuid}`],
      ['/account/password', '/account'],
      ['/keys/management', '/keys'],
      ['/identities', '/'],
    ]) {
      const res = await page.goto(`${s.url}${form}`);
      expect([form, res?.status(), new URL(page.url()).pathname]).toEqual([form, 200, lands]);
    }
    // A client of the API (no text/html asked for) still gets the spec's JSON.
    const api = await fetch(`${s.url}/no-such-page`);
    expect([api.status, await api.json()]).toEqual([404, { detail: 'Not found.', code: 'not_found' }]);
  });

  it('keeps the name typed in the rename form when the rename is refused (a name in use, a blank one)', async () => {
    await s.createIdentity(me.access, 'Taken name');
    const ident = await s.createIdentity(me.access, 'Renamed one');
    await page.goto(`${s.url}/identities/${ident.uuid}`);
    const field = page.getByLabel('New name');
    await field.fill('TAKEN name');
    const taken = nextPost(page);
    await submit(page, 'Rename');
    expect(await taken).toBe(409);
    expect(await field.inputValue()).toBe('TAKEN name'); // not the current name
    expect(await field.getAttribute('aria-invalid')).toBe('true');
    expect(await page.textContent('#name-error')).toMatch(/already exists/);
    expect(await page.textContent('h1')).toBe('Identity Renamed one');

    // Blank (spaces pass the browser's `required`): the field says what was sent, nothing.
    await field.fill('   ');
    const blank = nextPost(page);
    await submit(page, 'Rename');
    expect(await blank).toBe(400);
    expect(await field.inputValue()).toBe('');
    expect(await field.getAttribute('aria-invalid')).toBe('true');
  });

  it('takes identity names as long as the API does, to create and to rename', async () => {
    const long = `${'L'.repeat(NAME_MAX - 1)}x`;
    const ident = await s.createIdentity(me.access, long); // made through the API
    await page.goto(`${s.url}/identities/${ident.uuid}`);
    const field = page.getByLabel('New name');
    expect(await field.getAttribute('maxlength')).toBe(String(NAME_MAX));
    expect(await field.inputValue()).toBe(long);
    const renamed = `${'M'.repeat(NAME_MAX - 1)}y`;
    await field.fill('');
    await field.pressSequentially(renamed); // typed: the browser applies maxlength to what a person types
    expect(await field.inputValue()).toBe(renamed);
    await submit(page, 'Rename');
    expect(await page.textContent('h1')).toBe(`Identity ${renamed}`);
    await page.goto(`${s.url}/`);
    expect(await page.getByLabel('Name', { exact: true }).getAttribute('maxlength')).toBe(String(NAME_MAX));
  });

  it('a form sent after the session ended elsewhere says it was not saved, and signing in leads back to its page', async () => {
    const u = await s.signUp();
    const other = await signedInBrowser(s.url, { username: u.user.username, password: u.password });
    try {
      const ident = await s.createIdentity(u.access, 'Stale tab');
      await other.page.goto(`${s.url}/identities/${ident.uuid}`);
      expect((await s.api('POST', '/api/auth/logout/', { token: u.access })).status).toBe(200); // every session of the account ends
      await other.page.getByLabel('New name').fill('Never saved');
      await submit(other.page, 'Rename');
      const at = new URL(other.page.url());
      expect([at.pathname, at.searchParams.get('next')]).toEqual(['/login', `/identities/${ident.uuid}`]);
      expect(await other.page.getByRole('alert').textContent()).toMatch(/session had ended, so what you sent was not saved/);
      expect((await s.api('GET', `/api/identities/${ident.uuid}/`, { token: (await s.api('POST', '/api/auth/login/', { body: { username: u.user.username, password: u.password } })).body.access })).body.name).toBe('Stale tab');
    } finally {
      await other.browser.close();
    }
  });

  it('confirms a deletion with the name as a person can type it (an invisible bidi override is no part of it); a wrong name is said to be wrong', async () => {
    const ident = await s.createIdentity(me.access, 'x\u202Eevil');
    await page.goto(`${s.url}/identities/${ident.uuid}`);
    await page.getByLabel(/to confirm/).fill('not it');
    expect(await Promise.all([nextPost(page), submit(page, 'Delete identity')]).then(([status]) => status)).toBe(400);
    expect(await page.textContent('#confirm-error')).toMatch(/not this identity's name/);
    await page.getByLabel(/to confirm/).fill('xevil');
    const posts = postsTo(page, `/identities/${ident.uuid}/delete`);
    await submit(page, 'Delete identity');
    expect(posts).toEqual([303]);
    expect((await s.api('GET', `/api/identities/${ident.uuid}/`, { token: me.access })).status).toBe(404);
  });

  it('answers the deletion of an identity with a redirect to the home page: a reload posts nothing', async () => {
    const ident = await s.createIdentity(me.access, 'Short lived');
    await page.goto(`${s.url}/identities/${ident.uuid}`);
    const posts = postsTo(page, `/identities/${ident.uuid}/delete`);
    await page.getByLabel(/to confirm/).fill('Short lived');
    await submit(page, 'Delete identity');
    expect(posts).toEqual([303]);
    expect(new URL(page.url()).pathname).toBe('/');
    expect(await page.getByRole('status').textContent()).toBe('Identity “Short lived” deleted.');
    const again = await page.reload();
    expect(again!.status()).toBe(200);
    expect(posts).toEqual([303]); // nothing posted again
    expect(await page.getByRole('status').textContent()).toBe('Identity “Short lived” deleted.');
    expect((await s.api('GET', `/api/identities/${ident.uuid}/`, { token: me.access })).status).toBe(404);
    // The name is sealed in the address: one written by someone else shows no notice.
    const sealed = new URL(page.url()).searchParams.get('deleted')!;
    expect(sealed).not.toContain('Short');
    for (const forged of ['Short lived', 'Pay the overdue invoice at evil.example', `${sealed.slice(0, -2)}AA`]) {
      await page.goto(`${s.url}/?deleted=${encodeURIComponent(forged)}`);
      expect(await page.textContent('h1')).toBeTruthy();
      expect(await page.locator('.flash').count()).toBe(0);
    }
  });

  it('keeps the label (and the identity chosen) of a key that was not created, its error next to the field', async () => {
    const first = await s.createIdentity(me.access, 'Key holder one');
    const second = await s.createIdentity(me.access, 'Key holder two');
    await page.goto(`${s.url}/keys`);
    // A blank label: refused next to the label, the identity chosen still chosen.
    await page.getByLabel('Label of the new identity key').fill('   ');
    await page.getByLabel('Identity', { exact: true }).selectOption(second.uuid);
    let status = nextPost(page);
    await submit(page, 'Create identity key');
    expect(await status).toBe(400);
    const label = page.getByLabel('Label of the new identity key');
    expect(await label.getAttribute('aria-invalid')).toBe('true');
    expect(await page.textContent(`#${await label.getAttribute('aria-describedby')}`)).toMatch(/blank/);
    expect(await page.getByLabel('Identity', { exact: true }).inputValue()).toBe(second.uuid);
    expect(await page.getByLabel('Label of the new management key').getAttribute('aria-invalid')).toBeNull(); // the other form has no error
    // The identity deleted meanwhile: the label typed is kept.
    await label.fill('runner key');
    await page.getByLabel('Identity', { exact: true }).selectOption(first.uuid);
    expect((await s.api('DELETE', `/api/identities/${first.uuid}/`, { token: me.access })).status).toBe(204);
    status = nextPost(page);
    await submit(page, 'Create identity key');
    expect(await status).toBe(404);
    expect(await page.getByRole('alert').textContent()).toContain('Identity not found.');
    expect(await page.getByLabel('Label of the new identity key').inputValue()).toBe('runner key');
    // The management form keeps its label too.
    await page.getByLabel('Label of the new management key').fill('  ');
    status = nextPost(page);
    await submit(page, 'Create management key');
    expect(await status).toBe(400);
    expect(await page.getByLabel('Label of the new management key').getAttribute('aria-invalid')).toBe('true');
    expect(await page.getByLabel('Label of the new identity key').inputValue()).toBe(''); // that form was not the one sent
  });

  it('answers a refused CSRF token with an error page whose "Go back" leads to the form', async () => {
    const ident = await s.createIdentity(me.access, 'Guarded');
    await page.goto(`${s.url}/identities/${ident.uuid}`);
    await page.locator('form[action$="/rename"] input[name=csrf]').evaluate((el) => el.setAttribute('value', 'forged'));
    await page.getByLabel('New name').fill('Changed');
    const status = nextPost(page);
    await submit(page, 'Rename');
    expect(await status).toBe(403);
    expect(await page.title()).toBe('Error: Request refused · Agent Identity Service');
    expect(await page.getByRole('alert').textContent()).toContain('The form expired or did not come from this site.');
    const back = page.getByRole('link', { name: 'Go back' });
    expect(await back.getAttribute('href')).toBe(`/identities/${ident.uuid}`);
    await Promise.all([page.waitForLoadState('load'), back.click()]);
    expect(await page.textContent('h1')).toBe('Identity Guarded');

    // A client that sends a Referer: a page of this site is where it goes back; another site's is not.
    const cookie = (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
    const refused = async (referer: string) => {
      const res = await fetch(`${s.url}/keys/management`, { method: 'POST', headers: { cookie, referer, 'content-type': 'application/x-www-form-urlencoded' }, body: 'label=x&csrf=forged' });
      expect(res.status).toBe(403);
      return /<a href="([^"]*)">Go back<\/a>/.exec(await res.text())?.[1];
    };
    expect(await refused(`${s.url}/keys?from=here`)).toBe('/keys?from=here');
    expect(await refused('https://evil.example/keys-phish')).toBe('/keys');
  });

  it('answers a malformed id, or another account’s identity, as an unknown one', async () => {
    const mine = await s.createIdentity(me.access, 'Mine');
    const other = await s.signUp();
    const theirs = await s.createIdentity(other.access, 'Theirs');
    /** Status, title and main text of a page. */
    const shown = async (path: string) => {
      const res = await page.goto(`${s.url}${path}`);
      return { status: res!.status(), title: await page.title(), main: await page.innerText('main', { timeout: 5000 }) };
    };
    const pairs: [unknown: string, odd: string[]][] = [
      [`/identities/${randomUUID()}`, ['/identities/not-a-uuid', `/identities/${theirs.uuid}`]],
      [`/identities/${randomUUID()}/mail/${randomUUID()}`, [`/identities/not-a-uuid/mail/${randomUUID()}`, `/identities/${theirs.uuid}/mail/${randomUUID()}`]],
      [`/identities/${mine.uuid}/mail/${randomUUID()}`, [`/identities/${mine.uuid}/mail/not-a-uuid`]],
      [`/identities/${randomUUID()}/sms/${randomUUID()}`, [`/identities/not-a-uuid/sms/x`, `/identities/${theirs.uuid}/sms/x`]],
      [`/keys/management/${randomUUID()}/revoke`, ['/keys/management/zzz/revoke']],
    ];
    for (const [unknown, odd] of pairs) {
      const expected = await shown(unknown);
      expect([unknown, expected.status, expected.title]).toEqual([unknown, 404, expect.stringMatching(/^Error: /)]);
      expect(await page.getByRole('alert').count()).toBe(1);
      for (const path of odd) expect({ path, ...(await shown(path)) }).toEqual({ path, ...expected });
    }
    // The frame's document of a message: text, as for an unknown identity.
    const body = async (path: string) => {
      const res = await fetch(`${s.url}${path}`, { headers: { cookie: (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ') } });
      return { status: res.status, text: await res.text() };
    };
    const expected = await body(`/identities/${randomUUID()}/mail-body/${randomUUID()}`);
    expect(expected.status).toBe(404);
    expect(await body(`/identities/not-a-uuid/mail-body/${randomUUID()}`)).toEqual(expected);
    expect(await body(`/identities/${theirs.uuid}/mail-body/${randomUUID()}`)).toEqual(expected);
  });

  it('keeps the address typed in the forgotten-password form on an error, and answers it with a redirect: a reload sends no second mail', async () => {
    const anonymous = await browser.newContext();
    try {
      const p = await anonymous.newPage();
      const posts = postsTo(p, '/forgot-password');
      await p.goto(`${s.url}/forgot-password`);
      const field = p.getByLabel('Email of your account');
      await field.fill('a@b'); // an address to the browser, not to the service
      await submit(p, 'Send a reset link');
      expect(posts).toEqual([400]);
      expect(await p.getByRole('alert').textContent()).toMatch(/valid email/i);
      expect(await field.inputValue()).toBe('a@b');

      await mailedResetLink(s, me.user, async () => {
        await field.fill(me.user.email);
        await submit(p, 'Send a reset link');
      });
      expect(posts).toEqual([400, 303]);
      expect(new URL(p.url()).pathname + new URL(p.url()).search).toBe('/forgot-password?sent=1');
      const sent = 'If an account uses this address, a reset link is on its way.';
      expect(await p.getByRole('status').textContent()).toBe(sent);
      expect(await p.title()).not.toMatch(/^Error/);
      const again = await p.reload();
      expect(again!.status()).toBe(200);
      expect(posts).toEqual([400, 303]); // nothing posted again: no second mail
      expect(await p.getByRole('status').textContent()).toBe(sent);

      // An address nobody uses: the same answer (no account enumeration).
      await p.goto(`${s.url}/forgot-password`);
      await field.fill('nobody@example.com');
      await submit(p, 'Send a reset link');
      expect(posts).toEqual([400, 303, 303]);
      expect(new URL(p.url()).pathname + new URL(p.url()).search).toBe('/forgot-password?sent=1');
      expect(await p.getByRole('status').textContent()).toBe(sent);
    } finally {
      await anonymous.close();
    }
  });

  it('loads no script on the sign-in pages (only a page with a Copy button does)', async () => {
    const anonymous = await browser.newContext();
    try {
      const p = await anonymous.newPage();
      const link = await mailedResetLink(s, me.user);
      for (const path of ['/login', '/register', '/forgot-password', '/forgot-password?sent=1', link, '/reset-password?uid=x&token=y', '/verify-email?key=x', '/verify-email/resend', '/verify-email/resend?sent=1']) {
        await p.goto(`${s.url}${path}`);
        expect([path, await p.locator('script').count()]).toEqual([path, 0]);
      }
    } finally {
      await anonymous.close();
    }
    // The keys page showing a new key has its Copy button, and the script that shows it.
    await page.goto(`${s.url}/keys`);
    await page.getByLabel('Label of the new management key').fill('copy me');
    await submit(page, 'Create management key');
    expect(await page.locator('script[src="/static/dashboard.js"]').count()).toBe(1);
    expect(await page.getByRole('button', { name: 'Copy', exact: true }).isVisible()).toBe(true);
  });

  it('says "(no subject)" for a mail without one, in the thread list and on the message', async () => {
    const reader = await s.createIdentity(me.access, 'No subject reader');
    const other = await s.signUp();
    const peer = await s.createIdentity(other.access, 'Terse sender');
    await s.compose(other.access, peer.uuid, { to: reader.inbox, subject: '', body: 'No subject here.' });
    let link = page.locator('#mail-h + .table-wrap tbody a');
    for (let i = 0; i < 50 && !(await link.count()); i++) {
      await new Promise((r) => setTimeout(r, 200));
      await page.goto(`${s.url}/identities/${reader.uuid}`);
      link = page.locator('#mail-h + .table-wrap tbody a');
    }
    expect(await link.locator('em').textContent({ timeout: 5000 })).toBe('(no subject)');
    await Promise.all([page.waitForLoadState('load'), link.click()]);
    expect(await page.textContent('h1')).toBe('(no subject)');
    const subject = page.locator('article.message dl.kv dt:text-is("Subject") + dd');
    expect(await subject.locator('em').textContent({ timeout: 5000 })).toBe('(no subject)');
  });

  it('opens the revoke confirmation at its address, without a bare "?"', async () => {
    const minted = await s.api('POST', '/api/auth/keys/management/', { token: me.access, body: { label: 'tidy url' } });
    expect(minted.status).toBe(201);
    await page.goto(`${s.url}/keys`);
    await submit(page, 'Revoke management key tidy url');
    expect(await page.textContent('h1')).toBe('Revoke management key tidy url?');
    expect(page.url()).toBe(`${s.url}/keys/management/${minted.body.uuid}/revoke`);
  });

  it('releases an identity\'s phone number from its page once confirmed (post/redirect/get); the page then offers a new one', async () => {
    expect((await s.api('PUT', `/api/admin/users/${me.user.pk}/subscription/`, { headers: { authorization: 'Bearer admin' }, body: { plan: 'developer', status: 'active' } })).status).toBe(200);
    const ident = await s.createIdentity(me.access, 'Phone holder', { provision_phone: true });
    await page.goto(`${s.url}/identities/${ident.uuid}`);
    // Unconfirmed (the browser's own check taken away): refused, the number kept.
    await page.locator('input[name="confirm"][value="yes"]').evaluate((box) => box.removeAttribute('required'));
    expect(await Promise.all([nextPost(page), submit(page, 'Release the number')]).then(([status]) => status)).toBe(400);
    expect(await page.textContent('main')).toContain('Tick the box to confirm.');
    expect((await s.api('GET', `/api/identities/${ident.uuid}/`, { token: me.access })).body.phone).toBe(ident.phone);

    await page.getByLabel(`Release ${ident.phone}`).check();
    const posts = postsTo(page, `/identities/${ident.uuid}/phone/release`);
    await submit(page, 'Release the number');
    expect(posts).toEqual([303]);
    expect(page.url()).toBe(`${s.url}/identities/${ident.uuid}?released=1`);
    expect(await page.textContent('.flash.ok')).toContain('Phone number released.');
    expect((await s.api('GET', `/api/identities/${ident.uuid}/`, { token: me.access })).body.phone).toBeNull();
    expect(await page.getByRole('button', { name: 'Get a phone number' }).count()).toBe(1);
  });

  /** This browser's cookies, for requests sent without it. */
  const cookieHeader = async () => (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');

  it('a HEAD of a thread or message page marks nothing read (a HEAD to the API does not either); opening it does', async () => {
    const reader = await s.createIdentity(me.access, 'Head reader');
    const other = await s.signUp();
    const peer = await s.createIdentity(other.access, 'Head sender');
    await s.compose(other.access, peer.uuid, { to: reader.inbox, subject: 'Unread until opened', body: 'Still unread?' });
    const threads = () => s.api('GET', '/api/email-inbox/', { token: me.access, identity: reader.uuid });
    let thread: any;
    for (let i = 0; i < 50 && !thread; i++) {
      thread = (await threads()).body[0];
      if (!thread) await new Promise((r) => setTimeout(r, 100));
    }
    const message = (await s.api('GET', '/api/email-messages/', { token: me.access, identity: reader.uuid })).body[0];
    const head = async (path: string) => (await fetch(`${s.url}${path}`, { method: 'HEAD', headers: { cookie: await cookieHeader(), accept: 'text/html' } })).status;
    expect(await head(`/identities/${reader.uuid}/mail/${thread.thread_id}`)).toBe(200);
    expect(await head(`/identities/${reader.uuid}/mail-body/${message.uuid}`)).toBe(200);
    expect(await head(`/identities/${reader.uuid}/mail/${randomUUID()}`)).toBe(404);
    expect((await threads()).body[0].unread_count).toBe(1); // the HEADs read it before: 0
    await page.goto(`${s.url}/identities/${reader.uuid}/mail/${thread.thread_id}`);
    expect((await threads()).body[0].unread_count).toBe(0);
    // An SMS conversation's page alike (the account is on a plan with phones since the release test).
    const texted = await s.createIdentity(me.access, 'Head texted', { provision_phone: true });
    const hook = await fetch(`${s.url}/api/webhooks/sms/`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ From: '+15550142', To: texted.phone!, Body: 'unread?', MessageSid: `SM${Date.now()}` }) });
    expect(hook.status).toBe(200);
    const conversations = () => s.api('GET', '/api/sms-inbox/', { token: me.access, identity: texted.uuid });
    const conversation = (await conversations()).body[0];
    expect(await head(`/identities/${texted.uuid}/sms/${conversation.conversation_id}`)).toBe(200);
    expect((await conversations()).body[0].unread_count).toBe(1);
    await page.goto(`${s.url}/identities/${texted.uuid}/sms/${conversation.conversation_id}`);
    expect((await conversations()).body[0].unread_count).toBe(0);
  });

  it('a "." or ".." where a page takes an id names nothing: the not-found page, not the list the API has there', async () => {
    const reader = await s.createIdentity(me.access, 'Dot reader');
    const cookie = await cookieHeader();
    // Sent as written (a browser or fetch would resolve the dots before sending).
    const raw = (path: string) =>
      new Promise<number>((resolve, reject) => {
        const u = new URL(s.url);
        http.get({ host: u.hostname, port: u.port, path, headers: { cookie, accept: 'text/html' } }, (res) => resolve(res.resume().statusCode!)).on('error', reject);
      });
    for (const path of [`/identities/${reader.uuid}/mail/.`, `/identities/${reader.uuid}/mail/%2E`, `/identities/${reader.uuid}/mail/..`, `/identities/${reader.uuid}/mail-body/.`, `/identities/${reader.uuid}/sms/.`, `/identities/${reader.uuid}/sms/%2e%2E`]) {
      expect([path, await raw(path)]).toEqual([path, 404]); // 200, an empty "(no subject)" thread, before
    }
  });

  it('revoking a key that is not this account\'s (or revoked already) answers the not-found page its confirmation shows', async () => {
    await page.goto(`${s.url}/keys`);
    const csrf = await page.locator('input[name=csrf]').first().getAttribute('value');
    const other = await s.signUp();
    const theirs = await s.api('POST', '/api/auth/keys/management/', { token: other.access, body: { label: 'not yours' } });
    for (const id of [theirs.body.uuid, randomUUID()]) {
      const res = await fetch(`${s.url}/keys/management/${id}/revoke`, { method: 'POST', headers: { cookie: await cookieHeader(), 'content-type': 'application/x-www-form-urlencoded' }, body: `csrf=${csrf}` });
      expect([res.status, res.headers.get('content-type')]).toEqual([404, 'text/html; charset=utf-8']); // 400 before, the confirmation 404
      expect(await res.text()).toContain('This key does not exist or was already revoked.');
    }
    expect((await s.api('GET', '/api/auth/keys/management/', { token: other.access })).body.map((k: any) => k.uuid)).toContain(theirs.body.uuid);
    // A kind of key there is none of: the page for no page (the API's JSON before).
    const none = await fetch(`${s.url}/keys/zzz`, { method: 'POST', headers: { cookie: await cookieHeader(), 'content-type': 'application/x-www-form-urlencoded' }, body: `csrf=${csrf}&label=x` });
    expect([none.status, none.headers.get('content-type')]).toEqual([404, 'text/html; charset=utf-8']);
    expect(await none.text()).toContain('There is no page at this address.');
  });

  it('a form body that cannot be read is answered with why, as a page (dashboard, sign-in and /device forms alike), never the API\'s JSON', async () => {
    const post = async (path: string, type: string, body: string | Buffer) => {
      const res = await fetch(`${s.url}${path}`, { method: 'POST', headers: { cookie: await cookieHeader(), 'content-type': type }, body });
      return { path, status: res.status, type: res.headers.get('content-type'), text: await res.text() };
    };
    for (const path of ['/identities', '/login', '/device/approve', '/device/deny', '/device/lookup', '/device/login', '/device/logout']) {
      const notUtf8 = await post(path, 'application/x-www-form-urlencoded', 'csrf=x&name=%FF&user_code=%FF');
      expect([notUtf8.path, notUtf8.status, notUtf8.type]).toEqual([path, 400, 'text/html; charset=utf-8']); // /device: JSON before; the others a 403 "form expired"
      expect(notUtf8.text).toContain('The form body is not valid UTF-8');
      const xml = await post(path, 'application/xml', '<name>x</name>');
      expect([xml.path, xml.status, xml.type]).toEqual([path, 415, 'text/html; charset=utf-8']);
    }
    // Over 1 MiB and still being sent: the page reaches the client (the body's rest drained
    // first, as for the API), not a reset. A client process of its own (runClient says why).
    const client = `
      const [url, cookie] = process.argv.slice(1);
      const chunked = () => new ReadableStream({ start(c) { for (let i = 0; i < 48; i++) c.enqueue(new TextEncoder().encode('z'.repeat(64 * 1024))); c.close(); } });
      const seen = [];
      for (const body of [() => 'name=' + 'y'.repeat(5 * 1024 * 1024), chunked]) {
        for (let i = 0; i < 4; i++) {
          seen.push(await fetch(url, { method: 'POST', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' }, body: body(), duplex: 'half' }).then(
            (res) => res.status + ' ' + res.headers.get('content-type'),
            (err) => String(err.cause?.code ?? err.message),
          ));
        }
      }
      console.log(JSON.stringify(seen));
    `;
    for (const path of ['/identities', '/login', '/device/approve']) {
      expect([path, await runClient<string[]>(client, `${s.url}${path}`, await cookieHeader())]).toEqual([path, Array(8).fill('413 text/html; charset=utf-8')]);
    }
  });
});
