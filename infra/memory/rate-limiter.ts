import { evaluateWindow, type RateDecision, type RateLimiter } from '../ports/rate-limiter.js';

/**
 * In-process sliding-window log (one process: embedded mode). The decision is taken
 * synchronously, so concurrent callers never race between reading and counting. Memory is
 * bounded: each key keeps at most `limit` timestamps, and idle keys are swept. Times are
 * monotonic (performance.now): a wall clock set back or forward (an NTP step) neither
 * stretches a lockout nor ends it early.
 */
export function createMemoryRateLimiter(now: () => number = () => performance.now()): RateLimiter & { close(): void } {
  const hits = new Map<string, number[]>();
  const sweep = setInterval(() => {
    const t = now();
    for (const [k, list] of hits) if (!list.length || t - list[list.length - 1] > 86_400_000) hits.delete(k);
  }, 60_000);
  sweep.unref();

  function evaluate(key: string, limit: number, windowSeconds: number, count: boolean): RateDecision {
    const t = now();
    const list = (hits.get(key) ?? []).filter((ts) => t - ts < windowSeconds * 1000);
    const decision = evaluateWindow(list, t, limit, windowSeconds, count);
    if (decision.allowed && count) list.push(t);
    hits.set(key, list);
    return decision;
  }

  return {
    hit: async (key, limit, windowSeconds) => evaluate(key, limit, windowSeconds, true),
    peek: async (key, limit, windowSeconds) => evaluate(key, limit, windowSeconds, false),
    reset: async (key) => void hits.delete(key),
    close: () => clearInterval(sweep),
  };
}
