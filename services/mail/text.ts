/** Pure helpers on addresses, subjects and bodies (unit-tested in test/unit/mail.unit.test.ts). */
import addressparser from 'nodemailer/lib/addressparser/index.js';
import type { EmailAddress } from './events.js';
import { domainToASCII } from 'node:url';
import { startOf } from '../kernel/text.js';

/** A pragmatic addr-spec check (RFC 5321 §4.1.2 sizes; dot-atom local part, LDH domain). */
const ADDRESS = /^(?=.{3,254}$)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;

export const isEmailAddress = (value: string): boolean => ADDRESS.test(value) && value.split('@')[0].length <= 64;

/**
 * The form addresses are kept and compared in: lower case (RFC 5321 allows case-sensitive
 * local parts; no real host uses them), a quoted local part that needs no quotes unquoted
 * (`"ann"@x` is `ann@x`, RFC 5321 §4.1.2), and an internationalised domain in its ASCII
 * form (`bücher.de` → `xn--bcher-kva.de`, RFC 5890): what SMTP without SMTPUTF8 can carry.
 */
export function addressKey(address: string): string {
  let a = address.trim().toLowerCase();
  const at = a.lastIndexOf('@');
  if (at <= 0) return a;
  let local = a.slice(0, at);
  let domain = a.slice(at + 1);
  const unquoted = /^"([^"\\]+)"$/.exec(local)?.[1];
  if (unquoted && DOT_ATOM_LOCAL.test(unquoted)) local = unquoted;
  if (/[^\x00-\x7f]/.test(domain)) domain = domainToASCII(domain) || domain;
  a = `${local}@${domain}`;
  return a;
}
const DOT_ATOM_LOCAL = /^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/;

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
      if (!address || !isEmailAddress(addressKey(address))) {
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

/**
 * Reply and forward prefixes as clients write them (English, and the German, Scandinavian,
 * Dutch, French, Italian, Polish, Spanish and Portuguese ones Outlook sends: AW, SV, VS, WG,
 * TR, RIF, ODP, RES, ENC), with a counter (`Re[2]:`) or a mailing list's `[tag]` among them.
 */
const REPLY_PREFIX = /^\s*((\[[^\]\n]{1,40}\]\s*)*(re|fwd?|aw|sv|vs|antw|wg|tr|rif|odp|res|enc)(\[\d+\])?\s*:\s*)+/i;
/** A mailing list's tag alone (`[dev] Hello`): not a reply, but part of no one's subject. */
const LIST_TAG = /^\s*(\[[^\]\n]{1,40}\]\s*)+/;

/** The subject without reply/forward prefixes and list tags, whitespace collapsed, lowercased: the fallback thread key. */
export function normaliseSubject(subject: string): string {
  return subject.replace(REPLY_PREFIX, '').replace(LIST_TAG, '').replace(/\s+/g, ' ').trim().toLowerCase();
}

export const hasReplyPrefix = (subject: string): boolean => REPLY_PREFIX.test(subject);

/**
 * "Re: " exactly once (RFC 5322 §3.6.5); an empty subject answers as "Re:". Line breaks and
 * other control characters a sender encoded into its subject become spaces: a header is one
 * line, and the copy kept here reads as the one sent.
 */
export function replySubject(subject: string): string {
  const s = subject.replace(/[\x00-\x08\x0a-\x1f\x7f]+/g, ' ').trim();
  return /^re\s*:/i.test(s) ? s : s ? `Re: ${s}` : 'Re:';
}

/**
 * The References of a reply: the parent's chain plus the parent. A long chain keeps its
 * first id (the thread's root) and the newest ones (what RFC 5537 §3.4.4 asks of news
 * software, and what mail clients do): relays refuse headers of hundreds of kilobytes.
 */
