/**
 * Polls `probe` until it answers something truthy, and answers that; past `timeoutMs` it
 * throws ("condition not met in time"), so a test waiting on a background effect fails
 * instead of reading a stale state.
 */
export async function eventually<T>(probe: () => T | undefined | null | false | Promise<T | undefined | null | false>, timeoutMs = 15_000, everyMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
