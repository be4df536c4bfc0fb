/**
 * The inbound MX: an smtp-server listener on SMTP_HOST:SMTP_PORT. It accepts RCPT only for
 * live inboxes of MAIL_DOMAIN (550 5.1.1 otherwise, RFC 3463), refuses senders (envelope or
 * From) at MAIL_DOMAIN (550 5.7.1: its mail is delivered inside), caps messages at 25 MiB
 * (SIZE, RFC 1870; 552 beyond), parses with mailparser, stores the raw MIME as a blob and
 * answers 250 only after the EmailReceived events are durably appended.
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerDataStream, type SMTPServerSession, type SMTPServerAddress } from 'smtp-server';
import { simpleParser, type AddressObject, type ParsedMail } from 'mailparser';
import type { Logger } from 'pino';
import type { Metrics } from '../kernel/metrics.js';
import type { SplitterChunk } from '@zone-eu/mailsplit';
import { deliveryReportOf, isDeliveryReport, walkMime } from './bounces.js';
import type { BlobStore } from '../../infra/ports/blob-store.js';
import type { Config } from '../../infra/config.js';
import { isStorageFault } from '../kernel/faults.js';
import type { EmailAddress } from './events.js';
import { MAX_MESSAGE_BYTES, type IdentityDoc, type IncomingMail, type MailService } from './service.js';
import * as mimeFuncs from 'nodemailer/lib/mime-funcs/index.js';
import { addressKey, domainOf, htmlToText, MAX_INBOUND_REFERENCES, messageIds, oneLine, safeFilename, trimReferences } from './text.js';
import type { BodyBudget } from './body-budget.js';
import { throttleAddress } from '../kernel/client-address.js';
import { startOf } from '../kernel/text.js';

/** RFC 5321 §4.5.3.1.8: at least 100 recipients must be accepted; we stop there. */
export const MAX_RCPT = 100;
/** Concurrent SMTP connections. */
export const MAX_CLIENTS = 200;
/**
 * Connections one client address (an IPv6 client by its /64) may hold at once: a quarter of
 * them, as with the body budget. Without it, 200 idle connections from one address kept
 * everyone else's mail out (421) until they timed out.
 */
export const MAX_CLIENTS_PER_ADDRESS = MAX_CLIENTS / 4;
/** Idle socket timeout (RFC 5321 §4.5.3.2.7 suggests 5 minutes for the server; 2 is plenty for an MX behind nothing). */
export const SOCKET_TIMEOUT_MS = 120_000;

/** Socket errors of a client that went away (smtp-server's own list of quiet ones). */
const CLIENT_GONE = new Set(['ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH']);
/** The refusal of a sender at MAIL_DOMAIN: its inboxes' mail never comes in over SMTP. */
const FORGED_SENDER = '5.7.1 Sender address rejected: mail from this domain is sent by the service itself, not through its MX';

/** The addresses of a From header, those of its groups (`Team: a@x, b@y;`) included. */
const fromAddresses = (from: AddressObject | undefined): string[] =>
  (from?.value ?? []).flatMap((a) => [a.address ?? '', ...(a.group ?? []).map((g) => g.address ?? '')]).filter(Boolean);

/** The header section is at most mailsplit's limit for a node's head (1 MiB; past it, 552). */
const HEAD_READ = 1024 * 1024 + 4;

/**
 * `From :` (white space before the colon, RFC 5322 §4.5.3's obsolete syntax) is a From to
 * other readers of the message, but mailparser drops the line: the one-From rule and the
 * forged-sender check would not see it.
 */
function hasObsoleteFrom(raw: Buffer): boolean {
  const start = raw.subarray(0, HEAD_READ);
  // Only the header section is made text (a message's first bytes: not 1 MiB of its body).
  const ends = [start.indexOf('\r\n\r\n'), start.indexOf('\n\n')].filter((i) => i !== -1);
  return /^from[ \t]+:/im.test(start.subarray(0, ends.length ? Math.min(...ends) : start.length).toString('latin1'));
}

