/**
 * Budgets of failed attempts (wrong passwords, device codes, admin tokens) that hold under
 * concurrency. Checking a budget and then counting a failure leaves a gap: a burst of parallel
 * guesses would all pass the check before any of them is counted. So an attempt also counts
 * while it is in flight: when as many attempts are running as failures are left, the next one
 * waits for one to end (and is refused if that one failed and spent the budget).
 * The in-flight count is per process; the failures themselves are counted by the limiter
 * (shared across gateways in cluster mode).
 */
import type { RateLimiter } from '../../infra/ports/rate-limiter.js';

export interface FailureBudget {
  key: string;
  limit: number;
  windowS: number;
}

export interface FailureBudgets {
  /**
   * Runs `work` once every budget has room for it, else throws `refuse(retryAfter)`. `work`
   * calls `fail()` to count its failure against every budget (before it answers).
   */
  attempt<T>(budgets: readonly FailureBudget[], refuse: (retryAfter: number) => Error, work: (fail: () => Promise<void>) => Promise<T>): Promise<T>;
}

export function failureBudgets(limiter: RateLimiter): FailureBudgets {
  const inFlight = new Map<string, number>();
  /** Attempts waiting for room on a key (as many in flight as failures left). */
  const waiting = new Map<string, (() => void)[]>();

  const wakeNext = (key: string) => {
    const queue = waiting.get(key);
    const next = queue?.shift();
    if (queue && queue.length === 0) waiting.delete(key);
    next?.();
  };
  const release = (key: string) => {
    const n = (inFlight.get(key) ?? 1) - 1;
    if (n <= 0) inFlight.delete(key);
    else inFlight.set(key, n);
    wakeNext(key);
  };

  return {
    async attempt(budgets, refuse, work) {
      const held: string[] = [];
      try {
        for (const { key, limit, windowS } of budgets) {
          for (;;) {
            const d = await limiter.peek(key, limit, windowS);
            if (!d.allowed) {
              wakeNext(key); // the next waiter finds the same, and passes it on
              throw refuse(d.retryAfter);
            }
            if ((inFlight.get(key) ?? 0) < d.remaining) break;
            await new Promise<void>((resolve) => {
              const queue = waiting.get(key);
              if (queue) queue.push(resolve);
              else waiting.set(key, [resolve]);
            });
          }
          inFlight.set(key, (inFlight.get(key) ?? 0) + 1); // taken in the same turn as the check
          held.push(key);
        }
        const fail = async () => {
          await Promise.all(budgets.map(({ key, limit, windowS }) => limiter.hit(key, limit, windowS)));
        };
        return await work(fail);
      } finally {
        for (const key of held) release(key);
      }
    },
  };
}
