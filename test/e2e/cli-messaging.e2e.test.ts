/**
 * `ais` mail and SMS commands run as subprocesses against ONE real spawned service (issue 8):
 * send / reply / reply-all with `--attach` (presign, streamed upload, compose) checked at the
 * SMTP relay sink with mailparser; `inbox watch` receiving a mail sent into the service's own
 * SMTP listener; `inbox list --unread` and `show`; `phone`, `sms list|show|watch` after a plan
 * upgrade through the admin API and an inbound SMS posted to the webhook.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { jest } from '@jest/globals';
import { runCli, type CliRun } from '../support/cli.js';
import nodemailer from 'nodemailer';
import { freePort, spawnService, type ServiceProcess } from '../support/spawn.js';
import { startSmtpSink, type SmtpSink } from '../support/smtp-sink.js';

jest.setTimeout(120_000);

const ADMIN_TOKEN = 'admin-' + randomBytes(12).toString('hex');
const WEBHOOK_SECRET = 'hook-' + randomBytes(12).toString('hex');

let svc: ServiceProcess;
let sink: SmtpSink;
let smtpPort: number;
let dataDir: string;
let xdg: string;
let files: string;

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-clim-data-'));
  xdg = mkdtempSync(path.join(os.tmpdir(), 'ais-clim-xdg-'));
  files = mkdtempSync(path.join(os.tmpdir(), 'ais-clim-files-'));
  sink = await startSmtpSink();
  smtpPort = await freePort();
  svc = await spawnService({
    DATA_DIR: dataDir,
    LOG_LEVEL: 'warn',
    SMTP_PORT: String(smtpPort),
    SMTP_RELAY_URL: sink.url,
    ADMIN_TOKEN,
    SMS_WEBHOOK_SECRET: WEBHOOK_SECRET,
    PASSWORD_HASH_MEMORY_KIB: '19456',
  });
});

afterAll(async () => {
  svc?.child.kill('SIGTERM');
  await svc?.exited;
  await sink?.close();
  for (const d of [dataDir, xdg, files]) if (d) rmSync(d, { recursive: true, force: true });
});

/** Runs `ais` as users do; `onStderr` sees the stderr so far (to act while it runs). */
function ais(args: string[], opts: { env?: Record<string, string>; onStderr?: (s: string) => void } = {}): Promise<CliRun> {
  return runCli(args, { url: svc.url, home: xdg, env: opts.env, onStderr: opts.onStderr });
}

/** Starts `ais ... watch --count 1 --json` and resolves once it is connected to the stream. */
async function startWatch(args: string[], env?: Record<string, string>): Promise<{ done: Promise<CliRun> }> {
  let connected!: () => void;
  const ready = new Promise<void>((r) => (connected = r));
  const done = ais([...args, '--count', '1', '--json'], { env, onStderr: (s) => /"watching"/.test(s) && connected() });
  await Promise.race([ready, done.then((r) => Promise.reject(new Error(`watch ended early (${r.code}): ${r.stderr}`)))]);
  return { done };
}

async function api(method: string, p: string, o: { body?: unknown; token?: string; form?: Record<string, string>; headers?: Record<string, string> } = {}) {
  const res = await fetch(svc.url + p, {
    method,
    headers: {
      ...(o.form ? { 'content-type': 'application/x-www-form-urlencoded' } : o.body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...(o.token ? { authorization: `Bearer ${o.token}` } : {}),
      ...(o.headers ?? {}),
    },
    body: o.form ? new URLSearchParams(o.form).toString() : o.body === undefined ? undefined : JSON.stringify(o.body),
  });
  const text = await res.text();
  let body: any = text;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    /* XML (TwiML) or empty */
  }
  return { status: res.status, body };
}

let user: { pk: number; username: string };
let identity: { uuid: string; inbox: string; phone: string | null };

