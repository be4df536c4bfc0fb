/**
 * Failure budgets under concurrency (services/kernel/failure-budgets.ts). The limiter here
 * answers after a real delay, as the shared cluster limiter (MongoDB) does: a check-then-count
 * shape lets a whole burst pass the check before any failure is counted.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createMemoryRateLimiter } from '../../infra/memory/rate-limiter.js';
import type { RateLimiter } from '../../infra/ports/rate-limiter.js';
import { failureBudgets } from '../../services/kernel/failure-budgets.js';

function slowLimiter(): RateLimiter & { close(): void } {
  const inner = createMemoryRateLimiter();
  return {
    hit: async (...a) => (await sleep(2), inner.hit(...a)),
    peek: async (...a) => (await sleep(2), inner.peek(...a)),
    reset: (k) => inner.reset(k),
    close: () => inner.close(),
  };
}

const refused = (retryAfter: number) => Object.assign(new Error('refused'), { retryAfter });
const budget = [{ key: 'k', limit: 10, windowS: 60 }];

test('a burst of 60 failing attempts runs exactly 10 of them; the rest are refused', async () => {
  const limiter = slowLimiter();
  const budgets = failureBudgets(limiter);
  let ran = 0;
  const outcomes = await Promise.allSettled(
    Array.from({ length: 60 }, () =>
      budgets.attempt(budget, refused, async (fail) => {
        ran++;
        await sleep(5); // the work itself (a hash, a lookup) takes time
        await fail();
        return 'failed';
      }),
    ),
  );
  expect(ran).toBe(10);
  expect(outcomes.filter((o) => o.status === 'rejected').length).toBe(50);
  expect(((outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult).reason as { retryAfter: number }).retryAfter).toBeGreaterThan(0);
  limiter.close();
});

test('with one failure left, a second attempt waits for the first: refused if it failed, run if it succeeded', async () => {
  for (const firstFails of [true, false]) {
    const limiter = slowLimiter();
    for (let i = 0; i < 9; i++) await limiter.hit('k', 10, 60);
    const budgets = failureBudgets(limiter);
    const order: string[] = [];
    const first = budgets.attempt(budget, refused, async (fail) => {
      order.push('first');
      await sleep(10);
      if (firstFails) await fail();
      return 'first';
    });
    const second = budgets.attempt(budget, refused, async () => (order.push('second'), 'second'));
    await expect(first).resolves.toBe('first');
    if (firstFails) await expect(second).rejects.toThrow('refused');
    else await expect(second).resolves.toBe('second');
    expect(order).toEqual(firstFails ? ['first'] : ['first', 'second']);
    limiter.close();
  }
});

test('successes do not spend the budget, and a work that throws releases its place', async () => {
  const limiter = slowLimiter();
  const budgets = failureBudgets(limiter);
  const ok = await Promise.all(Array.from({ length: 30 }, (_, i) => budgets.attempt(budget, refused, async () => i)));
  expect(ok).toHaveLength(30);
  await expect(budgets.attempt(budget, refused, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
  await expect(budgets.attempt(budget, refused, async () => 'still open')).resolves.toBe('still open');
  expect((await limiter.peek('k', 10, 60)).remaining).toBe(10);
  limiter.close();
});
