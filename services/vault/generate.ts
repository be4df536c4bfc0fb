/**
 * Password generation for GET /api/passwords/generate_password/. Each character comes from
 * `crypto.randomInt` (a CSPRNG with rejection sampling: no modulo bias). A draw that misses
 * an enabled class is thrown away and redrawn, so the result is uniform over every password
 * of that length that has at least one character of each enabled class (forcing one
 * character per class would skew that distribution).
 */
import { randomInt } from 'node:crypto';

export const CHARACTER_CLASSES = {
  lowercase: 'abcdefghijklmnopqrstuvwxyz',
  uppercase: 'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
  digits: '0123456789',
  // No quotes, backslash, backtick or space: the result pastes safely into shells and configs.
  symbols: '!#$%&()*+,-./:;<=>?@[]^_{|}~',
} as const;

export type CharacterClass = keyof typeof CHARACTER_CLASSES;

export const PASSWORD_LENGTH = { min: 8, max: 128, default: 20 } as const;

export function generatePassword(length: number, classes: CharacterClass[]): string {
  if (!Number.isInteger(length) || length < PASSWORD_LENGTH.min || length > PASSWORD_LENGTH.max) throw new RangeError('length out of range');
  if (classes.length === 0) throw new RangeError('no character class');
  const sets = classes.map((c) => CHARACTER_CLASSES[c]);
  const alphabet = sets.join('');
  for (;;) {
    let out = '';
    for (let i = 0; i < length; i++) out += alphabet[randomInt(alphabet.length)];
    if (sets.every((set) => [...out].some((ch) => set.includes(ch)))) return out;
  }
}
