/** Runs work for one key at a time, in call order; other keys run freely. */
export function keyedSerial(): <T>(key: string, work: () => Promise<T>) => Promise<T> {
  const tails = new Map<string, Promise<unknown>>();
  return <T>(key: string, work: () => Promise<T>): Promise<T> => {
    const run = (tails.get(key) ?? Promise.resolve()).then(work, work);
    const tail = run.then(
      () => {},
      () => {},
    );
    tails.set(key, tail);
    void tail.then(() => {
      if (tails.get(key) === tail) tails.delete(key);
    });
    return run;
  };
}

export type KeyedSerial = ReturnType<typeof keyedSerial>;

/**
 * Runs `work` holding every one of `keys` of `serial` at once. They are taken in sorted order,
 * so two callers wanting overlapping keys never wait on each other in a cycle.
 */
export function withKeys<T>(serial: KeyedSerial, keys: Iterable<string>, work: () => Promise<T>): Promise<T> {
  const sorted = [...new Set(keys)].sort();
  const take = (i: number): Promise<T> => (i === sorted.length ? work() : serial(sorted[i]!, () => take(i + 1)));
  return take(0);
}
