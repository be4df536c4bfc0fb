import type { RateDecision, RateLimiter } from '../ports/rate-limiter.js';

/**
 * In-process sliding-window log (one process: embedded mode). The decision is taken
 * synchronously, so concurrent callers never race between reading and counting. Memory is bounded: each key keeps at most `limit`
 * timestamps, and idle keys are swept.
 */
export function createMemoryRateLimiter(now: () => number = Date.now): RateLimiter & { close(): void } {
  const hits = new Map<string, number[]>();
  const sweep = setInterval(() => {
    const t = now();
    for (const [k, list] of hits) if (!list.length || t - list[list.length - 1] > 86_400_000) hits.delete(k);
  }, 60_000);
  sweep.unref();

  function evaluate(key: string, limit: number, windowSeconds: number, count: boolean): RateDecision {
    const t = now();
    const windowMs = windowSeconds * 1000;
    const list = (hits.get(key) ?? []).filter((ts) => t - ts < windowMs);
    if (list.length >= limit) {
      hits.set(key, list);
      const retryAfter = Math.max(1, Math.ceil((list[list.length - limit] + windowMs - t) / 1000));
      return { allowed: false, retryAfter, remaining: 0 };
    }
    if (count) list.push(t);
    hits.set(key, list);
    return { allowed: true, retryAfter: 0, remaining: limit - list.length };
  }

  return {
    hit: async (key, limit, windowSeconds) => evaluate(key, limit, windowSeconds, true),
    peek: async (key, limit, windowSeconds) => evaluate(key, limit, windowSeconds, false),
    reset: async (key) => void hits.delete(key),
    close: () => clearInterval(sweep),
  };
}
