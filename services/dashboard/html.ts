/**
 * Server-rendered HTML with escaping by default: `html\`...\`` escapes every interpolated
 * value unless it is already Safe (another html fragment); arrays are concatenated. User
 * text is also made harmless to the page around it (see cleanText, render).
 */
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
  // subject or a name cannot reorder the page text around it (closed at </bdi>).
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

/**
 * Page CSP: scripts and styles from our own origin only, no inline script, never framed.
 * Forms post to this site only, plus the external identity provider's authorization origin
 * on sign-in pages (browsers apply form-action to the redirect that follows the POST).
 */
export function pageCsp(extraFormTargets: string[] = []): string {
  return [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "frame-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    `form-action ${["'self'", ...extraFormTargets].join(' ')}`,
    "frame-ancestors 'none'",
  ].join('; ');
}
export const PAGE_CSP = pageCsp();

/**
 * CSP of a mail's HTML document (framed by the thread page): a sandbox (opaque origin, no
 * script, even when opened on its own), nothing loads (remote images neither: no tracking),
 * the mail's own inline styles apply; only this site may frame it.
 */
export const MAIL_FRAME_CSP = "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

export interface Nav {
  username: string;
  csrf: string;
}

export interface LayoutOptions {
  /** Include /static/dashboard.js (only pages with a copy button need it). Default true. */
  script?: boolean;
  /** The path of the page: its link in the menu is marked aria-current="page". */
  path?: string;
}

/** A link of the main menu, marked as the current page when it is the one shown. */
function navLink(href: string, text: string, path: string | undefined): Safe {
  return html`<a href="${href}"${path === href ? new Safe(' aria-current="page"') : ''}>${text}</a>`;
}

/**
 * The document title: a page that shows an error (an error flash: a refused form, with its
 * field errors if any) says so first, as the first thing a screen reader announces.
 */
export function documentTitle(title: string, error: boolean): string {
  return `${error ? 'Error: ' : ''}${title}`;
}

export function layout(title: string, body: Safe, nav: Nav | null, flash?: { kind: 'ok' | 'error'; text: string | Safe } | null, opts: LayoutOptions = {}): string {
  const page = html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${documentTitle(title, flash?.kind === 'error')} · Agent Identity Service</title>
<link rel="stylesheet" href="/static/dashboard.css">
${opts.script === false ? '' : html`<script src="/static/dashboard.js" defer></script>`}
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
  <a class="brand" href="/">Agent Identity Service</a>
  ${nav
    ? html`<nav aria-label="Main">
    ${navLink('/', 'Identities', opts.path)}
    ${navLink('/keys', 'API keys', opts.path)}
    ${navLink('/device', 'Device approvals', opts.path)}
    ${navLink('/account', 'Account', opts.path)}
    <form method="post" action="/logout" class="inline">
      <input type="hidden" name="csrf" value="${nav.csrf}">
      <button type="submit" class="link">Sign out (${nav.username})</button>
    </form>
  </nav>`
    : html`<nav aria-label="Main">${navLink('/login', 'Sign in', opts.path)}${navLink('/register', 'Register', opts.path)}</nav>`}
</header>
<main id="main">
<h1>${title}</h1>
${flash ? html`<p class="flash ${flash.kind}" role="${flash.kind === 'error' ? 'alert' : 'status'}">${flash.text}</p>` : ''}
${body}
</main>
</body>
</html>`;
  return page.value;
}

export function fieldErrors(errors: Record<string, string[]> | null | undefined, field: string): Safe {
  const list = errors?.[field];
  return list?.length ? html`<span class="field-error" id="${field}-error">${list.join(' ')}</span>` : html``;
}

/** ` aria-describedby="<field>-error"` when that field has an error to point at, else nothing. */
export function describedBy(errors: Record<string, string[]> | null | undefined, field: string): Safe {
  return errors?.[field]?.length ? html` aria-describedby="${field}-error" aria-invalid="true"` : html``;
}

/**
 * A data table in a scroll region of its own: on a narrow screen the table scrolls sideways
 * inside it (focusable, so the keyboard scrolls it too), never the whole page. The region is
 * named after the table's heading, "<heading> table": the section around it is already the
 * region named by the heading, and two landmarks should not share a role and a name.
 */
export function tableRegion(heading: string, table: Safe): Safe {
  return html`<div class="table-wrap" role="region" aria-label="${heading} table" tabindex="0">${table}</div>`;
}

export function fmtDate(iso: unknown): string {
  if (typeof iso !== 'string' || !iso) return '—';
  return iso.replace('T', ' ').replace(/\.\d+Z$/, ' UTC').replace(/Z$/, ' UTC');
}
