/**
 * Signing up, in and out: GET /login (the sign-in itself is sign-in.ts), /register, /logout.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import { ApiError } from '../gateway/errors.js';
import { validator } from '../gateway/validate.js';
import { normalUsername } from '../accounts/service.js';
import { html } from '../gateway/html.js';
import { fieldErrors, describedBy } from './html.js';
import { fieldsOf, type Errors, type PageKit } from './plumbing.js';
import { safeReturnPath, seeOther } from '../gateway/web-session.js';

const v = {
  register: validator<{ username: string; email: string; password1: string; password2: string }>('accounts.json#Register'),
};

export function signUpRoutes(r: Router, kit: PageKit): void {
  const { accounts, web, send, hidden, session, form, loginPage, signIn } = kit;

  /** `next`: the sign-in's return path (safe), carried through registration (e.g. back to `/device?user_code=…`). */
  function registerPage(ctx: Context, values: Record<string, string> = {}, errors: Errors | null = null, next: string | null = null, status = errors ? 400 : 200) {
    send(
      ctx,
      'Create an account',
      html`<form method="post" action="/register" class="card" novalidate>
  ${hidden(ctx, null)}${next ? html`<input type="hidden" name="next" value="${next}">` : ''}
  ${fieldErrors(errors, 'non_field_errors')}
  <label for="username">Username</label>
  <input id="username" name="username" autocomplete="username" required maxlength="150" value="${values.username ?? ''}"${describedBy(errors, 'username')}>
  ${fieldErrors(errors, 'username')}
  <label for="email">Email</label>
  <input id="email" name="email" type="email" autocomplete="email" required value="${values.email ?? ''}"${describedBy(errors, 'email')}>
  ${fieldErrors(errors, 'email')}
  <label for="password1">Password</label>
  <input id="password1" name="password1" type="password" autocomplete="new-password" required${describedBy(errors, 'password1')}>
  ${fieldErrors(errors, 'password1')}
  <label for="password2">Password again</label>
  <input id="password2" name="password2" type="password" autocomplete="new-password" required${describedBy(errors, 'password2')}>
  ${fieldErrors(errors, 'password2')}
  <button type="submit">Create account</button>
</form>`,
      null,
      errors ? { kind: 'error', text: status === 429 ? 'The account was not created.' : 'Please correct the errors below.' } : null,
      status,
      '/register',
    );
  }

  r.get('/login', async (ctx) => {
    const next = safeReturnPath(ctx.query.next);
    if (await session(ctx)) return seeOther(ctx, next ?? '/');
    // Where a sign-out and a password reset land (post/redirect/get): what just happened.
    const done = ctx.query.signed_out === '1' ? 'You are signed out.' : ctx.query.reset === '1' ? 'Your password was reset. Sign in with the new one.' : null;
    // A form sent after the session ended (signed out elsewhere): it was not carried out.
    const ended = ctx.query.ended === '1' ? 'Your session had ended, so what you sent was not saved: sign in and do it again.' : null;
    await loginPage(ctx, '', done ? { kind: 'ok', text: done } : ended ? { kind: 'error', text: ended } : null, 200, next);
  });
  r.post('/login', (ctx) => web.passwordLogin(ctx));
  r.post('/login/oidc', (ctx) => web.oidcStart(ctx));

  // `next`: the return path of the sign-in page that linked here (validated again at each step).
  r.get('/register', async (ctx) => {
    const next = safeReturnPath(ctx.query.next);
    if (await session(ctx)) return seeOther(ctx, next ?? '/');
    registerPage(ctx, {}, null, next);
  });
  r.post('/register', async (ctx) => {
    const f = await form(ctx, null, (sent) => {
      const next = safeReturnPath(sent.next);
      return next ? `/register?next=${encodeURIComponent(next)}` : '/register';
    });
    if (!f) return;
    const next = safeReturnPath(f.next);
    const values = { username: (f.username ?? '').trim(), email: (f.email ?? '').trim() };
    try {
      const b = v.register({ ...values, username: normalUsername(values.username), password1: f.password1 ?? '', password2: f.password2 ?? '' });
      if (b.password1 !== b.password2) return registerPage(ctx, values, { password2: ["The two password fields didn't match."] }, next);
      const user = await accounts.register({ username: b.username, email: b.email, password: b.password1, ip: ctx.ip });
      await signIn(ctx, user);
    } catch (err) {
      // Too many sign-ups from this address: a 429 with its Retry-After, as the API's.
      if (err instanceof ApiError && err.status === 429) {
        for (const [k, v] of Object.entries(err.headers ?? {})) ctx.set(k, v);
        return registerPage(ctx, values, fieldsOf(err), next, 429);
      }
      return registerPage(ctx, values, fieldsOf(err), next);
    }
    seeOther(ctx, next ?? '/');
  });

  r.post('/logout', async (ctx) => {
    const s = await session(ctx);
    const f = await form(ctx, s);
    if (!f) return;
    await web.endSession(ctx, s, 'logout');
    seeOther(ctx, '/login?signed_out=1'); // POST-redirect-GET: a reload does not post again
  });
}
