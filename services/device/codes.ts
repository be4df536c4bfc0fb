/**
 * The two codes of RFC 8628 §3.2 and how they are kept.
 *
 * - device_code: 32 bytes from the CSPRNG (base64url). Only its SHA-256 is stored: with
 *   256 bits of entropy a fast hash cannot be reversed.
 * - user_code: 8 letters from a 20-letter alphabet without vowels (no words, no 0/O or
 *   1/I confusion; RFC 8628 §6.1), shown XXXX-XXXX, entered case- and dash-insensitively.
 *   20^8 ≈ 2^34.6: enough against online guessing within a code's lifetime (attempts are
 *   rate-limited, §5.1), too little against an offline search of a plain hash, so it is
 *   stored as an HMAC under a server key.
 */
import { createHash, randomBytes, randomInt } from 'node:crypto';
import { macOf } from '../kernel/secrets.js';

export const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';
export const USER_CODE_LENGTH = 8;

export function newDeviceCode(): string {
  return randomBytes(32).toString('base64url');
}

export function hashDeviceCode(deviceCode: string): string {
  return createHash('sha256').update(deviceCode, 'utf8').digest('base64url');
}

/** A fresh user code, normalized (8 capital letters, no dash). */
export function newUserCode(): string {
  let out = '';
  for (let i = 0; i < USER_CODE_LENGTH; i++) out += USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)];
  return out;
}

/**
 * What the human typed, normalized: compatibility forms folded (NFKC: a fullwidth `ＢＣＤＦ－…`
 * from an East Asian keyboard is the same code), upper case, separators (spaces, and the
 * dashes, hyphens and minus signs word processors put in) dropped.
 * Null when it cannot be a user code of ours (wrong length or a letter outside the alphabet).
 */
export function normalizeUserCode(input: string): string | null {
  const s = input.normalize('NFKC').toUpperCase().replace(/[\s\-\u2010-\u2015\u2212_.]/g, '');
  if (s.length !== USER_CODE_LENGTH) return null;
  for (const ch of s) if (!USER_CODE_ALPHABET.includes(ch)) return null;
  return s;
}

/** `BCDFGHJK` → `BCDF-GHJK` (RFC 8628 §6.1: a separator helps reading it back). */
export function formatUserCode(normalized: string): string {
  return `${normalized.slice(0, 4)}-${normalized.slice(4)}`;
}

export function hashUserCode(hmacKey: Buffer, normalized: string): string {
  return macOf(hmacKey, 'device-user-code', normalized);
}
