/**
 * The one normalisation of the webhook's `From` and `To` (docs/EVENTS.md "Inbound SMS"),
 * applied before anything is stored: the result is the conversation's peer,
 * the message's `from_number`/`to_number` and the SSE `from_number`, so two spellings of
 * one sender must give the same text, and no text may render as something it is not.
 *
 * 1. Control (\p{Cc}: NUL, tab, newline...) and format (\p{Cf}: zero-width characters, bidi
 *    overrides such as U+202E, the soft hyphen...) characters are refused, and so are the
 *    other default-ignorable ones (combining grapheme joiner, variation selectors, Hangul
 *    fillers): they are invisible or reorder what is shown, and no provider sends them.
 * 2. NFKC: full-width `＋１５５５`, superscript or circled digits, no-break and ideographic
 *    spaces become their ASCII forms.
 * 3. A value without a letter is a phone number: a `From` of 3 to 8 digits alone is a short
 *    code, kept so; otherwise spaces, dashes, dots and parentheses are removed, a leading
 *    `00` (or a `+` that arrived as a space, or no sign) reads as `+` (normalizeNumber), and
 *    the result must be E.164: `+` and 2 to 15 ASCII digits, the first not 0. Digits of
 *    other scripts (Arabic-Indic `١٥٥٥`, Devanagari...) are refused, not mapped: no provider
 *    sends them, and a mapping would be one more way to write the same number.
 * 4. A value with a letter is an alphanumeric sender ID (`ACMEBANK`, `Банк`, `T-Mobile`;
 *    `To` is never one, it is the identity's number). It is compacted as numbers are (spaces,
 *    dashes, dots and parentheses removed: `My Bank` is `MyBank`, as it always was, so a
 *    sender keeps its conversation), then must be letters of any script (with their combining
 *    marks), ASCII digits and visible ASCII punctuation (`AT&T`), at most 64 characters (the
 *    webhook's field; the SMS standard says 11, but a provider's message is not refused for
 *    that). Its case is kept.
 */
import { normalizeNumber } from './events.js';

export type Parsed = { ok: true; value: string } | { ok: false; error: string };

const INVISIBLE = /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}]/u;
const LETTER = /\p{L}/u;
const NON_ASCII_DIGIT = /(?![0-9])\p{Nd}/u;
/** `+`, then a country code (none starts with 0) and the rest: 2 to 15 digits in all. */
const E164 = /^\+[1-9][0-9]{1,14}$/;
/** A short code (`From` only): 3 to 8 digits as the carrier sends them, with no `+` (there is none). */
const SHORT_CODE = /^[0-9]{3,8}$/;
/** Letters (each with its combining marks), ASCII digits and visible ASCII punctuation. */
const SENDER_ID = /^(?:\p{L}\p{M}*|[0-9]|[!-/:-@[-`{-~])+$/u;
const SENDER_ID_MAX = 64;

const INVISIBLE_ERROR = 'Must not contain control or invisible formatting characters (zero-width, bidirectional, soft hyphen...).';
const E164_RULE = 'a phone number in E.164 (+ and 2 to 15 digits, the first not 0)';
const SHORT_CODE_RULE = 'a short code (3 to 8 digits)';
const SENDER_RULE = `an alphanumeric sender ID (letters, digits and punctuation, at most ${SENDER_ID_MAX})`;

/** `From` (a number or a sender ID) or `To` (a number only), normalised, or why it is refused. */
export function parseAddress(raw: string, kind: 'from' | 'to'): Parsed {
  const expected = kind === 'from' ? `Must be ${E164_RULE}, ${SHORT_CODE_RULE} or ${SENDER_RULE}.` : `Must be ${E164_RULE}.`;
  if (INVISIBLE.test(raw)) return { ok: false, error: INVISIBLE_ERROR };
  const text = raw.normalize('NFKC');
  if (INVISIBLE.test(text)) return { ok: false, error: INVISIBLE_ERROR };
  if (!LETTER.test(text)) {
    if (NON_ASCII_DIGIT.test(text)) return { ok: false, error: `Digits must be ASCII 0-9. ${expected}` };
    // Twilio sends short codes as digits alone (`894546`); a `+` would make a number that
    // does not exist, and a reply through the provider would be refused.
    if (kind === 'from' && SHORT_CODE.test(text)) return { ok: true, value: text };
    const number = normalizeNumber(text);
    return E164.test(number) ? { ok: true, value: number } : { ok: false, error: expected };
  }
  if (kind === 'to') return { ok: false, error: expected };
  const id = normalizeNumber(text);
  if (!SENDER_ID.test(id) || [...id].length > SENDER_ID_MAX) return { ok: false, error: expected };
  return { ok: true, value: id };
}
