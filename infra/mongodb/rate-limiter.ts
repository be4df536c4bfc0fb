/**
 * The RateLimiter port shared by every gateway, on MongoDB (collection `rate_limits`): the
 * same sliding-window log as the in-memory adapter (infra/memory/rate-limiter.ts), one
 * document per key, updated atomically by one findOneAndUpdate with an aggregation
 * pipeline, so concurrent hits from several gateways never over-count or under-count.
 * Wired by infra/cluster.ts when STORE=cluster. Idle keys expire by a TTL index.
 */
import type { Db } from 'mongodb';
import type { RateDecision, RateLimiter } from '../ports/rate-limiter.js';

/**
 * The decision for a log of hit times (ms) BEFORE this request, exactly as the memory
 * adapter decides: hits older than the window are dropped; at `limit` it refuses with the
 * seconds until the oldest counted hit leaves the window.
 */
export function evaluateWindow(hits: number[], now: number, limit: number, windowSeconds: number, count: boolean): RateDecision {
  const windowMs = windowSeconds * 1000;
  const live = hits.filter((t) => now - t < windowMs);
  if (live.length >= limit) {
    const retryAfter = Math.max(1, Math.ceil((live[live.length - limit]! + windowMs - now) / 1000));
    return { allowed: false, retryAfter, remaining: 0 };
  }
  return { allowed: true, retryAfter: 0, remaining: limit - live.length - (count ? 1 : 0) };
}

/** The pipeline update that prunes the log and appends `now` while under `limit`. */
export function hitPipeline(now: number, limit: number, windowSeconds: number): Record<string, unknown>[] {
  const windowMs = windowSeconds * 1000;
  const pruned = { $filter: { input: { $ifNull: ['$hits', []] }, cond: { $lt: [{ $subtract: [now, '$$this'] }, windowMs] } } };
  return [
    { $set: { hits: pruned } },
    {
      $set: {
        hits: { $cond: [{ $lt: [{ $size: '$hits' }, limit] }, { $concatArrays: ['$hits', [now]] }, '$hits'] },
        expiresAt: new Date(now + windowMs),
      },
    },
  ];
}

export async function createMongoRateLimiter(db: Db, now: () => number = Date.now): Promise<RateLimiter> {
  const coll = db.collection<{ _id: string; hits: number[]; expiresAt: Date }>('rate_limits');
  await coll.createIndex({ expiresAt: 1 }, { expireAfterSeconds: 0 });
  return {
    async hit(key, limit, windowSeconds) {
      const t = now();
      const before = await coll.findOneAndUpdate({ _id: key }, hitPipeline(t, limit, windowSeconds), {
        upsert: true,
        returnDocument: 'before',
      });
      return evaluateWindow(before?.hits ?? [], t, limit, windowSeconds, true);
    },
    async peek(key, limit, windowSeconds) {
      const doc = await coll.findOne({ _id: key });
      return evaluateWindow(doc?.hits ?? [], now(), limit, windowSeconds, false);
    },
    async reset(key) {
      await coll.deleteOne({ _id: key });
    },
  };
}
