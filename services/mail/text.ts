/** Pure helpers on addresses, subjects and bodies (unit-tested in test/unit/mail.unit.test.ts). */
import addressparser from 'nodemailer/lib/addressparser/index.js';
import type { EmailAddress } from './events.js';
import { domainToASCII } from 'node:url';
import { startOf } from '../kernel/text.js';

/** A pragmatic addr-spec check (RFC 5321 §4.1.2 sizes; dot-atom local part, LDH domain). */
const ADDRESS = /^(?=.{3,254}$)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;

export const isEmailAddress = (value: string): boolean => ADDRESS.test(value) && value.split('@')[0].length <= 64;

/**
 * The form addresses are kept and compared in: ASCII lower case (RFC 5321 allows
 * case-sensitive local parts; no real host uses them; only ASCII, so no other letter folds
 * into an inbox's name), a quoted local part that needs no quotes unquoted
 * (`"ann"@x` is `ann@x`, RFC 5321 §4.1.2), and an internationalised domain in its ASCII
 * form (`bücher.de` → `xn--bcher-kva.de`, RFC 5890): what SMTP without SMTPUTF8 can carry.
 */
export function addressKey(address: string): string {
  let a = address.trim();
  const at = a.lastIndexOf('@');
  if (at <= 0) return a.toLowerCase();
  // ASCII case only in the local part: Unicode lower-casing folds look-alikes into ASCII
  // (the Kelvin sign K into k), which would deliver `\u212Aim@` to kim's inbox.
  let local = a.slice(0, at).replace(/[A-Z]+/g, (s) => s.toLowerCase());
  // White space around the @ and the dots of an unquoted address is no part of it (RFC 5322
  // §4.4: `ann @ x.com` is ann@x.com), nor is an invisible format character (a zero-width
  // joiner, a bidi mark) in a domain, which holds none: either made a From that reads as one
  // of ours pass the forged-sender check.
  if (!local.startsWith('"')) local = local.replace(/\s+/g, '');
  let domain = a.slice(at + 1).toLowerCase().replace(/[\s\p{Cf}]+/gu, '');
  const unquoted = /^"([^"\\]+)"$/.exec(local)?.[1];
  if (unquoted && DOT_ATOM_LOCAL.test(unquoted)) local = unquoted;
  if (/[^\x00-\x7f]/.test(domain)) domain = domainToASCII(domain) || domain;
  a = `${local}@${domain}`;
  return a;
}
const DOT_ATOM_LOCAL = /^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/;

export const domainOf = (address: string): string => addressKey(address).split('@').pop() ?? '';

/** Invalid entries a list reports: the first few tell the sender what to fix. */
const INVALID_REPORTED = 20;
/** How much of an invalid entry is quoted back. */
const INVALID_SHOWN = 200;

/**
 * One address or a comma-separated list (or an array of either), with optional display
 * names (`Ann <ann@example.com>`). Returns the addresses and the entries that are not valid
 * (each once, the first {@link INVALID_REPORTED}, cut to {@link INVALID_SHOWN} characters).
 * Past `limit` entries it stops and says `tooMany`: each entry is checked against its
 * part's text, and a message takes no more recipients than that anyway.
 */
