/**
 * Delivery status notifications (RFC 3464): the report a mail server sends back to the
 * envelope sender (an identity's inbox) when it could not deliver a message it had accepted.
 * A relay's 250 only says the relay took the mail; the recipient's server may refuse it
 * later, and this report is the only news of that.
 *
 * A report is `multipart/report; report-type=delivery-status` with a `message/delivery-status`
 * part (per-recipient fields: Final-Recipient, Action, Status, Diagnostic-Code) and the
 * returned message or its headers (`message/rfc822`, `text/rfc822-headers`), whose Message-ID
 * names the message reported on. The MIME walk is mailsplit's (mailparser folds the status
 * part into the text); `message/global*` (RFC 6533, internationalised) are read the same way.
 */
import { Splitter, type SplitterChunk, type SplitterOptions } from '@zone-eu/mailsplit';
import type { Readable } from 'node:stream';
import { messageIds } from './text.js';

export interface BouncedRecipient {
  address: string;
  /** The RFC 3463 status code, `5.1.1`. */
  status: string;
  /** The remote server's words (Diagnostic-Code without its type), or ''. */
  diagnostic: string;
}

export interface DeliveryReport {
  /** The Message-ID of the message reported on, bracketed as stored (`<id@domain>`). */
  originalMessageId: string;
  /** The recipients whose delivery failed for good (`Action: failed`); delays are news, not failures. */
  failed: BouncedRecipient[];
}

/** Bytes of a part read: a status report or a header block fits many times (a returned message may not). */
const PART_LIMIT = 256 * 1024;
const STATUS_TYPES = new Set(['message/delivery-status', 'message/global-delivery-status']);
const RETURNED_TYPES = new Set(['text/rfc822-headers', 'message/global-headers', 'message/rfc822', 'message/global']);
/** Recipients read from one report. */
const MAX_RECIPIENTS = 100;

/**
 * Walks `raw` with mailsplit: each part header (`node`) and body chunk goes to `onChunk`, in
 * message order; settles when the message is read, rejects on a malformed one.
 */
export function walkMime(raw: Buffer, options: SplitterOptions, onChunk: (chunk: SplitterChunk) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const splitter = new Splitter(options);
    splitter.on('data', onChunk);
    const stream = splitter as unknown as NodeJS.ReadWriteStream;
    stream.on('end', resolve);
    stream.on('error', reject);
    stream.end(raw);
  });
}

/** Whether a parsed message's top-level Content-Type says it is a delivery report. */
export function isDeliveryReport(contentType: unknown): boolean {
  const ct = contentType as { value?: unknown; params?: Record<string, unknown> } | undefined;
  return typeof ct?.value === 'string' && ct.value.toLowerCase() === 'multipart/report' && String(ct.params?.['report-type'] ?? '').toLowerCase() === 'delivery-status';
}

/** RFC 5322-style fields of one block (continuation lines unfolded), names lower-cased; the first of each kept. */
function fieldsOf(block: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of block.replace(/\r?\n[ \t]+/g, ' ').split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    if (!fields.has(name)) fields.set(name, line.slice(colon + 1).trim());
  }
  return fields;
}

/** `rfc822; ann@example.com` → `ann@example.com` (the address type is dropped). */
const typedValue = (value: string | undefined): string => (value ?? '').replace(/^[^;]*;\s*/, '').trim();

/** The recipients a `message/delivery-status` body reports as failed. */
export function failedRecipientsOf(status: string): BouncedRecipient[] {
  // The first block is about the message; each later one about a recipient.
  const blocks = status.split(/\r?\n[ \t]*\r?\n/).slice(1);
  const failed: BouncedRecipient[] = [];
  for (const block of blocks) {
    const f = fieldsOf(block);
    if ((f.get('action') ?? '').toLowerCase() !== 'failed') continue;
    // The address the message was sent to (Original-Recipient), else the one that failed (an alias may differ).
    const address = typedValue(f.get('original-recipient') ?? f.get('final-recipient')).replace(/^<|>$/g, '').toLowerCase();
    if (!address.includes('@')) continue;
    const status = /^\d\.\d{1,3}\.\d{1,3}$/.exec((f.get('status') ?? '').split(/\s/)[0] ?? '')?.[0] ?? '';
    failed.push({ address: address.slice(0, 320), status, diagnostic: typedValue(f.get('diagnostic-code')).slice(0, 500) });
    if (failed.length >= MAX_RECIPIENTS) break;
  }
  return failed;
}

/**
 * The report in `raw`, or null when it is none (no status part, no Message-ID of the message
 * reported on, or no failed recipient). Never throws on malformed input: a report that cannot
 * be read is ordinary mail.
 */
export async function deliveryReportOf(raw: Buffer): Promise<DeliveryReport | null> {
  // A returned message/rfc822 is read as a part (its header block), not walked into: an inline one too.
  type Part = { node: { getDecoder(): NodeJS.ReadWriteStream }; kind: 'status' | 'headers'; chunks: Buffer[]; size: number };
  const parts: Part[] = [];
  let current: Part | null = null;
  try {
    await walkMime(raw, { maxHeadSize: 256 * 1024, ignoreEmbedded: true }, (chunk) => {
      const data = chunk as { type: string; value?: Buffer; contentType?: string | false };
      if (data.type === 'node') {
        current = null;
        const type = (data.contentType || '').toLowerCase();
        // The returned message (or only its headers): its header block names it.
        const kind = STATUS_TYPES.has(type) ? 'status' : RETURNED_TYPES.has(type) ? 'headers' : null;
        if (kind && !parts.some((p) => p.kind === kind)) parts.push((current = { node: data as never, kind, chunks: [], size: 0 }));
      } else if (data.type === 'body' && current && data.value) {
        const part: Part = current;
        // The beginning is enough (a status report, a header block); a long returned message is not kept whole.
        if (part.size < PART_LIMIT) part.chunks.push(data.value);
        part.size += data.value.length;
      }
    });
  } catch {
    return null;
  }
  const decoded = async (p: Part): Promise<string> => {
    const decoder = p.node.getDecoder() as unknown as Readable & NodeJS.WritableStream;
    const out: Buffer[] = [];
    decoder.on('data', (c: Buffer) => out.push(c));
    const done = new Promise<void>((resolve, reject) => {
      decoder.on('end', resolve);
      decoder.on('error', reject);
    });
    decoder.end(Buffer.concat(p.chunks));
    await done;
    return Buffer.concat(out).toString('utf8');
  };
  try {
    const status = parts.find((p) => p.kind === 'status');
    if (!status) return null;
    const failed = failedRecipientsOf(await decoded(status));
    const headers = parts.find((p) => p.kind === 'headers');
    const headerBlock = headers ? (await decoded(headers)).split(/\r?\n\r?\n/)[0] : '';
    const originalMessageId = messageIds(fieldsOf(headerBlock ?? '').get('message-id'))[0];
    if (!originalMessageId || !failed.length) return null;
    return { originalMessageId, failed };
  } catch {
    return null;
  }
}
