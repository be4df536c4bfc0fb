/**
 * The operator's bearer secrets: ADMIN_TOKEN for the admin API, METRICS_TOKEN for
 * `/metrics`. Unset, the endpoints do not exist (404); set, the Bearer must match (compared
 * in constant time). A bearer that is a valid account credential lacks the scope (403);
 * anything else is a bad token (401 token_not_valid, DECISIONS "Wire conventions"), and
 * wrong tokens are limited per client address: such a token can only be guessed.
 */
import type { Context } from 'koa';
import type { RateLimiter } from '../../infra/ports/rate-limiter.js';
import { failureBudgets } from '../kernel/failure-budgets.js';
import { throttleAddress } from '../kernel/client-address.js';
import { sameSecret } from '../kernel/secrets.js';
import { forbidden, notAuthenticated, notFound, throttled, tokenNotValid } from './errors.js';
import { authorizationOf } from './auth.js';

/** Wrong tokens tolerated per client address per window before 429. */
const WRONG_TOKENS_PER_IP = 20;
const WINDOW_S = 15 * 60;

export function operatorTokenGuard(deps: {
  /** `admin`, `metrics`: in messages and throttle keys. */
  name: string;
  secret: string | null;
  limiter: RateLimiter;
  /** The request's account credential (a user's JWT, key, basic or cookie): resolves when it is a valid one. */
  principal?: (ctx: Context) => Promise<unknown>;
}): (ctx: Context) => Promise<void> {
  const { name, secret } = deps;
  /** A user's own valid credential lacks the scope (403); it is no wrong guess of the token. */
  const refuseAccountCredential = async (ctx: Context) => {
    if (deps.principal && (await deps.principal(ctx).then(() => true, () => false))) throw forbidden(`This credential is not the ${name} token.`);
  };
  const wrongTokens = failureBudgets(deps.limiter);
  const refuse = (retryAfter: number) => throttled(retryAfter, `Too many wrong ${name} tokens. Try again in ${retryAfter} seconds.`);
  return async (ctx) => {
    if (!secret) throw notFound();
    // Read as every credential of the API is (`Token` is Bearer).
    const { scheme, value: token } = authorizationOf(ctx.get('authorization'));
    // A user's own credential in another form (HTTP basic, the dashboard's cookie) lacks the
    // scope as a JWT or a key does: 403 for all of them.
    if (scheme !== 'bearer' || !token) {
      await refuseAccountCredential(ctx);
      throw notAuthenticated();
    }
    const budgets = [{ key: `${name}:ip:${throttleAddress(ctx.ip)}`, limit: WRONG_TOKENS_PER_IP, windowS: WINDOW_S }];
    await wrongTokens.attempt(budgets, refuse, async (fail) => {
      if (sameSecret(token, secret)) return;
      await refuseAccountCredential(ctx);
      await fail();
      throw tokenNotValid(`Invalid ${name} token.`);
    });
  };
}
