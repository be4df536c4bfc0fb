/** Pure helpers on addresses, subjects and bodies (unit-tested in test/unit/mail.unit.test.ts). */
import addressparser from 'nodemailer/lib/addressparser/index.js';
import type { EmailAddress } from './events.js';
import { startOf } from '../kernel/text.js';

/** A pragmatic addr-spec check (RFC 5321 §4.1.2 sizes; dot-atom local part, LDH domain). */
const ADDRESS = /^(?=.{3,254}$)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;

export const isEmailAddress = (value: string): boolean => ADDRESS.test(value) && value.split('@')[0].length <= 64;

/** Addresses compare case-insensitively here (RFC 5321 allows case-sensitive local parts; no real host uses them). */
export const addressKey = (address: string): string => address.trim().toLowerCase();

export const domainOf = (address: string): string => addressKey(address).split('@').pop() ?? '';

/**
 * One address or a comma-separated list (or an array of either), with optional display
 * names (`Ann <ann@example.com>`). Returns the addresses and the entries that are not valid.
 */
export function parseAddressList(input: unknown): { addresses: EmailAddress[]; invalid: string[] } {
  const parts = Array.isArray(input) ? input : [input];
  const addresses: EmailAddress[] = [];
  const invalid: string[] = [];
  const seen = new Set<string>();
  for (const part of parts) {
    if (part === undefined || part === null) continue;
    if (typeof part !== 'string') {
      invalid.push(String(part));
      continue;
    }
    if (part.trim() === '') continue;
    // A line break or other control character has no place in an address list (it could
    // smuggle a header), and addressparser would read past it: refuse the whole entry.
    if (/[\x00-\x1f\x7f]/.test(part)) {
      invalid.push(part.replace(/[\x00-\x1f\x7f]+/g, ' ').trim());
      continue;
    }
    for (const entry of flatten(addressparser(part))) {
      const address = entry.address.trim();
      if (!address || !isEmailAddress(address)) {
        invalid.push(address || entry.name);
        continue;
      }
      // `a@x.com b@x.com` and `a@x.com <b@x.com>` parse as a name plus one address: an
      // unquoted name that is itself an address is a malformed list, not a display name.
      if (entry.name.includes('@') && !part.includes(`"${entry.name}"`)) {
        invalid.push(part.trim());
        continue;
      }
      const key = addressKey(address);
      if (seen.has(key)) continue;
      seen.add(key);
      addresses.push({ address: key, name: (entry.name ?? '').trim() });
    }
  }
  return { addresses, invalid };
}

type Parsed = { address?: string; name?: string; group?: Parsed[] };
function flatten(list: Parsed[]): { address: string; name: string }[] {
  return list.flatMap((p) => (p.group ? flatten(p.group) : [{ address: p.address ?? '', name: p.name ?? '' }]));
}

/** `"Name" <address>` for headers (nodemailer quotes as needed). */
export const formatAddress = (a: EmailAddress): { name: string; address: string } => ({ name: a.name, address: a.address });

const REPLY_PREFIX = /^\s*((re|fwd?|aw|sv|antw)(\[\d+\])?\s*:\s*)+/i;

/** The subject without reply/forward prefixes, whitespace collapsed, lowercased: the fallback thread key. */
export function normaliseSubject(subject: string): string {
  return subject.replace(REPLY_PREFIX, '').replace(/\s+/g, ' ').trim().toLowerCase();
}

export const hasReplyPrefix = (subject: string): boolean => REPLY_PREFIX.test(subject);

/** "Re: " exactly once (RFC 5322 §3.6.5). */
export function replySubject(subject: string): string {
  const s = subject.trim();
  return /^re\s*:/i.test(s) ? s : `Re: ${s}`;
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ' };

/** A readable plain-text alternative of an HTML body (for the text part and previews). */
export function htmlToText(html: string): string {
  return html
    .replace(/<(script|style|head)[^>]*>[\s\S]*?<\/\1\s*>/gi, '')
    .replace(/<br\s*\/?>/gi, '\n')
    .replace(/<\/(p|div|h[1-6]|li|tr|blockquote|pre)\s*>/gi, '\n')
    .replace(/<li[^>]*>/gi, '- ')
    .replace(/<[^>]+>/g, '')
    .replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (m, e: string) => {
      if (e[0] === '#') {
        const code = e[1] === 'x' || e[1] === 'X' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10);
        return Number.isFinite(code) && code > 0 && code < 0x110000 ? String.fromCodePoint(code) : m;
      }
      return ENTITIES[e.toLowerCase()] ?? m;
    })
    .replace(/[ \t]+\n/g, '\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

export const PREVIEW_LENGTH = 200;

/** First ~200 characters of the text, whitespace collapsed. */
export function previewOf(text: string | null | undefined, html?: string | null): string {
  const source = text && /\S/.test(text) ? text : html ? htmlToText(html) : '';
  const collapsed = collapsedStart(source);
  if (collapsed.length <= PREVIEW_LENGTH) return collapsed;
  return `${startOf(collapsed, PREVIEW_LENGTH - 1).trimEnd()}…`;
}

/**
 * `source` with whitespace collapsed, or a start of it longer than a preview: collapsing a
 * long body whole cost more than parsing it (a 64 KB mail). A prefix collapses to a prefix
 * of the whole, so once it is longer than the preview the preview is exact.
 */
function collapsedStart(source: string): string {
  for (let n = PREVIEW_LENGTH * 4; ; n *= 4) {
    const prefix = source.length > n ? source.slice(0, n) : source;
    const collapsed = prefix.replace(/\s+/g, ' ').trim();
    if (prefix === source || collapsed.length > PREVIEW_LENGTH) return collapsed;
  }
}

/** Message-IDs (`<...>`) found in a header value or list, in order, without duplicates. */
export function messageIds(value: unknown): string[] {
  const raw = Array.isArray(value) ? value.join(' ') : typeof value === 'string' ? value : '';
  const out: string[] = [];
  for (const m of raw.matchAll(/<([^<>\s]+)>/g)) {
    const id = `<${m[1]}>`;
    if (!out.includes(id)) out.push(id);
  }
  // A bare id without brackets (some senders): keep it bracketed.
  if (out.length === 0 && /^[^<>\s]+@[^<>\s]+$/.test(raw.trim())) out.push(`<${raw.trim()}>`);
  return out;
}

/** The key of a thread's participant set, the identity's own inbox left out. */
export function participantsKey(addresses: string[], ownInbox: string): string {
  const own = addressKey(ownInbox);
  const set = [...new Set(addresses.map(addressKey))].filter((a) => a && a !== own).sort();
  return set.join(',');
}

/** A file name safe for a Content-Disposition header and a file system. */
export function safeFilename(name: string): string {
  const cleaned = name.replace(/[\u0000-\u001f\u007f/\\"]/g, '_').trim();
  return cleaned.slice(0, 255) || 'attachment';
}