export const MAX_REFERENCES = 20;
export function trimReferences(references: string[]): string[] {
  return references.length <= MAX_REFERENCES ? references : [references[0], ...references.slice(-(MAX_REFERENCES - 1))];
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ' };

function decodeEntity(m: string, e: string): string {
  if (e[0] === '#') {
    const code = e[1] === 'x' || e[1] === 'X' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10);
    return Number.isFinite(code) && code > 0 && code < 0x110000 ? String.fromCodePoint(code) : m;
  }
  return ENTITIES[e.toLowerCase()] ?? m;
}
const decodeEntities = (s: string): string => s.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, decodeEntity);

/** A line without its trailing spaces and tabs (a loop: `/[ \t]+$/` backtracks over long inner runs). */
function trimSpacesEnd(line: string): string {
  let end = line.length;
  while (end > 0 && (line[end - 1] === ' ' || line[end - 1] === '\t')) end--;
  return end === line.length ? line : line.slice(0, end);
}

/** Elements whose end starts a new line in the text. */
const BLOCK_ENDS = new Set(['p', 'div', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'li', 'tr', 'blockquote', 'pre']);
/** Elements whose content is no text. */
const HIDDEN = new Set(['script', 'style', 'head']);
const TAG_NAME = /^\/?\s*([a-z][a-z0-9]*)/;
const HREF = /(?:^|\s)href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))/i;

/**
 * A readable plain-text alternative of an HTML body (for the text part and previews): links
 * keep their targets (`here (https://…)`), table cells their separation, block ends their
 * line breaks. One pass over the input (`indexOf` scans that never go back): any mail,
 * however malformed, costs time in proportion to its size. Regular expressions over the
 * whole body backtracked on unclosed tags (15 KB of `<a href=x ` froze the process for seconds).
 */
export function htmlToText(html: string): string {
  const lower = html.toLowerCase();
  // Past the last `</a`, no link closes: no search for one (each would scan to the end).
  const lastLinkEnd = lower.lastIndexOf('</a');
  let out = '';
  let i = 0;
  while (i < html.length) {
    const lt = html.indexOf('<', i);
    const gt = lt < 0 ? -1 : html.indexOf('>', lt + 1);
    if (gt < 0) {
      out += decodeEntities(html.slice(i)); // no tag left: the rest is text
      break;
    }
    out += decodeEntities(html.slice(i, lt));
    const tag = lower.slice(lt + 1, gt);
    const name = TAG_NAME.exec(tag)?.[1] ?? '';
    const closing = tag.startsWith('/');
    i = gt + 1;
    if (!closing && HIDDEN.has(name)) {
      const end = lower.indexOf(`</${name}`, i);
      const endGt = end < 0 ? -1 : html.indexOf('>', end);
      i = endGt < 0 ? html.length : endGt + 1;
    } else if (name === 'br') {
      out += '\n';
    } else if (closing && BLOCK_ENDS.has(name)) {
      out += '\n';
    } else if (!closing && name === 'li') {
      out += '- ';
    } else if (closing && (name === 'td' || name === 'th')) {
      let j = i;
      while (j < html.length && /\s/.test(html[j])) j++;
      if (/^<t[dh][\s>]/.test(lower.slice(j, j + 4))) {
        out += '\t';
        i = j;
      }
    } else if (!closing && name === 'a') {
      const m = HREF.exec(html.slice(lt + 2, gt));
      const href = decodeEntities((m?.[1] ?? m?.[2] ?? m?.[3] ?? '').trim());
      const close = /^(https?:|mailto:)/i.test(href) && i <= lastLinkEnd ? lower.indexOf('</a', i) : -1;
      if (close < 0) continue; // not a link we show: its content reads on as text
      const closeGt = html.indexOf('>', close);
      const label = htmlToText(html.slice(i, close));
      const shown = href.replace(/^mailto:/i, '');
      out += !label || label === shown ? shown : `${label} (${shown})`;
      i = closeGt < 0 ? html.length : closeGt + 1;
    }
    // any other tag: dropped
  }
  return out
    .split('\n')
    .map(trimSpacesEnd)
    .join('\n')
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
