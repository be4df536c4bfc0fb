/**
 * The low-water mark (infra/low-water-mark.ts) behind a reactor's checkpoint and a Kafka
 * partition's commit: the mark is the last position before the first unfinished one, and
 * what it keeps is bounded by the unfinished positions, not by the positions that arrived
 * since the oldest of them (a mail retried for a day held every event of that day).
 */
import { LowWaterMark } from '../../infra/low-water-mark.js';

test('an unfinished position holds the mark; the finished ones after it are kept as one', () => {
  const marks = new LowWaterMark<number>();
  const finish = Array.from({ length: 10_000 }, (_, i) => marks.add(i));
  for (let i = 1; i < finish.length; i++) finish[i]();
  expect(marks.advance()).toBeNull();
  expect(marks.size).toBe(2);
  finish[0]();
  expect(marks.advance()).toBe(9_999);
  expect(marks.size).toBe(0);
  expect(marks.advance()).toBeNull();
});

test('finishing in any order: the mark is the last position before the first unfinished one', () => {
  const marks = new LowWaterMark<number>();
  const n = 2_000;
  const finish = Array.from({ length: n }, (_, i) => marks.add(i));
  // A fixed shuffle: i * 7919 mod n visits every index once (7919 is prime and does not divide n).
  const order = Array.from({ length: n }, (_, i) => (i * 7919) % n);
  const unfinished = order.slice(-5);
  const finished = new Set<number>();
  let mark: number | null = null;
  for (const i of order.slice(0, -5)) {
    finish[i]();
    finish[i](); // twice is once
    finished.add(i);
    mark = marks.advance() ?? mark;
    let first = 0;
    while (finished.has(first)) first++;
    expect(mark).toBe(first === 0 ? null : first - 1);
    expect(marks.size).toBeLessThanOrEqual(2 * (n - finished.size) + 1);
  }
  expect(marks.size).toBeLessThanOrEqual(2 * unfinished.length + 1);
  for (const i of unfinished) finish[i]();
  expect(marks.advance()).toBe(n - 1);
  expect(marks.size).toBe(0);
});
