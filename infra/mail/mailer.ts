/**
 * Outbound mailer adapter (nodemailer): SMTP_RELAY_URL when set, else each message is
 * written as an .eml file under DATA_DIR/outbox (DECISIONS "Running it").
 */
import nodemailer from 'nodemailer';
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import { chmod, mkdir, readdir, stat, unlink } from 'node:fs/promises';
import { fsyncPath, writeFileDurably } from '../durable-file.js';
import path from 'node:path';
import { createHash, randomUUID } from 'node:crypto';
import * as mimeFuncs from 'nodemailer/lib/mime-funcs/index.js';
import { startOf } from '../../services/kernel/text.js';
import { TemporaryMailError, type Mailer, type OutboundAddress, type OutboundMail, type SendResult } from '../ports/mailer.js';

export interface MailerOptions {
  relayUrl: string | null;
  outboxDir: string;
  /** Domain for generated Message-IDs. */
  domain: string;
  dkim?: { domainName: string; keySelector: string; privateKey: string };
}

/** RFC 5322 §2.1.1: a header line is at most 998 characters; folding happens only at whitespace. */
const MAX_LINE = 998;

/**
 * A subject nodemailer would leave on one over-long line (a run of more characters than a
 * line holds, with no whitespace to fold at) goes out as RFC 2047 encoded words, which fold.
 * So does a subject holding text shaped like an encoded word (`=?utf-8?B?SGFja2Vk?=`): sent
 * as is, the recipient's client would decode it and show another subject than the one sent.
 * The run is looked for from where runs start (after whitespace): tried at every character,
 * a subject of long runs cost a run's length per character (a second for 900 KB).
 */
const UNFOLDABLE_SUBJECT = new RegExp(`(?:^|\\s)\\S{${MAX_LINE - 'Subject: '.length - 10}}`);
const ENCODED_WORD_LIKE = /=\?[^?\s]+\?[bq]\?[^?\s]*\?=/i;
function subjectHeader(subject: string): string | { prepared: true; foldLines: true; value: string } {
  if (!UNFOLDABLE_SUBJECT.test(subject) && !ENCODED_WORD_LIKE.test(subject)) return subject;
  return { prepared: true, foldLines: true, value: mimeFuncs.encodeWord(subject, 'Q', 52) };
}

/** Bare LFs as CRLF (a lone CR stays: such content goes out in base64). */
function crlf(content: Buffer): Buffer {
  let bare = 0;
  for (let i = 0; i < content.length; i++) if (content[i] === 0x0a && content[i - 1] !== 0x0d) bare++;
  if (bare === 0) return content;
  const out = Buffer.allocUnsafe(content.length + bare);
  let j = 0;
  for (let i = 0; i < content.length; i++) {
    if (content[i] === 0x0a && content[i - 1] !== 0x0d) out[j++] = 0x0d;
    out[j++] = content[i];
  }
  return out;
}

/** Whether `content` is valid 8bit data (RFC 2045 §2.8): no NUL, CR and LF only as CRLF, lines ≤ 998. */
function fitsEightBit(content: Buffer): boolean {
  let line = 0;
  for (let i = 0; i < content.length; i++) {
    const c = content[i];
    if (c === 0) return false;
    if (c === 0x0d) {
      if (content[i + 1] !== 0x0a) return false;
      continue;
    }
    if (c === 0x0a) {
      if (content[i - 1] !== 0x0d) return false;
      line = 0;
    } else if (++line > MAX_LINE) return false;
  }
  return true;
}

/**
 * Attachments go out as attachments (nodemailer makes message/* parts inline). A message/*
 * part may not be base64-encoded (RFC 2046 §5.2.1): 7-bit content goes as it is, valid 8bit
 * content as 8bit with BODY=8BITMIME, and bytes that are neither (NUL, long lines) as
 * application/octet-stream in base64 under the same file name, which any client still opens.
 */
