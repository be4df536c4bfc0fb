/**
 * Server-rendered HTML with escaping by default: `html\`...\`` escapes every interpolated
 * value unless it is already Safe (another html fragment); arrays are concatenated.
 */
export class Safe {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (s: string): string => s.replace(/[&<>"']/g, (c) => ESCAPES[c]);

type Value = Safe | string | number | boolean | null | undefined | Value[];

function render(v: Value): string {
  if (v === null || v === undefined || v === false) return '';
  if (v instanceof Safe) return v.value;
  if (Array.isArray(v)) return v.map(render).join('');
  return escapeHtml(String(v));
}

export function html(strings: TemplateStringsArray, ...values: Value[]): Safe {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
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
}

export function layout(title: string, body: Safe, nav: Nav | null, flash?: { kind: 'ok' | 'error'; text: string } | null, opts: LayoutOptions = {}): string {
  const page = html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title} · Agent Identity Service</title>
<link rel="stylesheet" href="/static/dashboard.css">
${opts.script === false ? '' : html`<script src="/static/dashboard.js" defer></script>`}
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
  <a class="brand" href="/">Agent Identity Service</a>
  ${nav
    ? html`<nav aria-label="Main">
    <a href="/">Identities</a>
    <a href="/keys">API keys</a>
    <a href="/device">Device approvals</a>
    <a href="/account">Account</a>
    <form method="post" action="/logout" class="inline">
      <input type="hidden" name="csrf" value="${nav.csrf}">
      <button type="submit" class="link">Sign out (${nav.username})</button>
    </form>
  </nav>`
    : html`<nav aria-label="Main"><a href="/login">Sign in</a><a href="/register">Register</a></nav>`}
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

export function fmtDate(iso: unknown): string {
  if (typeof iso !== 'string' || !iso) return '—';
  return iso.replace('T', ' ').replace(/\.\d+Z$/, ' UTC').replace(/Z$/, ' UTC');
}
