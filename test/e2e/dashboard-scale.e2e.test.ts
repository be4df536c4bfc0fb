/**
 * The dashboard for an account that grew: every identity and key is reachable (the lists are
 * whole, not their first page), a key past the first 200 can be revoked from its
 * confirmation page, and an identity's threads page older and back.
 */
import type { Browser, Page } from 'playwright-core';
import { jest } from '@jest/globals';
import { signedInBrowser } from '../support/browser.js';
import { startTestServer, type TestServer } from '../support/server.js';

jest.setTimeout(180_000);

let s: TestServer;
let browser: Browser;
let page: Page;
let access: string;

beforeAll(async () => {
  s = await startTestServer({ EMAIL_LIMIT_HOUR: '1000', EMAIL_LIMIT_DAY: '1000' });
  const user = await s.signUp();
  access = user.access;
  ({ browser, page } = await signedInBrowser(s.url, { username: user.user.username, password: user.password }));
});
afterAll(async () => {
  await browser?.close();
  await s?.close();
});

const mint = (label: string) => s.api('POST', '/api/auth/keys/management/', { token: access, body: { label } });

it('lists every key and identity, and confirms the revocation of a key past the first 200', async () => {
  const keys: { uuid: string }[] = [];
  for (let i = 0; i < 205; i++) keys.push((await mint(`k${String(i).padStart(3, '0')}`)).body);
  for (let i = 0; i < 203; i++) expect((await s.api('POST', '/api/identities/', { token: access, body: { name: `agent ${i}` } })).status).toBe(201);

  await page.goto(`${s.url}/keys`);
  expect(await page.locator('form[action$="/revoke"]').count()).toBe(205);
  expect(await page.locator('#identity option').count()).toBe(203); // the mint form's identity choice
  await page.goto(`${s.url}/`);
  expect(await page.locator('a[href^="/identities/"]').count()).toBeGreaterThanOrEqual(203);

  const last = keys[keys.length - 1].uuid;
  const confirm = await page.goto(`${s.url}/keys/management/${last}/revoke`);
  expect(confirm!.status()).toBe(200);
  expect(await page.textContent('main')).toContain('k204');
});

it("pages through an identity's threads: older ones, and back to the newest", async () => {
  const ids = ((await s.api('GET', '/api/identities/?limit=2', { token: access })).body as { uuid: string; inbox: string }[]);
  const [reader, writer] = ids;
  for (let i = 0; i < 53; i++) {
    const sent = await s.api('POST', '/api/email-messages/compose/', { token: access, identity: writer.uuid, body: { to: reader.inbox, subject: `topic ${i}`, body: '<p>x</p>' } });
    expect(sent.status).toBe(201);
  }
  await page.goto(`${s.url}/identities/${reader.uuid}`);
  const subjects = async () => (await page.locator('a[href*="/mail/"]').allTextContents()).map((t) => t.replace(' (unread)', ''));
  expect(await subjects()).toHaveLength(50);
  expect(await subjects()).toContain('topic 52');
  await page.getByRole('link', { name: 'Older threads' }).click();
  expect(await subjects()).toEqual(['topic 2', 'topic 1', 'topic 0']);
  await page.getByRole('link', { name: 'Newest' }).click();
  expect(await subjects()).toContain('topic 52');
});

it("shows a long thread's newest messages, and says how many there are", async () => {
  const ids = ((await s.api('GET', '/api/identities/?limit=4', { token: access })).body as { uuid: string; inbox: string }[]);
  const [, , reader, writer] = ids;
  for (let i = 0; i < 203; i++) {
    const sent = await s.api('POST', '/api/email-messages/compose/', { token: access, identity: writer.uuid, body: { to: reader.inbox, subject: i ? 'Re: chat' : 'chat', body: `<p>line ${i}</p>` } });
    expect(sent.status).toBe(201);
  }
  const [thread] = (await s.api('GET', '/api/email-inbox/', { token: access, identity: reader.uuid })).body;
  expect(thread.message_count).toBe(203);
  await page.goto(`${s.url}/identities/${reader.uuid}/mail/${thread.thread_id}`);
  expect(await page.locator('article.message').count()).toBe(200);
  expect(await page.textContent('main')).toContain('The newest 200 of 203 messages are shown');
  expect(await page.locator('article.message').last().textContent()).toContain('line 202');
});