test('setup: sign up through the API, `login --username` (AIS_PASSWORD), plan upgrade, identity with a phone', async () => {
  const u = `msg${Date.now() % 1e7}`;
  const password = 'Secret-pass-1';
  const reg = await api('POST', '/api/auth/social/', { body: { username: u, email: `${u}@example.com`, password1: password, password2: password } });
  expect(reg.status).toBe(201);
  user = reg.body.user;

  const login = await ais(['login', '--username', u, '--json'], { env: { AIS_PASSWORD: password } });
  expect(login.code).toBe(0);
  expect(login.json.user.username).toBe(u);

  // Free plan: no phone (402), surfaced with the API's status.
  const refused = await ais(['identities', 'create', 'nophone', '--phone', '--json']);
  expect(refused.code).toBe(20);
  expect(refused.error.status).toBe(402);
  // Nothing in the CLI changes a plan: the message says who does.
  expect(refused.error.message).toBe(`Your plan (free) does not include a phone number; upgrade to developer. Plans are changed by the service's operator, not by \`ais\`: ask them to move your account (${u}, pk ${user.pk}) to the developer plan.`);

  // A plan with phones but a subscription not active: the operator is asked about the subscription.
  expect((await api('PUT', `/api/admin/users/${user.pk}/subscription/`, { token: ADMIN_TOKEN, body: { plan: 'developer', status: 'past_due' } })).status).toBe(200);
  const inactive = await ais(['identities', 'create', 'nophone', '--phone', '--json']);
  expect([inactive.code, inactive.error.message]).toEqual([20, `Your subscription is past_due; phone numbers need an active subscription. Subscriptions are set by the service's operator, not by \`ais\`: ask them about your account (${u}, pk ${user.pk}).`]);

  const up = await api('PUT', `/api/admin/users/${user.pk}/subscription/`, { token: ADMIN_TOKEN, body: { plan: 'developer', status: 'active' } });
  expect(up.status).toBe(200);

  const c = await ais(['identities', 'create', 'courier', '--phone', '--use', '--json']);
  expect(c.code).toBe(0);
  identity = c.json;
  expect(identity.inbox).toMatch(/^courier[\w.-]*@agents\.localhost$/);
  expect(identity.phone).toMatch(/^\+\d+$/);

  // An identity made without a phone gets one later, and a new name.
  expect((await ais(['identities', 'create', 'later', '--json'])).code).toBe(0);
  const updated = await ais(['identities', 'update', 'later', '--phone', '--name', 'later-renamed', '--json']);
  expect([updated.code, updated.json?.name, updated.json?.phone]).toEqual([0, 'later-renamed', expect.stringMatching(/^\+\d+$/)]);
  expect((await ais(['identities', 'update', 'later-renamed'])).code).toBe(2); // nothing to change
  // Its number given up: back to the plan (3 on developer: courier's, and room for two).
  const released = await ais(['identities', 'update', 'later-renamed', '--release-phone', '--json']);
  expect([released.code, released.json?.name, released.json?.phone]).toEqual([0, 'later-renamed', null]);
  expect((await api('GET', '/api/subscription/', { token: reg.body.access })).body).toMatchObject({ phones_used: 1 });
  const none = await ais(['identities', 'update', 'later-renamed', '--release-phone', '--json']);
  expect([none.code, none.error?.message]).toEqual([20, 'This identity has no phone number.']);
  expect((await ais(['identities', 'update', 'later-renamed', '--phone', '--release-phone'])).code).toBe(2);
});

