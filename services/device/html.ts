/**
 * Server-rendered HTML of the /device page (no build step, no script: the page works with
 * a strict Content-Security-Policy). Built with the shared `html` template
 * (services/gateway/html.ts), which escapes every interpolated value.
 */
import { html, type Safe } from '../gateway/html.js';

export interface Notice {
  kind: 'error' | 'success';
  text: string;
}

/** The id of a page's error alert (at most one), for a field it is about to point at. */
const ALERT_ID = 'alert';

function notice(n: Notice | undefined): Safe {
  if (!n) return html``;
  return n.kind === 'error'
    ? html`<div class="alert" id="${ALERT_ID}" role="alert">${n.text}</div>`
    : html`<div class="success" role="status">${n.text}</div>`;
}

/** `shown`: the page's notice; an error one prefixes the document title with "Error: " (announced first). */
export function layout(title: string, body: Safe, shown?: Notice): Safe {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>${shown?.kind === 'error' ? 'Error: ' : ''}${title} · Agent Identity</title>
<link rel="stylesheet" href="/device/device.css">
</head>
<body>
<main>
${body}
</main>
</body>
</html>`;
}

/**
 * Puts a page (title, body with its h1 and notice) in a document: this file's `layout`, or
 * for a signed-in person the dashboard's shell with its menu (page.ts, dashboard/sign-in.ts `frame`).
 */
export type Frame = (title: string, body: Safe, shown?: Notice) => Safe;

/**
 * A user code shown to compare with the device's (RFC 8628 §3.3.1): big on screen, and read
 * out letter by letter, group by group ("Code: W R N R, L K P P"), not as a word.
 */
export function codeShown(userCode: string): Safe {
  const spelled = userCode.split('-').map((group) => group.split('').join(' ')).join(', ');
  return html`<p class="code"><span aria-hidden="true">${userCode}</span><span class="sr-only">Code: ${spelled}</span></p>`;
}

const hidden = (name: string, value: string) => html`<input type="hidden" name="${name}" value="${value}">`;

/**
 * RFC 8628 §3.3: the human enters the code shown by the device. `confirm`: the code came
 * with a link from elsewhere; the signed-in person confirms it with a CSRF-checked POST
 * before the page looks it up.
 */
export function enterCodePage(opts: { notice?: Notice; value?: string; invalid?: boolean; confirm?: boolean; signedInAs?: string | null; csrf: string }, frame: Frame = layout): Safe {
  // An invalid code is marked as such and described by the alert that says why.
  const invalid = opts.invalid && opts.notice?.kind === 'error';
  return frame(
    'Connect a device',
    html`<h1>Connect a device</h1>
${notice(opts.notice)}
<p>${opts.confirm ? 'Check that this is the code shown by the agent or device that asked to sign in, then continue.' : 'Enter the code shown by the agent or device that asked to sign in.'}</p>
<form method="${opts.confirm ? 'post' : 'get'}" action="${opts.confirm ? '/device/lookup' : '/device'}">
  ${opts.confirm ? hidden('csrf', opts.csrf) : ''}
  <label for="user_code">Code</label>
  <input id="user_code" class="code-input" type="text" name="user_code" value="${opts.value ?? ''}" placeholder="XXXX-XXXX" autocomplete="off" autocapitalize="characters" spellcheck="false" maxlength="20" required autofocus ${invalid ? html`aria-invalid="true" aria-describedby="${ALERT_ID} code-help"` : html`aria-describedby="code-help"`}>
  <p id="code-help" class="muted">8 letters; the dash is optional.</p>
  <button type="submit">Continue</button>
</form>
${signedInFooter(opts.signedInAs ?? null, '', opts.csrf)}`,
    opts.notice,
  );
}

/** Signed in: approve or deny (RFC 8628 §3.3), with the code shown to compare. */
export function approvePage(opts: { userCode: string; csrf: string; signedInAs: string; notice?: Notice; request?: DeviceRequest }, frame: Frame = layout): Safe {
  return frame(
    'Approve device',
    html`<h1>Approve this device?</h1>
${notice(opts.notice)}
<p>An agent or device is asking for access to your account. Approve only if it shows this code:</p>
${codeShown(opts.userCode)}
${opts.request ? requestFacts(opts.request) : ''}
<p class="muted">Approving gives it a new management key for your account (you can revoke it any time) and signs it in as you.</p>
<div class="actions">
  <form method="post" action="/device/approve">
    ${hidden('user_code', opts.userCode)}${hidden('csrf', opts.csrf)}
    <button type="submit" id="approve">Approve</button>
  </form>
  <form method="post" action="/device/deny">
    ${hidden('user_code', opts.userCode)}${hidden('csrf', opts.csrf)}
    <button type="submit" class="danger" id="deny">Deny</button>
  </form>
</div>
${signedInFooter(opts.signedInAs, opts.userCode, opts.csrf)}`,
    opts.notice,
  );
}

/** What the page knows of a pending request: when it came, when its code ends, what the device calls itself. */
export interface DeviceRequest {
  clientId: string | null;
  requestedAt: string;
  expiresAt: string;
  now: number;
}

/** "3 minutes" (at least 1): the page has no script, so times are said relative to the page's rendering. */
function minutes(ms: number): string {
  const n = Math.max(1, Math.round(ms / 60_000));
  return `${n} minute${n === 1 ? '' : 's'}`;
}

/**
 * RFC 8628 §5.4 (remote phishing): the person should know what they approve. The client_id
 * is the device's own unchecked word (public clients), so the page says so; a request made
 * long ago by a device not in front of them is a hint too.
 */
function requestFacts(r: DeviceRequest): Safe {
  const asked = Date.parse(r.requestedAt);
  const ends = Date.parse(r.expiresAt);
  return html`<dl class="facts">
${r.clientId ? html`<dt>The device calls itself</dt><dd><bdi>${r.clientId}</bdi> <span class="muted">(its own word, not checked)</span></dd>` : ''}
${Number.isFinite(asked) ? html`<dt>Asked</dt><dd>${r.now - asked < 60_000 ? 'less than a minute ago' : `${minutes(r.now - asked)} ago`}</dd>` : ''}
${Number.isFinite(ends) ? html`<dt>The code ends</dt><dd>in ${minutes(ends - r.now)}</dd>` : ''}
</dl>`;
}

/** A decision's outcome (only a signed-in person decides): the way on, another code or the dashboard. */
export function resultPage(opts: { title: string; notice: Notice; userCode?: string; again?: boolean }, frame: Frame = layout): Safe {
  return frame(
    opts.title,
    html`<h1>${opts.title}</h1>
${notice(opts.notice)}
${opts.userCode ? codeShown(opts.userCode) : ''}
${opts.again ? html`<p><a href="/device">Enter another code</a></p>` : ''}
<p><a href="/">Back to the dashboard</a></p>`,
    opts.notice,
  );
}

function signedInFooter(who: string | null, userCode: string, csrf: string): Safe {
  if (!who) return html``;
  return html`<footer>
  <form method="post" action="/device/logout">
    Signed in as <strong>${who}</strong>.
    ${hidden('user_code', userCode)}${hidden('csrf', csrf)}
    <button type="submit" class="link">Use another account</button>
  </form>
</footer>`;
}
