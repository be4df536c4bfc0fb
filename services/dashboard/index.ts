/**
 * The web dashboard for humans (issue 9): server-rendered pages at `/` outside /api/.
 *
 * Accounts (sign-in, register, sign-out, password change and reset, email verification)
 * call the Accounts service directly. Everything owned by other contexts (identities,
 * keys, mail, SMS, subscription) goes through the gateway's own public API over loopback
 * HTTP, with the session cookie as the credential: the dashboard sees exactly what an API
 * client sees (same validation, plan rules, errors) and depends on no context's internals.
 *
 * Security: the session cookie is HttpOnly, SameSite=Lax, Secure when PUBLIC_URL is https;
 * every POST form carries a CSRF token (gateway/web-session.ts); pages are sent with a strict
 * CSP (no inline script), `no-store`, and never framed. A freshly minted API key is shown
 * once, on the page its POST redirects to (keys.ts), carried there in a sealed cookie;
 * never in plain in a cookie, in browser storage or in a URL.
 *
 * Where the pages are: sign-up.ts (sign-in page glue, register, sign-out), account.ts
 * (account, password reset, email verification), identities.ts (home, an identity),
 * mail.ts (a thread, a mail's sandboxed HTML), sms.ts (a conversation), keys.ts; their
 * shared helpers in plumbing.ts, the page shell in html.ts, the sign-in in sign-in.ts.
 */
import { readFileSync } from 'node:fs';
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { ApiError } from '../gateway/errors.js';
import { seeOther } from '../gateway/web-session.js';
import type { ContextFactory, Shared } from '../../infra/runtime.js';
import { formPageOf, pageKit } from './plumbing.js';
import { webSignIn } from './sign-in.js';
import { signUpRoutes } from './sign-up.js';
import { accountRoutes } from './account.js';
import { identityRoutes } from './identities.js';
import { mailRoutes } from './mail.js';
import { smsRoutes } from './sms.js';
import { keyRoutes } from './keys.js';

const STATIC: Record<string, { type: string; body: Buffer }> = {
  '/static/dashboard.css': { type: 'text/css; charset=utf-8', body: readFileSync(new URL('./static/dashboard.css', import.meta.url)) },
  '/static/dashboard.js': { type: 'text/javascript; charset=utf-8', body: readFileSync(new URL('./static/dashboard.js', import.meta.url)) },
};

export const dashboardContext: ContextFactory = (shared: Shared) => {
  const kit = pageKit(shared, webSignIn(shared));

  function routes(r: Router): void {
    for (const [p, file] of Object.entries(STATIC)) {
      r.get(p, (ctx) => {
        ctx.type = file.type;
        ctx.set('Cache-Control', 'public, max-age=3600');
        ctx.body = file.body;
      });
    }

    // Browsers ask for it on every page: no icon, and no 404 in their consoles.
    r.get('/favicon.ico', (ctx) => {
      ctx.status = 204;
      ctx.set('Cache-Control', 'public, max-age=86400');
    });

    signUpRoutes(r, kit);
    accountRoutes(r, kit);
    identityRoutes(r, kit);
    mailRoutes(r, kit);
    smsRoutes(r, kit);
    keyRoutes(r, kit);
  }

  /**
   * A browser at an address with no page: 404, a page with the menu (signed in) and a way
   * home, not the API's JSON. An address that only takes a form (a refused form leaves the
   * browser there; Enter in the address bar GETs it) goes back to the page the form is on.
   */
  async function errorPage(ctx: Context, error: ApiError): Promise<boolean> {
    if (error.status === 405) {
      seeOther(ctx, formPageOf(ctx.path));
      return true;
    }
    kit.pageNotFound(ctx, await kit.session(ctx).catch(() => null));
    return true;
  }

  return { name: 'dashboard', module: { routes, errorPage } };
};
