/**
 * The behaviour every ReadStore adapter must have (SQLite today, MongoDB later).
 *
 * Nothing here knows the adapter: each test works in collections and projections named
 * uniquely for this run, so the suite can share a database server with other runs.
 */
import { randomBytes } from 'node:crypto';
import type { Doc, ReadStore } from '../../infra/ports/read-store.js';

type Open = () => Promise<{ store: ReadStore; cleanup: () => Promise<void> }>;

/** Registers the read-store contract suite for one adapter. */
export function readStoreContract(adapterName: string, open: Open): void {
  describe(`ReadStore contract: ${adapterName}`, () => {
    let store: ReadStore;
    let cleanup: () => Promise<void>;
    const run = `t${randomBytes(4).toString('hex')}`;
    let counter = 0;
    /** A collection or projection name unique to this run and test. */
    const unique = (what: string) => `${run}_${what}_${++counter}`;

    beforeAll(async () => {
      ({ store, cleanup } = await open());
    });
    afterAll(async () => {
      await cleanup();
    });

    /** Given a collection holding `docs`, committed by a fresh projection at position 1. */
    async function givenCollection(docs: Doc[], indexes: string[][] = []): Promise<string> {
      const name = unique('c');
      await store.ensureCollections([{ name, indexes }]);
      await store.commit(unique('p'), '1', docs.map((doc) => ({ collection: name, id: doc.id, doc })));
      return name;
    }

    const ids = (docs: Doc[]) => docs.map((d) => d.id);

    const people: Doc[] = [
      { id: 'a', name: 'Ada', age: 36, admin: true, team: 'x', nick: null },
      { id: 'b', name: 'Bob', age: 25, admin: false, team: 'y', nick: 'bobby' },
      { id: 'c', name: 'Cy', age: 36, admin: false, team: 'x', nick: null },
      { id: 'd', name: 'Di', age: 1, admin: true, team: 'y', nick: 'd' },
      { id: 'e', name: 'Ed', age: 0, admin: false, team: 'x' }, // no nick at all
    ];

    describe('reads', () => {
      it('should return a document by id, and null for an unknown id', async () => {
        const c = await givenCollection([{ id: 'x1', nested: { list: [1, 'two', { three: 3 }] }, n: 1.5 }]);
        await expect(store.collection(c).get('x1')).resolves.toEqual({ id: 'x1', nested: { list: [1, 'two', { three: 3 }] }, n: 1.5 });
        await expect(store.collection(c).get('nope')).resolves.toBeNull();
      });

      it('should return many documents by id in the order asked, null for unknown ids', async () => {
        const c = await givenCollection(people);
        await expect(store.collection(c).getMany(['c', 'nope', 'a', 'c'])).resolves.toEqual([people[2], null, people[0], people[2]]);
        await expect(store.collection(c).getMany([])).resolves.toEqual([]);
        await expect(store.collection(unique('empty')).getMany(['a'])).resolves.toEqual([null]);
      });

      it('should answer many documents by id as get does, whatever characters the ids hold', async () => {
        const odd = ['k\ud800', 'ü\u0301', 'a\u0000b', '01', '1e3', '😀'];
        const c = await givenCollection(odd.map((id, n) => ({ id, n })));
        const coll = store.collection(c);
        await expect(coll.getMany(odd)).resolves.toEqual(odd.map((id, n) => ({ id, n })));
        await expect(Promise.all(odd.map((id) => coll.get(id)))).resolves.toEqual(odd.map((id, n) => ({ id, n }))); // nothing wrong cached
      });

      it('should answer many documents by id as they are after a commit', async () => {
        const c = await givenCollection(people);
        const coll = store.collection(c);
        await expect(coll.getMany(['a', 'f'])).resolves.toEqual([people[0], null]); // (a cache may now hold both)
        await store.commit(unique('p'), '1', [
          { collection: c, id: 'a', doc: null },
          { collection: c, id: 'f', doc: { id: 'f', name: 'Fay' } },
        ]);
        await expect(coll.getMany(['a', 'f'])).resolves.toEqual([null, { id: 'f', name: 'Fay' }]);
      });

      it('should find one matching document, or null', async () => {
        const c = await givenCollection(people);
        await expect(store.collection(c).findOne({ name: 'Bob' })).resolves.toEqual(people[1]);
        await expect(store.collection(c).findOne({ name: 'Zed' })).resolves.toBeNull();
      });

      it('should count all documents or the matching ones', async () => {
        const c = await givenCollection(people);
        await expect(store.collection(c).count()).resolves.toBe(5);
        await expect(store.collection(c).count({ team: 'x' })).resolves.toBe(3);
        await expect(store.collection(c).count({ team: 'z' })).resolves.toBe(0);
      });

      it('should return every document, ordered by id, when the query is empty', async () => {
        const c = await givenCollection([...people].reverse());
        const page = await store.collection(c).find();
        expect(ids(page.items)).toEqual(['a', 'b', 'c', 'd', 'e']);
        expect(page.next).toBeNull();
      });

      it('should read an unknown collection as empty', async () => {
        const c = unique('never_created');
        await store.ensureCollections([{ name: c }]);
        await expect(store.collection(c).find()).resolves.toEqual({ items: [], next: null });
        await expect(store.collection(c).count()).resolves.toBe(0);
      });

      it('should accept ensureCollections twice', async () => {
        const c = unique('c');
        const spec = { name: c, indexes: [['team', 'age'], ['admin']] };
        await store.ensureCollections([spec]);
        await store.ensureCollections([spec]);
        await expect(store.collection(c).count()).resolves.toBe(0);
      });
    });

    describe('equality', () => {
      it('should match strings and numbers', async () => {
        const c = await givenCollection(people, [['team', 'age']]);
        expect(ids((await store.collection(c).find({ where: { team: 'x' } })).items)).toEqual(['a', 'c', 'e']);
        expect(ids((await store.collection(c).find({ where: { age: 36 } })).items)).toEqual(['a', 'c']);
        expect(ids((await store.collection(c).find({ where: { team: 'x', age: 36 } })).items)).toEqual(['a', 'c']);
        expect(ids((await store.collection(c).find({ where: { age: '36' } })).items)).toEqual([]);
      });

      it('should match booleans without confusing them with 1 and 0', async () => {
        const c = await givenCollection(people, [['admin']]);
        expect(ids((await store.collection(c).find({ where: { admin: true } })).items)).toEqual(['a', 'd']);
        expect(ids((await store.collection(c).find({ where: { admin: false } })).items)).toEqual(['b', 'c', 'e']);
        expect(ids((await store.collection(c).find({ where: { age: 1 } })).items)).toEqual(['d']);
        expect(ids((await store.collection(c).find({ where: { age: 0 } })).items)).toEqual(['e']);
        expect(ids((await store.collection(c).find({ where: { admin: 1 } })).items)).toEqual([]);
      });

      it('should match null against null and missing fields', async () => {
        const c = await givenCollection(people);
        expect(ids((await store.collection(c).find({ where: { nick: null } })).items)).toEqual(['a', 'c', 'e']);
        await expect(store.collection(c).count({ nick: null, team: 'x' })).resolves.toBe(3);
        await expect(store.collection(c).count({ nick: 'd' })).resolves.toBe(1);
      });

      it('should match by id', async () => {
        const c = await givenCollection(people);
        expect(ids((await store.collection(c).find({ where: { id: 'c' } })).items)).toEqual(['c']);
      });
    });

    describe('ranges', () => {
      it('should apply gt, gte, lt and lte on numbers', async () => {
        const c = await givenCollection(people, [['age']]);
        const find = async (range: Record<string, number>) =>
          ids((await store.collection(c).find({ range: { age: range }, orderBy: { field: 'age', direction: 'asc' } })).items);
        expect(await find({ gt: 25 })).toEqual(['a', 'c']);
        expect(await find({ gte: 25 })).toEqual(['b', 'a', 'c']);
        expect(await find({ lt: 25 })).toEqual(['e', 'd']);
        expect(await find({ lte: 25 })).toEqual(['e', 'd', 'b']);
        expect(await find({ gt: 0, lt: 36 })).toEqual(['d', 'b']);
      });

      it('should apply ranges on strings, combined with equality', async () => {
        const c = await givenCollection(people);
        const page = await store.collection(c).find({ where: { team: 'x' }, range: { name: { gte: 'B', lt: 'E' } } });
        expect(ids(page.items)).toEqual(['c']);
      });

      it('should not compare across types', async () => {
        const c = await givenCollection([
          { id: '1', v: 5 },
          { id: '2', v: 'five' },
          { id: '3', v: true },
          { id: '4', v: null },
        ]);
        expect(ids((await store.collection(c).find({ range: { v: { gt: 0 } } })).items)).toEqual(['1']);
        expect(ids((await store.collection(c).find({ range: { v: { gte: 'a' } } })).items)).toEqual(['2']);
      });
    });

    describe('ordering and pagination', () => {
      const scores: Doc[] = [
        { id: 'k3', score: 2, group: 'g' },
        { id: 'k1', score: 1, group: 'g' },
        { id: 'k5', score: 2, group: 'h' },
        { id: 'k2', score: 3, group: 'g' },
        { id: 'k4', score: 2, group: 'g' },
        { id: 'k6', score: 1, group: 'h' },
        { id: 'k7', score: 3, group: 'g' },
      ];

      it('should order ascending with ties broken by ascending id', async () => {
        const c = await givenCollection(scores, [['score']]);
        const page = await store.collection(c).find({ orderBy: { field: 'score', direction: 'asc' } });
        expect(ids(page.items)).toEqual(['k1', 'k6', 'k3', 'k4', 'k5', 'k2', 'k7']);
        expect(page.next).toBeNull();
      });

      it('should order descending with ties broken by descending id', async () => {
        const c = await givenCollection(scores, [['score']]);
        const page = await store.collection(c).find({ orderBy: { field: 'score', direction: 'desc' } });
        expect(ids(page.items)).toEqual(['k7', 'k2', 'k5', 'k4', 'k3', 'k6', 'k1']);
      });

      it('should order by id descending', async () => {
        const c = await givenCollection(scores);
        const page = await store.collection(c).find({ orderBy: { field: 'id', direction: 'desc' } });
        expect(ids(page.items)).toEqual(['k7', 'k6', 'k5', 'k4', 'k3', 'k2', 'k1']);
      });

      /** Follows `next` until the end, collecting every page. */
      async function walk(c: string, query: Parameters<ReturnType<ReadStore['collection']>['find']>[0]) {
        const pages: string[][] = [];
        let cursor: string | null = null;
        do {
          const page = await store.collection(c).find({ ...query, cursor });
          pages.push(ids(page.items));
          cursor = page.next;
          if (pages.length > 50) throw new Error('pagination does not terminate');
        } while (cursor);
        return pages;
      }

      it.each(['asc', 'desc'] as const)('should walk every document exactly once, in order (%s)', async (direction) => {
        const docs: Doc[] = [...scores, { id: 'n1', score: null, group: 'g' }, { id: 'n0', group: 'g' }, { id: 'n2', score: null, group: 'g' }];
        const c = await givenCollection(docs, [['group', 'score']]);
        const query = { orderBy: { field: 'score', direction } };
        const all = ids((await store.collection(c).find(query)).items);
        expect(all).toHaveLength(docs.length);

        for (const limit of [1, 2, 3, 10]) {
          const pages = await walk(c, { ...query, limit });
          expect(pages.flat()).toEqual(all);
          expect(pages.slice(0, -1).every((p) => p.length === limit)).toBe(true);
        }

        const filtered = ids((await store.collection(c).find({ ...query, where: { group: 'g' } })).items);
        expect((await walk(c, { ...query, where: { group: 'g' }, limit: 2 })).flat()).toEqual(filtered);
      });

      it('should refuse a crafted cursor whose sort value is not a scalar (invalid_cursor, never an engine error)', async () => {
        const c = await givenCollection(scores);
        for (const value of [{}, [], [1, 2], { a: 1 }]) {
          const cursor = Buffer.from(JSON.stringify([value, 'x'])).toString('base64url');
          await expect(store.collection(c).find({ limit: 2, orderBy: { field: 'score', direction: 'asc' }, cursor })).rejects.toMatchObject({ code: 'invalid_cursor' });
        }
      });

      it('should return no cursor when the last page is exactly full', async () => {
        const c = await givenCollection(scores);
        const first = await store.collection(c).find({ limit: 4 });
        expect(first.next).not.toBeNull();
        const second = await store.collection(c).find({ limit: 3, cursor: first.next });
        expect(ids(second.items)).toEqual(['k5', 'k6', 'k7']);
        expect(second.next).toBeNull();
      });

      it('should paginate on boolean sort fields', async () => {
        const c = await givenCollection(people);
        const query = { orderBy: { field: 'admin', direction: 'asc' as const } };
        const all = ids((await store.collection(c).find(query)).items);
        expect(all).toEqual(['b', 'c', 'e', 'a', 'd']);
        expect((await walk(c, { ...query, limit: 2 })).flat()).toEqual(all);
      });
    });

    describe('commits and checkpoints', () => {
      it('should round-trip a checkpoint, null before the first commit', async () => {
        const p = unique('p');
        await expect(store.getCheckpoint(p)).resolves.toBeNull();
        await store.commit(p, '42', []);
        await expect(store.getCheckpoint(p)).resolves.toBe('42');
      });

      it('should change nothing when the same commit is applied twice', async () => {
        const p = unique('p');
        const c = unique('c');
        await store.ensureCollections([{ name: c }]);
        await store.commit(p, '5', [{ collection: c, id: 'd1', doc: { id: 'd1', n: 1 } }]);
        await store.commit(p, '5', [{ collection: c, id: 'd1', doc: { id: 'd1', n: 2 } }, { collection: c, id: 'd2', doc: { id: 'd2' } }]);
        await expect(store.collection(c).find()).resolves.toEqual({ items: [{ id: 'd1', n: 1 }], next: null });
        await expect(store.getCheckpoint(p)).resolves.toBe('5');
      });

      it('should ignore a commit below the checkpoint', async () => {
        const p = unique('p');
        const c = unique('c');
        await store.ensureCollections([{ name: c }]);
        await store.commit(p, '10', [{ collection: c, id: 'd1', doc: { id: 'd1', n: 10 } }]);
        await store.commit(p, '9', [{ collection: c, id: 'd1', doc: { id: 'd1', n: 9 } }]);
        await expect(store.collection(c).get('d1')).resolves.toEqual({ id: 'd1', n: 10 });
        await expect(store.getCheckpoint(p)).resolves.toBe('10');
      });

      it('should compare positions as numbers, not strings', async () => {
        const p = unique('p');
        const c = unique('c');
        await store.ensureCollections([{ name: c }]);
        await store.commit(p, '9', [{ collection: c, id: 'd1', doc: { id: 'd1', n: 9 } }]);
        await store.commit(p, '10', [{ collection: c, id: 'd1', doc: { id: 'd1', n: 10 } }]);
        await expect(store.collection(c).get('d1')).resolves.toEqual({ id: 'd1', n: 10 });
        await expect(store.getCheckpoint(p)).resolves.toBe('10');
      });

      it('should keep checkpoints per projection', async () => {
        const [p1, p2] = [unique('p'), unique('p')];
        await store.commit(p1, '7', []);
        await store.commit(p2, '3', []);
        await expect(store.getCheckpoint(p1)).resolves.toBe('7');
        await expect(store.getCheckpoint(p2)).resolves.toBe('3');
      });

      it('should replace and delete documents', async () => {
        const p = unique('p');
        const c = unique('c');
        await store.ensureCollections([{ name: c }]);
        await store.commit(p, '1', [
          { collection: c, id: 'd1', doc: { id: 'd1', v: 'a', extra: true } },
          { collection: c, id: 'd2', doc: { id: 'd2', v: 'b' } },
        ]);
        await store.commit(p, '2', [
          { collection: c, id: 'd1', doc: { id: 'd1', v: 'a2' } },
          { collection: c, id: 'd2', doc: null },
          { collection: c, id: 'd3', doc: null }, // deleting a missing doc is fine
        ]);
        await expect(store.collection(c).find()).resolves.toEqual({ items: [{ id: 'd1', v: 'a2' }], next: null });
        await expect(store.collection(c).get('d2')).resolves.toBeNull();
      });

      it('should apply changes to several collections in one commit', async () => {
        const p = unique('p');
        const [c1, c2] = [unique('c'), unique('c')];
        await store.ensureCollections([{ name: c1 }, { name: c2 }]);
        await store.commit(p, '1', [
          { collection: c1, id: 'x', doc: { id: 'x' } },
          { collection: c2, id: 'y', doc: { id: 'y' } },
        ]);
        await expect(store.collection(c1).count()).resolves.toBe(1);
        await expect(store.collection(c2).count()).resolves.toBe(1);
      });

      it('should reset the collections and checkpoint of one projection only', async () => {
        const [p1, p2] = [unique('p'), unique('p')];
        const [c1, c2] = [unique('c'), unique('c')];
        await store.ensureCollections([{ name: c1 }, { name: c2 }]);
        await store.commit(p1, '4', [{ collection: c1, id: 'x', doc: { id: 'x' } }]);
        await store.commit(p2, '4', [{ collection: c2, id: 'y', doc: { id: 'y' } }]);

        await store.reset(p1, [c1]);

        await expect(store.collection(c1).count()).resolves.toBe(0);
        await expect(store.getCheckpoint(p1)).resolves.toBeNull();
        await expect(store.collection(c2).count()).resolves.toBe(1);
        await expect(store.getCheckpoint(p2)).resolves.toBe('4');
        // After a reset, a replay from the start is applied again.
        await store.commit(p1, '1', [{ collection: c1, id: 'x', doc: { id: 'x', again: true } }]);
        await expect(store.collection(c1).get('x')).resolves.toEqual({ id: 'x', again: true });
      });
    });

    it('should store and query unicode text as is', async () => {
      const texts = ['héllo wörld', '日本語のテキスト', 'emoji 🔐🤖👩‍💻', 'עברית', 'quote " backslash \\ nul \u0000 end', 'line\nbreak'];
      const docs = texts.map((text, i) => ({ id: `u${i}-ключ-🔑`, text, tags: [text] }));
      const c = await givenCollection(docs);
      for (const doc of docs) {
        await expect(store.collection(c).get(doc.id)).resolves.toEqual(doc);
        await expect(store.collection(c).findOne({ text: doc.text })).resolves.toEqual(doc);
      }
      await expect(store.collection(c).count()).resolves.toBe(texts.length);
    });
  });
}
