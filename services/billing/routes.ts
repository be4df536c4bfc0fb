/** GET /api/subscription/ and the admin API (DECISIONS "Plans and admin"). */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { HttpModule } from '../gateway/app.js';
import type { Authenticator } from '../gateway/auth.js';
import { body } from '../gateway/http.js';
import { validator } from '../gateway/validate.js';
import { notFound } from '../gateway/errors.js';
import { operatorTokenGuard } from '../gateway/operator-token.js';
import type { RateLimiter } from '../../infra/ports/rate-limiter.js';
import type { Accounts } from '../accounts/service.js';
import type { PlanName, SubscriptionStatus } from './plans.js';
import type { Billing } from './service.js';

const v = {
  change: validator<{ plan: PlanName; status?: SubscriptionStatus }>('billing.json#SubscriptionChange'),
  patch: validator<{ plan?: PlanName; status?: SubscriptionStatus }>('billing.json#SubscriptionPatch'),
};

export function billingRoutes(deps: { billing: Billing; accounts: Accounts; auth: () => Authenticator; adminToken: string | null; limiter: RateLimiter }): HttpModule {
  const { billing } = deps;

  /** The admin API: ADMIN_TOKEN as Bearer (404 without it; a user's own credential: 403). */
  const admin = operatorTokenGuard({
    name: 'admin',
    secret: deps.adminToken,
    limiter: deps.limiter,
    principal: (ctx) => deps.auth().principal(ctx),
  });

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

      // Without ADMIN_TOKEN the admin API does not exist: every method of its paths is a 404
      // (registered, they answered 405 or, to OPTIONS, 200 naming the methods).
      if (!deps.adminToken) return;
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
        ctx.body = await billing.change(pk, { plan: b.plan, status: b.status }, 'admin');
      };
      r.put('/api/admin/users/:pk/subscription/', put);
      r.patch('/api/admin/users/:pk/subscription/', async (ctx) => {
        await admin(ctx);
        const pk = await targetUser(ctx);
        const b = v.patch(await body(ctx));
        ctx.body = await billing.change(pk, { plan: b.plan, status: b.status }, 'admin');
      });
    },
  };
}
