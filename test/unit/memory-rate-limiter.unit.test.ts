/**
 * The embedded rate limiter (infra/memory/rate-limiter.ts) holds a key only while one of its
 * hits can still count. Failed logins from many addresses make a key each (per address, per
 * name): kept for a day whatever the window, a spray that never stops grew the process by
 * every key of the last 24 hours.
 */
import { jest } from '@jest/globals';
import { createMemoryRateLimiter } from '../../infra/memory/rate-limiter.js';

const WINDOW_S = 15 * 60; // the login throttles' window
const MINUTE = 60_000;

afterEach(() => jest.useRealTimers());

test('a key is let go once its newest hit has left the window, not before', async () => {
  jest.useFakeTimers();
  let t = 1_000_000;
  const limiter = createMemoryRateLimiter(() => t);
  for (let i = 0; i < 500; i++) await limiter.hit(`login:ip:10.0.${i >> 8}.${i & 255}`, 1, WINDOW_S);
  expect(limiter.size()).toBe(500);

  t += WINDOW_S * 1000 - 1;
  jest.advanceTimersByTime(MINUTE);
  expect(limiter.size()).toBe(500); // still counted: the next attempt is refused
  expect((await limiter.peek('login:ip:10.0.0.0', 1, WINDOW_S)).allowed).toBe(false);

  t += 1;
  jest.advanceTimersByTime(MINUTE);
  expect(limiter.size()).toBe(0);
  expect((await limiter.peek('login:ip:10.0.0.0', 1, WINDOW_S)).allowed).toBe(true);
  limiter.close();
});

test('a spray of new keys for two hours holds about a window of them, not all it saw', async () => {
  jest.useFakeTimers();
  let t = 0;
  const limiter = createMemoryRateLimiter(() => t);
  const perMinute = 100;
  let most = 0;
  for (let minute = 0; minute < 120; minute++) {
    for (let i = 0; i < perMinute; i++) await limiter.hit(`login:name:guess-${minute}-${i}`, 100, WINDOW_S);
    most = Math.max(most, limiter.size());
    t += MINUTE;
    jest.advanceTimersByTime(MINUTE);
  }
  // The window's 15 minutes of keys, and one sweep period more.
  expect(most).toBeLessThanOrEqual((WINDOW_S / 60 + 1) * perMinute);
  expect(most).toBeGreaterThanOrEqual((WINDOW_S / 60) * perMinute);
  limiter.close();
});

test('a look at a key that has no hits keeps nothing', async () => {
  const limiter = createMemoryRateLimiter();
  for (let i = 0; i < 100; i++) expect((await limiter.peek(`device:ip:10.1.0.${i}`, 5, 600)).allowed).toBe(true);
  expect(limiter.size()).toBe(0);
  limiter.close();
});