describe('email', () => {
  const small = Buffer.from('hello attachment\n');
  const big = randomBytes(300 * 1024 + 7); // several 64 KiB upload chunks
  let smallPath: string;
  let bigPath: string;
  let inboundId: string;
  let threadId: string;

  beforeAll(() => {
    smallPath = path.join(files, 'notes.txt');
    bigPath = path.join(files, 'blob.bin');
    writeFileSync(smallPath, small);
    writeFileSync(bigPath, big);
  });

  test('send --attach: presign, upload, compose; the relay sink gets From/To/Subject and the exact bytes', async () => {
    const r = await ais(['send', '--to', 'bob@example.com', '--subject', 'Quarterly report', '--body', '<p>See attached.</p>', '--attach', smallPath, '--attach', bigPath]);
    expect(r.code).toBe(0);
    // Mail to another domain goes through the service's mailer: queued, not "sent" yet.
    expect(r.stdout).toMatch(/^(Queued for delivery: [0-9a-f-]{36} \(the service's mailer sends it; `ais inbox show [0-9a-f-]{36}` shows its status\)|Sent: [0-9a-f-]{36})\n$/);
    // Not a terminal: one final progress line per file.
    expect(r.stderr).toContain(`uploaded notes.txt (${small.length} bytes)`);
    expect(r.stderr).toContain(`uploaded blob.bin (${big.length} bytes)`);

    const m = await sink.waitFor((x) => x.parsed.subject === 'Quarterly report');
    expect(m.parsed.from?.value[0].address).toBe(identity.inbox);
    expect(m.envelope.to).toEqual(['bob@example.com']);
    expect(m.parsed.text).toMatch(/See attached\./);
    const byName = Object.fromEntries(m.parsed.attachments.map((a) => [a.filename, a]));
    expect(byName['notes.txt'].contentType).toBe('text/plain');
    expect(Buffer.compare(byName['notes.txt'].content, small)).toBe(0);
    expect(byName['blob.bin'].contentType).toBe('application/octet-stream');
    expect(Buffer.compare(byName['blob.bin'].content, big)).toBe(0);
  });

  test('send --json reports each upload as a JSON line and answers the message', async () => {
    const r = await ais(['send', '--to', 'dora@example.com', '--subject', 'json mode', '--body', 'x', '--attach', smallPath, '--json']);
    expect(r.code).toBe(0);
    expect(r.json).toMatchObject({ subject: 'json mode', to: ['dora@example.com'] });
    expect(r.json.attachments.map((a: any) => a.filename)).toEqual(['notes.txt']);
    expect(JSON.parse(r.stderr.trim().split('\n')[0])).toEqual({ uploaded: 'notes.txt', bytes: small.length });
    await sink.waitFor((x) => x.parsed.subject === 'json mode');
    // The attachment's bytes back, by its uuid; an existing file is not overwritten.
    const out = path.join(files, 'saved-notes.txt');
    const saved = await ais(['inbox', 'attachment', r.json.attachments[0].uuid, '--out', out, '--json']);
    expect([saved.code, saved.json]).toEqual([0, { saved: out, bytes: small.length, content_type: expect.stringMatching(/^text\/plain/) }]);
    expect(readFileSync(out)).toEqual(small);
    const again = await ais(['inbox', 'attachment', r.json.attachments[0].uuid, '--out', out]);
    expect([again.code, again.stderr.trim()]).toEqual([2, `error: Cannot write ${out}: the file already exists (it is never overwritten: choose another --out name, or remove the file first).`]);
  });

  test('a missing attachment file is a usage error before anything is sent', async () => {
    const r = await ais(['send', '--to', 'bob@example.com', '--subject', 's', '--body', 'b', '--attach', path.join(files, 'nope.pdf'), '--json']);
    expect(r.code).toBe(2);
    expect(r.error.message).toBe(`Cannot read the attachment ${path.join(files, 'nope.pdf')}: no such file or directory.`);
  });

  test('inbox watch prints a mail sent into the SMTP listener, live', async () => {
    const watch = await startWatch(['inbox', 'watch']);
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
    await transport.sendMail({
      from: 'Alice <alice@example.com>',
      to: identity.inbox,
      cc: 'carol@example.com',
      subject: 'Lunch on Friday?',
      text: 'Are you free on Friday at noon?',
      messageId: '<lunch-1@example.com>',
    });
    transport.close();
    const r = await watch.done;
    expect(r.code).toBe(0);
    const e = JSON.parse(r.stdout.trim());
    expect(e).toMatchObject({ event: 'email', from_email: 'alice@example.com', subject: 'Lunch on Friday?' });
    expect(e.preview).toMatch(/free on Friday/);
    expect(typeof e.id).toBe('string');
    threadId = e.thread_id;
    // The human line leads with the event id (for --since) and names the message (for reply).
    const replay = await ais(['inbox', 'watch', '--count', '1', '--since', '0']);
    expect(replay.stdout.trim()).toBe(`${e.id}  alice@example.com  Lunch on Friday?  ${e.preview} [message ${e.message_id}, thread ${e.thread_id}]`);
    expect(replay.stderr).toContain(`watching email for courier (${identity.uuid}) (Ctrl-C to stop)`);
  });

  test('inbox list --unread, show (marks read), then nothing unread', async () => {
    const unread = await ais(['inbox', 'list', '--unread', '--json']);
    expect(unread.code).toBe(0);
    expect(unread.json.map((t: any) => t.thread_id)).toEqual([threadId]);
    const human = await ais(['inbox', 'list', '--unread']);
    expect(human.stdout).toMatch(/THREAD_ID\s+WITH\s+SUBJECT/);
    expect(human.stdout).toContain('Lunch on Friday?');

    const show = await ais(['inbox', 'show', threadId, '--json']);
    expect(show.code).toBe(0);
    expect(show.json.messages).toHaveLength(1);
    inboundId = show.json.messages[0].id;
    expect(show.json.messages[0]).toMatchObject({ from_email: 'alice@example.com', cc: ['carol@example.com'] });
    const text = await ais(['inbox', 'show', threadId]);
    expect(text.stdout).toContain('\nFrom: Alice <alice@example.com>\n'); // the sender's display name too
    expect(text.stdout).toContain('Are you free on Friday at noon?');

    const after = await ais(['inbox', 'list', '--unread', '--json']);
    expect(after.json).toEqual([]);
  });

  test('reply --attach goes to the sender, in the thread, with the file', async () => {
    const r = await ais(['reply', inboundId, '--body', 'Yes, noon works.', '--attach', smallPath, '--json']);
    expect(r.code).toBe(0);
    expect(r.json.thread_id).toBe(threadId);
    const m = await sink.waitFor((x) => x.parsed.subject === 'Re: Lunch on Friday?' && x.parsed.text?.includes('noon works') === true);
    expect(m.parsed.from?.value[0].address).toBe(identity.inbox);
    expect(m.envelope.to).toEqual(['alice@example.com']);
    expect(m.parsed.inReplyTo).toBe('<lunch-1@example.com>');
    // The thread is listed with the others in it, not with the identity that answered last.
    const list = await ais(['inbox', 'list']);
    const row = list.stdout.split('\n').find((l) => l.startsWith(threadId))!;
    expect(row).toContain('alice@example.com, carol@example.com');
    expect(row).not.toContain(identity.inbox);
    expect(m.parsed.attachments.map((a) => [a.filename, a.content.toString()])).toEqual([['notes.txt', small.toString()]]);
  });

  test('reply-all --attach goes to the sender and the other recipients', async () => {
    const r = await ais(['reply-all', inboundId, '--body', 'Adding everyone.', '--attach', bigPath]);
    expect(r.code).toBe(0);
    const m = await sink.waitFor((x) => x.parsed.text?.includes('Adding everyone.') === true);
    expect(m.parsed.subject).toBe('Re: Lunch on Friday?');
    expect((m.parsed.to as any).value.map((a: any) => a.address)).toEqual(['alice@example.com']);
    expect((m.parsed.cc as any).value.map((a: any) => a.address)).toEqual(['carol@example.com']);
    expect([...m.envelope.to].sort()).toEqual(['alice@example.com', 'carol@example.com']);
    expect(Buffer.compare(m.parsed.attachments[0].content, big)).toBe(0);
  });

  test('send to an inbox of this service says Delivered; inbox show gives the status of mail the identity sent', async () => {
    const r = await ais(['send', '--to', identity.inbox, '--subject', 'Note to self', '--body', 'internal']);
    expect(r.stdout).toMatch(/^Delivered: [0-9a-f-]{36}\n$/);
    const sent = (await ais(['inbox', 'list', '--json'])).json.find((t: any) => t.subject === 'Note to self');
    const shown = await ais(['inbox', 'show', sent.thread_id]);
    expect(shown.stdout).toContain(`\nFrom: courier <${identity.inbox}>\nTo: ${identity.inbox}\nStatus: sent\n`);
  });

  test('a send a recipient did not get ends in not_delivered (exit 1), with or without the others getting it', async () => {
    const nobody = `nobody-${randomBytes(4).toString('hex')}@${identity.inbox.split('@')[1]}`;
    const none = await ais(['send', '--to', nobody, '--subject', 'Lost', '--body', 'x']);
    expect(none.code).toBe(1);
    expect(none.stdout).toBe('');
    expect(none.stderr).toMatch(new RegExp(`^error: Not sent \\(${nobody}: 550 5\\.1\\.1 no such mailbox\\): [0-9a-f-]{36}\\n$`));
    // Part of them: the message is shown (--json), and the error names who did not get it.
    const some = await ais(['send', '--to', `${identity.inbox}, ${nobody}`, '--subject', 'Half', '--body', 'x', '--json']);
    expect(some.code).toBe(1);
    expect(some.json).toMatchObject({ status: 'sent', rejected: [nobody] });
    expect(JSON.parse(some.stderr)).toEqual({
      error: { code: 'not_delivered', message: `Not delivered to ${nobody}; the other recipients got it: ${some.json.id}`, exit_code: 1, id: some.json.id, thread_id: some.json.thread_id, status: 'sent', rejected: [nobody], error: null },
    });
  });
});

describe('sms and phone', () => {
  let conversationId: string;

  test('phone lists the provisioned number', async () => {
    const r = await ais(['phone', '--json']);
    expect(r.code).toBe(0);
    expect(r.json).toEqual([expect.objectContaining({ number: identity.phone, capabilities: ['sms'] })]);
    const human = await ais(['phone']);
    expect(human.stdout).toContain(identity.phone);
  });

  test('sms watch prints an inbound SMS posted to the webhook, live (the stream is not cut by AIS_TIMEOUT)', async () => {
    const watch = await startWatch(['sms', 'watch'], { AIS_TIMEOUT: '1' });
    await new Promise((resolve) => setTimeout(resolve, 2000)); // the stream is quiet for longer than the timeout
    const hook = await api('POST', '/api/webhooks/sms/', {
      headers: { 'x-webhook-secret': WEBHOOK_SECRET },
      form: { From: '+15557654321', To: identity.phone!, Body: 'Your code is 424242', MessageSid: 'SM' + randomBytes(16).toString('hex') },
    });
    expect(hook.status).toBe(200);
    const r = await watch.done;
    expect(r.code).toBe(0);
    const e = JSON.parse(r.stdout.trim());
    expect(e).toMatchObject({ event: 'sms', from_number: '+15557654321', preview: 'Your code is 424242' });
    conversationId = e.conversation_id;
  });

  test('sms list --unread, show (marks read), then nothing unread', async () => {
    const unread = await ais(['sms', 'list', '--unread', '--json']);
    expect(unread.code).toBe(0);
    expect(unread.json).toEqual([expect.objectContaining({ conversation_id: conversationId, peer: '+15557654321', unread_count: 1 })]);
    const human = await ais(['sms', 'list']);
    expect(human.stdout).toContain('+15557654321');

    const show = await ais(['sms', 'show', conversationId, '--json']);
    expect(show.code).toBe(0);
    expect(show.json.messages.map((m: any) => m.body)).toEqual(['Your code is 424242']);
    const text = await ais(['sms', 'show', conversationId]);
    expect(text.stdout).toContain('Your code is 424242');

    expect((await ais(['sms', 'list', '--unread', '--json'])).json).toEqual([]);
  });
});
