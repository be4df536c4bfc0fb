/**
 * The /device pages (RFC 8628 §3.3) put a hostile value in every slot they fill (element
 * text, attribute values, <title>) without it changing the markup: the same tags and
 * attributes as with a plain value, no control character, and text that may reorder the page
 * (a bidi override) isolated in <bdi>.
 */
import { approvePage, enterCodePage, resultPage } from '../../services/device/html.js';
import type { Safe } from '../../services/gateway/html.js';

const HOSTILE = `"'><script>alert(1)</script><b x='&amp;'>\u202E\u0007\u2069`;
const PLAIN = 'plain';

/** The page's tags with attribute values blanked and <bdi> wrappers dropped: its structure. */
function skeleton(page: Safe): string[] {
  return (page.value.match(/<[^>]*>/g) ?? []).filter((t) => !/^<\/?bdi>$/.test(t)).map((t) => t.replace(/="[^"]*"/g, '=""'));
}

/** Element text only: no tags' insides, no <title> (text without elements, not bidi-isolated). */
function elementText(page: Safe): string {
  return page.value.replace(/<title>[\s\S]*?<\/title>/, '').replace(/<(?!\/?bdi>)[^>]*>/g, '');
}

const pages: [string, (v: string) => Safe][] = [
  ['enter code (invalid, signed in)', (v) => enterCodePage({ value: v, invalid: true, notice: { kind: 'error', text: v }, signedInAs: v, csrf: v })],
  ['confirm a linked code', (v) => enterCodePage({ value: v, confirm: true, notice: { kind: 'error', text: v }, signedInAs: v, csrf: v })],
  ['approve', (v) => approvePage({ userCode: v, csrf: v, signedInAs: v, notice: { kind: 'success', text: v }, request: { clientId: v, requestedAt: '2026-01-01T00:00:00.000Z', expiresAt: '2026-01-01T00:10:00.000Z', now: Date.parse('2026-01-01T00:03:00.000Z') } })],
  ['result', (v) => resultPage({ title: v, notice: { kind: 'error', text: v }, userCode: v, again: true })],
];

describe('device pages escape every value they interpolate', () => {
  test.each(pages)('%s: a hostile value leaves the markup as a plain one does', (_, render) => {
    expect(skeleton(render(HOSTILE))).toEqual(skeleton(render(PLAIN)));
  });

  test.each(pages)('%s: no control character, no stray PDI, reaches the page', (_, render) => {
    const page = render(HOSTILE).value;
    expect(page).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    expect(page).not.toContain('\u2069'); // closes no isolate the value opened
    expect(page).toContain('&quot;&#39;&gt;&lt;script&gt;');
  });

  test.each(pages)('%s: the <title> holds no bidi control (it would reorder the tab title around it)', (_, render) => {
    const title = /<title>([\s\S]*?)<\/title>/.exec(render(HOSTILE).value)![1]!;
    expect(title).not.toMatch(/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/);
  });

  test.each(pages)('%s: a bidi override in element text is inside <bdi>', (_, render) => {
    const text = elementText(render(HOSTILE));
    let open = 0;
    for (const part of text.split(/(<\/?bdi>)/)) {
      if (part === '<bdi>') open++;
      else if (part === '</bdi>') open--;
      else if (part.includes('\u202E')) expect(open).toBeGreaterThan(0);
    }
    expect(text).toContain('\u202E');
  });
});
