/**
 * Rolling-window counters for throttling (login attempts, device codes, ...). The embedded
 * adapter keeps them in memory (infra/memory/rate-limiter.ts); the cluster adapter shares
 * them across gateways in MongoDB (infra/mongodb/rate-limiter.ts). Asynchronous because a
 * shared adapter is a network round trip: callers `await` every method.
 */
export interface RateDecision {
  allowed: boolean;
  /** Seconds until the next hit would be allowed (0 when allowed). */
  retryAfter: number;
  remaining: number;
}

export interface RateLimiter {
  /** Counts one hit for `key` and says whether it stays within `limit` per `windowSeconds`. */
  hit(key: string, limit: number, windowSeconds: number): Promise<RateDecision>;
  /** Looks without counting. */
  peek(key: string, limit: number, windowSeconds: number): Promise<RateDecision>;
  reset(key: string): Promise<void>;
}