/**
 * Spellings of a Date a mailer sends: RFC 5322 §3.3 (its obsolete forms too: no weekday or
 * seconds, a two-digit year), ISO 8601, asctime. The year is captured. Anything else is no
 * date, though JavaScript's Date.parse reads `-1` or `version 2` as a day of 2001.
 */
const DATE_SPELLINGS = [/^(?:[a-z]{3}\s*,\s*)?\d{1,2}\s+[a-z]{3}\s+(\d{2,4})\s+\d{1,2}\s*:\s*\d{2}\b/i, /^(\d{4})-\d{2}-\d{2}[t ]\d{2}:\d{2}/i, /^[a-z]{3}\s+[a-z]{3}\s+\d{1,2}\s+\d{1,2}:\d{2}(?::\d{2})?\s+(?:\S+\s+)?(\d{4})\b/i];

/** The sender's Date header as a time, or null: no date, or one RFC 3339 cannot write (a year past 9999). */
function senderDate(dateLine: string | undefined, parsed: Date | undefined): string | null {
  const year = dateLine && DATE_SPELLINGS.map((spelling) => spelling.exec(dateLine)?.[1]).find(Boolean);
  if (!year || !parsed || Number.isNaN(parsed.getTime())) return null;
  const parsedYear = parsed.getUTCFullYear();
  // A four-digit year read as another (`0001` is 2001 to V8); two digits are 19xx or 20xx (§4.3).
  if (year.length === 4 ? Math.abs(parsedYear - Number(year)) > 1 : year.length !== 2) return null;
  return parsedYear >= 0 && parsedYear <= 9999 ? parsed.toISOString() : null;
}

function smtpError(code: number, message: string): Error {
  return Object.assign(new Error(message), { responseCode: code });
}

/**
 * Addresses kept of one header (To, Cc, Reply-To): a header of tens of thousands would be
 * stored, listed and walked by every reply-all, which answers at most 100 recipients anyway.
 */
export const MAX_HEADER_ADDRESSES = 1000;
/** Characters kept of an inbound subject: as many as a composed one may have. */
export const MAX_INBOUND_SUBJECT = 998;
/** Characters kept of a display name: what a header line holds (a name of 10,000 was kept whole). */
const MAX_DISPLAY_NAME = 998;
const displayName = (name: string | undefined) => startOf((name ?? '').trim(), MAX_DISPLAY_NAME);
/**
 * HTML read to make a large message's text (the linear htmlToText, ~0.1 s per MiB on the one
 * thread): the text of a 25 MiB HTML-only mail is its first 2 MiB's.
 */
const MAX_HTML_FOR_TEXT = 2 * 1024 * 1024;

function addressesOf(value: AddressObject | AddressObject[] | undefined): EmailAddress[] {
  const list = Array.isArray(value) ? value : value ? [value] : [];
  const out: EmailAddress[] = [];
  const walk = (entries: { address?: string; name?: string; group?: unknown[] }[]) => {
    for (const e of entries) {
      if (out.length >= MAX_HEADER_ADDRESSES) return;
      if (e.group) walk(e.group as typeof entries);
      else if (e.address) out.push({ address: addressKey(e.address), name: displayName(e.name) });
    }
  };
  for (const v of list) walk(v.value);
  return out;
}

/**
 * Messages up to this size are parsed with mailparser's own HTML-to-text, which knows each
 * part's place (the text of a multipart/mixed in its order, an alternative's plain part).
 * Its conversion is super-linear (1 MB of `<li>x` held the process 10 s; 64 KB, under
 * 0.15 s at worst), so larger messages skip it and get {@link textOf}.
 */
export const MAILPARSER_TEXT_LIMIT = 64 * 1024;

/**
 * The text of a message. `textIsWhole`: mailparser's text already holds every part (it
 * converted the HTML parts itself, or the message is an alternative whose plain part is the
 * text). Otherwise (parsed with `skipHtmlToText`) the linear htmlToText makes what mailparser
 * would have: HTML parts beside plain ones outside an alternative (a list post and its
 * footer) give the HTML parts' text, then the plain parts' (their order is not known here).
 * Either way a message with HTML but no text (HTML-only; shapes mailparser makes none for)
 * gets its HTML's text.
 */
