/** GET /api/subscription/ and the admin API (DECISIONS "Plans and admin"). */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { HttpModule } from '../gateway/app.js';
import type { Authenticator } from '../gateway/auth.js';
import { body } from '../gateway/http.js';
import { validator } from '../gateway/validate.js';
import { forbidden, notAuthenticated, notFound, throttled, tokenNotValid } from '../gateway/errors.js';
import type { RateLimiter } from '../../infra/ports/rate-limiter.js';
import { failureBudgets } from '../kernel/failure-budgets.js';
import type { Accounts } from '../accounts/service.js';
import type { PlanName, SubscriptionStatus } from './plans.js';
import type { Billing } from './service.js';
import { throttleAddress } from '../kernel/client-address.js';

const v = {
  change: validator<{ plan: PlanName; status?: SubscriptionStatus }>('billing.json#SubscriptionChange'),
  patch: validator<{ plan?: PlanName; status?: SubscriptionStatus }>('billing.json#SubscriptionPatch'),
};

/** Wrong admin tokens tolerated per client address per window before 429 (the token is a guessable secret only by brute force). */
const ADMIN_FAILURES_PER_IP = 20;
const ADMIN_WINDOW_S = 15 * 60;

export function billingRoutes(deps: { billing: Billing; accounts: Accounts; auth: () => Authenticator; adminEnabled: boolean; limiter: RateLimiter }): HttpModule {
  const { billing } = deps;

  /**
   * The admin API does not exist without ADMIN_TOKEN (404); with it, the Bearer must match.
   * Another valid credential (a user's JWT or key) lacks the scope: 403; anything else is
   * a bad token: 401 token_not_valid (DECISIONS "Wire conventions").
   */
  const wrongTokens = failureBudgets(deps.limiter);

  async function admin(ctx: Context): Promise<void> {
    if (!deps.adminEnabled) throw notFound();
    const header = ctx.get('authorization');
    const m = /^Bearer\s+(.+)$/i.exec(header);
    if (!m) throw notAuthenticated();
    const budgets = [{ key: `admin:ip:${throttleAddress(ctx.ip)}`, limit: ADMIN_FAILURES_PER_IP, windowS: ADMIN_WINDOW_S }];
    const refuse = (retryAfter: number) => throttled(retryAfter, `Too many wrong admin tokens. Try again in ${retryAfter} seconds.`);
    await wrongTokens.attempt(budgets, refuse, async (fail) => {
      if (billing.isAdminToken(m[1].trim())) return;
      const account = await deps.auth().principal(ctx).then(() => true, () => false);
      if (account) throw forbidden('This credential is not the admin token.');
      await fail();
      throw tokenNotValid('Invalid admin token.');
    });
  }

  async function targetUser(ctx: Context): Promise<number> {
    const raw = String(ctx.params.pk);
    if (!/^[1-9]\d{0,14}$/.test(raw)) throw notFound('User not found.');
    const pk = Number(raw);
    if (!(await deps.accounts.findUser(pk))) throw notFound('User not found.');
    return pk;
  }

  return {
    routes(r: Router) {
      r.get('/api/subscription/', async (ctx) => {
        const p = await deps.auth().principal(ctx);
        ctx.body = await billing.view(p.userPk);
      });

      r.get('/api/admin/users/:pk/subscription/', async (ctx) => {
        await admin(ctx);
        ctx.body = await billing.view(await targetUser(ctx));
      });

      const put = async (ctx: Context) => {
        await admin(ctx);
        const pk = await targetUser(ctx);
        const b = v.change(await body(ctx));
        // Without a status the account keeps its own: a plan change must not reactivate a
        // canceled customer (a new account is active, so a plain {plan} gives active there).
        const status = b.status ?? (await billing.view(pk)).status;
        ctx.body = await billing.change(pk, { plan: b.plan, status }, 'admin');
      };
      r.put('/api/admin/users/:pk/subscription/', put);
      r.patch('/api/admin/users/:pk/subscription/', async (ctx) => {
        await admin(ctx);
        const pk = await targetUser(ctx);
        const current = await billing.view(pk);
        const b = v.patch(await body(ctx));
        ctx.body = await billing.change(pk, { plan: b.plan ?? current.plan, status: b.status ?? current.status }, 'admin');
      });
    },
  };
}