export function parseAddressList(input: unknown, limit = Infinity): { addresses: EmailAddress[]; invalid: string[]; tooMany: boolean } {
  const parts = Array.isArray(input) ? input : [input];
  const addresses: EmailAddress[] = [];
  const invalid = new Set<string>();
  const refuse = (text: string) => {
    if (invalid.size < INVALID_REPORTED) invalid.add(text.length > INVALID_SHOWN ? `${text.slice(0, INVALID_SHOWN)}…` : text);
  };
  const seen = new Set<string>();
  let entries = 0;
  const result = (tooMany: boolean) => ({ addresses, invalid: [...invalid], tooMany });
  for (const part of parts) {
    if (part === undefined || part === null) continue;
    if (typeof part !== 'string') {
      refuse(String(part));
      continue;
    }
    if (part.trim() === '') continue;
    // A line break or other control character has no place in an address list (it could
    // smuggle a header), and addressparser would read past it: refuse the whole entry.
    if (/[\x00-\x1f\x7f]/.test(part)) {
      refuse(part.replace(/[\x00-\x1f\x7f]+/g, ' ').trim());
      continue;
    }
    for (const entry of flatten(addressparser(part))) {
      if (++entries > limit) return result(true);
      const address = entry.address.trim();
      if (!address || !isEmailAddress(addressKey(address))) {
        refuse(address || entry.name);
        continue;
      }
      // `a@x.com b@x.com` and `a@x.com <b@x.com>` parse as a name plus one address: an
      // unquoted name that is itself an address is a malformed list, not a display name.
      if (entry.name.includes('@') && !part.includes(`"${entry.name}"`)) {
        refuse(part.trim());
        continue;
      }
      // A display name goes with an address in angle brackets (RFC 5322 §3.4), or is a
      // comment after it (`ann@x.com (Ann)`). addressparser reads any other word beside an
      // address as a name: `a b@c.com`, a typo, would go to b@c.com as "a".
      if (entry.name && !angleAddress(address).test(part) && !part.includes(`(${entry.name})`)) {
        refuse(part.trim());
        continue;
      }
      const key = addressKey(address);
      if (seen.has(key)) continue;
      seen.add(key);
      addresses.push({ address: key, name: (entry.name ?? '').trim() });
    }
  }
  return result(false);
}

/** `<address>` in a list's text, spaces inside the brackets allowed. */
const angleAddress = (address: string) => new RegExp(`<\\s*${address.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s*>`, 'i');

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
 * A header's text as one line: line breaks and other control characters (an encoded-word may
 * carry any: `=?utf-8?q?a=0D=0ABcc:_x?=`) become one space each run; a tab stays.
 */
export const oneLine = (text: string): string => text.replace(/[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]+/g, ' ').trim();

/**
 * "Re: " exactly once (RFC 5322 §3.6.5); an empty subject answers as "Re:". Line breaks and
 * other control characters a sender encoded into its subject become spaces: a header is one
 * line, and the copy kept here reads as the one sent.
 */
export function replySubject(subject: string): string {
  const s = oneLine(subject);
  return /^re\s*:/i.test(s) ? s : s ? `Re: ${s}` : 'Re:';
}

/**
 * The References of a reply: the parent's chain plus the parent. A long chain keeps its
 * first id (the thread's root) and the newest ones (what RFC 5537 §3.4.4 asks of news
 * software, and what mail clients do): relays refuse headers of hundreds of kilobytes.
 */
