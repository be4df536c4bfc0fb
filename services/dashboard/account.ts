/**
 * The person's account: GET /account (details, profile, password change, resend
 * verification, signed-in sessions), the emailed links (verify email, reset password) and
 * /forgot-password.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import { validator } from '../gateway/validate.js';
import { normalUsername } from '../accounts/service.js';
import type { SessionDoc } from '../../projections/sessions/index.js';
import { html } from '../gateway/html.js';
import { fieldErrors, describedBy, fmtDate, tableRegion } from './html.js';
import { apiAll, fieldsOf, str, uuidParam, type DashboardSession, type Errors, type Flash, type PageKit } from './plumbing.js';
import { resetCurrentSession, seeOther } from '../gateway/web-session.js';

const v = {
  passwordChange: validator<{ new_password1: string; new_password2: string }>('accounts.json#PasswordChange'),
  resetConfirm: validator<{ new_password1: string; new_password2: string; uid: string; token: string }>('accounts.json#PasswordResetConfirm'),
  emailOnly: validator<{ email: string }>('accounts.json#EmailOnly'),
  profile: validator<{ username: string; first_name: string; last_name: string }>('accounts.json#UserPut'),
};

/** Live sessions listed on the account page (the latest signed in or refreshed first). */
const SESSIONS_SHOWN = 50;

/**
 * What a session is, in words, from how it began (SessionStarted.via) and its kind; an agent
 * approved at /device is named by the label of the key it got (its client and the minute).
 */
function sessionKind(doc: SessionDoc, keyLabels: Map<string, string>): string {
  if (doc.kind === 'cookie') return /oidc/.test(doc.via) ? 'Browser, signed in with the external provider' : 'Browser';
  switch (doc.via) {
    case 'device': {
      const label = doc.keyId ? keyLabels.get(doc.keyId) : undefined;
      return label ? `Agent or device, approved at /device (key “${label}”)` : 'Agent or device, approved at /device';
    }
    case 'register':
      return 'API: signed up';
    case 'bind-identity':
      return 'API: token bound to an identity';
    default:
      return 'API: signed in with the password';
  }
}

