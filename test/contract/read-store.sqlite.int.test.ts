import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openDatabase } from '../../infra/sqlite/driver.js';
import { openSqliteReadStore } from '../../infra/sqlite/read-store.js';
import { readStoreContract } from './read-store.contract.js';

function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'read-store-'));
}

readStoreContract('sqlite', async () => {
  const dir = tempDir();
  const store = openSqliteReadStore({ file: path.join(dir, 'read.db') });
  return {
    store,
    cleanup: async () => {
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});

// The same contract with a tiny read cache, so that eviction runs all the time.
readStoreContract('sqlite, 3-entry read cache', async () => {
  const dir = tempDir();
  const store = openSqliteReadStore({ file: path.join(dir, 'read.db'), cache: { maxEntries: 3, maxChars: 1_000_000 } });
  return {
    store,
    cleanup: async () => {
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});

describe('SQLite read store', () => {
  let dir: string;
  beforeEach(() => {
    dir = tempDir();
  });
  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('should keep documents and checkpoints across close and reopen', async () => {
    const file = path.join(dir, 'read.db');
    const first = openSqliteReadStore({ file });
    await first.ensureCollections([{ name: 'agents', indexes: [['owner', 'createdAt']] }]);
    await first.commit('agents:v1', '12', [{ collection: 'agents', id: 'a1', doc: { id: 'a1', owner: 'o', createdAt: 'now' } }]);
    await first.close();

    const second = openSqliteReadStore({ file });
    await expect(second.getCheckpoint('agents:v1')).resolves.toBe('12');
    await expect(second.collection('agents').findOne({ owner: 'o' })).resolves.toEqual({ id: 'a1', owner: 'o', createdAt: 'now' });
    await second.close();
  });

  it('should fail every commit once its writer thread died, and keep answering reads', async () => {
    const store = openSqliteReadStore({ file: path.join(dir, 'read.db') });
    try {
      await store.commit('p', '1', [{ collection: 'agents', id: 'a1', doc: { id: 'a1', n: 1 } }]);
      await store.crashWriterForTesting();
      await expect(store.commit('p', '2', [{ collection: 'agents', id: 'a2', doc: { id: 'a2', n: 2 } }])).rejects.toThrow(/writer thread/);
      await expect(store.commit('p', '3', [])).rejects.toThrow(/writer thread/);
      await expect(store.collection('agents').get('a1')).resolves.toEqual({ id: 'a1', n: 1 });
      await expect(store.getCheckpoint('p')).resolves.toBe('1');
    } finally {
      await store.close();
    }
  });

  it('should reject collection and field names that are not safe in SQL', async () => {
    const store = openSqliteReadStore({ file: path.join(dir, 'read.db') });
    try {
      await expect(store.ensureCollections([{ name: 'x"; DROP TABLE y; --' }])).rejects.toThrow(/invalid collection name/);
      expect(() => store.collection('Upper')).toThrow(/invalid collection name/);
      await expect(store.ensureCollections([{ name: 'ok', indexes: [["a') --"]] }])).rejects.toThrow(/invalid field name/);
      await expect(store.collection('ok').find({ where: { 'a.b': 1 } })).rejects.toThrow(/invalid field name/);
      await expect(store.collection('ok').find({ orderBy: { field: "x'", direction: 'asc' } })).rejects.toThrow(/invalid field name/);
    } finally {
      await store.close();
    }
  });

  it('should create an expression index per index spec that queries use', async () => {
    const file = path.join(dir, 'read.db');
    const store = openSqliteReadStore({ file });
    await store.ensureCollections([{ name: 'inboxes', indexes: [['owner', 'createdAt']] }]);
    await store.close();

    const db = openDatabase(file, { readonly: true });
    try {
      const plan = db
        .prepare(
          `EXPLAIN QUERY PLAN SELECT id FROM "inboxes" WHERE json_extract(doc, '$.owner') = ? ORDER BY json_extract(doc, '$.createdAt')`,
        )
        .all('o') as { detail: string }[];
      expect(plan.map((p) => p.detail).join('\n')).toContain('USING INDEX ix_inboxes(owner,createdAt)');
    } finally {
      db.close();
    }
  });

  it('should drop an index a collection no longer declares, and leave other collections alone', async () => {
    const file = path.join(dir, 'read.db');
    const store = openSqliteReadStore({ file });
    await store.ensureCollections([
      { name: 'inboxes', indexes: [['owner', 'createdAt'], ['inbox']] },
      { name: 'other', indexes: [['owner']] },
    ]);
    // a later version sorts by `seq` and names only its own collection
    await store.ensureCollections([{ name: 'inboxes', indexes: [['owner', 'seq'], ['inbox']] }]);
    await store.close();

    const db = openDatabase(file, { readonly: true });
    try {
      const names = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'ix%' ORDER BY name").all() as { name: string }[]).map((r) => r.name);
      expect(names).toEqual(['ix_inboxes(inbox)', 'ix_inboxes(owner,seq)', 'ix_other(owner)']);
    } finally {
      db.close();
    }
  });

  describe('read cache', () => {
    let store: ReturnType<typeof openSqliteReadStore>;
    beforeEach(async () => {
      store = openSqliteReadStore({ file: path.join(dir, 'read.db') });
      await store.ensureCollections([{ name: 'agents', indexes: [['owner', 'n']] }, { name: 'other' }]);
      await store.commit('p', '1', [
        { collection: 'agents', id: 'a1', doc: { id: 'a1', owner: 'o', n: 1, tags: ['x'] } },
        { collection: 'agents', id: 'a2', doc: { id: 'a2', owner: 'o', n: 2, tags: [] } },
        { collection: 'other', id: 'z', doc: { id: 'z', v: 1 } },
      ]);
    });
    afterEach(async () => {
      await store.close();
    });

    const reads = async () => {
      const agents = store.collection('agents');
      return {
        a1: await agents.get('a1'),
        a3: await agents.get('a3'),
        one: await agents.findOne({ owner: 'o', n: 2 }),
        page: (await agents.find({ where: { owner: 'o' }, orderBy: { field: 'n', direction: 'asc' } })).items.map((d) => d.id),
        count: await agents.count({ owner: 'o' }),
        other: await store.collection('other').get('z'),
      };
    };

    it('should answer every read again after a commit that changes what it read', async () => {
      expect(await reads()).toEqual({ a1: { id: 'a1', owner: 'o', n: 1, tags: ['x'] }, a3: null, one: { id: 'a2', owner: 'o', n: 2, tags: [] }, page: ['a1', 'a2'], count: 2, other: { id: 'z', v: 1 } });
      expect(await reads()).toEqual(await reads()); // cached answers are the same answers

      await store.commit('p', '2', [
        { collection: 'agents', id: 'a1', doc: { id: 'a1', owner: 'o', n: 5, tags: ['y'] } }, // updated
        { collection: 'agents', id: 'a2', doc: null }, // deleted
        { collection: 'agents', id: 'a3', doc: { id: 'a3', owner: 'o', n: 0, tags: [] } }, // created (was a cached null)
      ]);
      expect(await reads()).toEqual({
        a1: { id: 'a1', owner: 'o', n: 5, tags: ['y'] },
        a3: { id: 'a3', owner: 'o', n: 0, tags: [] },
        one: null,
        page: ['a3', 'a1'],
        count: 2,
        other: { id: 'z', v: 1 },
      });
    });

    it('should forget the collections of a reset', async () => {
      await reads();
      await store.reset('p', ['agents']);
      expect(await reads()).toEqual({ a1: null, a3: null, one: null, page: [], count: 0, other: { id: 'z', v: 1 } });
    });

    it('should not let a replayed (ignored) commit leave anything stale', async () => {
      await reads();
      await store.commit('p', '1', [{ collection: 'agents', id: 'a1', doc: { id: 'a1', owner: 'o', n: 99, tags: [] } }]);
      expect((await reads()).a1).toEqual({ id: 'a1', owner: 'o', n: 1, tags: ['x'] });
    });

    it('should return frozen documents, so that a caller modifying one fails instead of corrupting the cache', async () => {
      const agents = store.collection('agents');
      for (const doc of [await agents.get('a1'), await agents.findOne({ owner: 'o' }), (await agents.find({ where: { owner: 'o' } })).items[0]]) {
        expect(Object.isFrozen(doc)).toBe(true);
        expect(() => {
          (doc as unknown as { n: number }).n = 7;
        }).toThrow(TypeError);
        expect(() => (doc!.tags as string[]).push('z')).toThrow(TypeError);
      }
      const page = await agents.find({ where: { owner: 'o' } });
      expect(() => page.items.reverse()).toThrow(/read.only|frozen|not extensible/); // (an Array method: TypeError of another realm under Jest)
      expect(await agents.get('a1')).toEqual({ id: 'a1', owner: 'o', n: 1, tags: ['x'] });
    });

    it('should stay correct while evicting (bounded cache)', async () => {
      const tiny = openSqliteReadStore({ file: path.join(dir, 'tiny.db'), cache: { maxEntries: 2, maxChars: 200 } });
      try {
        const docs = Array.from({ length: 20 }, (_, i) => ({ id: `d${String(i).padStart(2, '0')}`, n: i, pad: 'x'.repeat(i * 5) }));
        await tiny.commit('p', '1', docs.map((doc) => ({ collection: 'many', id: doc.id, doc })));
        for (let round = 0; round < 2; round++) {
          for (const doc of docs) await expect(tiny.collection('many').get(doc.id)).resolves.toEqual(doc);
          await expect(tiny.collection('many').count({ n: 3 })).resolves.toBe(1);
          await expect(tiny.collection('many').find({ limit: 3 })).resolves.toMatchObject({ items: docs.slice(0, 3) });
        }
        await tiny.commit('p', '2', [{ collection: 'many', id: 'd03', doc: null }]);
        await expect(tiny.collection('many').count({ n: 3 })).resolves.toBe(0);
        await expect(tiny.collection('many').get('d03')).resolves.toBeNull();
      } finally {
        await tiny.close();
      }
    });
  });
});
