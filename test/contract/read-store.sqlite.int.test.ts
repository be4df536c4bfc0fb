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
});