export function accountRoutes(r: Router, kit: PageKit): void {
  const { accounts, send, hidden, session, requireSession, form, loginPage, signIn, web } = kit;

  /**
   * The account's live sessions with a sign-out for each, and "sign out everywhere else"
   * (a stolen cookie or refresh token is ended from here; the dashboard's own sign-out
   * ends only this browser's session).
   */
  const sessionsSection = (ctx: Context, s: DashboardSession, live: { items: SessionDoc[]; more: boolean }, keyLabels: Map<string, string>) => html`<section aria-labelledby="sessions-h"><h2 id="sessions-h">Signed-in sessions</h2>
<p>Browsers and agents signed in as you. Signing one out ends its refresh token at once; an access token it already holds works until it expires (within the hour). API keys are not sessions: revoke them under <a href="/keys">API keys</a>.</p>
${live.more ? html`<p class="note">The ${live.items.length} sessions signed in or refreshed last are shown.</p>` : ''}
${tableRegion('Signed-in sessions', html`<table><thead><tr><th scope="col">Session</th><th scope="col">Started</th><th scope="col">Last refreshed</th><th scope="col">Ends</th><th scope="col" class="actions"><span class="sr-only">Actions</span></th></tr></thead><tbody>
${live.items.map((doc) => {
  const mine = doc.id === s.sessionId;
  return html`<tr${mine ? html` class="current"` : ''}><td>${sessionKind(doc, keyLabels)}${mine ? html` <strong>(this browser)</strong>` : ''}</td><td>${fmtDate(doc.startedAt)}</td><td>${fmtDate(doc.refreshedAt)}</td><td>${fmtDate(doc.expiresAt)}</td>
<td class="actions"><form method="post" action="/account/sessions/${doc.id}/end" class="inline">${hidden(ctx, s)}<button type="submit" class="danger" aria-label="Sign out ${mine ? 'this browser' : `${sessionKind(doc, keyLabels)}, started ${fmtDate(doc.startedAt)}`}">Sign out</button></form></td></tr>`;
})}
</tbody></table>`)}
<form method="post" action="/account/sessions/end-others" class="card">${hidden(ctx, s)}
<p>Lost a device, or see a session you do not know? Sign out everywhere else, then change your password.</p>
<button type="submit" class="danger">Sign out everywhere else</button></form></section>`;

  /** `errors` are those of the form `of` (the profile or the password form), shown in that form only. */
  const accountPage = async (ctx: Context, s: DashboardSession, flash: Flash = null, errors: Errors | null = null, values: Record<string, string> | null = null, of: 'profile' | 'password' = 'profile') => {
    const u = ctx.state.dashboardUser;
    const page = await accounts.listSessions(s.userPk, { limit: SESSIONS_SHOWN });
    const live = { items: page.items, more: page.next !== null };
    // The keys' labels name agents approved at /device: asked for only when one is listed.
    const keys = page.items.some((d) => d.keyId) ? await apiAll(ctx, s, '/api/auth/keys/management/?limit=200') : null;
    const keyLabels = new Map(Array.isArray(keys?.body) ? (keys.body as any[]).map((k) => [str(k.uuid), str(k.label)] as [string, string]) : []);
    // This browser is always listed, also behind 50 sessions more recent than its sign-in.
    if (!live.items.some((d) => d.id === s.sessionId)) {
      const mine = await accounts.liveSession(s.sessionId);
      if (mine) live.items.push(mine);
    }
    const profileErrors = of === 'profile' ? errors : null;
    const pwErrors = of === 'password' ? errors : null;
    const val = (k: string, fallback: unknown) => (values ? values[k] ?? '' : str(fallback));
    send(
      ctx,
      'Account',
      html`<dl class="kv"><dt>Username</dt><dd>${u.username}</dd><dt>Name</dt><dd>${[u.firstName, u.lastName].filter(Boolean).join(' ') || '—'}</dd><dt>Email</dt><dd>${u.email} ${u.emailVerified ? '(verified)' : '(not verified)'}</dd><dt>Account number</dt><dd>${String(u.pk)}</dd></dl>
${u.emailVerified
? ''
: html`<section aria-labelledby="verify-h"><h2 id="verify-h">Verify your email address</h2>
<form method="post" action="/account/resend-verification" class="card">${hidden(ctx, s)}
<p>We mailed a verification link to <strong>${u.email}</strong>. Not received?</p>
<button type="submit">Resend verification email</button></form></section>`}
<section aria-labelledby="profile-h"><h2 id="profile-h">Profile</h2>
<form method="post" action="/account/profile" class="card" novalidate>${hidden(ctx, s)}
${fieldErrors(profileErrors, 'non_field_errors')}
<label for="username">Username</label><input id="username" name="username" autocomplete="username" required maxlength="150" value="${val('username', u.username)}"${describedBy(profileErrors, 'username')}>
${fieldErrors(profileErrors, 'username')}
<label for="first_name">First name</label><input id="first_name" name="first_name" autocomplete="given-name" maxlength="150" value="${val('first_name', u.firstName)}"${describedBy(profileErrors, 'first_name')}>
${fieldErrors(profileErrors, 'first_name')}
<label for="last_name">Last name</label><input id="last_name" name="last_name" autocomplete="family-name" maxlength="150" value="${val('last_name', u.lastName)}"${describedBy(profileErrors, 'last_name')}>
${fieldErrors(profileErrors, 'last_name')}
<button type="submit">Save profile</button></form></section>
<section aria-labelledby="pw-h"><h2 id="pw-h">Change password</h2>
<form method="post" action="/account/password" class="card">${hidden(ctx, s)}
${fieldErrors(pwErrors, 'non_field_errors')}
<label for="new_password1">New password</label><input id="new_password1" name="new_password1" type="password" autocomplete="new-password" required${describedBy(pwErrors, 'new_password1')}>
${fieldErrors(pwErrors, 'new_password1')}
<label for="new_password2">New password again</label><input id="new_password2" name="new_password2" type="password" autocomplete="new-password" required${describedBy(pwErrors, 'new_password2')}>
${fieldErrors(pwErrors, 'new_password2')}
<p class="note">Changing the password signs out every other session and invalidates refresh tokens.</p>
<button type="submit">Change password</button></form></section>
${sessionsSection(ctx, s, live, keyLabels)}`,
      s,
      flash,
      errors ? 400 : 200,
      '/account',
    );
  };
  const refused: Flash = { kind: 'error', text: 'Please correct the errors below.' };
  r.get('/account', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    const q = ctx.query;
    const done: Record<string, string> = {
      changed: 'Your password was changed.',
      saved: 'Profile saved.',
      sent: 'A new verification link is on its way.',
      ended: q.ended === 'others' ? 'Every other session was signed out.' : q.ended === 'none' ? 'Nothing to sign out: that session had already ended.' : 'The session was signed out.',
    };
    const which = Object.keys(done).find((k) => q[k]);
    await accountPage(ctx, s, which ? { kind: 'ok', text: done[which]! } : null);
  });
  r.post('/account/profile', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    const f = await form(ctx, s, '/account');
    if (!f) return;
    const values = { username: (f.username ?? '').trim(), first_name: (f.first_name ?? '').trim(), last_name: (f.last_name ?? '').trim() };
    try {
      const b = v.profile({ ...values, username: normalUsername(values.username) });
      await accounts.updateProfile(s.userPk, { username: b.username, firstName: b.first_name, lastName: b.last_name });
    } catch (err) {
      return await accountPage(ctx, s, refused, fieldsOf(err), values);
    }
    seeOther(ctx, '/account?saved=1');
  });
  r.post('/account/resend-verification', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    const f = await form(ctx, s, '/account');
    if (!f) return;
    // Same rules as POST /api/auth/social/resend-email/ (no-op once verified; throttled per account).
    await accounts.resendVerification(str(ctx.state.dashboardUser.email));
    seeOther(ctx, '/account?sent=1');
  });
  r.post('/account/password', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    const f = await form(ctx, s, '/account');
    if (!f) return;
    try {
      const b = v.passwordChange({ new_password1: f.new_password1 ?? '', new_password2: f.new_password2 ?? '' });
      if (b.new_password1 !== b.new_password2) return await accountPage(ctx, s, refused, { new_password2: ["The two password fields didn't match."] }, null, 'password');
      await accounts.setPassword(s.userPk, b.new_password1, 'change');
    } catch (err) {
      return await accountPage(ctx, s, refused, fieldsOf(err), null, 'password');
    }
    // The change revoked every session, this one included: start a fresh one.
    const user = await accounts.getUser(s.userPk);
    await signIn(ctx, user);
    resetCurrentSession(ctx);
    seeOther(ctx, '/account?changed=1');
  });
  r.post('/account/sessions/end-others', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    if (!(await form(ctx, s, '/account'))) return;
    // One step for all of them (the account's session generation), this browser's too:
    // then a fresh session for this browser, as after a password change.
    await accounts.revokeAllSessions(s.userPk, 'dashboard_sign_out_everywhere_else');
    await signIn(ctx, await accounts.getUser(s.userPk));
    resetCurrentSession(ctx);
    seeOther(ctx, '/account?ended=others');
  });
  r.post('/account/sessions/:id/end', async (ctx) => {
    const s = await requireSession(ctx);
    if (!s) return;
    if (!(await form(ctx, s, '/account'))) return;
    // Another account's session is as unknown here as one already over, and so is an id that is none.
    const id = uuidParam(ctx);
    const mine = id !== null && (await accounts.endSession(s.userPk, id, 'dashboard_signed_out'));
    if (id === s.sessionId) {
      await web.endSession(ctx, null, 'dashboard_signed_out');
      return seeOther(ctx, '/login');
    }
    seeOther(ctx, mine ? '/account?ended=one' : '/account?ended=none');
  });

  /** `email`: the address a refused form sent, shown again. */
  const forgotPage = (ctx: Context, flash: Flash = null, status = 200, email = '') =>
    send(
      ctx,
      'Reset your password',
      html`<form method="post" action="/forgot-password" class="card">${hidden(ctx, null)}
<label for="email">Email of your account</label><input id="email" name="email" type="email" autocomplete="email" required value="${email}">
<button type="submit">Send a reset link</button></form>`,
      null,
      flash,
      status,
    );
  /**
   * The address of an anonymous form (forgot password, a new verification link) handed to
   * `act`: null when done, else why not, in words (the address was not one).
   */
  async function forAddress(f: Record<string, string | undefined>, act: (email: string) => Promise<unknown>): Promise<string | null> {
    try {
      await act(v.emailOnly({ email: (f.email ?? '').trim() }).email);
      return null;
    } catch (err) {
      return Object.values(fieldsOf(err)).flat().join(' ');
    }
  }
  r.get('/forgot-password', async (ctx) => {
    // Where the form lands (post/redirect/get): the same answer whether or not the address is known (no account enumeration).
    if (ctx.query.sent) return send(ctx, 'Reset your password', html`<p>Open the link in the mail to choose a new password. <a href="/login">Sign in</a></p>`, null, { kind: 'ok', text: 'If an account uses this address, a reset link is on its way.' });
    forgotPage(ctx);
  });
  r.post('/forgot-password', async (ctx) => {
    const f = await form(ctx, null, '/forgot-password');
    if (!f) return;
    const refused = await forAddress(f, (email) => accounts.requestPasswordReset(email));
    if (refused) return forgotPage(ctx, { kind: 'error', text: refused }, 400, (f.email ?? '').trim());
    // A reload of the answer posts nothing: no second mail.
    seeOther(ctx, '/forgot-password?sent=1');
  });

  /** A reset link that can never work (no token, wrong or expired): say so, and where to get a new one. */
  const deadResetLink = (ctx: Context) =>
    send(
      ctx,
      'This reset link cannot be used',
      html`<p>Reset links work once, for a limited time. <a href="/forgot-password">Ask for a new reset link</a>.</p>`,
      null,
      { kind: 'error', text: 'This reset link is invalid or has expired.' },
      400,
    );
  const resetPage = (ctx: Context, uid: string, tok: string, errors: Errors | null = null) => {
    if (!uid || !tok || errors?.uid || errors?.token) return deadResetLink(ctx);
    send(
      ctx,
      'Choose a new password',
      html`<form method="post" action="/reset-password" class="card">${hidden(ctx, null)}
<input type="hidden" name="uid" value="${uid}"><input type="hidden" name="token" value="${tok}">
${fieldErrors(errors, 'non_field_errors')}
<label for="new_password1">New password</label><input id="new_password1" name="new_password1" type="password" autocomplete="new-password" required${describedBy(errors, 'new_password1')}>
${fieldErrors(errors, 'new_password1')}
<label for="new_password2">New password again</label><input id="new_password2" name="new_password2" type="password" autocomplete="new-password" required${describedBy(errors, 'new_password2')}>
${fieldErrors(errors, 'new_password2')}
<button type="submit">Set password</button></form>`,
      null,
      errors ? { kind: 'error', text: 'Please correct the errors below.' } : null,
      errors ? 400 : 200,
    );
  };
  r.get('/reset-password', async (ctx) => {
    const [uid, tok] = [str(ctx.query.uid), str(ctx.query.token)];
    // A spent or expired link says so before asking for a new password, not after.
    const alive = await accounts.checkPasswordReset(uid, tok).then(() => true, (err) => (fieldsOf(err), false));
    if (!alive) return deadResetLink(ctx);
    resetPage(ctx, uid, tok);
  });
  r.post('/reset-password', async (ctx) => {
    const f = await form(ctx, null, (sent) => `/reset-password?${new URLSearchParams({ uid: sent.uid ?? '', token: sent.token ?? '' })}`);
    if (!f) return;
    try {
      const b = v.resetConfirm({ uid: f.uid ?? '', token: f.token ?? '', new_password1: f.new_password1 ?? '', new_password2: f.new_password2 ?? '' });
      if (b.new_password1 !== b.new_password2) return resetPage(ctx, b.uid, b.token, { new_password2: ["The two password fields didn't match."] });
      await accounts.confirmPasswordReset(b.uid, b.token, b.new_password1);
    } catch (err) {
      return resetPage(ctx, f.uid ?? '', f.token ?? '', fieldsOf(err));
    }
    // Post/redirect/get: the success is a page of its own, so a reload does not post the spent link again.
    seeOther(ctx, '/login?reset=1');
  });

  /**
   * A verification link that did not work, and what to do next: a signed-in person whose
   * address is unverified gets a new link with one button; one already verified is told so;
   * anyone else asks for a new link by address (the same answer whether or not it is known).
   */
  const deadVerifyLink = (ctx: Context, s: DashboardSession | null) => {
    const u = s ? ctx.state.dashboardUser : null;
    if (u?.emailVerified) return send(ctx, 'Email verification', html`<p>This link is no longer needed. <a href="/">Continue</a></p>`, s, { kind: 'ok', text: 'Your email address is already verified.' });
    send(
      ctx,
      'Email verification',
      html`<p>Verification links work once, for a limited time. Ask for a new one:</p>
${u
  ? html`<form method="post" action="/account/resend-verification" class="card">${hidden(ctx, s)}
<p>A new link goes to <strong>${u.email}</strong>.</p>
<button type="submit">Send a new verification link</button></form>`
  : resendForm(ctx)}`,
      s,
      { kind: 'error', text: 'Not verified: this verification link is invalid or has expired.' },
      400,
    );
  };
  /** The form asking for a new verification link by address (POST /verify-email/resend); `email`: a refused one, shown again. */
  const resendForm = (ctx: Context, email = '') => html`<form method="post" action="/verify-email/resend" class="card">${hidden(ctx, null)}
<label for="email">Email of your account</label><input id="email" name="email" type="email" autocomplete="email" required value="${email}">
<button type="submit">Send a new verification link</button></form>
<p>Or <a href="/login?next=%2Faccount">sign in</a>: your account page sends one too.</p>`;

  r.get('/verify-email', async (ctx) => {
    const s = await session(ctx);
    let email: string;
    try {
      email = await accounts.verifyEmail(str(ctx.query.key));
    } catch (err) {
      fieldsOf(err);
      return deadVerifyLink(ctx, s);
    }
    // Named: whoever opens the link (signed in as someone else, or no one) learns whose address it was.
    send(ctx, 'Email verification', html`<p><a href="/">Continue</a></p>`, s, { kind: 'ok', text: `The email address ${email} is verified.` });
  });
  // A new verification link for a person who is not signed in: the rules of POST
  // /api/auth/social/resend-email/ (nothing for an unknown or verified address, throttled per
  // account, the same answer either way); post/redirect/get.
  r.get('/verify-email/resend', async (ctx) => {
    const s = await session(ctx);
    if (ctx.query.sent) return send(ctx, 'Email verification', html`<p>Open the link in the mail to verify your address.</p>`, s, { kind: 'ok', text: 'If an unverified account uses this address, a new verification link is on its way.' });
    send(ctx, 'Email verification', resendForm(ctx), s);
  });
  r.post('/verify-email/resend', async (ctx) => {
    const s = await session(ctx);
    const f = await form(ctx, null, '/verify-email/resend');
    if (!f) return;
    const refused = await forAddress(f, (email) => accounts.resendVerification(email));
    if (refused) return send(ctx, 'Email verification', resendForm(ctx, (f.email ?? '').trim()), s, { kind: 'error', text: refused }, 400);
    seeOther(ctx, '/verify-email/resend?sent=1');
  });
}
