/**
 * Bounces (RFC 3464 delivery status notifications): a relay takes a message (250), a
 * recipient's server refuses it later, and the report comes back over SMTP to the sender's
 * inbox (the envelope sender). The sent message then names the failed recipients in
 * `rejected`, and fails (with the remote server's words in `error`) once none of its
 * recipients is left. Real SMTP both ways: an
 * smtp-server sink as the relay, nodemailer sending the report to the service's listener.
 */
import nodemailer from 'nodemailer';
import { startTestServer, type TestServer } from '../support/server.js';
import { startSmtpSink, type SmtpSink } from '../support/smtp-sink.js';
import { freePort } from '../support/spawn.js';

let s: TestServer;
let relay: SmtpSink;
let smtpPort: number;
let user: Awaited<ReturnType<TestServer['signUp']>>;
let sender: { uuid: string; inbox: string };

/** Addresses the relay answers 451 (greylisting) until they are taken off. */
const greylisted = new Set<string>();

beforeAll(async () => {
  relay = await startSmtpSink(0, { refuseRcpt: (address) => (greylisted.has(address) ? { code: 451, message: '4.7.1 greylisted, try later' } : null) });
  smtpPort = await freePort();
  s = await startTestServer({ SMTP_RELAY_URL: relay.url, SMTP_PORT: String(smtpPort) });
  user = await s.signUp();
  sender = (await s.api('POST', '/api/identities/', { token: user.access, body: { name: 'Bounced sender' } })).body;
});
afterAll(async () => {
  await s?.close();
  await relay?.close();
});

type Message = { uuid: string; status: string; message_id: string; rejected: string[]; error: string | null };
const message = async (uuid: string): Promise<Message> => (await s.api('GET', `/api/email-messages/${uuid}/`, { token: user.access, identity: sender.uuid })).body;

/** Composes to `to` and waits until the relay has it: the envelope sender and the Message-ID it went out with. */
async function sent(to: string, subject: string): Promise<{ uuid: string; messageId: string; envelopeFrom: string }> {
  const res = await s.api('POST', '/api/email-messages/compose/', { token: user.access, identity: sender.uuid, body: { to, subject, body: '<p>hello</p>' } });
  expect(res.status).toBe(201);
  const relayed = await relay.waitFor((m) => m.parsed.subject === subject, 10_000);
  for (let i = 0; i < 100 && (await message(res.body.uuid)).status !== 'sent'; i++) await new Promise((r) => setTimeout(r, 50));
  expect((await message(res.body.uuid)).status).toBe('sent');
  return { uuid: res.body.uuid, messageId: relayed.parsed.messageId!, envelopeFrom: relayed.envelope.from };
}

/** A report as Postfix writes it: the failed recipients, and the returned message's headers. */
function report(to: string, messageId: string, failed: string[], delayed: string[] = []): string {
  const block = (address: string, action: string, status: string, diag: string) =>
    `Final-Recipient: rfc822; ${address}\r\nOriginal-Recipient: rfc822;${address}\r\nAction: ${action}\r\nStatus: ${status}\r\nDiagnostic-Code: smtp; ${diag}\r\n`;
  return [
    'From: MAILER-DAEMON@relay.example (Mail Delivery System)',
    `To: ${to}`,
    'Subject: Undelivered Mail Returned to Sender',
    `Message-ID: <report-${Date.now()}-${Math.random()}@relay.example>`,
    'MIME-Version: 1.0',
    'Content-Type: multipart/report; report-type=delivery-status; boundary="REPORT"',
    '',
    '--REPORT',
    'Content-Type: text/plain; charset=us-ascii',
    '',
    'I am sorry to have to inform you that your message could not be delivered.',
    '',
    '--REPORT',
    'Content-Type: message/delivery-status',
    '',
    'Reporting-MTA: dns; relay.example',
    '',
    [...failed.map((a) => block(a, 'failed', '5.1.1', `550 5.1.1 <${a}>: Recipient address rejected: User unknown`)), ...delayed.map((a) => block(a, 'delayed', '4.4.1', 'connection timed out'))].join('\r\n'),
    '--REPORT',
    'Content-Type: text/rfc822-headers',
    '',
    `From: ${sender.inbox}`,
    `Message-ID: ${messageId}`,
    'Subject: whatever',
    '',
    '--REPORT--',
    '',
  ].join('\r\n');
}

async function bounce(envelopeTo: string, raw: string, envelopeFrom = ''): Promise<void> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
  try {
    await transport.sendMail({ envelope: { from: envelopeFrom, to: [envelopeTo] }, raw });
  } finally {
    transport.close();
  }
}

it('a report of a refused recipient fails the sent message, with the remote words; the report itself is mail', async () => {
  const out = await sent('nobody@remote.example', 'to a missing mailbox');
  expect(out.envelopeFrom).toBe(sender.inbox); // bounces come back to the identity's inbox
  await bounce(sender.inbox, report(sender.inbox, out.messageId, ['nobody@remote.example']));
  const m = await message(out.uuid);
  expect(m.status).toBe('failed');
  expect(m.rejected).toEqual(['nobody@remote.example']);
  expect(m.error).toBe('Bounced after the relay took it: nobody@remote.example: 5.1.1 550 5.1.1 <nobody@remote.example>: Recipient address rejected: User unknown');
  // The report is mail too, in the thread of the message it returns.
  const sentThread = (await s.api('GET', `/api/email-messages/${out.uuid}/`, { token: user.access, identity: sender.uuid })).body.thread_id;
  const thread = await s.api('GET', `/api/email-inbox/${sentThread}/`, { token: user.access, identity: sender.uuid });
  expect(thread.body.messages.map((x: { subject: string }) => x.subject)).toEqual(['to a missing mailbox', 'Undelivered Mail Returned to Sender']);
  // The thread is still the conversation with its people: a reply without reply headers finds it by subject and participants.
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
  await transport.sendMail({ from: 'nobody@remote.example', to: sender.inbox, subject: 'Re: to a missing mailbox', text: 'I am here after all' });
  transport.close();
  const after = await s.api('GET', `/api/email-inbox/${sentThread}/`, { token: user.access, identity: sender.uuid });
  expect(after.body.messages).toHaveLength(3);
});

