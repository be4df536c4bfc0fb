/**
 * The local part of an identity's inbox address. Pure helpers, unit-tested.
 *
 * RFC 5321 §4.1.2 `Dot-string = Atom *("." Atom)` with RFC 5322 §3.2.3 `atext`; the local
 * part is at most 64 octets (RFC 5321 §4.5.3.1.1). Addresses are compared lower-cased.
 */
import { randomInt } from 'node:crypto';

export const MAX_LOCAL_PART = 64;
const ATEXT = "[a-z0-9!#$%&'*+/=?^_`{|}~-]";
const DOT_ATOM = new RegExp(`^${ATEXT}+(\\.${ATEXT}+)*$`);

/**
 * Mailboxes every mail domain must keep for its operators (RFC 5321 §4.5.1 postmaster,
 * RFC 2142 abuse & co.), and those a certificate authority may mail to prove control of the
 * domain (CA/Browser Forum Baseline Requirements §3.2.2.4.4: admin, administrator, webmaster,
 * hostmaster, postmaster; root and the ssl* ones some CAs used): a tenant holding one could
 * get a TLS certificate for MAIL_DOMAIN. An identity never gets them.
 */
export const RESERVED_LOCAL_PARTS = new Set([
  'postmaster',
  'abuse',
  'mailer-daemon',
  'hostmaster',
  'webmaster',
  'security',
  'noreply',
  'no-reply',
  'admin',
  'administrator',
  'root',
  'ssladmin',
  'ssladministrator',
  'sslwebmaster',
]);

/** The normalized local part, or an error message. */
export function normalizeLocalPart(raw: string): { value: string } | { error: string } {
  const value = raw.trim().toLowerCase();
  if (value.length === 0) return { error: 'This field may not be blank.' };
  if (value.length > MAX_LOCAL_PART) return { error: `Ensure this field has no more than ${MAX_LOCAL_PART} characters.` };
  if (!DOT_ATOM.test(value)) {
    return { error: 'Enter a valid email local part: letters, digits and !#$%&\'*+/=?^_`{|}~- separated by single dots.' };
  }
  return { value };
}

/** A readable stem from an identity name: `Sales Bot #1` → `sales-bot-1`. */
export function slugOf(name: string): string {
  const slug = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '') // accents off: é → e
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40)
    .replace(/-+$/g, '');
  return slug || 'agent';
}

const SUFFIX_ALPHABET = 'abcdefghijkmnpqrstuvwxyz23456789'; // no 0/o, 1/l: read aloud safely

/** `slug-xxxx` with 4 random characters: readable, and rarely taken. */
export function generateLocalPart(name: string, suffixLength = 4): string {
  let suffix = '';
  for (let i = 0; i < suffixLength; i++) suffix += SUFFIX_ALPHABET[randomInt(SUFFIX_ALPHABET.length)];
  return `${slugOf(name)}-${suffix}`;
}
