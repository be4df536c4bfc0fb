/** A real SMTP server (smtp-server) that keeps what it receives, parsed by mailparser: the relay sink of tests. */
import { SMTPServer } from 'smtp-server';
import { simpleParser, type ParsedMail } from 'mailparser';
import type { AddressInfo } from 'node:net';

export interface SmtpSink {
  url: string;
  port: number;
  messages: Array<{ envelope: { from: string; to: string[] }; raw: Buffer; parsed: ParsedMail }>;
  /** Resolves with the first message matching `predicate` (waits for it to arrive). */
  waitFor(predicate: (m: SmtpSink['messages'][number]) => boolean, timeoutMs?: number): Promise<SmtpSink['messages'][number]>;
  close(): Promise<void>;
}

export interface SmtpSinkOptions {
  /** Answers a recipient with a refusal (`{ code: 451, message: '4.7.1 try later' }`), or null to take it. */
  refuseRcpt?: (address: string) => { code: number; message: string } | null;
}

/** A sink on `port` (default: any free port). */
export async function startSmtpSink(port = 0, options: SmtpSinkOptions = {}): Promise<SmtpSink> {
  const messages: SmtpSink['messages'] = [];
  const waiters: Array<() => void> = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onRcptTo(address, _session, callback) {
      const refusal = options.refuseRcpt?.(address.address);
      callback(refusal ? Object.assign(new Error(refusal.message), { responseCode: refusal.code }) : undefined);
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', async () => {
        const raw = Buffer.concat(chunks);
        const parsed = await simpleParser(raw);
        messages.push({
          envelope: { from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '', to: session.envelope.rcptTo.map((r) => r.address) },
          raw,
          parsed,
        });
        waiters.splice(0).forEach((w) => w());
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', () => resolve()));
  port = (server.server.address() as AddressInfo).port;
  return {
    url: `smtp://127.0.0.1:${port}`,
    port,
    messages,
    waitFor(predicate, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('timed out waiting for a mail')), timeoutMs);
        const check = () => {
          const found = messages.find(predicate);
          if (found) {
            clearTimeout(timer);
            resolve(found);
          } else waiters.push(check);
        };
        check();
      });
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
