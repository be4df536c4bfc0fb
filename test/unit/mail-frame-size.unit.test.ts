/**
 * The dashboard's guess of a mail frame's height (services/dashboard/mail.ts frameSize): from
 * the mail's visible text and blocks, and sensible on HTML anyone can send (one pass, no
 * regular expression over tags: those went quadratic on unclosed `<`).
 */
import { frameSize } from '../../services/dashboard/mail.js';

const paragraphs = (n: number) => Array.from({ length: n }, (_, i) => `<p>Paragraph ${i} of the mail.</p>`).join('\n');

test('one line is small; a few paragraphs medium; many large; a long mail extra large', () => {
  expect(frameSize('<p>Hello there</p>')).toBe('mail-h-s');
  expect(frameSize(paragraphs(6))).toBe('mail-h-m');
  expect(frameSize(paragraphs(10))).toBe('mail-h-l');
  expect(frameSize(paragraphs(40))).toBe('mail-h-xl');
  expect(frameSize(`<div>${'word '.repeat(2_000)}</div>`)).toBe('mail-h-xl'); // text alone, no blocks
});

test('what is never shown counts for nothing: style, script, head, title, tags and white space', () => {
  const hidden = `<html><head><title>${'t'.repeat(5_000)}</title><style>p { color: red }${' x'.repeat(5_000)}</style></head>
<body><script>${'s'.repeat(5_000)}</script><span   class="a">Hi</span>${' '.repeat(5_000)}<b>there</b></body></html>`;
  expect(frameSize(hidden)).toBe('mail-h-s');
  expect(frameSize('<header>Not hidden: a header is shown</header>')).toBe('mail-h-s');
  expect(frameSize(`<header>${'shown '.repeat(300)}</header>`)).not.toBe('mail-h-s'); // <header> is not <head>
});

test('hostile HTML gets an answer, not a stall: unclosed tags, unclosed hidden elements, no tags at all', () => {
  expect(frameSize('<'.repeat(20_000))).toBe('mail-h-s'); // nothing after an unclosed tag is shown
  expect(frameSize('<style>'.repeat(5_000))).toBe('mail-h-s');
  expect(frameSize('<head'.repeat(5_000) + '>')).toBe('mail-h-s');
  expect(frameSize('<p>'.repeat(10_000))).toBe('mail-h-xl');
  expect(frameSize('x'.repeat(1_000_000))).toBe('mail-h-xl'); // read up to 20,000 characters
  expect(frameSize('')).toBe('mail-h-s');
});