export const MAX_REFERENCES = 20;
export function trimReferences(references: string[], max = MAX_REFERENCES): string[] {
  return references.length <= max ? references : [references[0], ...references.slice(-(max - 1))];
}
/** What is kept of an inbound References header (threading looks each one up). */
export const MAX_INBOUND_REFERENCES = 100;

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
/** Elements whose content is no text (a `title` also when `</head>` was left out). */
const HIDDEN = new Set(['script', 'style', 'head', 'title']);
/** Of those, the ones whose content runs to the end when never closed (as browsers read them). */
const RAW_TEXT = new Set(['script', 'style']);
const TAG_NAME = /^\/?\s*([a-z][a-z0-9-]*)/; // `-` included: <style-guide> is no <style>
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
  /**
   * Where the element `name` opened before `from` ends: the index of its `</name>` and of the
   * character after that tag's `>`, or null when it never closes. Only a whole tag name
   * counts (`</a>` ends a link, `</abbr>` does not; `</head>`, not `</header>`).
   */
  const findEnd = (name: string, from: number): [number, number] | null => {
    for (let at = lower.indexOf(`</${name}`, from); at >= 0; at = lower.indexOf(`</${name}`, at + 1)) {
      const next = lower.charCodeAt(at + 2 + name.length);
      if (next === 0x3e || next === 0x2f || next === 0x20 || (next >= 0x09 && next <= 0x0d)) {
        const gt = html.indexOf('>', at);
        return gt < 0 ? null : [at, gt + 1];
      }
    }
    return null;
  };
  // Searches only move forward, so the last answer per name also answers every later
  // question it covers: many openings of an element that closes far away, or never, cost
  // one scan in all (hostile input), not one each.
  const lastEnd = new Map<string, { from: number; end: [number, number] | null }>();
  const endOf = (name: string, from: number): [number, number] | null => {
    const known = lastEnd.get(name);
    if (known && from >= known.from && (known.end === null || from <= known.end[0])) return known.end;
    const end = findEnd(name, from);
    lastEnd.set(name, { from, end });
    return end;
  };
  // The ends of links, found once: a search per link from each opening would scan to the end
  // again and again when they are far or missing (hostile input).
  const linkEnds: [number, number][] = [];
  for (let at = 0, end = endOf('a', 0); end; end = endOf('a', at)) {
    linkEnds.push(end);
    at = end[1];
  }
  let nextLinkEnd = 0;
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
    const hiddenEnd = !closing && HIDDEN.has(name) ? endOf(name, i) : null;
    if (hiddenEnd) {
      i = hiddenEnd[1];
    } else if (!closing && RAW_TEXT.has(name)) {
      i = html.length; // a script or style never closed: the rest is code
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
      while (nextLinkEnd < linkEnds.length && linkEnds[nextLinkEnd][0] < i) nextLinkEnd++;
      const end = /^(https?:|mailto:)/i.test(href) ? linkEnds[nextLinkEnd] : undefined;
      if (!end) continue; // not a link we show, or never closed: its content reads on as text
      const label = htmlToText(html.slice(i, end[0]));
      const shown = href.replace(/^mailto:/i, '');
      out += !label || label === shown ? shown : `${label} (${shown})`;
      i = end[1];
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
    // Control characters too (a NUL, junk of a broken encoding): a preview is a line to show.
    const collapsed = prefix.replace(/[\s\u0000-\u001f\u007f-\u009f]+/g, ' ').trim();
    if (prefix === source || collapsed.length > PREVIEW_LENGTH) return collapsed;
  }
}

/** Characters of a Message-ID between its brackets: what a header line holds (RFC 5322 §2.1.1, 998). */
const MAX_MESSAGE_ID = 990;

/** Message-IDs (`<...>`) found in a header value or list, in order, without duplicates. */
export function messageIds(value: unknown): string[] {
  const raw = Array.isArray(value) ? value.join(' ') : typeof value === 'string' ? value : '';
  const out = new Set<string>(); // a Set: a header of 100,000 ids deduplicated by includes() took seconds
  for (const m of raw.matchAll(/<([^<>\s]+)>/g)) if (m[1]!.length <= MAX_MESSAGE_ID) out.add(`<${m[1]}>`);
  if (out.size) return [...out];
  // A bare id without brackets (some senders): keep it bracketed.
  // One @ (RFC 5322 §3.6.4's id-left and id-right hold none): `@` in both classes backtracked,
  // a header of 100,000 of them took seconds.
  const bare = raw.trim();
  return /^[^<>\s@]+@[^<>\s@]+$/.test(bare) && bare.length <= MAX_MESSAGE_ID ? [`<${bare}>`] : [];
}

/** The key of a thread's participant set, the identity's own inbox left out. */
export function participantsKey(addresses: string[], ownInbox: string): string {
  const own = addressKey(ownInbox);
  const set = [...new Set(addresses.map(addressKey))].filter((a) => a && a !== own).sort();
  return set.join(',');
}

/**
 * A file name safe for a Content-Disposition header and a file system. Bidirectional
 * overrides and isolates go too: `invoice\u202Efdp.exe` shows as `invoiceexe.pdf`.
 */
export function safeFilename(name: string): string {
  const cleaned = name.replace(/[\u0000-\u001f\u007f/\\"\u202a-\u202e\u2066-\u2069]/g, '_').trim();
  // `.` and `..` name directories, not files: a client saving under the name given fails or worse.
  return (/^\.+$/.test(cleaned) ? cleaned.replace(/\./g, '_') : cleaned).slice(0, 255) || 'attachment';
}
