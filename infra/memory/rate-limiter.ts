import { evaluateWindow, type RateDecision, type RateLimiter } from '../ports/rate-limiter.js';

/** How often keys are looked over for ones whose hits have all left their window. */
const SWEEP_EVERY_MS = 60_000;

/**
 * In-process sliding-window log (one process: embedded mode). The decision is taken
 * synchronously, so concurrent callers never race between reading and counting. Memory is
 * bounded: each key keeps at most `limit` timestamps, and a key is dropped once its newest
 * hit has left its window (as the MongoDB adapter's documents expire): a spray of failed
 * logins from many addresses, each a key, was held for a day whatever the window (15 min).
 * Times are monotonic (performance.now): a wall clock set back or forward (an NTP step)
 * neither stretches a lockout nor ends it early.
 */
export function createMemoryRateLimiter(now: () => number = () => performance.now()): RateLimiter & { close(): void; size(): number } {
  /** Per key: its hits inside the window, and when the newest leaves it (the key can go then). */
  const hits = new Map<string, { times: number[]; until: number }>();
  const sweep = setInterval(() => {
    const t = now();
    for (const [k, entry] of hits) if (entry.until <= t) hits.delete(k);
  }, SWEEP_EVERY_MS);
  sweep.unref();

  function evaluate(key: string, limit: number, windowSeconds: number, count: boolean): RateDecision {
    const t = now();
    const windowMs = windowSeconds * 1000;
    const held = hits.get(key);
    const list = (held?.times ?? []).filter((ts) => t - ts < windowMs);
    const decision = evaluateWindow(list, t, limit, windowSeconds, count);
    if (decision.allowed && count) list.push(t);
    // A look at a key with nothing in its window keeps nothing.
    if (list.length) hits.set(key, { times: list, until: Math.max(held?.until ?? 0, list[list.length - 1] + windowMs) });
    else hits.delete(key);
    return decision;
  }

  return {
    hit: async (key, limit, windowSeconds) => evaluate(key, limit, windowSeconds, true),
    peek: async (key, limit, windowSeconds) => evaluate(key, limit, windowSeconds, false),
    reset: async (key) => void hits.delete(key),
    close: () => clearInterval(sweep),
    size: () => hits.size,
  };
}
