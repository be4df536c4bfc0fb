/** The embedded blob store's journal: group commit, reads before materialisation, recovery of a crashed process's segments. */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createFsBlobStore, JOURNAL_MAX_BLOB } from '../../infra/blobs/fs-blob-store.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const fileOf = (dir: string, key: string) => path.join(dir, key.slice(0, 2), key.slice(2, 4), key);

function record(content: Buffer): Buffer {
  const header = Buffer.alloc(40);
  header.write('BLB1', 0, 'latin1');
  header.write(sha(content), 4, 32, 'hex');
  header.writeUInt32BE(content.length, 36);
  return Buffer.concat([header, content]);
}

describe('fs blob store journal', () => {
  const dirs: string[] = [];
  const tmp = () => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'ais-blobj-'));
    dirs.push(d);
    return d;
  };
  afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

  test('concurrent small puts are durable in the journal and readable at once; big ones go to their own file', async () => {
    const dir = tmp();
    const blobs = createFsBlobStore({ dir });
    const contents = Array.from({ length: 20 }, (_, i) => Buffer.from(`message ${i}`));
    const refs = await Promise.all(contents.map((c) => blobs.put(c)));
    // Readable right away (from memory or file), whatever the materialisation's progress.
    for (const [i, ref] of refs.entries()) expect((await blobs.get(ref.key))?.toString()).toBe(`message ${i}`);
    // Every acknowledged small blob is in the journal.
    const journal = Buffer.concat(fs.readdirSync(path.join(dir, 'journal')).map((f) => fs.readFileSync(path.join(dir, 'journal', f))));
    for (const c of contents) expect(journal.includes(record(c))).toBe(true);

    const big = Buffer.alloc(JOURNAL_MAX_BLOB + 1, 7);
    const bigRef = await blobs.put(big);
    expect(fs.statSync(fileOf(dir, bigRef.key)).size).toBe(big.length);
    expect(journal.includes(big.subarray(0, 64))).toBe(false);
  });

  test('a new process replays the segments a crash left behind (a torn tail is ignored) and deletes them', async () => {
    const dir = tmp();
    fs.mkdirSync(path.join(dir, 'journal'), { recursive: true });
    const a = Buffer.from('acknowledged before the crash');
    const b = Buffer.from('also acknowledged');
    const torn = record(Buffer.from('never acknowledged')).subarray(0, 50);
    fs.writeFileSync(path.join(dir, 'journal', '000000000007.log'), Buffer.concat([record(a), record(b), torn]));

    const blobs = createFsBlobStore({ dir });
    expect((await blobs.get(sha(a)))?.toString()).toBe(a.toString());
    expect(fs.readFileSync(fileOf(dir, sha(b))).toString()).toBe(b.toString());
    expect(await blobs.has(sha(Buffer.from('never acknowledged')))).toBe(false);
    // The old segment is gone; new puts go to a later one.
    expect(fs.readdirSync(path.join(dir, 'journal'))).toEqual(['000000000008.log']);
    const c = await blobs.put(Buffer.from('after recovery'));
    expect((await blobs.get(c.key))?.toString()).toBe('after recovery');
  });
});
