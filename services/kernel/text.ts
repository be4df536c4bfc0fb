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
