/**
 * Email end to end over real SMTP both ways: nodemailer as an outside sender into the MX
 * listener, smtp-server as the relay sink (parsed with mailparser), the API in between.
 */
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import nodemailer from 'nodemailer';
import { AppendTooLargeError } from '../../infra/eventstoredb/event-store.js';
import { SMTPServer } from 'smtp-server';
import { simpleParser, type ParsedMail } from 'mailparser';
import { startTestServer, type TestServer } from '../support/server.js';
import { freePort } from '../support/spawn.js';
import { runClient } from '../support/client-process.js';
import type { MailParts } from '../../services/mail/index.js';
import { eventually } from '../support/eventually.js';

const DOMAIN = 'agents.localhost';

/** An SMTP relay sink: records envelope and parsed message of everything relayed to it. */
async function startSink() {
  const received: { envelope: { from: string; to: string[]; body?: string }; mail: ParsedMail; raw: string; session: string }[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['AUTH', 'STARTTLS'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const raw = Buffer.concat(chunks);
        simpleParser(raw)
          .then((mail) => {
            const args = session.envelope.mailFrom ? (session.envelope.mailFrom.args as Record<string, string> | false) : false;
            received.push({
              envelope: { from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '', to: session.envelope.rcptTo.map((r) => r.address), body: args ? args.BODY : undefined },
              mail,
              raw: raw.toString('latin1'),
              session: session.id, // one per SMTP connection
            });
            callback();
          })
          .catch(callback);
      });
    },
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', () => resolve()));
  return { port, received, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

let server: TestServer;
let sink: Awaited<ReturnType<typeof startSink>>;
let smtpPort: number;
let token: string;
let alice: { uuid: string; inbox: string };
let bob: { uuid: string; inbox: string };
let mallory: { token: string; identity: { uuid: string; inbox: string } };

async function createIdentity(tok: string, name: string, local: string) {
  const res = await server.api('POST', '/api/identities/', { token: tok, body: { name, email_identifier: local } });
  if (res.status !== 201) throw new Error(`identity create failed: ${res.status} ${res.text}`);
  return res.body as { uuid: string; inbox: string };
}

function outsideSender() {
  return nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true, tls: { rejectUnauthorized: false } });
}

const suffix = `${process.pid}${Date.now() % 100000}`;

