/**
 * The read-store contract against MongoDB (writer mode), when MONGO_URL is set
 * (a replica set: transactions; from the host, as docs/DEPLOYMENT.md says,
 * `mongodb://localhost:27017/contract?directConnection=true`, since the member is named
 * `mongo` inside the compose network; `npm run test:cluster`), plus the follower mode and
 * the lease fencing. Without MONGO_URL, one test says so and passes: no MongoDB runs on our
 * machines.
 */
import { randomUUID } from 'node:crypto';
import { LeaseLostError, openMongoReadStore, type MongoReadStore } from '../../infra/mongodb/read-store.js';
import { acquireLease, tryAcquireLease } from '../../infra/mongodb/lease.js';
import { createMongoRateLimiter } from '../../infra/mongodb/rate-limiter.js';
import { readStoreContract } from './read-store.contract.js';

const url = process.env.MONGO_URL;
const database = `contract_${randomUUID().slice(0, 8)}`;

if (url) {
  readStoreContract('mongodb', async () => {
    const store = await openMongoReadStore({ url, database, mode: 'writer' });
    return {
      store,
      cleanup: async () => {
        await store.db.dropDatabase();
        await store.close();
      },
    };
  });

  describe('MongoDB read store: cluster modes', () => {
    let writer: MongoReadStore;
    let follower: MongoReadStore;
    const db = `${database}_modes`;
    beforeAll(async () => {
      writer = await openMongoReadStore({ url, database: db, mode: 'writer' });
      follower = await openMongoReadStore({ url, database: db, mode: 'follower', pollMs: 5 });
    });
    afterAll(async () => {
      await writer.db.dropDatabase();
      await Promise.all([writer.close(), follower.close()]);
    });

    it('follower commits write nothing and wait for the writer to reach their position', async () => {
      await writer.ensureCollections([{ name: 'docs' }]);
      let settled = false;
      const waiting = follower.commit('p1', '5', [{ collection: 'docs', id: 'a', doc: { id: 'a', by: 'follower' } }]).then(() => (settled = true));
      await new Promise((r) => setTimeout(r, 100));
      expect(settled).toBe(false);
      await expect(follower.collection('docs').get('a')).resolves.toBeNull();
      await writer.commit('p1', '6', [{ collection: 'docs', id: 'a', doc: { id: 'a', by: 'writer' } }]);
      await waiting;
      await expect(follower.collection('docs').get('a')).resolves.toEqual({ id: 'a', by: 'writer' });
      await expect(follower.reset('p1', ['docs'])).rejects.toThrow(/worker/);
    });

    it('fences commits by the lease: a writer that lost it cannot write', async () => {
      const name = `lease_${randomUUID().slice(0, 8)}`;
      const lease = await acquireLease(writer.db, name, 'owner-a', { ttlMs: 60_000 });
      const fenced = await openMongoReadStore({ url, database: db, mode: 'writer', lease: { name, owner: 'owner-a' } });
      const intruder = await openMongoReadStore({ url, database: db, mode: 'writer', lease: { name, owner: 'owner-b' } });
      try {
        await fenced.commit('p2', '1', [{ collection: 'docs', id: 'f', doc: { id: 'f' } }]);
        await expect(intruder.commit('p2', '2', [])).rejects.toBeInstanceOf(LeaseLostError);
        expect(await tryAcquireLease(writer.db, name, 'owner-b', 60_000)).toBe(false);
        await lease.release();
        expect(await tryAcquireLease(writer.db, name, 'owner-b', 60_000)).toBe(true);
        await expect(fenced.commit('p2', '3', [])).rejects.toBeInstanceOf(LeaseLostError);
        await expect(writer.getCheckpoint('p2')).resolves.toBe('1');
      } finally {
        await Promise.all([fenced.close(), intruder.close()]);
      }
    });

    it('shares rate-limit windows between limiter instances', async () => {
      let t = 1_000_000;
      const a = await createMongoRateLimiter(writer.db, () => t);
      const b = await createMongoRateLimiter(follower.db, () => t);
      expect((await a.hit('k', 2, 60)).allowed).toBe(true);
      expect((await b.hit('k', 2, 60)).allowed).toBe(true);
      expect(await a.hit('k', 2, 60)).toEqual({ allowed: false, retryAfter: 60, remaining: 0 });
      t += 60_000;
      expect((await b.hit('k', 2, 60)).allowed).toBe(true);
    });
  });
} else {
  describe('ReadStore contract: mongodb', () => {
    it('is skipped without MONGO_URL', () => {
      console.log('SKIPPED: MongoDB read-store contract suite (set MONGO_URL to run)');
      expect(url).toBeFalsy();
    });
  });
}