export function textOf(parsed: Pick<ParsedMail, 'text' | 'html'>, textIsWhole: boolean): string | null {
  const html = typeof parsed.html === 'string' ? startOf(parsed.html, MAX_HTML_FOR_TEXT) : null;
  if (html === null) return parsed.text ?? null;
  if (!parsed.text?.trim()) return htmlToText(html);
  if (textIsWhole) return parsed.text;
  return `${htmlToText(html)}\n${parsed.text.replace(/^\n+/, '')}`;
}

/** A part's header as mailsplit gives it. */
type PartNode = Extract<SplitterChunk, { type: 'node' }>;

/**
 * Whether every HTML body part of `raw` has a plain alternative (a text/plain body part under
 * the same multipart/alternative): then mailparser's text, parsed without its HTML-to-text,
 * already holds everything the message says. The walk reads part headers only (mailsplit),
 * and a message/rfc822 part is a leaf: its own parts, like a line of a body that merely looks
 * like a header, are no part of this message's text. A message that cannot be walked: false
 * (the HTML's text is added: some text said twice rather than lost).
 */
async function everyHtmlHasPlainAlternative(raw: Buffer): Promise<boolean> {
  const nodes: PartNode[] = [];
  try {
    await walkMime(raw, { ignoreEmbedded: true }, (chunk) => {
      if (chunk.type === 'node') nodes.push(chunk);
    });
  } catch {
    return false;
  }
  const isBody = (n: PartNode, type: string) => n.contentType === type && n.disposition !== 'attachment';
  const within = (n: PartNode, ancestor: PartNode): boolean => {
    for (let p = n.parentNode; p; p = p.parentNode) if (p === ancestor) return true;
    return false;
  };
  const plains = nodes.filter((n) => isBody(n, 'text/plain'));
  return nodes
    .filter((n) => isBody(n, 'text/html'))
    .every((html) => {
      for (let p = html.parentNode; p; p = p.parentNode) {
        if (p.multipart === 'alternative' && plains.some((plain) => within(plain, p))) return true;
      }
      return false;
    });
}

/** The extension an unnamed part is named with: its type's, `bin` for bytes of no known type (nodemailer says `*` for octet-stream). */
function unnamedExtension(contentType: string): string {
  const extension = mimeFuncs.detectExtension(contentType);
  return /^[a-z0-9]+$/i.test(extension) ? extension : 'bin';
}

/** What the read side needs from a parsed message (attachments stored as blobs). */
export async function incomingFromParsed(parsed: ParsedMail, raw: { blob: string; size: number }, envelopeFrom: string, blobs: BlobStore): Promise<IncomingMail> {
  // No From address at all (no header, or `From: Just A Name`): the envelope sender, as an
  // MTA adding the missing header would (Postfix, sendmail), under the header's name if any.
  // A malformed address is kept as written: a reply to it answers 400, it reaches no one.
  const from = addressesOf(parsed.from)[0] ?? {
    address: addressKey(envelopeFrom || 'unknown@invalid'),
    name: displayName(parsed.from?.value?.[0]?.name),
  };
  // In parallel: small blobs join one group commit of the blob store.
  const attachments = await Promise.all(
    (parsed.attachments ?? []).map(async (a) => {
      const ref = await blobs.put(a.content);
      const contentType = (a.contentType || 'application/octet-stream').toLowerCase();
      return {
        // An unnamed part (a forwarded message, an invite) gets a name its type opens with; a
        // named one a name safe to save and show (no path, no control or bidi characters), as
        // the download and the presign give it.
        filename: a.filename === undefined ? `attachment.${unnamedExtension(contentType)}` : safeFilename(a.filename),
        contentType,
        size: ref.size,
        blob: ref.key,
        contentId: a.contentId ?? null,
        // Parts of multipart/related (cid: images) are inline whether or not they say so.
        inline: a.contentDisposition === 'inline' || (a as { related?: boolean }).related === true,
      };
    }),
  );
  const internetMessageId = messageIds(parsed.messageId)[0] ?? null;
  // mailparser turns an unparsable Date into "now": that is no more the sender's date than a
  // missing one. Nor is a year RFC 3339 cannot write in four digits (`Date: 1 Jan 10000`
  // would become "+010000-01-01T..."), which no client parses as a date-time.
  const dateLine = parsed.headerLines?.find((l) => l.key === 'date')?.line.replace(/^date\s*:/i, '').replace(/\s+/g, ' ').trim();
  const date = senderDate(dateLine, parsed.date);
  return {
    internetMessageId,
    inReplyTo: messageIds(parsed.inReplyTo)[0] ?? null,
    // A long chain keeps its root and newest ids (each is looked up to thread the mail).
    references: trimReferences(messageIds(parsed.references), MAX_INBOUND_REFERENCES),
    from,
    to: addressesOf(parsed.to),
    cc: addressesOf(parsed.cc),
    replyTo: addressesOf(parsed.replyTo),
    subject: startOf(oneLine(parsed.subject ?? ''), MAX_INBOUND_SUBJECT),
    text: parsed.text ?? null,
    html: typeof parsed.html === 'string' ? parsed.html : null,
    attachments,
    raw,
    via: 'smtp',
    sourceMessageId: null,
    date,
  };
}