it('one refused recipient of two leaves the message sent, naming that one; a delay is no failure; the same report again changes nothing', async () => {
  const out = await sent('gone@remote.example, here@remote.example', 'to two');
  const raw = report(sender.inbox, out.messageId, ['gone@remote.example'], ['here@remote.example']);
  await bounce(sender.inbox, raw);
  await bounce(sender.inbox, raw); // a relay that retried after a lost 250
  const m = await message(out.uuid);
  expect(m.status).toBe('sent');
  expect(m.rejected).toEqual(['gone@remote.example']);
  expect(m.error).toBeNull();
  const history = await s.runtime.events.readStream(`delivery-${out.uuid}`);
  expect(history.filter((e) => e.type === 'EmailBounced')).toHaveLength(1);
  // The other one bounces later too: now none is left.
  await bounce(sender.inbox, report(sender.inbox, out.messageId, ['here@remote.example']));
  expect((await message(out.uuid)).status).toBe('failed');
});

it('a report about a message the identity never sent changes nothing (another identity\'s, or made up)', async () => {
  const out = await sent('x@remote.example', 'not bounced');
  const other = (await s.api('POST', '/api/identities/', { token: user.access, body: { name: 'Bystander' } })).body as { uuid: string; inbox: string };
  await bounce(other.inbox, report(other.inbox, out.messageId, ['x@remote.example'])); // to an identity that did not send it
  await bounce(sender.inbox, report(sender.inbox, '<made-up@agents.localhost>', ['x@remote.example']));
  await bounce(sender.inbox, report(sender.inbox, out.messageId, ['someone-else@remote.example'])); // not a recipient of it
  const m = await message(out.uuid);
  expect([m.status, m.rejected]).toEqual(['sent', []]);
});

it('a bounce that comes while another recipient waits for a retry survives that recipient\'s delivery', async () => {
  greylisted.add('slow@remote.example');
  const res = await s.api('POST', '/api/email-messages/compose/', { token: user.access, identity: sender.uuid, body: { to: 'gone@remote.example, slow@remote.example', subject: 'one greylisted', body: '<p>x</p>' } });
  expect(res.status).toBe(201);
  const relayed = await relay.waitFor((m) => m.parsed.subject === 'one greylisted', 10_000); // gone@ taken, slow@ deferred
  expect(relayed.envelope.to).toEqual(['gone@remote.example']);
  await bounce(sender.inbox, report(sender.inbox, relayed.parsed.messageId!, ['gone@remote.example']));
  let m = await message(res.body.uuid);
  expect([m.status, m.rejected]).toEqual(['queued', ['gone@remote.example']]);
  greylisted.delete('slow@remote.example');
  for (let i = 0; i < 200 && (await message(res.body.uuid)).status === 'queued'; i++) await new Promise((r) => setTimeout(r, 50));
  m = await message(res.body.uuid);
  expect([m.status, m.rejected]).toEqual(['sent', ['gone@remote.example']]); // the retry's EmailSent kept the bounce
  await bounce(sender.inbox, report(sender.inbox, relayed.parsed.messageId!, ['slow@remote.example']));
  expect((await message(res.body.uuid)).status).toBe('failed');
}, 30_000);

it('only what can be a bounce counts: not a recipient delivered here, not a report with a sender address', async () => {
  const colleague = (await s.api('POST', '/api/identities/', { token: user.access, body: { name: 'Colleague' } })).body as { inbox: string };
  const out = await sent(`${colleague.inbox}, far@remote.example`, 'internal and external');
  await bounce(sender.inbox, report(sender.inbox, out.messageId, ['far@remote.example']), 'postmaster@remote.example'); // DSNs come from <>
  expect((await message(out.uuid)).rejected).toEqual([]);
  await bounce(sender.inbox, report(sender.inbox, out.messageId, [colleague.inbox, 'far@remote.example']));
  const m = await message(out.uuid);
  expect([m.status, m.rejected]).toEqual(['sent', ['far@remote.example']]); // the colleague has the mail
});

it('reports about messages this identity never sent are mail, each its own thread (not one thread per reporting server)', async () => {
  const before = (await s.api('GET', '/api/email-inbox/?limit=200', { token: user.access, identity: sender.uuid })).body.length as number;
  await bounce(sender.inbox, report(sender.inbox, '<unknown-1@agents.localhost>', ['a@remote.example']));
  await bounce(sender.inbox, report(sender.inbox, '<unknown-2@agents.localhost>', ['b@remote.example']));
  const after = (await s.api('GET', '/api/email-inbox/?limit=200', { token: user.access, identity: sender.uuid })).body.length as number;
  expect(after).toBe(before + 2);
});