function attachmentsOf(mail: OutboundMail): { attachments: object[] | undefined; eightBit: boolean } {
  let eightBit = false;
  const attachments = mail.attachments?.map((a) => {
    const part = { filename: a.filename, contentType: withCharset(a.contentType, a.content), content: a.content, contentDisposition: 'attachment' as const };
    if (!/^message\//i.test(a.contentType)) return part;
    // A message in the canonical form MIME asks for (RFC 2046 §5.2.1): CRLF line ends (an
    // .eml written by a Unix tool has bare LFs, which no 7bit or 8bit part may carry).
    const canonical = crlf(a.content);
    if (!fitsEightBit(canonical)) return { ...part, contentType: 'application/octet-stream', contentTransferEncoding: 'base64' };
    if (canonical.every((b) => b < 0x80)) return { ...part, content: canonical, contentTransferEncoding: '7bit' };
    eightBit = true;
    return { ...part, content: canonical, contentTransferEncoding: '8bit' };
  });
  return { attachments, eightBit };
}

/**
 * A text attachment names its charset, or readers take US-ASCII (RFC 2046 §4.1.2) and garble
 * anything else: UTF-8 text (what agents upload) is labelled as such; other bytes are left
 * unlabelled, as uploaded.
 */
function withCharset(contentType: string, content: Buffer): string {
  if (!/^text\//i.test(contentType) || /;\s*charset=/i.test(contentType) || content.every((b) => b < 0x80)) return contentType;
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(content);
    return `${contentType}; charset=utf-8`;
  } catch {
    return contentType;
  }
}

/**
 * A display name as it may go out: nodemailer folds a name only at its spaces, so a long
 * unbroken one made a header line over 998 characters (RFC 5322 §2.1.1); names are cut to
 * MAX_NAME characters, which no real name reaches. A name shaped like an encoded word goes
 * out encoded, as a subject does (clients decode one even inside quotes: a sender could show
 * another name than its own).
 */
const MAX_NAME = 200;
function wireAddress(a: OutboundAddress): OutboundAddress {
  if (typeof a === 'string') return a;
  const name = a.name.length <= MAX_NAME ? a.name : `${startOf(a.name, MAX_NAME - 1)}…`;
  return { name: ENCODED_WORD_LIKE.test(name) ? mimeFuncs.encodeWord(name, 'Q', 52) : name, address: a.address };
}

function toNodemailer(mail: OutboundMail, domain: string) {
  const { attachments, eightBit } = attachmentsOf(mail);
  // nodemailer copies envelope members other than from/to into the SMTP envelope.
  const envelope = eightBit ? { ...(mail.envelope ?? { from: addressOf(mail.from), to: [...mail.to, ...(mail.cc ?? []), ...(mail.bcc ?? [])].map(addressOf) }), use8BitMime: true } : mail.envelope;
  return {
    from: wireAddress(mail.from),
    to: mail.to.map(wireAddress),
    cc: mail.cc?.length ? mail.cc.map(wireAddress) : undefined,
    bcc: mail.bcc?.length ? mail.bcc.map(wireAddress) : undefined,
    subject: subjectHeader(mail.subject) as string, // nodemailer takes a prepared header object here too (untyped)
    text: mail.text,
    html: mail.html,
    messageId: mail.messageId ?? `<${randomUUID()}@${domain}>`,
    date: mail.date ? new Date(mail.date) : undefined,
    inReplyTo: mail.inReplyTo,
    references: mail.references,
    headers: mail.headers,
    attachments,
    envelope,
  };
}

const addressOf = (a: OutboundAddress): string => (typeof a === 'string' ? a : a.address);

/**
 * Relay connections kept open and reused (nodemailer's pool): a relay reached over TLS with
 * AUTH costs a handshake and a login per connection, and relays limit connection rates. As
 * many as the delivery reactor's default concurrency (services/mail/delivery.ts; more
 * deliveries at once would wait for a connection); each is renewed after RELAY_POOL_MESSAGES.
 */
const RELAY_POOL_CONNECTIONS = 8;
const RELAY_POOL_MESSAGES = 100;

/**
 * A process killed while filing a message leaves its `.eml.tmp` behind (the delivery is
 * retried and files the message again). Removed at start when over a minute old: a write in
 * progress (of another process sharing the outbox) takes milliseconds.
 */
async function removeAbandonedWrites(outboxDir: string): Promise<void> {
  const names = await readdir(outboxDir).catch(() => [] as string[]);
  for (const name of names.filter((n) => n.endsWith('.eml.tmp'))) {
    const file = path.join(outboxDir, name);
    const info = await stat(file).catch(() => null);
    if (info && Date.now() - info.mtimeMs > 60_000) await unlink(file).catch(() => {});
  }
}

/**
 * Files `raw` as `file` in the outbox: written to a temporary name (a reader never sees a
 * half-written message), fsynced, renamed, the directory fsynced, so a message recorded as
 * sent survives a power loss. A failure leaves no temporary file behind.
 */
async function fileDurably(outboxDir: string, file: string, raw: Buffer): Promise<void> {
  // The outbox is the operator's mailbox when no relay is set (DECISIONS), and its mails
  // carry password reset and verification links: private to the service's user whatever
  // the umask or the mode of a DATA_DIR made beforehand (0644 let a local user take over
  // an account).
  await mkdir(outboxDir, { recursive: true, mode: 0o700 });
  await chmod(outboxDir, 0o700);
  // A temporary name of its own (the final one is the message's, the same on every attempt:
  // a second attempt, or one after a kill that left its temporary file, must not meet it).
  await writeFileDurably(`${file.slice(0, -'.eml'.length)}.${randomUUID()}.eml.tmp`, raw, file);
  await fsyncPath(outboxDir);
}

export function createMailer(options: MailerOptions): Mailer {
  const transport = options.relayUrl
    ? nodemailer.createTransport(
        { url: options.relayUrl, pool: true, maxConnections: RELAY_POOL_CONNECTIONS, maxMessages: RELAY_POOL_MESSAGES },
        options.dkim ? { dkim: options.dkim } : undefined,
      )
    : null;
  if (!transport) void removeAbandonedWrites(options.outboxDir);
  // Without a relay the message is built (and DKIM-signed, when configured) the same way, then filed.
  const fileTransport = nodemailer.createTransport({ streamTransport: true, buffer: true, ...(options.dkim ? { dkim: options.dkim } : {}) });

  async function compile(mail: OutboundMail): Promise<Buffer> {
    const composer = new MailComposer(toNodemailer(mail, options.domain));
    return composer.compile().build();
  }

  async function send(mail: OutboundMail): Promise<SendResult> {
    const message = toNodemailer(mail, options.domain);
    if (transport) {
      try {
        const info = (await transport.sendMail(message)) as { messageId?: string; rejectedErrors?: { recipient?: string; responseCode?: number; response?: string; message: string }[] };
        const refused = (info.rejectedErrors ?? []).map((e) => ({
          address: String(e.recipient ?? ''),
          reason: e.response ?? e.message,
          temporary: e.responseCode !== undefined && e.responseCode < 500,
        }));
        return { messageId: info.messageId ?? message.messageId, via: 'relay', refused };
      } catch (err) {
        const e = err as { responseCode?: number; code?: string };
        // 5xx replies are permanent; 4xx replies and connection trouble are worth a retry, and
        // so is a refused or missing login (535, 530): our own setup, not the recipient, is at fault.
        if (e.responseCode && e.responseCode >= 500 && e.code !== 'EAUTH' && e.responseCode !== 530) throw err;
        throw new TemporaryMailError(`relay failed: ${(err as Error).message}`, { cause: err });
      }
    }
    const raw = (await fileTransport.sendMail(message)).message as Buffer;
    // In time order; a message with its own id and date always gets the same name (handed
    // over again after a crash, it replaces its file instead of making a second one).
    const own = mail.messageId && mail.date ? { id: mail.messageId, date: new Date(mail.date) } : null;
    const stamp = (own?.date ?? new Date()).toISOString().replace(/[:.]/g, '-');
    const name = `${stamp}-${own ? createHash('sha256').update(own.id).digest('hex').slice(0, 32) : randomUUID()}.eml`;
    const file = path.join(options.outboxDir, name);
    try {
      await fileDurably(options.outboxDir, file, raw);
    } catch (err) {
      // Our own disk (full, read-only, a permission) is at fault, never the recipient: the
      // delivery is retried later. The reason names the error code, not a server path.
      throw new TemporaryMailError(`the outbox could not file the message (${(err as NodeJS.ErrnoException).code ?? 'error'})`, { cause: err });
    }
    return { messageId: message.messageId, via: 'outbox', location: file, refused: [] };
  }

  async function verify(): Promise<void> {
    if (transport) await transport.verify();
    else await mkdir(options.outboxDir, { recursive: true });
  }

  return { send, compile, verify, close: async () => transport?.close() };
}
