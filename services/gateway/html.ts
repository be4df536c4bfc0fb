/**
 * Server-rendered HTML with escaping by default, for every page of the service (the
 * dashboard, the /device page): `html\`...\`` escapes every interpolated value by where it
 * lands unless it is already Safe (another html fragment); arrays are concatenated. User
 * text is also made harmless to the page around it (see cleanText, render).
 */
import { withoutControls } from '../kernel/text.js';

export class Safe {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** C0 controls but tab and newline (CR LF counts as a newline), DEL, C1 controls. */
const CONTROLS = /\r\n|[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;
/** Isolate initiators (LRI, RLI, FSI), PDI, and what may end a bidi paragraph before it. */
const ISOLATES = /[\u2066-\u2069\n\u2029]/g;

/**
 * Text as it may appear in a page: control characters become U+FFFD (CR LF a newline), and
 * a PDI that closes no isolate the text itself opened becomes U+FFFD too: it would close the
 * isolation (<bdi>, see html) around the text, letting an override after it reorder the page.
 */
export function cleanText(s: string): string {
  const out = s.replace(CONTROLS, (c) => (c === '\r\n' ? '\n' : '\uFFFD'));
  if (!out.includes('\u2069')) return out;
  let open = 0;
  return out.replace(ISOLATES, (c) => {
    if (c === '\u2069') return open > 0 ? (open--, c) : '\uFFFD';
    if (c === '\n' || c === '\u2029') open = 0; // may start a new bidi paragraph: nothing open in it
    else open++;
    return c;
  });
}

export const escapeHtml = (s: string): string => cleanText(s).replace(/[&<>"']/g, (c) => ESCAPES[c]);

type Value = Safe | string | number | boolean | null | undefined | Value[];

/** Where a value lands: element content, an attribute (or inside a tag), or <title>/<textarea> text (no elements). */
type Slot = 'text' | 'attribute' | 'rcdata';

/** The slot after a template's literal text so far (the literals never hold a '<' or '>' inside an attribute value). */
function slotAfter(literal: string): Slot {
  const lt = literal.lastIndexOf('<');
  const gt = literal.lastIndexOf('>');
  if (lt > gt) return 'attribute';
  if (gt < 0) return /=\s*["'][^"']*$/.test(literal) ? 'attribute' : 'text'; // a fragment of a tag's attributes
  return /^<(title|textarea)[\s>]/i.test(literal.slice(lt)) ? 'rcdata' : 'text';
}

/** Anything that is not plain ASCII may carry right-to-left text or bidi controls. */
const NOT_ASCII = /[^\t\n\x20-\x7e]/;

function render(v: Value, slot: Slot): string {
  if (v === null || v === undefined || v === false) return '';
  if (v instanceof Safe) return v.value;
  if (Array.isArray(v)) return v.map((x) => render(x, slot)).join('');
  const text = escapeHtml(String(v));
  // Element content is bidi-isolated: an override (U+202E...) or right-to-left text in a
  // subject or a name cannot reorder the page text around it (closed at </bdi>). A <title>
  // holds no elements: its bidi and invisible controls are dropped, so an override cannot
  // reverse the site's name after it in the tab and the history.
  if (slot === 'rcdata') return withoutControls(text);
  return slot === 'text' && NOT_ASCII.test(text) ? `<bdi>${text}</bdi>` : text;
}

/**
 * `html\`...\``: every interpolated value is escaped (control characters neutralised, see
 * cleanText) unless it is Safe; in element content, text that is not plain ASCII is wrapped
 * in <bdi>, so user text is bidi-isolated from the page around it.
 */
export function html(strings: TemplateStringsArray, ...values: Value[]): Safe {
  let out = strings[0];
  let literal = strings[0];
  for (let i = 0; i < values.length; i++) {
    out += render(values[i], slotAfter(literal)) + strings[i + 1];
    literal += strings[i + 1];
  }
  return new Safe(out);
}
