/**
 * The uses of API keys one process has seen: which to record now (an `ApiKeyUsed` at most
 * once per key per interval, so a busy key does not write an event per request), the latest
 * use of each key for the lists, and what a graceful stop still has to record.
 *
 * Intervals are measured on the monotonic clock (`tick`: a wall clock set back must not stop
 * the recording); uses are wall-clock times (`at`: what `last_used_at` shows). A use that
 * came within a key's interval is recorded once the interval is over (`due`, asked once an
 * interval, and for everything at a stop), and a key whose latest use is recorded and whose interval has passed is
 * forgotten (its next use records at once): the map holds the keys used lately, not every
 * key this process ever saw.
 */
interface KeyUse {
  /** Monotonic time of the last recorded use. */
  recordedTick: number;
  /** Wall-clock time of the last recorded use. */
  recordedAt: number;
  /** Wall-clock time of the latest use. */
  latestAt: number;
}

/** Uses noted between two sweeps of forgettable keys. */
const SWEEP_EVERY = 1024;

export function createKeyUses(intervalMs: number) {
  const uses = new Map<string, KeyUse>();
  let sinceSweep = 0;

  function sweep(tick: number): void {
    sinceSweep = 0;
    for (const [keyId, u] of uses) if (u.recordedAt >= u.latestAt && tick - u.recordedTick >= intervalMs) uses.delete(keyId);
  }

  return {
    /** A use of `keyId` at wall time `at`, monotonic `tick`: true when it is to be recorded now. */
    note(keyId: string, at: number, tick: number): boolean {
      if (++sinceSweep >= SWEEP_EVERY) sweep(tick);
      const u = uses.get(keyId);
      if (u && tick - u.recordedTick < intervalMs) {
        u.latestAt = at;
        return false;
      }
      uses.set(keyId, { recordedTick: tick, recordedAt: at, latestAt: at });
      return true;
    },
    /**
     * The uses still to record whose key's interval is over; they count as recorded from now.
     * `due(Infinity)`: every use not recorded yet (a stop).
     */
    due(tick: number): [keyId: string, at: number][] {
      const out: [string, number][] = [];
      for (const [keyId, u] of uses) {
        if (u.recordedAt >= u.latestAt || tick - u.recordedTick < intervalMs) continue;
        out.push([keyId, u.latestAt]);
        Object.assign(u, { recordedTick: tick, recordedAt: u.latestAt });
      }
      sweep(tick);
      return out;
    },
    /** The latest use seen of `keyId`, recorded or not (undefined: none lately). */
    latest(keyId: string): number | undefined {
      return uses.get(keyId)?.latestAt;
    },
    /** A revoked key: nothing more to show or record. */
    forget(keyId: string): void {
      uses.delete(keyId);
    },
    get size(): number {
      return uses.size;
    },
  };
}

export type KeyUses = ReturnType<typeof createKeyUses>;
