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

/**
 * The sliding-window rule every adapter keeps, for a log of hit times (ms) BEFORE this
 * request: hits older than the window are dropped; at `limit` it refuses with the seconds
 * until the oldest counted hit leaves the window. A hit time ahead of `now` (recorded before
 * a wall clock was set back) counts as now, so Retry-After never exceeds the window.
 */
export function evaluateWindow(hits: number[], now: number, limit: number, windowSeconds: number, count: boolean): RateDecision {
  const windowMs = windowSeconds * 1000;
  const live = hits.filter((t) => now - t < windowMs);
  if (live.length >= limit) {
    const retryAfter = Math.max(1, Math.ceil((Math.min(live[live.length - limit]!, now) + windowMs - now) / 1000));
    return { allowed: false, retryAfter, remaining: 0 };
  }
  return { allowed: true, retryAfter: 0, remaining: limit - live.length - (count ? 1 : 0) };
}
