/**
 * Reading delivery status notifications (services/mail/bounces.ts, RFC 3464) in the forms
 * mail servers send them: the returned headers or the whole returned message, a status part in
 * base64, folded Diagnostic-Code lines, delays beside failures, and what is no report at all.
 */
import { deliveryReportOf, failedRecipientsOf } from '../../services/mail/bounces.js';

const report = (status: string, returned: string) =>
  Buffer.from(
    `From: MAILER-DAEMON@relay.example\nTo: ann@agents.localhost\nSubject: Undelivered\nMIME-Version: 1.0\nContent-Type: multipart/report; report-type=delivery-status; boundary="BB"\n\n--BB\nContent-Type: text/plain\n\nBounce.\n\n--BB\n${status}\n--BB\n${returned}\n--BB--\n`.replace(/\n/g, '\r\n'),
  );
const fields = `Reporting-MTA: dns; relay.example\n\nFinal-Recipient: rfc822; Nobody@Example.com\nAction: failed\nStatus: 5.1.1 (user unknown)\nDiagnostic-Code: smtp; 550 5.1.1 <nobody@example.com>:\n Recipient address rejected\n\nFinal-Recipient: rfc822; slow@example.com\nAction: delayed\nStatus: 4.4.1\n`;
const failed = [{ address: 'nobody@example.com', status: '5.1.1', diagnostic: '550 5.1.1 <nobody@example.com>: Recipient address rejected' }];

describe('deliveryReportOf', () => {
  it('reads the failed recipients and the Message-ID of the returned headers', async () => {
    const r = await deliveryReportOf(report(`Content-Type: message/delivery-status\n\n${fields}`, 'Content-Type: text/rfc822-headers\n\nFrom: ann@agents.localhost\nMessage-ID: <orig-1@agents.localhost>\n'));
    expect(r).toEqual({ originalMessageId: '<orig-1@agents.localhost>', failed });
  });

  it('reads the returned message (message/rfc822) and a base64 status part', async () => {
    const b64 = Buffer.from(fields.replace(/\n/g, '\r\n')).toString('base64').replace(/.{76}/g, '$&\n');
    const r = await deliveryReportOf(report(`Content-Type: message/delivery-status\nContent-Transfer-Encoding: base64\n\n${b64}\n`, 'Content-Type: message/rfc822\n\nFrom: ann@agents.localhost\nMessage-ID: <orig-2@agents.localhost>\nSubject: hi\n\nthe body\n'));
    expect(r).toEqual({ originalMessageId: '<orig-2@agents.localhost>', failed });
  });

  it('reads a returned message marked inline, and keeps only a well-formed status code', async () => {
    const odd = fields.replace('Status: 5.1.1 (user unknown)', `Status: ${'9'.repeat(5000)}`);
    const r = await deliveryReportOf(report(`Content-Type: message/delivery-status\n\n${odd}`, 'Content-Type: message/rfc822\nContent-Disposition: inline\n\nFrom: ann@agents.localhost\nMessage-ID: <orig-3@agents.localhost>\n\nthe body\n'));
    expect(r).toEqual({ originalMessageId: '<orig-3@agents.localhost>', failed: [{ ...failed[0], status: '' }] });
  });

  it('is null for what is no usable report: no failure, no returned Message-ID, no status part, not MIME', async () => {
    expect(await deliveryReportOf(report('Content-Type: message/delivery-status\n\nReporting-MTA: dns; x\n\nFinal-Recipient: rfc822; a@b.c\nAction: delayed\n', 'Content-Type: text/rfc822-headers\n\nMessage-ID: <o@x>\n'))).toBeNull();
    expect(await deliveryReportOf(report(`Content-Type: message/delivery-status\n\n${fields}`, 'Content-Type: text/rfc822-headers\n\nSubject: no id\n'))).toBeNull();
    expect(await deliveryReportOf(report('Content-Type: text/plain\n\nhello', 'Content-Type: text/rfc822-headers\n\nMessage-ID: <o@x>\n'))).toBeNull();
    expect(await deliveryReportOf(Buffer.from('not a message at all'))).toBeNull();
  });

  it('prefers the address the message was sent to (Original-Recipient) over the one that failed (an alias)', () => {
    expect(failedRecipientsOf('Reporting-MTA: dns; x\n\nOriginal-Recipient: rfc822;team@example.com\nFinal-Recipient: rfc822; alice@internal.example\nAction: failed\nStatus: 5.2.2\n')).toEqual([
      { address: 'team@example.com', status: '5.2.2', diagnostic: '' },
    ]);
  });
});
