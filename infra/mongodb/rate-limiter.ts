/**
 * The RateLimiter port shared by every gateway, on MongoDB (collection `rate_limits`): the
 * same sliding-window log as the in-memory adapter (infra/memory/rate-limiter.ts), one
 * document per key, updated atomically by one findOneAndUpdate with an aggregation
 * pipeline, so concurrent hits from several gateways never over-count or under-count.
 * Wired by infra/cluster.ts when STORE=cluster. Idle keys expire by a TTL index.
 */
import type { Db } from 'mongodb';
import { evaluateWindow, type RateLimiter } from '../ports/rate-limiter.js';

// The window rule is the port's (evaluateWindow), so both adapters decide alike; hit times
// here are wall-clock ms (several gateways share them), so a clock set back keeps hits
// counted longer than their window, though never with a Retry-After beyond it.

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