export interface SmtpListener {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** The bound port once started (SMTP_PORT may be an ephemeral one in tests). */
  port(): number | null;
}

export function createSmtpListener(deps: { config: Config; logger: Logger; mail: MailService; blobs: BlobStore; metrics: Pick<Metrics, 'smtpMessage'>; budget: BodyBudget }): SmtpListener {
  const { config, mail, blobs, metrics, budget } = deps;
  const log = deps.logger.child({ component: 'smtp' });
  const tls = config.tls ? { key: readFileSync(config.tls.keyFile), cert: readFileSync(config.tls.certFile) } : null;

  /** An address at MAIL_DOMAIN (a fully qualified `agents.example.` with its root dot too). */
  const ourDomain = (address: string) => domainOf(address).replace(/\.$/, '') === config.mailDomain;

  async function recipientsOf(session: SMTPServerSession): Promise<IdentityDoc[]> {
    const found: IdentityDoc[] = [];
    for (const rcpt of session.envelope.rcptTo) {
      const identity = await mail.identityByInbox(addressKey(rcpt.address));
      if (identity && !found.some((f) => f.id === identity.id)) found.push(identity);
    }
    return found;
  }

  /** Open connections by client address, and the address each counted session holds. */
  const byAddress = new Map<string, number>();
  const counted = new Map<string, string>();

  const server = new SMTPServer({
    name: config.mailDomain,
    banner: 'agent identity MX',
    size: MAX_MESSAGE_BYTES,
    authOptional: true,
    // An inbound MX takes no AUTH; STARTTLS only when a certificate is configured.
    disabledCommands: tls ? ['AUTH'] : ['AUTH', 'STARTTLS'],
    ...(tls ? { key: tls.key, cert: tls.cert } : {}),
    maxClients: MAX_CLIENTS,
    socketTimeout: SOCKET_TIMEOUT_MS,
    // SIGTERM: clients still connected after the 421 are cut after this (well inside the
    // 10 s a supervisor such as Docker grants before SIGKILL); a DATA cut short was not
    // acknowledged, so its sender retries.
    closeTimeout: 3_000,
    logger: false,

    onConnect(session: SMTPServerSession, callback: (err?: Error | null) => void) {
      const address = throttleAddress(session.remoteAddress);
      const open = byAddress.get(address) ?? 0;
      if (open >= MAX_CLIENTS_PER_ADDRESS) {
        metrics.smtpMessage('connection_refused');
        // As Postfix words it (smtpd_client_connection_count_limit); the client tries again later.
        return callback(smtpError(421, '4.7.0 Too many connections from your address, try again later'));
      }
      byAddress.set(address, open + 1);
      counted.set(session.id, address);
      callback();
    },

    onClose(session: SMTPServerSession) {
      const address = counted.get(session.id);
      if (address === undefined) return; // refused, or gone before it was greeted
      counted.delete(session.id);
      const left = (byAddress.get(address) ?? 1) - 1;
      if (left > 0) byAddress.set(address, left);
      else byAddress.delete(address);
    },

    // Mail from MAIL_DOMAIN's inboxes is delivered inside the service, never through this
    // listener: one that says it is from there is forged, and would read as our own.
    onMailFrom(address: SMTPServerAddress, _session: SMTPServerSession, callback: (err?: Error | null) => void) {
      if (address.address && ourDomain(address.address)) {
        metrics.smtpMessage('rejected');
        return callback(smtpError(550, FORGED_SENDER));
      }
      callback();
    },

    onRcptTo(address: SMTPServerAddress, session: SMTPServerSession, callback: (err?: Error | null) => void) {
      if (session.envelope.rcptTo.length >= MAX_RCPT) return callback(smtpError(452, '4.5.3 Too many recipients'));
      const rcpt = addressKey(address.address);
      const refuse = (text: string) => {
        metrics.smtpMessage('recipient_rejected');
        callback(smtpError(550, text));
      };
      if (domainOf(rcpt) !== config.mailDomain) return refuse('5.1.1 Recipient address rejected: not a local mailbox');
      mail
        .identityByInbox(rcpt)
        .then((identity) => {
          if (!identity) return refuse('5.1.1 Recipient address rejected: no such mailbox');
          callback();
        })
        .catch((err) => {
          log.error({ err }, 'rcpt lookup failed');
          callback(smtpError(451, '4.3.0 Temporary lookup failure, try again later'));
        });
    },

    onData(stream: SMTPServerDataStream, session: SMTPServerSession, callback: (err?: Error | null, message?: string) => void) {
      let chunks: Buffer[] = [];
      let size = 0;
      /** Bytes of the budget this message holds; null once refused for want of it (the rest is read and dropped). */
      let held: number | null = 0;
      const holder = `smtp:${throttleAddress(session.remoteAddress)}`; // an IPv6 client by its /64
      const release = () => {
        if (held) budget.give(held, holder);
        held = null;
      };
      stream.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (held === null || size > MAX_MESSAGE_BYTES) return;
        if (!budget.take(chunk.length, holder)) {
          release();
          chunks = [];
          return;
        }
        held += chunk.length;
        chunks.push(chunk);
      });
      stream.on('error', (err) => {
        release();
        callback(err);
      });
      stream.on('end', () => {
        if (stream.sizeExceeded || size > MAX_MESSAGE_BYTES) {
          release();
          metrics.smtpMessage('rejected');
          callback(smtpError(552, '5.3.4 Message size exceeds fixed maximum message size'));
          return;
        }
        if (held === null) {
          metrics.smtpMessage('failed');
          log.warn({ size }, 'inbound message refused for now: too many bodies in memory (the sender retries)');
          callback(smtpError(452, '4.3.1 Insufficient system resources, try again later'));
          return;
        }
        accept(Buffer.concat(chunks), session)
          .finally(release)
          .then((count) => {
            metrics.smtpMessage('accepted', count);
            callback(null, `2.0.0 Ok: delivered to ${count} mailbox${count === 1 ? '' : 'es'}`);
          })
          .catch((err) => {
            const code = (err as { responseCode?: number }).responseCode;
            // A 5xx refuses the message for good; a 4xx (and any failure of ours) has it sent again.
            metrics.smtpMessage(code && code >= 500 ? 'rejected' : 'failed');
            if (code) return callback(smtpError(code, (err as Error).message));
            // Over what the event store takes in one write (EventStoreDB's MaxAppendSize): the
            // same message fails the same way, so a permanent refusal, not days of retries.
            if ((err as { code?: string }).code === 'append_too_large') return callback(smtpError(552, '5.3.4 Message too large to store'));
            if (isStorageFault(err)) {
              // RFC 5321 §4.2.3: 452 "insufficient system storage"; the sender retries later.
              log.warn({ err: (err as Error).message }, 'inbound message refused: storage full');
              return callback(smtpError(452, '4.3.1 Insufficient system storage, try again later'));
            }
            log.error({ err }, 'inbound message could not be stored');
            callback(smtpError(451, '4.3.0 Temporary failure, try again later'));
          });
      });
    },
  });
  // A failure to listen is start()'s to report (one line naming SMTP_PORT), not the log's too.
  let listening = false;
  server.on('error', (err: Error & { code?: string; remoteAddress?: string }) => {
    if (!listening) return;
    // A client gone mid-transaction (smtp-server passes these on only then): its mail was not
    // acknowledged, so it sends it again. Its doing, not a fault of ours.
    if (err.code && CLIENT_GONE.has(err.code)) return log.info({ code: err.code, remoteAddress: err.remoteAddress }, 'smtp client went away mid-transaction');
    log.error({ err }, 'smtp server error');
  });

  async function accept(raw: Buffer, session: SMTPServerSession): Promise<number> {
    const recipients = await recipientsOf(session);
    if (!recipients.length) throw smtpError(550, '5.1.1 No valid recipients');
    // Parsed once per message, whatever the number of recipients. The raw MIME is stored
    // while it is parsed; the attachments' puts join the same group commit.
    const large = raw.length > MAILPARSER_TEXT_LIMIT;
    const parse = simpleParser(raw, { skipImageLinks: true, skipTextToHtml: true, skipHtmlToText: large, keepCidLinks: true }).catch((err: Error) => {
      // The same bytes fail the same way: a permanent refusal, or the sender retries for days.
      if (/header size/i.test(err.message)) throw smtpError(552, '5.3.4 Message header too large');
      // mailsplit's limit (MAX_CHILD_NODES): said as a limit, not as a message it cannot read.
      if (/child nodes/i.test(err.message)) throw smtpError(554, '5.6.0 Message has more than 1000 MIME parts');
      throw smtpError(554, '5.6.0 Message could not be parsed');
    });
    const [parsed, rawRef] = await Promise.all([parse, blobs.put(raw)]);
    // RFC 5322 §3.6: one From. Of several, mailparser keeps the last: one of ours could ride
    // above an outside one, past the forged-sender check below and into the stored message.
    if (parsed.headerLines.filter((line) => line.key === 'from').length > 1) throw smtpError(554, '5.6.0 Message has more than one From header (RFC 5322 section 3.6)');
    if (hasObsoleteFrom(raw)) throw smtpError(554, '5.6.0 Message has a From header written with white space before its colon (RFC 5322 section 3.6.2)');
    if (fromAddresses(parsed.from).some(ourDomain)) throw smtpError(550, FORGED_SENDER);
    const envelopeFrom = session.envelope.mailFrom ? session.envelope.mailFrom.address : '';
    const text = textOf(parsed, !large || (typeof parsed.html === 'string' && (await everyHtmlHasPlainAlternative(raw))));
    const incoming = await incomingFromParsed({ ...parsed, text: text ?? undefined }, { blob: rawRef.key, size: rawRef.size }, envelopeFrom, blobs);
    // A bounce of one of the recipients' own sent messages marks its failed recipients there.
    // Only what can be one: sent with the null reverse path (RFC 3464 §2, RFC 5321 §4.5.5),
    // to a service that relays (without a relay, outside mail only goes to the outbox).
    if (envelopeFrom === '' && config.smtpRelayUrl && isDeliveryReport(parsed.headers.get('content-type'))) incoming.report = await deliveryReportOf(raw);
    // Same bytes for the same identity = the same message (a sender retrying after a lost 250).
    await mail.receive(recipients, incoming, `smtp:${rawRef.key}`);
    log.info({ recipients: recipients.length, size: raw.length }, 'inbound mail accepted');
    return recipients.length;
  }

  let bound: number | null = null;
  return {
    async start() {
      await new Promise<void>((resolve, reject) => {
        const onError = (err: Error) => reject(err);
        server.server.once('error', onError);
        server.listen(config.smtpPort, config.smtpHost, () => {
          server.server.off('error', onError);
          resolve();
        });
      });
      listening = true;
      bound = (server.server.address() as AddressInfo).port;
      log.info({ host: config.smtpHost, port: bound }, 'smtp listening');
    },
    async stop() {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      bound = null;
    },
    port: () => bound,
  };
}
