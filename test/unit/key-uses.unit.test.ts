/** services/keys/key-uses.ts: when a key's use is recorded, what the lists show, what a stop records, and that the map stays bounded. */
import { createKeyUses } from '../../services/keys/key-uses.js';

const MINUTE = 60_000;

test('a key in use is recorded at most once a minute (monotonic), the latest use is kept for the lists', () => {
  const uses = createKeyUses(MINUTE);
  expect(uses.note('k', 1_000, 0)).toBe(true);
  expect(uses.note('k', 2_000, 30_000)).toBe(false);
  expect(uses.latest('k')).toBe(2_000);
  // A wall clock set back a day changes what is shown, not when the next record is due.
  expect(uses.note('k', 1_000 - 86_400_000, 59_999)).toBe(false);
  expect(uses.note('k', 3_000, MINUTE)).toBe(true);
});

test('a stop records each use not recorded yet, once', () => {
  const uses = createKeyUses(MINUTE);
  uses.note('a', 1_000, 0);
  uses.note('a', 5_000, 10);
  uses.note('b', 1_000, 0);
  expect(uses.due(Infinity)).toEqual([['a', 5_000]]);
  expect(uses.due(Infinity)).toEqual([]);
});

test('keys used once and recorded are forgotten after their interval: the map holds recent keys only', () => {
  const uses = createKeyUses(MINUTE);
  for (let i = 0; i < 5_000; i++) uses.note(`old${i}`, i, i); // each recorded at its first use
  expect(uses.size).toBe(5_000);
  // later traffic on one key sweeps the others out (their uses are recorded, their minute is over)
  for (let i = 0; i < 1_024; i++) uses.note('busy', 10 * MINUTE + i, 10 * MINUTE + i);
  expect(uses.size).toBe(1);
  // a key with a use still to record is kept
  uses.note('pending', 1, 20 * MINUTE);
  uses.note('pending', 2, 20 * MINUTE + 1);
  for (let i = 0; i < 1_024; i++) uses.note('busy', 30 * MINUTE + i, 30 * MINUTE + i);
  expect(uses.latest('pending')).toBe(2);
  // and a revoked key is forgotten at once
  uses.forget('pending');
  expect(uses.latest('pending')).toBeUndefined();
});

test('a use within the interval is recorded once the interval is over, and the idle key is then forgotten', () => {
  const uses = createKeyUses(MINUTE);
  uses.note('k', 1_000, 0); // recorded at once
  uses.note('k', 2_000, 10); // within the minute: pending
  expect(uses.due(MINUTE - 1)).toEqual([]);
  expect(uses.due(MINUTE)).toEqual([['k', 2_000]]);
  expect(uses.size).toBe(1);
  expect(uses.due(2 * MINUTE)).toEqual([]); // an interval after that record, nothing new: forgotten
  expect(uses.size).toBe(0);
  expect(uses.due(Infinity)).toEqual([]);
});
