/**
 * The first `length` UTF-16 units of `text`, one less when the cut would split a surrogate
 * pair: half an emoji is no text (strict UTF-8 encoders refuse it) and the API refuses it
 * on input, so it must not answer one either.
 */
export function startOf(text: string, length: number): string {
  if (text.length <= length) return text;
  const last = text.charCodeAt(length - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? length - 1 : length);
}

/**
 * Characters that change how the text around them shows without showing themselves: C0 and
 * C1 controls, bidi marks, embeddings, overrides and isolates, zero-width characters, line and
 * paragraph separators, the BOM. For text from outside that lands where no isolation is
 * possible (a key label read in a terminal, a page's <title>).
 */
const INVISIBLE_CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]/g;

export const withoutControls = (text: string): string => text.replace(INVISIBLE_CONTROLS, '');