beforeAll(async () => {
  sink = await startSink();
  smtpPort = await freePort();
  server = await startTestServer({ SMTP_PORT: String(smtpPort), SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}`, MAIL_DOMAIN: DOMAIN });
  const user = await server.signUp();
  token = user.access;
  alice = await createIdentity(token, 'Alice Agent', `alice${suffix}`);
  bob = await createIdentity(token, 'Bob Agent', `bob${suffix}`);
  const other = await server.signUp();
  mallory = { token: other.access, identity: await createIdentity(other.access, 'Mallory', `mallory${suffix}`) };
}, 60_000);

afterAll(async () => {
  await server?.close();
  await sink?.close();
});

const api = (method: string, path: string, identity: string, body?: unknown, tok = token) => server.api(method, path, { token: tok, identity, body });

describe('inbound SMTP (smtp-server + mailparser)', () => {
  let firstId: string;

  test('a mail from outside is accepted with 250 and readable as an unread thread', async () => {
    const info = await outsideSender().sendMail({
      from: 'Carol <carol@example.com>',
      to: alice.inbox,
      subject: 'Project kickoff',
      text: 'Hello Alice,\n\nlet us   start on Monday.',
      html: '<p>Hello Alice,</p><p>let us start on Monday.</p>',
      messageId: `<kickoff-${suffix}@example.com>`,
      attachments: [{ filename: 'plan.txt', content: 'step 1\nstep 2\n' }],
    });
    expect(info.response).toMatch(/^250/);
    expect(info.accepted).toEqual([alice.inbox]);

    const inbox = await api('GET', '/api/email-inbox/', alice.uuid);
    expect(inbox.status).toBe(200);
    const thread = inbox.body.find((t: { subject: string }) => t.subject === 'Project kickoff');
    expect(thread).toMatchObject({ message_count: 1, unread_count: 1, preview: 'Hello Alice, let us start on Monday.' });
    expect(thread.participants).toEqual(expect.arrayContaining(['carol@example.com', alice.inbox]));

    const unread = await api('GET', '/api/email-messages/?unread=true', alice.uuid);
    const message = unread.body.find((m: { subject: string }) => m.subject === 'Project kickoff');
    expect(message).toMatchObject({ direction: 'inbound', from_email: 'carol@example.com', from_name: 'Carol', to: [alice.inbox], read: false, thread_id: thread.thread_id });
    firstId = message.uuid;

    // The other account cannot see it, and Bob's inbox is untouched.
    expect((await api('GET', `/api/email-messages/${firstId}/`, mallory.identity.uuid, undefined, mallory.token)).status).toBe(404);
    expect((await api('GET', `/api/email-messages/${firstId}/`, bob.uuid)).status).toBe(404);
  });

  test('opening a message marks it read; PATCH sets it explicitly; attachments download by uuid', async () => {
    const opened = await api('GET', `/api/email-messages/${firstId}/`, alice.uuid);
    expect(opened.status).toBe(200);
    expect(opened.body).toMatchObject({ read: true, text: expect.stringContaining('start on Monday'), html: expect.stringContaining('<p>Hello Alice,</p>') });
    expect(opened.body.attachments).toHaveLength(1);
    const att = opened.body.attachments[0];
    expect(att).toMatchObject({ filename: 'plan.txt', content_type: 'text/plain', size: 14 });

    const dl = await fetch(`${server.url}/api/email-attachments/${att.uuid}/`, { headers: { authorization: `Bearer ${token}`, 'x-service-identity': alice.uuid } });
    expect(dl.status).toBe(200);
    expect(await dl.text()).toBe('step 1\nstep 2\n');
    // download_url works as given, without an identity header (it names the identity).
    const followed = await fetch(att.download_url, { headers: { authorization: `Bearer ${token}` } });
    expect([followed.status, await followed.text()]).toEqual([200, 'step 1\nstep 2\n']);
    // Its ETag names the bytes: a client that has them gets 304 and no body.
    const etag = dl.headers.get('etag')!;
    expect(etag).toMatch(/^"[0-9a-f]{64}"$/);
    const again = await fetch(`${server.url}/api/email-attachments/${att.uuid}/`, { headers: { authorization: `Bearer ${token}`, 'x-service-identity': alice.uuid, 'if-none-match': etag } });
    expect([again.status, await again.text(), again.headers.get('etag')]).toEqual([304, '', etag]);
    const other = await fetch(`${server.url}/api/email-attachments/${att.uuid}/`, { headers: { authorization: `Bearer ${token}`, 'x-service-identity': alice.uuid, 'if-none-match': '"0000"' } });
    expect([other.status, await other.text()]).toEqual([200, 'step 1\nstep 2\n']);
    const foreign = await fetch(`${server.url}/api/email-attachments/${att.uuid}/`, { headers: { authorization: `Bearer ${token}`, 'x-service-identity': bob.uuid } });
    expect(foreign.status).toBe(404);
    // A download cut off resumes (RFC 9110 §14): one range, 206 with Content-Range; If-Range
    // naming other bytes, several ranges or another unit: the whole; outside the bytes: 416.
    const ranged = (range: string, extra: Record<string, string> = {}) =>
      fetch(`${server.url}/api/email-attachments/${att.uuid}/`, { headers: { authorization: `Bearer ${token}`, 'x-service-identity': alice.uuid, range, ...extra } });
    expect(dl.headers.get('accept-ranges')).toBe('bytes');
    let part = await ranged('bytes=7-');
    expect([part.status, part.headers.get('content-range'), part.headers.get('content-length'), await part.text()]).toEqual([206, 'bytes 7-13/14', '7', 'step 2\n']);
    part = await ranged('bytes=0-3');
    expect([part.status, await part.text()]).toEqual([206, 'step']);
    part = await ranged('bytes=-2');
    expect([part.status, part.headers.get('content-range'), await part.text()]).toEqual([206, 'bytes 12-13/14', '2\n']);
    part = await ranged('bytes=5-9999');
    expect([part.status, part.headers.get('content-range')]).toEqual([206, 'bytes 5-13/14']);
    part = await ranged('bytes=0-3', { 'if-range': etag });
    expect(part.status).toBe(206);
    part = await ranged(' bytes = 0 - 3 '); // optional whitespace around its parts
    expect([part.status, await part.text()]).toEqual([206, 'step']);
    // A header longer than any one range is not parsed (a run of whitespace in it made the
    // match backtrack for minutes: the whole process stalled): the whole body.
    const stalling = `bytes=${'\t'.repeat(6000)}-${' '.repeat(6000)}x`;
    part = await ranged(`bytes=${' '.repeat(200)}0-3`);
    expect([part.status, await part.text()]).toEqual([200, 'step 1\nstep 2\n']);
    for (const whole of [ranged('bytes=0-3', { 'if-range': '"0000"' }), ranged('bytes=0-1,4-5'), ranged('lines=1-2'), ranged('bytes=5-3'), ranged('bytes=1 2-3'), ranged(stalling)]) {
      const res = await whole;
      expect([res.status, await res.text()]).toEqual([200, 'step 1\nstep 2\n']);
    }
    // A HEAD ignores Range (RFC 9110 §14.2): the whole length.
    const head = await fetch(`${server.url}/api/email-attachments/${att.uuid}/`, { method: 'HEAD', headers: { authorization: `Bearer ${token}`, 'x-service-identity': alice.uuid, range: 'bytes=2-4' } });
    expect([head.status, head.headers.get('content-length')]).toEqual([200, '14']);
    const outside = await ranged('bytes=14-');
    expect([outside.status, outside.headers.get('content-range'), outside.headers.get('content-disposition'), ((await outside.json()) as { code: string }).code]).toEqual([416, 'bytes */14', null, 'range_not_satisfiable']);

    let threads = await api('GET', '/api/email-inbox/?unread=true', alice.uuid);
    expect(threads.body.find((t: { subject: string }) => t.subject === 'Project kickoff')).toBeUndefined();

    const patched = await api('PATCH', `/api/email-messages/${firstId}/`, alice.uuid, { read: false });
    expect(patched.status).toBe(200);
    expect(patched.body.read).toBe(false);
    threads = await api('GET', '/api/email-inbox/?unread=true', alice.uuid);
    expect(threads.body.find((t: { subject: string }) => t.subject === 'Project kickoff')).toMatchObject({ unread_count: 1 });
    expect((await api('PATCH', `/api/email-messages/${firstId}/`, alice.uuid, { read: 'maybe' })).status).toBe(400);
    // JSON null is not false: refused, and a read message stays read.
    expect((await api('PATCH', `/api/email-messages/${firstId}/`, alice.uuid, { read: true })).body.read).toBe(true);
    expect((await api('PATCH', `/api/email-messages/${firstId}/`, alice.uuid, { read: null })).body).toEqual({ read: ['This field may not be null.'] });
    expect((await api('GET', '/api/email-messages/?unread=true', alice.uuid)).body.some((m: { uuid: string }) => m.uuid === firstId)).toBe(false);
    expect((await api('PATCH', `/api/email-messages/${firstId}/`, alice.uuid, { read: false })).body.read).toBe(false); // as the next test expects
  });

  test('HEAD marks nothing read; bodies over 256 KiB are left out of the list (truncated) and in the thread and message', async () => {
    const big = 'x'.repeat(300 * 1024);
    await outsideSender().sendMail({ from: 'bulk@example.com', to: alice.inbox, subject: `Big body ${suffix}`, text: big });
    const listed = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((m: { subject: string }) => m.subject === `Big body ${suffix}`);
    expect(listed).toMatchObject({ truncated: true, text: null, read: false });
    const head = await fetch(`${server.url}/api/email-messages/${listed.uuid}/`, { method: 'HEAD', headers: { authorization: `Bearer ${token}`, 'x-service-identity': alice.uuid } });
    expect(head.status).toBe(200);
    const headThread = await fetch(`${server.url}/api/email-inbox/${listed.thread_id}/`, { method: 'HEAD', headers: { authorization: `Bearer ${token}`, 'x-service-identity': alice.uuid } });
    expect(headThread.status).toBe(200);
    expect((await api('GET', '/api/email-messages/?unread=true', alice.uuid)).body.some((m: { uuid: string }) => m.uuid === listed.uuid)).toBe(true);
    const thread = await api('GET', `/api/email-inbox/${listed.thread_id}/`, alice.uuid);
    expect(thread.body.messages[0].text.trim()).toBe(big);
    expect(thread.body.messages[0].truncated).toBe(false);
    expect((await api('GET', `/api/email-messages/${listed.uuid}/`, alice.uuid)).body.text.trim()).toBe(big);
  });

  test('a 64 KB text and HTML mail (kept as blobs, out of the event) reads in full in the list, the thread and the message', async () => {
    const text = `Dear agent,\n${'a line of a long report, wrapped as mail is.\n'.repeat(1500)}`;
    const html = `<p>Dear agent,</p>${'<p>a paragraph of a long report</p>'.repeat(2000)}`;
    await outsideSender().sendMail({ from: 'reports@example.com', to: alice.inbox, subject: `Long report ${suffix}`, text, html });
    const listed = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((m: { subject: string }) => m.subject === `Long report ${suffix}`);
    expect(listed).toMatchObject({ truncated: false, preview: expect.stringMatching(/^Dear agent, a line of a long report/) });
    expect([listed.text.trim(), listed.html.trim()]).toEqual([text.trim(), html]);
    const thread = await api('GET', `/api/email-inbox/${listed.thread_id}/`, alice.uuid);
    expect(thread.body.messages[0].text.trim()).toBe(text.trim());
    expect((await api('GET', `/api/email-messages/${listed.uuid}/`, alice.uuid)).body.html.trim()).toBe(html);
    // The event carries blob references and sizes, not the bodies.
    const recorded = (await server.runtime.events.readStream(`mailbox-${alice.uuid}`)).find((e) => e.data.messageId === listed.uuid)!;
    expect(recorded.data).toMatchObject({ text: null, html: null, textBlob: expect.any(String), htmlBlob: expect.any(String), htmlBytes: Buffer.byteLength(html) });
    expect(JSON.stringify(recorded.data).length).toBeLessThan(4096);
  });

  test('a large body an older version kept inline in its event lists like a blob one: left out of the list (truncated), whole in the message', async () => {
    // Before bodies over 16 KiB became blobs, events carried them inline (up to 16 MiB).
    const template = (await server.runtime.events.readStream(`mailbox-${alice.uuid}`))[0];
    const messageId = randomUUID();
    const big = 'an old, long body. '.repeat(20_000); // 380 KB
    const { textBlob: _t, htmlBlob: _h, textBytes: _tb, htmlBytes: _hb, ...old } = template.data;
    const data = { ...old, messageId, threadId: randomUUID(), internetMessageId: `<${messageId}@old.example>`, subject: `Old inline ${suffix}`, text: big, html: null };
    await server.runtime.events.append(`mailbox-${alice.uuid}`, [{ id: randomUUID(), type: 'EmailReceived', data }]);
    const listed = await eventually(async () => (await api('GET', '/api/email-messages/', alice.uuid)).body.find((m: { uuid: string }) => m.uuid === messageId));
    expect([listed.text, listed.truncated]).toEqual([null, true]);
    expect((await api('GET', `/api/email-messages/${messageId}/`, alice.uuid)).body.text).toBe(big);
  });

  test('a thread of large mails shows its newest bodies within one answer\'s budget; older ones are truncated, whole in the message', async () => {
    const subject = `Big thread ${suffix}`;
    const sixMiB = (c: string) => `${c.repeat(64)}\n`.repeat(6 * 1024 * 16); // 6.1 MiB of text
    const ids: string[] = [];
    for (const c of ['a', 'b', 'c']) {
      const messageId = `<big-${c}-${suffix}@example.com>`;
      await outsideSender().sendMail({ from: 'big@example.com', to: alice.inbox, subject: ids.length ? `Re: ${subject}` : subject, text: sixMiB(c), messageId, inReplyTo: ids.at(-1), references: [...ids] });
      ids.push(messageId);
    }
    const listed = (await api('GET', '/api/email-messages/', alice.uuid)).body.filter((m: { message_id: string }) => ids.includes(m.message_id));
    const thread = await api('GET', `/api/email-inbox/${listed[0].thread_id}/`, alice.uuid);
    expect(thread.status).toBe(200);
    expect(thread.body.messages.map((m: { truncated: boolean; text: string | null }) => [m.truncated, m.text?.length ?? null])).toEqual([
      [true, null],
      [false, sixMiB('b').length],
      [false, sixMiB('c').length],
    ]);
    const oldest = thread.body.messages[0];
    expect((await api('GET', `/api/email-messages/${oldest.uuid}/`, alice.uuid)).body.text).toBe(sixMiB('a'));
  }, 60_000);

  test('a reply to a message without a usable sender address is a 400, not a mail to nobody', async () => {
    await outsideSender().sendMail({ envelope: { from: 'bounce@example.com', to: [alice.inbox] }, raw: `From: "bad" <not an address>\r\nTo: ${alice.inbox}\r\nSubject: No sender ${suffix}\r\n\r\nhello\r\n` });
    const m = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((x: { subject: string }) => x.subject === `No sender ${suffix}`);
    const res = await api('POST', `/api/email-messages/${m.uuid}/reply/`, alice.uuid, { body: 'hi' });
    expect([res.status, Object.keys(res.body)]).toEqual([400, ['non_field_errors']]);
  });

  test('real-world shapes: cid images of multipart/related are inline, unnamed parts get a name their type opens with, a bad Date is no date, a From without an address is the envelope sender under its name', async () => {
    const subject = `Shapes ${suffix}`;
    const raw = [
      'From: Just A Name',
      `To: ${alice.inbox}`,
      `Subject: ${subject}`,
      'Date: the day after tomorrow',
      'MIME-Version: 1.0',
      'Content-Type: multipart/mixed; boundary="m"',
      '',
      '--m',
      'Content-Type: multipart/related; boundary="r"',
      '',
      '--r',
      'Content-Type: text/html; charset=utf-8',
      '',
      '<p>logo: <img src="cid:logo@x"></p>',
      '--r',
      'Content-Type: image/png',
      'Content-ID: <logo@x>',
      'Content-Transfer-Encoding: base64',
      '',
      'iVBORw0KGgo=',
      '--r--',
      '--m',
      'Content-Type: message/rfc822',
      '',
      'From: inner@example.com',
      'Subject: forwarded',
      '',
      'inner body',
      '--m',
      'Content-Type: text/calendar; method=REQUEST',
      '',
      'BEGIN:VCALENDAR',
      'END:VCALENDAR',
      '--m',
      'Content-Type: application/octet-stream',
      'Content-Transfer-Encoding: base64',
      '',
      'AAECAw==',
      '--m',
      'Content-Type: text/x-log; name="../../etc/\u202Epasswd"',
      'Content-Disposition: attachment; filename="../../etc/\u202Epasswd"',
      '',
      'log line',
      '--m--',
      '',
    ].join('\r\n');
    await outsideSender().sendMail({ envelope: { from: 'bounces@lists.example.com', to: [alice.inbox] }, raw });
    const m = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((x: { subject: string }) => x.subject === subject);
    expect([m.from_email, m.from_name, m.sent_at]).toEqual(['bounces@lists.example.com', 'Just A Name', null]);
    expect([m.text, m.preview]).toEqual(['logo:', 'logo:']); // an HTML-only mail's text, from the linear htmlToText
    const byType = Object.fromEntries(m.attachments.map((a: { content_type: string }) => [a.content_type, a]));
    expect(byType['image/png']).toMatchObject({ inline: true, content_id: '<logo@x>' });
    expect(byType['message/rfc822']).toMatchObject({ filename: 'attachment.eml', inline: false });
    expect(byType['text/calendar']).toMatchObject({ filename: 'attachment.ics' });
    expect(byType['application/octet-stream']).toMatchObject({ filename: 'attachment.bin', size: 4 });
    // A name safe to save and show: no path, no bidirectional override.
    expect(byType['text/x-log']).toMatchObject({ filename: '.._.._etc__passwd' });
  });

  test('a subject whose encoded words carry line breaks or other control characters reads as one line', async () => {
    const tag = `Oneline${suffix}`;
    await outsideSender().sendMail({ envelope: { from: 'a@example.org', to: [alice.inbox] }, raw: `From: a@example.org\r\nTo: ${alice.inbox}\r\nSubject: =?utf-8?q?${tag}_line1=0D=0ABcc:_x@example.org=00nul?=\r\n\r\nx\r\n` });
    const m = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((x: { subject: string }) => x.subject.startsWith(tag));
    expect(m.subject).toBe(`${tag} line1 Bcc: x@example.org nul`);
    const thread = (await api('GET', '/api/email-inbox/', alice.uuid)).body.find((t: { subject: string }) => t.subject.startsWith(tag));
    expect(thread.subject).toBe(m.subject);
  });

  test('sent_at is the Date header in UTC, or null when RFC 3339 cannot write it (a year past 9999)', async () => {
    const dated = async (date: string) => {
      const subject = `Dated ${date} ${suffix}`;
      await outsideSender().sendMail({ envelope: { from: 'a@example.org', to: [alice.inbox] }, raw: `From: a@example.org\r\nTo: ${alice.inbox}\r\nDate: ${date}\r\nSubject: ${subject}\r\n\r\nx\r\n` });
      return (await api('GET', '/api/email-messages/', alice.uuid)).body.find((x: { subject: string }) => x.subject === subject).sent_at;
    };
    expect(await dated('Mon, 1 Jan 2024 10:00:00 +0530')).toBe('2024-01-01T04:30:00.000Z');
    expect(await dated('Fri, 1 Jan 10000 10:00:00 +0000')).toBeNull();
    // What is no date (JavaScript's Date.parse reads them all as some day of 2001): none.
    for (const junk of ['-1', 'version 2', '5.1.1', 'tomorrow at 3', 'Mon, 01 Jan 0001 00:00:00 +0000']) expect([junk, await dated(junk)]).toEqual([junk, null]);
    // Spellings mailers do send: RFC 5322 without a weekday or seconds, a two-digit year, ISO 8601, asctime.
    expect(await dated('1 Jan 2024 10:00 +0000')).toBe('2024-01-01T10:00:00.000Z');
    expect(await dated('Mon, 1 Jan 24 10:00:00 GMT')).toBe('2024-01-01T10:00:00.000Z');
    expect(await dated('2024-01-01T10:00:00Z')).toBe('2024-01-01T10:00:00.000Z');
  });

  test('what a header line cannot hold is not kept (a display name past 998 characters, a Message-ID past 990); over 1000 MIME parts is a 554 saying so', async () => {
    const subject = `Long name ${suffix}`;
    await outsideSender().sendMail({ envelope: { from: 'a@example.org', to: [alice.inbox] }, raw: `From: "${'N'.repeat(5000)}" <a@example.org>\r\nTo: ${alice.inbox}\r\nIn-Reply-To: <${'i'.repeat(5000)}@example.org>\r\nSubject: ${subject}\r\n\r\nx\r\n` });
    const m = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((x: { subject: string }) => x.subject === subject);
    expect([m.from_name.length, m.from_email]).toEqual([998, 'a@example.org']);
    expect(JSON.stringify(m)).not.toContain('i'.repeat(991));
    const parts = Array.from({ length: 1001 }, (_, i) => `--B\r\nContent-Type: text/plain\r\n\r\npart ${i}\r\n`).join('');
    await expect(outsideSender().sendMail({ envelope: { from: 'a@example.org', to: [alice.inbox] }, raw: `From: a@example.org\r\nTo: ${alice.inbox}\r\nSubject: parts ${suffix}\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="B"\r\n\r\n${parts}--B--\r\n` })).rejects.toMatchObject({
      responseCode: 554,
      response: expect.stringContaining('more than 1000 MIME parts'),
    });
  });

  test('a list post (an HTML part, then a plain footer, in multipart/mixed) keeps both in its text; an alternative keeps its plain part', async () => {
    const post = (subject: string, type: string, parts: string[][]) =>
      outsideSender().sendMail({
        envelope: { from: 'list@example.com', to: [alice.inbox] },
        raw: [`From: list@example.com`, `To: ${alice.inbox}`, `Subject: ${subject}`, 'MIME-Version: 1.0', `Content-Type: ${type}; boundary="B"`, '', ...parts.flatMap((p) => ['--B', ...p]), '--B--', ''].join('\r\n'),
      });
    await post(`Mixed ${suffix}`, 'multipart/mixed', [
      ['Content-Type: text/html', '', '<p>The real body: meeting at 5pm</p>'],
      ['Content-Type: text/plain', '', '_______________', 'list mailing list footer'],
    ]);
    await post(`Alternative ${suffix}`, 'multipart/alternative', [
      ['Content-Type: text/plain', '', "the sender's own plain text"],
      ['Content-Type: text/html', '', '<p>the <b>HTML</b> version</p>'],
    ]);
    await post(`Order ${suffix}`, 'multipart/mixed', [
      ['Content-Type: text/plain', '', 'Hi Bob, the report is below.'],
      ['Content-Type: text/html', '', '<p>Q3 report table</p>'],
    ]);
    // Over 64 KiB mailparser's own conversion is skipped (super-linear); a body that only
    // mentions multipart/alternative is no alternative.
    const pad = ['Content-Type: application/octet-stream', 'Content-Disposition: attachment; filename="pad.bin"', 'Content-Transfer-Encoding: base64', '', Buffer.alloc(70_000, 7).toString('base64').replace(/.{76}/g, '$&\r\n')];
    await post(`Large ${suffix}`, 'multipart/mixed', [['Content-Type: text/html', '', '<p>How do I send multipart/alternative mail?</p>'], ['Content-Type: text/plain', '', '-- list footer'], pad]);
    // Nor is a body line that reads like a part header, nor an alternative inside a forwarded message.
    await post(`Large line ${suffix}`, 'multipart/mixed', [['Content-Type: text/html', '', '<p>MAIN HTML BODY</p>'], ['Content-Type: text/plain', '', 'Content-Type: multipart/alternative; boundary=x', 'list footer'], pad]);
    const forwarded = ['Content-Type: message/rfc822', '', 'From: inner@example.com', 'Subject: inner', 'Content-Type: multipart/alternative; boundary="I"', '', '--I', 'Content-Type: text/plain', '', 'inner plain', '--I', 'Content-Type: text/html', '', '<p>inner html</p>', '--I--'];
    await post(`Large forward ${suffix}`, 'multipart/mixed', [['Content-Type: text/html', '', '<p>MAIN HTML BODY</p>'], ['Content-Type: text/plain', '', 'list footer'], forwarded, pad]);
    // A large alternative says its plain part once, the HTML's text not added to it.
    const alternative = ['Content-Type: multipart/alternative; boundary="A"', '', '--A', 'Content-Type: text/plain', '', 'plain words', '--A', 'Content-Type: text/html', '', '<p>html words</p>', '--A--'];
    await post(`Large alternative ${suffix}`, 'multipart/mixed', [alternative, pad]);
    const list = (await api('GET', '/api/email-messages/', alice.uuid)).body;
    const bySubject = (subject: string) => list.find((m: { subject: string }) => m.subject === subject);
    const mixed = bySubject(`Mixed ${suffix}`);
    expect(mixed.text.trim()).toBe('The real body: meeting at 5pm\n_______________\nlist mailing list footer');
    expect(mixed.preview).toMatch(/^The real body: meeting at 5pm/);
    expect(bySubject(`Alternative ${suffix}`).text.trim()).toBe("the sender's own plain text");
    expect(bySubject(`Order ${suffix}`).text.trim()).toBe('Hi Bob, the report is below.\nQ3 report table');
    expect(bySubject(`Large ${suffix}`).text.trim()).toBe('How do I send multipart/alternative mail?\n-- list footer');
    expect(bySubject(`Large line ${suffix}`).text.trim()).toBe('MAIN HTML BODY\nContent-Type: multipart/alternative; boundary=x\nlist footer');
    expect(bySubject(`Large forward ${suffix}`).text.trim()).toBe('MAIN HTML BODY\nlist footer');
    expect(bySubject(`Large alternative ${suffix}`).text.trim()).toBe('plain words');
  });

  test('lists built to cost the one thread seconds get a short 400 at once: half a million list items, thousands of bad addresses', async () => {
    const compose = (body: Record<string, unknown>) => server.api('POST', '/api/email-messages/compose/', { token, identity: alice.uuid, body });
    const items = await compose({ to: 'a@example.com', attachment_uuids: Array(500_000).fill(1) });
    expect([items.status, items.body]).toEqual([400, { attachment_uuids: ['Ensure this field has no more than 50 elements.'] }]);
    const recipients = await compose({ to: Array.from({ length: 101 }, (_, i) => `r${i}@example.com`) });
    expect([recipients.status, recipients.body]).toEqual([400, { non_field_errors: ['At most 100 recipients per message.'] }]);
    // Duplicates are one recipient: 120 copies of one address are a message to one.
    const copies = await compose({ to: Array(120).fill('dup@example.com').join(', '), subject: 'copies' });
    expect([copies.status, copies.body.to]).toEqual([201, ['dup@example.com']]);
    // Each bad entry once, not the whole field per entry (that answered 133 MB).
    const bad = 'a b@x.co,'.repeat(2000);
    const amplified = await compose({ to: bad, cc: bad, bcc: bad });
    expect(amplified.status).toBe(400);
    expect(amplified.text.length).toBeLessThan(10_000);
    expect(amplified.body.to).toEqual([`At most 100 recipients per message.`]);
    const wrongTypes = await compose({ to: 'a@example.com', attachment_uuids: Array(50).fill(1) });
    expect(wrongTypes.body.attachment_uuids).toHaveLength(20); // the first 20 messages of a field
  });

  test('an inbound subject keeps 998 characters, a To or Cc header its first 1000 addresses', async () => {
    const tag = `Long${suffix}`;
    const to = [alice.inbox, ...Array.from({ length: 1500 }, (_, i) => `p${i}@example.com`)].join(', ');
    await outsideSender().sendMail({ envelope: { from: 'a@example.org', to: [alice.inbox] }, raw: `From: a@example.org\r\nTo: ${to}\r\nSubject: ${tag} ${'word '.repeat(2000)}\r\n\r\nx\r\n` });
    const m = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((x: { subject: string }) => x.subject.startsWith(tag));
    expect(m.subject).toHaveLength(998);
    expect(m.to).toHaveLength(1000);
  });

  test('a 1 MB HTML-only mail built to stall an HTML-to-text converter is taken at once', async () => {
    const started = Date.now();
    await outsideSender().sendMail({ from: 'hostile@example.com', to: alice.inbox, subject: `Hostile ${suffix}`, html: '<li>x'.repeat(200_000) });
    expect(Date.now() - started).toBeLessThan(4_000); // mailparser's own conversion: 10 s
    const m = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((x: { subject: string }) => x.subject === `Hostile ${suffix}`);
    expect(m.preview).toMatch(/^- x- x- x/);
  }, 10_000);

  test('RFC 5322 §3.6.4: a reply carrying In-Reply-To joins the thread; opening the thread marks all read', async () => {
    await outsideSender().sendMail({
      from: 'Carol <carol@example.com>',
      to: alice.inbox,
      subject: 'Re: Project kickoff',
      text: 'One more thing.',
      inReplyTo: `<kickoff-${suffix}@example.com>`,
      references: [`<kickoff-${suffix}@example.com>`],
    });
    const inbox = await api('GET', '/api/email-inbox/', alice.uuid);
    const thread = inbox.body.find((t: { subject: string }) => t.subject === 'Project kickoff');
    expect(thread).toMatchObject({ message_count: 2, unread_count: 2, preview: 'One more thing.' });
    expect(inbox.body[0].thread_id).toBe(thread.thread_id); // newest first

    const detail = await api('GET', `/api/email-inbox/${thread.thread_id}/`, alice.uuid);
    expect(detail.status).toBe(200);
    expect(detail.body.messages.map((m: { subject: string }) => m.subject)).toEqual(['Project kickoff', 'Re: Project kickoff']);
    expect(detail.body.messages.every((m: { read: boolean }) => m.read)).toBe(true);
    expect(detail.body.unread_count).toBe(0);
    expect((await api('GET', `/api/email-inbox/${thread.thread_id}/`, bob.uuid)).status).toBe(404);
  });

  test('fallback threading: "Re:" + same subject + same participants without headers joins the thread', async () => {
    await outsideSender().sendMail({ from: 'carol@example.com', to: alice.inbox, subject: 'RE: project kickoff', text: 'Forgot the headers.' });
    const inbox = await api('GET', '/api/email-inbox/', alice.uuid);
    expect(inbox.body.filter((t: { subject: string }) => /kickoff/i.test(t.subject))).toHaveLength(1);
    expect(inbox.body[0]).toMatchObject({ message_count: 3 });
  });

  test('a reply decided while its original is still being recorded waits for it and joins its thread', async () => {
    const { mail } = server.runtime.parts.find((p) => p.name === 'mail') as MailParts;
    const identity = (await mail.identityByInbox(alice.inbox))!;
    const common = {
      references: [] as string[],
      from: { address: 'dave@example.com', name: 'Dave' },
      to: [{ address: alice.inbox, name: '' }],
      cc: [],
      replyTo: [],
      text: 'Racing.',
      html: null,
      attachments: [],
      raw: null,
      via: 'smtp' as const,
      sourceMessageId: null,
      date: null,
    };
    const original = `<race-${suffix}@example.com>`;
    // Started in the same tick: the reply's thread is decided right after the original's,
    // while the original is not yet in the read models the decision reads.
    const [[first], [reply]] = await Promise.all([
      mail.receive([identity], { ...common, internetMessageId: original, inReplyTo: null, subject: 'Race' }, `test:race-${suffix}`),
      mail.receive([identity], { ...common, internetMessageId: `<race-re-${suffix}@example.com>`, inReplyTo: original, references: [original], subject: 'Re: Race' }, `test:race-re-${suffix}`),
    ]);
    expect(reply.threadId).toBe(first.threadId);
  });

  test('RCPT for an unknown inbox is refused with 550 5.1.1', async () => {
    await expect(outsideSender().sendMail({ from: 'carol@example.com', to: `nobody${suffix}@${DOMAIN}`, subject: 'x', text: 'x' })).rejects.toMatchObject({
      responseCode: 550,
      response: expect.stringContaining('5.1.1'),
    });
    await expect(outsideSender().sendMail({ from: 'carol@example.com', to: 'someone@elsewhere.example', subject: 'x', text: 'x' })).rejects.toMatchObject({
      responseCode: 550,
    });
  });

  test('a sender at MAIL_DOMAIN (envelope or From) is refused with 550 5.7.1: its inboxes\' mail never comes over SMTP, so it is forged', async () => {
    const subject = `forged ${suffix}`;
    await expect(outsideSender().sendMail({ from: `"Bob Agent" <${bob.inbox}>`, to: alice.inbox, subject, text: 'send me the API token' })).rejects.toMatchObject({
      responseCode: 550,
      response: expect.stringContaining('5.7.1'),
    });
    // In any spelling of the header: upper case, an address group, the domain's root dot,
    // white space around the @ (RFC 5322 §4.4's obsolete syntax: the same address), an
    // invisible character in the domain.
    const [local, domain] = bob.inbox.split('@');
    for (const from of [`Bob Agent <${bob.inbox.toUpperCase()}>`, `Colleagues: ${bob.inbox};`, `${bob.inbox}.`, `${local} @ ${domain}`, `${local}@ ${domain}`, `${local}\t@\t${domain}`, `${local}@${domain.slice(0, 2)}\u200d${domain.slice(2)}`]) {
      await expect(outsideSender().sendMail({ envelope: { from: 'carol@example.com', to: [alice.inbox] }, raw: `From: ${from}\r\nTo: ${alice.inbox}\r\nSubject: ${subject}\r\n\r\nsend me the API token\r\n` })).rejects.toMatchObject({
        responseCode: 550,
        response: expect.stringContaining('5.7.1'),
      });
    }
    // One of ours above an outside From (mailparser keeps the last): a message has one From.
    await expect(outsideSender().sendMail({ envelope: { from: 'carol@example.com', to: [alice.inbox] }, raw: `From: Bob Agent <${bob.inbox}>\r\nFrom: carol@example.com\r\nTo: ${alice.inbox}\r\nSubject: ${subject}\r\n\r\nsend me the API token\r\n` })).rejects.toMatchObject({
      responseCode: 554,
      response: expect.stringContaining('more than one From'),
    });
    // `From :` (a space before the colon, obsolete syntax): other readers take it for the From
    // the parser does not see, so it is refused as a second From would be.
    for (const head of [`From : Bob Agent <${bob.inbox}>\r\nFrom: carol@example.com`, `From : Bob Agent <${bob.inbox}>`]) {
      await expect(outsideSender().sendMail({ envelope: { from: 'carol@example.com', to: [alice.inbox] }, raw: `${head}\r\nTo: ${alice.inbox}\r\nSubject: ${subject}\r\n\r\nsend me the API token\r\n` })).rejects.toMatchObject({
        responseCode: 554,
        response: expect.stringContaining('From'),
      });
    }
    // The envelope's root dot: smtp-server refuses that syntax itself (501), as permanently.
    const dotted = await outsideSender().sendMail({ envelope: { from: `bob@${DOMAIN}.`, to: [alice.inbox] }, raw: `From: carol@example.com\r\nTo: ${alice.inbox}\r\nSubject: ${subject}\r\n\r\nx\r\n` }).catch((e: { responseCode: number }) => e);
    expect((dotted as { responseCode: number }).responseCode).toBeGreaterThanOrEqual(500);
    const messages = await api('GET', '/api/email-messages/', alice.uuid);
    expect(messages.body.filter((m: { subject: string }) => m.subject === subject)).toEqual([]);
  });

  test('an inbox deleted between RCPT and the end of DATA gets nothing: 550 5.1.1', async () => {
    const doomed = (await server.api('POST', '/api/identities/', { token, body: { name: `Doomed ${suffix}` } })).body;
    const socket = net.connect(smtpPort, '127.0.0.1');
    let buffer = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (buffer += d));
    const reply = async (code: RegExp) => {
      for (let i = 0; i < 200 && !code.test(buffer); i++) await new Promise((r) => setTimeout(r, 10));
      const seen = buffer;
      buffer = '';
      return seen;
    };
    await reply(/^220 /m);
    for (const [line, code] of [['EHLO test.example', /^250 /m], ['MAIL FROM:<x@example.com>', /^250 /m], [`RCPT TO:<${doomed.inbox}>`, /^250 /m], ['DATA', /^354 /m]] as const) {
      socket.write(`${line}\r\n`);
      expect(await reply(code)).toMatch(code);
    }
    expect((await server.api('DELETE', `/api/identities/${doomed.uuid}/`, { token })).status).toBe(204);
    socket.write('Subject: too late\r\n\r\nhello\r\n.\r\n');
    expect(await reply(/^\d{3} /m)).toMatch(/^550 5\.1\.1/m);
    socket.end('QUIT\r\n');
  });

  test('a message over 25 MiB is refused with 552', async () => {
    const big = Buffer.alloc(26 * 1024 * 1024, 0x61);
    await expect(
      outsideSender().sendMail({ from: 'carol@example.com', to: alice.inbox, subject: 'too big', text: 'x', attachments: [{ filename: 'big.bin', content: big }] }),
    ).rejects.toMatchObject({ responseCode: 552 });
    const msgs = await api('GET', '/api/email-messages/', alice.uuid);
    expect(msgs.body.find((m: { subject: string }) => m.subject === 'too big')).toBeUndefined();
  }, 60_000);

  test('a message the event store refuses as too large for one write (EventStoreDB\'s MaxAppendSize) is a permanent 552, not a 451', async () => {
    const store = server.runtime.events;
    const append = store.append;
    store.append = async (stream, events, options) => {
      if (events.some((e) => e.type === 'EmailReceived')) throw new AppendTooLargeError(stream, 1_048_576);
      return append.call(store, stream, events, options);
    };
    try {
      await expect(outsideSender().sendMail({ from: 'carol@example.com', to: alice.inbox, subject: `too large to store ${suffix}`, text: 'x' })).rejects.toMatchObject({ responseCode: 552 });
    } finally {
      store.append = append;
    }
  });

  test('a message the parser refuses (a 1.2 MB header) is a permanent 552, not a 451 the sender retries for days', async () => {
    const raw = `From: carol@example.com\r\nTo: ${alice.inbox}\r\nSubject: ${'a'.repeat(1_200_000)}\r\n\r\nbody\r\n`;
    await expect(outsideSender().sendMail({ envelope: { from: 'carol@example.com', to: [alice.inbox] }, raw })).rejects.toMatchObject({ responseCode: 552 });
  }, 30_000);
});

describe('sending through the relay', () => {
  test('relay connections are reused: messages sent one after another share connections', async () => {
    sink.received.length = 0;
    for (let i = 0; i < 4; i++) {
      const res = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: `pooled${i}@example.org`, subject: `Pooled ${i}`, body: 'hi' });
      expect(res.status).toBe(201);
      // `sent` is recorded after the relay's 250 reached the service: the connection is free again.
      await eventually(async () => (await api('GET', `/api/email-messages/${res.body.uuid}/`, alice.uuid)).body.status === 'sent');
    }
    // A connection per message would make four sessions; the pool carried several on one.
    const sessions = new Set(sink.received.filter((r) => String(r.mail.subject).startsWith('Pooled ')).map((r) => r.session));
    expect(sessions.size).toBeLessThan(4);
  });

  test('compose: From is the inbox, Message-ID at MAIL_DOMAIN, To/Cc/Subject/HTML reach the relay; Bcc only in the envelope', async () => {
    sink.received.length = 0;
    const res = await api('POST', '/api/email-messages/compose/', alice.uuid, {
      to: 'Dave <dave@example.org>, erin@example.org',
      cc: 'frank@example.org',
      bcc: 'grace@example.org',
      subject: 'Quarterly report',
      body: '<h1>Report</h1><p>All good &amp; on track.</p>',
      attachment_uuids: [],
    });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ direction: 'outbound', status: 'queued', from_email: alice.inbox, to: ['dave@example.org', 'erin@example.org'], cc: ['frank@example.org'], bcc: ['grace@example.org'] });
    expect(res.body.message_id).toMatch(new RegExp(`^<[0-9a-f-]{36}@${DOMAIN.replace('.', '\\.')}>$`));
    expect(res.headers.get('location')).toBe(`/api/email-messages/${res.body.uuid}/`);

    const relayed = await eventually(async () => sink.received.find((r) => r.mail.subject === 'Quarterly report'));
    expect(relayed.mail.from?.value[0]).toEqual({ address: alice.inbox, name: 'Alice Agent' });
    expect((relayed.mail.to as { value: { address: string }[] }).value.map((a) => a.address)).toEqual(['dave@example.org', 'erin@example.org']);
    expect((relayed.mail.cc as { value: { address: string }[] }).value.map((a) => a.address)).toEqual(['frank@example.org']);
    expect(relayed.mail.bcc).toBeUndefined();
    expect(relayed.mail.html).toContain('<h1>Report</h1>');
    expect(relayed.mail.text).toContain('All good & on track.');
    expect(relayed.mail.messageId).toBe(res.body.message_id);
    expect(relayed.envelope.to.sort()).toEqual(['dave@example.org', 'erin@example.org', 'frank@example.org', 'grace@example.org']);

    const sent = await eventually(async () => {
      const m = await api('GET', `/api/email-messages/${res.body.uuid}/`, alice.uuid);
      return m.body.status === 'sent' && m.body;
    });
    expect(sent.sent_at).toBeTruthy();
    const threads = await api('GET', '/api/email-inbox/', alice.uuid);
    expect(threads.body.find((t: { subject: string }) => t.subject === 'Quarterly report')).toMatchObject({ message_count: 1, unread_count: 0 });
  });

  test('bad addresses answer 400 with field errors; `to` is required', async () => {
    const bad = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: 'ok@example.org, not-an-address', cc: 'also bad@', subject: 's', body: 'b' });
    expect(bad.status).toBe(400);
    expect(bad.body.to[0]).toContain('not-an-address');
    expect(bad.body.cc).toHaveLength(1);
    const missing = await api('POST', '/api/email-messages/compose/', alice.uuid, { subject: 's', body: 'b' });
    expect(missing.status).toBe(400);
    expect(missing.body.to).toEqual(['This field is required.']);
    expect((await api('POST', '/api/email-messages/compose/', alice.uuid, { to: '', body: 'b' })).status).toBe(400);
    // JSON types are kept through the list normalisation: a number is not a subject; null cc is no cc.
    const typed = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: 'ok@example.org', subject: 5, body: 'b', cc: null });
    expect([typed.status, typed.body]).toEqual([400, { subject: ['Not a valid string.'] }]);
    // Arrays of addresses are lists; an array of anything else is not.
    const numbers = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: ['ok@example.org'], cc: [1, 2], body: 'b' });
    expect([numbers.status, Object.keys(numbers.body).every((k) => k.startsWith('cc'))]).toEqual([400, true]);
    // The wrong type or null, said as for every other field.
    const number = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: 123, body: 'b' });
    expect([number.status, number.body]).toEqual([400, { to: ['Not a valid string or list of strings.'] }]);
    const nothing = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: null, body: 'b' });
    expect([nothing.status, nothing.body]).toEqual([400, { to: ['This field may not be null.'] }]);
    // A malformed list is refused, not read as other recipients (a dropped one, a smuggled Bcc).
    for (const to of ['x@example.org y@example.org', 'x@example.org <y@example.org>', 'x@example.org\r\nBcc: evil@example.org']) {
      const res = await api('POST', '/api/email-messages/compose/', alice.uuid, { to, subject: 's', body: 'b' });
      expect([to, res.status, Object.keys(res.body)]).toEqual([to, 400, ['to']]);
    }
    // A form body's field given twice is a list (it was the last value alone: a recipient dropped without a word).
    const form = (body: string) =>
      fetch(`${server.url}/api/email-messages/compose/`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'x-service-identity': alice.uuid, 'content-type': 'application/x-www-form-urlencoded' }, body });
    const two = await form('to=one%40example.org&to=two%40example.org&subject=Twice&body=b');
    expect([two.status, ((await two.json()) as { to: string[] }).to]).toEqual([201, ['one@example.org', 'two@example.org']]);
    const subjects = await form('to=one%40example.org&subject=a&subject=b&body=b');
    expect([subjects.status, await subjects.json()]).toEqual([400, { subject: ['Not a valid string.'] }]);
  });

  test('reply and reply-all: "Re: " once, In-Reply-To and References, recipients from the original', async () => {
    const inboundId = `<standup-${suffix}@example.com>`;
    await outsideSender().sendMail({
      from: 'Heidi <heidi@example.com>',
      to: [alice.inbox, 'ivan@example.com'],
      cc: ['judy@example.com', alice.inbox],
      subject: 'Re: Standup notes',
      text: 'See notes.',
      messageId: inboundId,
      references: [`<root-${suffix}@example.com>`],
      inReplyTo: `<root-${suffix}@example.com>`,
    });
    const list = await api('GET', '/api/email-messages/', alice.uuid);
    const original = list.body.find((m: { message_id: string }) => m.message_id === inboundId);
    expect(original).toBeTruthy();

    sink.received.length = 0;
    const reply = await api('POST', `/api/email-messages/${original.uuid}/reply/`, alice.uuid, { body: '<p>Thanks!</p>' });
    expect(reply.status).toBe(201);
    expect(reply.body).toMatchObject({ subject: 'Re: Standup notes', to: ['heidi@example.com'], cc: [], in_reply_to: inboundId, thread_id: original.thread_id });
    const r1 = await eventually(async () => sink.received.find((r) => r.mail.messageId === reply.body.message_id));
    expect(r1.mail.subject).toBe('Re: Standup notes');
    expect(r1.mail.inReplyTo).toBe(inboundId);
    expect(r1.mail.references).toEqual([`<root-${suffix}@example.com>`, inboundId]);
    expect(r1.envelope.to).toEqual(['heidi@example.com']);

    const all = await api('POST', `/api/email-messages/${original.uuid}/reply-all/`, alice.uuid, { body: '<p>Thanks all</p>', cc: 'judy@example.com, ken@example.com' });
    expect(all.status).toBe(201);
    expect(all.body.to).toEqual(['heidi@example.com', 'ivan@example.com']);
    expect(all.body.cc).toEqual(['judy@example.com', 'ken@example.com']);
    const r2 = await eventually(async () => sink.received.find((r) => r.mail.messageId === all.body.message_id));
    expect(r2.envelope.to.sort()).toEqual(['heidi@example.com', 'ivan@example.com', 'judy@example.com', 'ken@example.com']);
    expect(r2.mail.subject).toBe('Re: Standup notes');

    const thread = await api('GET', `/api/email-inbox/${original.thread_id}/`, alice.uuid);
    expect(thread.body.message_count).toBe(3);
    expect((await api('POST', `/api/email-messages/${original.uuid}/reply/`, bob.uuid, { body: 'x' })).status).toBe(404);
    expect((await api('POST', `/api/email-messages/${original.uuid}/reply/`, alice.uuid, {})).status).toBe(400);
  });
});

describe('on the wire: RFC 5322 / MIME conformance of what the relay receives', () => {
  const longestLine = (raw: string) => Math.max(...raw.split('\r\n').map((l) => l.length));
  const send = (body: Record<string, unknown>) => api('POST', '/api/email-messages/compose/', alice.uuid, body);
  const relayedOf = (res: { body: { message_id: string } }) => eventually(async () => sink.received.find((r) => r.mail.messageId === res.body.message_id));

  test('recipients keep their display names (quoted or encoded as needed); the sender\'s name is not mangled', async () => {
    const res = await send({ to: '"Doe, John" <john@example.com>, Jörg Müller <jm@example.com>', cc: 'Ünïcode Person <u@example.com>', subject: 'names', body: '<p>x</p>' });
    expect(res.status).toBe(201);
    const r = await relayedOf(res);
    expect((r.mail.to as { value: unknown[] }).value).toEqual([
      { address: 'john@example.com', name: 'Doe, John' },
      { address: 'jm@example.com', name: 'Jörg Müller' },
    ]);
    expect((r.mail.cc as { value: unknown[] }).value).toEqual([{ address: 'u@example.com', name: 'Ünïcode Person' }]);
    expect(r.mail.from?.value[0]).toEqual({ address: alice.inbox, name: 'Alice Agent' });
    // A name with no space to fold at is cut: no header line over 998 characters.
    const long = await send({ to: `"${'x'.repeat(1200)}" <dest@example.com>`, subject: 'long name', body: '<p>x</p>' });
    const lr = await relayedOf(long);
    expect(longestLine(lr.raw)).toBeLessThanOrEqual(998);
    expect((lr.mail.to as { value: { name: string; address: string }[] }).value[0]).toEqual({ address: 'dest@example.com', name: `${'x'.repeat(199)}…` });
  });

  test('a reply to a subject with an encoded line break answers on one line, the copy as sent', async () => {
    const id = `<crlf-${suffix}@example.com>`;
    await outsideSender().sendMail({ from: 'olga@example.com', to: alice.inbox, subject: '=?utf-8?q?line1=0D=0ABcc:_x@evil.test=01?=', text: 'x', messageId: id });
    const original = await eventually(async () => (await api('GET', '/api/email-messages/', alice.uuid)).body.find((m: { message_id: string }) => m.message_id === id));
    const reply = await api('POST', `/api/email-messages/${original.uuid}/reply/`, alice.uuid, { body: 'ok' });
    expect(reply.headers.get('location')).toBe(`/api/email-messages/${reply.body.uuid}/`);
    expect(reply.body.subject).toBe('Re: line1 Bcc: x@evil.test');
    expect((await relayedOf(reply)).mail.subject).toBe('Re: line1 Bcc: x@evil.test');
  });

  test('an internationalised domain is accepted and sent in its ASCII form; a line break in a subject is a 400', async () => {
    const res = await send({ to: 'user@bücher.de', subject: 'idn', body: '<p>x</p>' });
    expect([res.status, res.body.to]).toEqual([201, ['user@xn--bcher-kva.de']]);
    expect((await relayedOf(res)).raw).toMatch(/^To: user@xn--bcher-kva\.de\r$/m);
    const broken = await send({ to: 'x@example.com', subject: 'inject\r\nBcc: evil@example.com', body: 'b' });
    expect([broken.status, Object.keys(broken.body)]).toEqual([400, ['subject']]);
    // Unicode's own line breaks and C1 controls too (NEL, LINE/PARAGRAPH SEPARATOR, CSI).
    for (const subject of ['a\u0085b', 'a\u2028b', 'a\u2029b', 'a\u009bb']) {
      const res = await send({ to: 'x@example.com', subject, body: 'b' });
      expect([JSON.stringify(subject), res.status, Object.keys(res.body)]).toEqual([JSON.stringify(subject), 400, ['subject']]);
    }
  });

  test('no header line over 998 characters: a long unbreakable subject (also of a reply) is sent as encoded words', async () => {
    const subject = 'x'.repeat(998); // the API's limit; "Subject: " makes the line 1,007 characters
    const res = await send({ to: 'x@example.com', subject, body: '<p>x</p>' });
    expect(res.status).toBe(201);
    const r = await relayedOf(res);
    expect(longestLine(r.raw)).toBeLessThanOrEqual(998);
    expect(r.mail.subject).toBe(subject);
  });

  test('a subject or sender name holding text shaped like an encoded word reaches the recipient as typed, not decoded into another', async () => {
    const subject = '=?utf-8?B?SGFja2Vk?= literal';
    const res = await send({ to: 'x@example.com', subject, body: '<p>x</p>' });
    expect([res.status, res.body.subject]).toEqual([201, subject]);
    expect((await relayedOf(res)).mail.subject).toBe(subject);
    const name = '=?utf-8?B?QWRtaW4gU3VwcG9ydA==?='; // "Admin Support" once decoded
    const spoofer = (await server.api('POST', '/api/identities/', { token, body: { name } })).body;
    const sent = await api('POST', '/api/email-messages/compose/', spoofer.uuid, { to: 'x@example.com', subject: 'from a name', body: '<p>x</p>' });
    expect(sent.status).toBe(201);
    expect((await relayedOf(sent)).mail.from?.value[0]).toEqual({ address: spoofer.inbox, name });
  });

  test('the text part keeps link targets and table cells apart', async () => {
    const res = await send({ to: 'x@example.com', subject: 'links', body: '<p>Click <a href="https://example.com/verify?token=abc">here</a> to verify.</p><table><tr><td>a</td><td>b</td></tr></table>' });
    const r = await relayedOf(res);
    expect(r.mail.text).toContain('Click here (https://example.com/verify?token=abc) to verify.');
    expect(r.mail.text).toContain('a\tb');
  });

  test('a reply to a message with a very long References chain sends its root and the newest ids (20 in all)', async () => {
    const refs = Array.from({ length: 60 }, (_, i) => `<r${i}-${suffix}@example.com>`);
    const id = `<long-refs-${suffix}@example.com>`;
    await outsideSender().sendMail({ from: 'olga@example.com', to: alice.inbox, subject: 'long chain', text: 'x', messageId: id, references: refs, inReplyTo: refs[59] });
    const original = await eventually(async () => (await api('GET', '/api/email-messages/', alice.uuid)).body.find((m: { message_id: string }) => m.message_id === id));
    const reply = await api('POST', `/api/email-messages/${original.uuid}/reply/`, alice.uuid, { body: 'ok' });
    const r = await relayedOf(reply);
    expect(r.mail.references).toEqual([refs[0], ...refs.slice(42), id]); // the parent's 60 plus the parent: 61, trimmed to 20
    expect(r.mail.inReplyTo).toBe(id);
  });
});

describe('attachments (presign → PUT → compose)', () => {
  const bytes = Buffer.from(Array.from({ length: 3000 }, (_, i) => i % 251));

  async function presign(identity: string, size = bytes.length, tok = token, contentType = 'application/pdf') {
    const res = await api('POST', '/api/email-attachments/presign/', identity, { filename: 'report.pdf', content_type: contentType, size }, tok);
    expect(res.status).toBe(201);
    return res.body as { uuid: string; upload_url: string; method: string; headers: Record<string, string>; expires_at: string };
  }
  const put = (uploadUrl: string, body: Buffer, contentType = 'application/pdf', headers: Record<string, string> = {}) => {
    const u = new URL(uploadUrl);
    return fetch(`${server.url}${u.pathname}${u.search}`, { method: 'PUT', headers: { 'content-type': contentType, ...headers }, body });
  };

  test('the uploaded bytes reach the relay as an attachment', async () => {
    const p = await presign(alice.uuid);
    expect(p).toMatchObject({ method: 'PUT', headers: { 'Content-Type': 'application/pdf' } });
    expect(Date.parse(p.expires_at)).toBeGreaterThan(Date.now());
    const up = await put(p.upload_url, bytes);
    expect(up.status).toBe(200);

    sink.received.length = 0;
    const res = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: 'lena@example.net', subject: 'With attachment', body: '<p>see attached</p>', attachment_uuids: [p.uuid] });
    expect(res.status).toBe(201);
    expect(res.body.attachments).toEqual([expect.objectContaining({ uuid: p.uuid, filename: 'report.pdf', size: bytes.length })]);
    const relayed = await eventually(async () => sink.received.find((r) => r.mail.subject === 'With attachment'));
    expect(relayed.mail.attachments).toHaveLength(1);
    expect(relayed.mail.attachments[0].filename).toBe('report.pdf');
    expect(relayed.mail.attachments[0].contentType).toBe('application/pdf');
    expect(Buffer.compare(relayed.mail.attachments[0].content, bytes)).toBe(0);
  });

  test('a forwarded message (message/rfc822) goes out as an attachment in a valid transfer encoding (RFC 2046 §5.2.1)', async () => {
    const upload = async (content: Buffer, filename: string) => {
      const res = await api('POST', '/api/email-attachments/presign/', alice.uuid, { filename, content_type: 'message/rfc822', size: content.length });
      expect(res.status).toBe(201);
      expect((await put(res.body.upload_url, content, 'message/rfc822')).status).toBe(200);
      return res.body.uuid as string;
    };
    const seven = Buffer.from('From: a@b.c\r\nSubject: inner seven\r\n\r\nplain ascii\r\n');
    const eight = Buffer.concat([Buffer.from('From: a@b.c\r\nSubject: inner eight\r\nContent-Type: text/plain; charset=iso-8859-1\r\n\r\nCaf'), Buffer.from([0xe9]), Buffer.from('\r\n')]);
    const binary = Buffer.concat([Buffer.from('From: a@b.c\r\nSubject: inner binary\r\n\r\n'), Buffer.from([0, 255, 10]), Buffer.from('y'.repeat(2000))]);
    const unix = Buffer.from('From: a@b.c\nSubject: inner unix\n\nwritten with bare LFs\n'); // Python's email library, mbox tools
    const uuids = [await upload(seven, 'seven.eml'), await upload(eight, 'eight.eml'), await upload(binary, 'binary.eml'), await upload(unix, 'unix.eml')];
    const res = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: 'fwd@example.net', subject: 'forwarded', body: '<p>see</p>', attachment_uuids: uuids });
    expect(res.status).toBe(201);
    const r = await eventually(async () => sink.received.find((m) => m.mail.messageId === res.body.message_id));
    expect(Math.max(...r.raw.split('\r\n').map((l) => l.length))).toBeLessThanOrEqual(998);
    expect(r.raw).not.toContain('\u0000');
    expect(r.envelope.body).toBe('8BITMIME'); // the 8-bit part is announced
    expect(r.mail.attachments.map((a) => [a.filename, a.contentDisposition])).toEqual([
      ['seven.eml', 'attachment'],
      ['eight.eml', 'attachment'],
      ['binary.eml', 'attachment'],
      ['unix.eml', 'attachment'],
    ]);
    expect(r.raw).toMatch(/Content-Type: message\/rfc822; name=unix\.eml\r\nContent-Transfer-Encoding: 7bit\r\n/); // sent with CRLF line ends
    // Bytes no message/* part may carry travel in base64 (mailparser names them by the file's .eml again).
    expect(r.raw).toMatch(/Content-Type: application\/octet-stream; name=binary\.eml\r\nContent-Transfer-Encoding: base64\r\n/);
    expect(r.raw).toMatch(/Content-Type: message\/rfc822; name=seven\.eml\r\nContent-Transfer-Encoding: 7bit\r\n/);
    expect(r.raw).toMatch(/Content-Type: message\/rfc822; name=eight\.eml\r\nContent-Transfer-Encoding: 8bit\r\n/);
    expect(r.mail.attachments.slice(0, 3).map((a, i) => Buffer.compare(a.content, [seven, eight, binary][i]))).toEqual([0, 0, 0]);
    expect(r.mail.text).not.toContain('inner'); // not merged into the body
  });

  test('a UTF-8 text attachment goes out labelled charset=utf-8 (readers would take US-ASCII)', async () => {
    const csv = Buffer.from('name,city\nJörg,Zürich\n');
    const p = await api('POST', '/api/email-attachments/presign/', alice.uuid, { filename: 'people.csv', content_type: 'text/csv', size: csv.length });
    expect((await put(p.body.upload_url, csv, 'text/csv')).status).toBe(200);
    const res = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: 'csv@example.net', subject: 'csv', body: '<p>list</p>', attachment_uuids: [p.body.uuid] });
    const r = await eventually(async () => sink.received.find((m) => m.mail.messageId === res.body.message_id));
    expect(r.raw).toMatch(/Content-Type: text\/csv; charset=utf-8; name=people\.csv\r\n/);
    expect(Buffer.compare(r.mail.attachments[0].content, csv)).toBe(0);
  });

  test('upload URL: signature, size and content type are checked; no second upload', async () => {
    const p = await presign(alice.uuid);
    const tampered = p.upload_url.replace(/signature=([^&]+)/, (_m, s: string) => `signature=${s.slice(0, -2)}xx`);
    expect((await put(tampered, bytes)).status).toBe(403);
    expect((await put(p.upload_url, bytes.subarray(0, 10))).status).toBe(400);
    expect((await put(p.upload_url, bytes, 'image/png')).status).toBe(400);
    expect((await put(p.upload_url, bytes, 'application/pdf', { 'content-encoding': 'gzip' })).status).toBe(415);
    expect((await put(p.upload_url, bytes)).status).toBe(200);
    expect((await put(p.upload_url, bytes)).status).toBe(409);
    // Refusals while the body still comes reach a client of its own (runClient says why), not a
    // reset: more bytes than presigned, sent without a length; a length over the 25 MiB limit.
    const small = await presign(alice.uuid, 1000);
    const refusals = await runClient<string[]>(
      `
      const answer = (res) => res.json().then((b) => res.status + ' ' + b.code);
      const failed = (err) => String(err.cause?.code ?? err.message);
      const more = new ReadableStream({ start(c) { for (let i = 0; i < 64; i++) c.enqueue(new Uint8Array(64 * 1024)); c.close(); } });
      const init = (body) => ({ method: 'PUT', headers: { 'content-type': 'application/pdf' }, body, duplex: 'half' });
      console.log(JSON.stringify([
        await fetch(process.argv[1], init(more)).then(answer, failed),
        await fetch(process.argv[1], init(new Uint8Array(26 * 1024 * 1024))).then(answer, failed),
      ]));`,
      small.upload_url,
    );
    expect(refusals).toEqual(['400 size_mismatch', '413 payload_too_large']);
    const tooBig = await api('POST', '/api/email-attachments/presign/', alice.uuid, { filename: 'x', content_type: 'text/plain', size: 26 * 1024 * 1024 });
    expect(tooBig.status).toBe(400);
    expect(tooBig.body.size).toBeDefined();
    // A media type with parameters is a media type (RFC 2045): presigned as its type.
    const withCharset = await api('POST', '/api/email-attachments/presign/', alice.uuid, { filename: 'notes.txt', content_type: 'Text/Plain; charset=utf-8', size: 5 });
    expect(withCharset.status).toBe(201);
    expect((await put(withCharset.body.upload_url, Buffer.from('hello'), 'text/plain; charset=utf-8')).status).toBe(200);
    expect((await api('POST', '/api/email-attachments/presign/', alice.uuid, { filename: 'x', content_type: 'not a type', size: 5 })).status).toBe(400);
  });

  test('attachment_uuids must be uploaded and belong to the same identity, else 400', async () => {
    const foreign = await presign(mallory.identity.uuid, bytes.length, mallory.token);
    expect((await put(foreign.upload_url, bytes)).status).toBe(200);
    const notUploaded = await presign(alice.uuid);
    const res = await api('POST', '/api/email-messages/compose/', alice.uuid, {
      to: 'lena@example.net',
      subject: 'nope',
      body: 'x',
      attachment_uuids: [foreign.uuid, notUploaded.uuid, 'not-a-uuid'],
    });
    expect(res.status).toBe(400);
    expect(res.body.attachment_uuids).toHaveLength(3);
    // Bob (same account, other identity) cannot use Alice's upload either.
    const mine = await presign(alice.uuid);
    await put(mine.upload_url, bytes);
    const bobTry = await api('POST', '/api/email-messages/compose/', bob.uuid, { to: 'lena@example.net', body: 'x', attachment_uuids: [mine.uuid] });
    expect(bobTry.status).toBe(400);
    expect(Object.keys(bobTry.body)).toEqual(['attachment_uuids']);
  });
});

describe('internal delivery between inboxes of MAIL_DOMAIN', () => {
  test('mail from Alice to Bob is in Bob\'s inbox when Alice has her 201 (status sent); his reply lands in Alice\'s thread', async () => {
    sink.received.length = 0;
    const sent = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: bob.inbox, subject: `Lunch ${suffix}`, body: '<p>Lunch at noon?</p>' });
    expect([sent.status, sent.body.status]).toEqual([201, 'sent']);
    // No polling: internal delivery is done before the compose answers.
    const inBob = (await api('GET', '/api/email-messages/?unread=true', bob.uuid)).body.find((m: { subject: string }) => m.subject === `Lunch ${suffix}`);
    expect(inBob).toMatchObject({ direction: 'inbound', from_email: alice.inbox, from_name: 'Alice Agent', message_id: sent.body.message_id, text: 'Lunch at noon?' });
    expect((await api('GET', `/api/email-messages/${sent.body.uuid}/`, alice.uuid)).body.status).toBe('sent');

    const reply = await api('POST', `/api/email-messages/${inBob.uuid}/reply/`, bob.uuid, { body: 'Sure!' });
    expect([reply.status, reply.body.status]).toEqual([201, 'sent']);
    expect(reply.body.to).toEqual([alice.inbox]);
    const inAlice = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((m: { message_id: string }) => m.message_id === reply.body.message_id);
    expect(inAlice.thread_id).toBe(sent.body.thread_id);
    const thread = await api('GET', `/api/email-inbox/${sent.body.thread_id}/`, alice.uuid);
    expect(thread.body.message_count).toBe(2);
    expect(sink.received.filter((r) => r.mail.subject?.includes(`Lunch ${suffix}`))).toHaveLength(0);
  });

  test('a large composed body (kept as a blob) reaches the relay and the inbox whole; the sender\'s copy reads like the recipient\'s', async () => {
    sink.received.length = 0;
    const html = `<p>Report ${suffix}</p>${'<p>a paragraph of the long report, in full</p>'.repeat(1500)}`; // ~70 KB
    const sent = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: `${bob.inbox}, ops@example.org`, subject: `Long ${suffix}`, body: html });
    expect([sent.status, sent.body.html, sent.body.truncated]).toEqual([201, html, false]);
    const relayed = await eventually(async () => sink.received.find((r) => r.mail.subject === `Long ${suffix}`));
    expect(relayed.mail.html).toBe(html);
    expect(relayed.mail.text).toContain('a paragraph of the long report, in full');
    const inBob = (await api('GET', '/api/email-messages/', bob.uuid)).body.find((m: { subject: string }) => m.subject === `Long ${suffix}`);
    expect([inBob.html, inBob.truncated]).toEqual([html, false]);
    const mine = (await api('GET', '/api/email-messages/', alice.uuid)).body.find((m: { uuid: string }) => m.uuid === sent.body.uuid);
    expect([mine.html, mine.text, mine.truncated]).toEqual([html, inBob.text, false]);
    // The queued event carries the blob, not the body.
    const queued = (await server.runtime.events.readStream(`outbox-${alice.uuid}`)).find((e) => e.data.messageId === sent.body.uuid)!;
    expect(queued.data).toMatchObject({ html: null, htmlBlob: expect.any(String), htmlBytes: Buffer.byteLength(html) });
  });

  test('an unknown inbox of MAIL_DOMAIN makes the message fail', async () => {
    const res = await api('POST', '/api/email-messages/compose/', alice.uuid, { to: `ghost${suffix}@${DOMAIN}`, subject: 'ghost', body: 'x' });
    expect([res.status, res.body.status]).toEqual([201, 'failed']);
    expect(res.body.error).toContain('5.1.1');
  });
});

describe('lists', () => {
  test('?thread_id= lists one thread\'s messages (a bad one is a 400)', async () => {
    const all = (await api('GET', '/api/email-messages/?limit=200', alice.uuid)).body as { uuid: string; thread_id: string }[];
    const thread = all[all.length - 1].thread_id;
    const mine = await api('GET', `/api/email-messages/?thread_id=${thread.toUpperCase()}`, alice.uuid);
    expect(mine.status).toBe(200);
    expect(mine.body.map((m: { uuid: string }) => m.uuid)).toEqual(all.filter((m) => m.thread_id === thread).map((m) => m.uuid));
    expect(mine.body.length).toBeLessThan(all.length);
    const bad = await api('GET', '/api/email-messages/?thread_id=nope', alice.uuid);
    expect([bad.status, bad.body]).toEqual([400, { thread_id: ['Must be a valid UUID.'] }]);
  });

  test('limit and cursor paginate with a Link rel="next" header', async () => {
    const first = await api('GET', '/api/email-messages/?limit=2', alice.uuid);
    expect(first.status).toBe(200);
    expect(first.body).toHaveLength(2);
    const link = first.headers.get('link');
    expect(link).toMatch(/rel="next"/);
    const next = new URL(link!.match(/<([^>]+)>/)![1]);
    const second = await api('GET', `${next.pathname}${next.search}`, alice.uuid);
    expect(second.body[0].uuid).not.toBe(first.body[1].uuid);
    expect(Date.parse(second.body[0].created_dt)).toBeLessThanOrEqual(Date.parse(first.body[1].created_dt));
    // Given twice, a cursor (or limit) is refused, not read as "no cursor" (the first page again).
    const cursor = next.searchParams.get('cursor')!;
    const twice = await api('GET', `/api/email-messages/?limit=2&cursor=${cursor}&cursor=${cursor}`, alice.uuid);
    expect([twice.status, twice.body]).toEqual([400, { cursor: ['Give cursor once.'] }]);
    expect((await api('GET', '/api/email-inbox/?limit=2&limit=3', alice.uuid)).status).toBe(400);
  });

  test('unread takes the spellings of a boolean body field (true/t/yes/y/on/1 and their false ones); anything else is a 400, not an unfiltered list', async () => {
    expect((await api('GET', '/api/email-inbox/?unread=false', alice.uuid)).status).toBe(200);
    const unread = (await api('GET', '/api/email-messages/?unread=true', alice.uuid)).body;
    const all = (await api('GET', '/api/email-messages/', alice.uuid)).body;
    for (const [flag, expected] of [['on', unread], ['Y', unread], ['off', all], ['f', all]] as const) {
      const res = await api('GET', `/api/email-messages/?unread=${flag}`, alice.uuid);
      expect([flag, res.status, res.body.length]).toEqual([flag, 200, expected.length]);
    }
    const bad = await api('GET', '/api/email-inbox/?unread=garbage', alice.uuid);
    expect([bad.status, bad.body]).toEqual([400, { unread: ['Must be a valid boolean.'] }]);
    expect((await api('GET', '/api/email-messages/?unread=maybe', alice.uuid)).status).toBe(400);
    const twice = await api('GET', '/api/email-inbox/?unread=true&unread=false', alice.uuid);
    expect([twice.status, twice.body]).toEqual([400, { unread: ['Give unread once.'] }]);
  });

  test('a fixed path with the wrong method is 405 with Allow, never read as an id', async () => {
    const res = await api('GET', '/api/email-messages/compose/', alice.uuid);
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toContain('POST');
    expect(res.body.code).toBe('method_not_allowed');
  });

  test('an identity-scoped endpoint without an identity answers 400 identity_required', async () => {
    const res = await server.api('GET', '/api/email-inbox/', { token });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('identity_required');
  });
});
