/**
 * The dashboard's page shell (layout, menu, form errors, tables) and CSPs, built with the
 * shared `html` template (services/gateway/html.ts).
 */
import { html, Safe } from '../gateway/html.js';

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
export const MAIL_FRAME_CSP = "sandbox allow-popups allow-popups-to-escape-sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

export interface Nav {
  username: string;
  csrf: string;
}

export interface LayoutOptions {
  /** Include /static/dashboard.js: only a page with a Copy button needs it (a new key on /keys). Default false. */
  script?: boolean;
  /** The path of the page: its link in the menu is marked aria-current="page". */
  path?: string;
  /** False: the body brings its own h1 (the /device page's, see sign-in.ts `frame`). Default true. */
  heading?: boolean;
  /** The body shows an error of its own (not the flash): the title says so too. */
  error?: boolean;
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
<title>${documentTitle(title, flash?.kind === 'error' || opts.error === true)} · Agent Identity Service</title>
<link rel="stylesheet" href="/static/dashboard.css">
${opts.script === true ? html`<script src="/static/dashboard.js" defer></script>` : ''}
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
${opts.heading === false ? '' : html`<h1>${title}</h1>`}
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
