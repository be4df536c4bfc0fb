/**
 * Rolling-window counters for throttling (login attempts, device codes, ...). The embedded
 * adapter keeps them in memory; a cluster adapter must share them across gateways.
 */
export interface RateDecision {
  allowed: boolean;
  /** Seconds until the next hit would be allowed (0 when allowed). */
  retryAfter: number;
  remaining: number;
}

export interface RateLimiter {
  /** Counts one hit for `key` and says whether it stays within `limit` per `windowSeconds`. */
  hit(key: string, limit: number, windowSeconds: number): RateDecision;
  /** Looks without counting. */
  peek(key: string, limit: number, windowSeconds: number): RateDecision;
  reset(key: string): void;
}
