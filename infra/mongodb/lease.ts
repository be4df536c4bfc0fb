/**
 * A lease in MongoDB: at most one live holder per name (the `leases` collection). The
 * cluster worker holds `projections` while it runs projections, reactors and the Kafka
 * relay; standby workers wait for it. The holder renews it every ttl/3; a holder that
 * cannot renew (lost to another, or MongoDB unreachable past the ttl) is told through
 * `lost` and must stop. Commits are also fenced by it (see ./read-store.ts), so a paused
 * holder that wakes up after losing its lease cannot write.
 *
 * Times are the processes' clocks: keep them in sync (NTP); the ttl (30 s) dwarfs any skew.
 * It also outlasts a routine primary election (10-12 s): a holder whose renewals fail that
 * long keeps its lease instead of exiting.
 */
import { MongoServerError, type Db } from 'mongodb';

export interface LeaseDoc {
  _id: string;
  owner: string;
  expiresAt: Date;
  acquiredAt?: Date;
  fencedAt?: Date;
}

export interface HeldLease {
  name: string;
  owner: string;
  /** Resolves when the lease was lost (never when released). */
  readonly lost: Promise<void>;
  release(): Promise<void>;
}

export interface LeaseLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

/** The filter matching a lease `owner` may take now: its own, or an expired one. */
export function takeableFilter(name: string, owner: string, now: Date): Record<string, unknown> {
  return { _id: name, $or: [{ owner }, { expiresAt: { $lte: now } }] };
}

/** One attempt; true when `owner` now holds the lease until now + ttl. */
export async function tryAcquireLease(db: Db, name: string, owner: string, ttlMs: number, now = new Date()): Promise<boolean> {
  try {
    const result = await db.collection<LeaseDoc>('leases').updateOne(
      takeableFilter(name, owner, now),
      { $set: { owner, expiresAt: new Date(now.getTime() + ttlMs), acquiredAt: now } },
      { upsert: true },
    );
    return result.matchedCount === 1 || result.upsertedCount === 1;
  } catch (err) {
    // Held by someone else: the filter missed and the upsert hit the existing _id.
    if (err instanceof MongoServerError && err.code === 11000) return false;
    throw err;
  }
}

/** Default lease ttl; renewed every third of it. */
export const LEASE_TTL_MS = 30_000;

/** Waits (polling every `retryMs`) until the lease is ours, then keeps renewing it. */
export async function acquireLease(
  db: Db,
  name: string,
  owner: string,
  options: { ttlMs?: number; retryMs?: number; logger?: LeaseLogger; signal?: AbortSignal } = {},
): Promise<HeldLease> {
  const ttlMs = options.ttlMs ?? LEASE_TTL_MS;
  const retryMs = options.retryMs ?? 2_000;
  let waitingLogged = false;
  while (!(await tryAcquireLease(db, name, owner, ttlMs))) {
    if (options.signal?.aborted) throw new Error(`gave up waiting for lease ${name}`);
    if (!waitingLogged) {
      options.logger?.info({ lease: name }, 'standing by: another worker holds the lease');
      waitingLogged = true;
    }
    await new Promise((resolve) => setTimeout(resolve, retryMs));
  }
  options.logger?.info({ lease: name, owner }, 'lease acquired');

  let lastRenewed = Date.now();
  let released = false;
  let onLost!: () => void;
  const lost = new Promise<void>((resolve) => (onLost = resolve));
  const leases = db.collection<LeaseDoc>('leases');
  const timer = setInterval(() => {
    const now = new Date();
    leases
      .updateOne({ _id: name, owner, expiresAt: { $gt: now } }, { $set: { expiresAt: new Date(now.getTime() + ttlMs) } })
      .then((r) => {
        if (released) return;
        if (r.matchedCount === 1) lastRenewed = now.getTime();
        else {
          clearInterval(timer);
          onLost();
        }
      })
      .catch((err: unknown) => {
        if (released) return;
        options.logger?.warn({ err, lease: name }, 'lease renewal failed');
        if (Date.now() - lastRenewed >= ttlMs) {
          clearInterval(timer);
          onLost();
        }
      });
  }, Math.max(100, Math.floor(ttlMs / 3)));
  timer.unref();

  return {
    name,
    owner,
    lost,
    async release() {
      if (released) return;
      released = true;
      clearInterval(timer);
      await leases.deleteOne({ _id: name, owner }).catch(() => {});
    },
  };
}
