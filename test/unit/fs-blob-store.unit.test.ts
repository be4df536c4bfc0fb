/**
 * The embedded blob store's pack files: group commit, durability across a crash (a second
 * instance on the same directory, the first never closed), torn tails, sealing and idx
 * files, dedupe, the older layouts (journal segments, per-blob files). Real files, no mocks.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Readable } from 'node:stream';
import { createFsBlobStore, PACK_MAX_BLOB } from '../../infra/blobs/fs-blob-store.js';
import type { BlobStore } from '../../infra/ports/blob-store.js';
import { eventually } from '../support/eventually.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const fileOf = (dir: string, key: string) => path.join(dir, key.slice(0, 2), key.slice(2, 4), key);

function record(content: Buffer): Buffer {
  const header = Buffer.alloc(40);
  header.write('BLB1', 0, 'latin1');
  header.write(sha(content), 4, 32, 'hex');
  header.writeUInt32BE(content.length, 36);
  return Buffer.concat([header, content]);
}

const packsOf = (dir: string) => fs.readdirSync(path.join(dir, 'packs')).filter((f) => f.endsWith('.pack')).sort();
const idxsOf = (dir: string) => fs.readdirSync(path.join(dir, 'packs')).filter((f) => f.endsWith('.idx')).sort();
const allPacks = (dir: string) => Buffer.concat(packsOf(dir).map((f) => fs.readFileSync(path.join(dir, 'packs', f))));

async function drain(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** get, open and has all agree that `content` is stored. */
async function expectStored(blobs: BlobStore, content: Buffer): Promise<void> {
  const key = sha(content);
  expect((await blobs.get(key))?.equals(content)).toBe(true);
  expect(await blobs.has(key)).toBe(true);
  const opened = await blobs.open(key);
  expect(opened?.size).toBe(content.length);
  expect((await drain(opened!.stream)).equals(content)).toBe(true);
}

/** A fresh directory for one store; all of them are removed after the file's tests. */
const dirs: string[] = [];
const tmp = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'ais-blobs-'));
  dirs.push(d);
  return d;
};
afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

describe('fs blob store packs', () => {

  test('concurrent small puts are in the pack when they resolve and readable at once; big ones get their own file', async () => {
    const dir = tmp();
    const blobs = createFsBlobStore({ dir });
    const contents = Array.from({ length: 20 }, (_, i) => Buffer.from(`message ${i}`));
    const writtenWhenResolved: boolean[] = [];
    const refs = await Promise.all(
      contents.map((c, i) =>
        blobs.put(c).then((ref) => {
          writtenWhenResolved[i] = allPacks(dir).includes(record(c));
          return ref;
        }),
      ),
    );
    expect(writtenWhenResolved).toEqual(contents.map(() => true));
    for (const [i, ref] of refs.entries()) {
      expect(ref).toEqual({ key: sha(contents[i]), size: contents[i].length });
      await expectStored(blobs, contents[i]);
    }
    // Small blobs are never copied into files of their own.
    for (const ref of refs) expect(fs.existsSync(fileOf(dir, ref.key))).toBe(false);
    expect(packsOf(dir)).toEqual(['000000000001.pack']);

    const big = Buffer.alloc(PACK_MAX_BLOB + 1, 7);
    const bigRef = await blobs.put(big);
    expect(fs.statSync(fileOf(dir, bigRef.key)).size).toBe(big.length);
    expect(allPacks(dir).includes(big.subarray(0, 64))).toBe(false);
    await expectStored(blobs, big);
    const atLimit = Buffer.alloc(PACK_MAX_BLOB, 9);
    await blobs.put(atLimit);
    expect(allPacks(dir).includes(record(atLimit))).toBe(true);
  });

  test('every acknowledged blob survives a crash: a second instance reads it without the first closing', async () => {
    const dir = tmp();
    const first = createFsBlobStore({ dir });
    const small = Array.from({ length: 30 }, (_, i) => Buffer.from(`acknowledged ${i} `.repeat(i + 1)));
    const big = Buffer.alloc(PACK_MAX_BLOB + 10, 3);
    await Promise.all([...small, big].map((c) => first.put(c)));

    const second = createFsBlobStore({ dir });
    for (const c of [...small, big]) await expectStored(second, c);
    // The first instance's pack was sealed by the second's start; the second appends elsewhere.
    expect(idxsOf(dir)).toEqual(['000000000001.idx']);
    const later = await second.put(Buffer.from('after the restart'));
    expect(packsOf(dir)).toEqual(['000000000001.pack', '000000000002.pack']);
    expect(fs.readFileSync(path.join(dir, 'packs', '000000000002.pack')).includes(record(Buffer.from('after the restart')))).toBe(true);
    await expectStored(createFsBlobStore({ dir }), Buffer.from('after the restart'));
    expect((await second.get(later.key))?.toString()).toBe('after the restart');
  });

  test('a start that stores nothing leaves no pack behind', async () => {
    const dir = tmp();
    const first = createFsBlobStore({ dir });
    await first.put(Buffer.from('one blob'));
    for (let i = 0; i < 3; i++) {
      const restarted = createFsBlobStore({ dir });
      await expectStored(restarted, Buffer.from('one blob')); // reads only
    }
    expect(packsOf(dir)).toEqual(['000000000001.pack']);
  });

  test('instances sharing a directory see what the other one wrote after they started', async () => {
    const dir = tmp();
    const a = createFsBlobStore({ dir, segmentBytes: 300 });
    await a.put(Buffer.from('before b'));
    const b = createFsBlobStore({ dir, segmentBytes: 300 });
    await b.has(sha(Buffer.from('before b')));
    const fromA = Array.from({ length: 12 }, (_, i) => Buffer.from(`written by a after b started, ${i}`.padEnd(60, '.')));
    for (const c of fromA) await a.put(c); // fills a's pack, seals it, starts others
    const fromB = Buffer.from('written by b');
    await b.put(fromB);
    for (const c of fromA) await expectStored(b, c);
    await expectStored(a, fromB);
    // Different instances never append to the same pack.
    const records = allPacks(dir);
    for (const c of [...fromA, fromB]) expect(records.indexOf(record(c))).toBe(records.lastIndexOf(record(c)));
  });

  test('a torn tail is ignored and never appended to: new puts go to a fresh pack', async () => {
    const dir = tmp();
    const first = createFsBlobStore({ dir });
    const a = Buffer.from('acknowledged before the crash');
    const b = Buffer.from('also acknowledged');
    await first.put(a);
    await first.put(b);
    const tornContent = Buffer.from('never acknowledged');
    const newest = path.join(dir, 'packs', packsOf(dir).at(-1)!);
    fs.appendFileSync(newest, record(tornContent).subarray(0, 50));

    const second = createFsBlobStore({ dir });
    await expectStored(second, a);
    await expectStored(second, b);
    expect(await second.has(sha(tornContent))).toBe(false);
    expect(await second.get(sha(tornContent))).toBeNull();
    const c = Buffer.from('after recovery');
    await second.put(c);
    const packs = packsOf(dir);
    expect(packs).toHaveLength(2);
    expect(fs.readFileSync(path.join(dir, 'packs', packs[1])).equals(record(c))).toBe(true);
    // The torn pack kept its bytes (nothing was appended after the torn record).
    expect(fs.readFileSync(newest).length).toBe(record(a).length + record(b).length + 50);

    const third = createFsBlobStore({ dir });
    for (const content of [a, b, c]) await expectStored(third, content);
    expect(await third.has(sha(tornContent))).toBe(false);
    // A put of the torn content now is a normal one.
    await third.put(tornContent);
    await expectStored(createFsBlobStore({ dir }), tornContent);
  });

  test('full packs are sealed with an idx that later starts use; a corrupt idx is rebuilt by a scan', async () => {
    const dir = tmp();
    const blobs = createFsBlobStore({ dir, segmentBytes: 256 });
    const contents = Array.from({ length: 40 }, (_, i) => Buffer.from(`sealed blob number ${i} `.repeat(1 + (i % 4))));
    for (const c of contents) await blobs.put(c); // one batch each: deterministic pack sizes
    await Promise.all(contents.slice(0, 5).map((c) => blobs.put(Buffer.concat([c, Buffer.from('!')]))));
    contents.push(...contents.slice(0, 5).map((c) => Buffer.concat([c, Buffer.from('!')])));
    const packs = packsOf(dir);
    expect(packs.length).toBeGreaterThan(5);
    // Every pack but the active one gets its idx (written in the background).
    await eventually(() => idxsOf(dir).length === packs.length - 1, 5_000, 10);
    for (const c of contents) await expectStored(blobs, c); // sealed ones through the in-memory index

    // Break every record header of the first pack: a scan would find nothing there, so
    // reading its blobs proves the idx is used.
    const firstPack = path.join(dir, 'packs', packs[0]);
    const original = fs.readFileSync(firstPack);
    const broken = Buffer.from(original);
    for (let at = 0; at < broken.length; at += 40 + broken.readUInt32BE(at + 36)) broken.write('XXXX', at, 'latin1');
    fs.writeFileSync(firstPack, broken);
    const inFirst = contents.filter((c) => original.includes(record(c)));
    expect(inFirst.length).toBeGreaterThan(0);
    const reopened = createFsBlobStore({ dir, segmentBytes: 256 });
    for (const c of contents) await expectStored(reopened, c);
    fs.writeFileSync(firstPack, original);

    // Flip a byte of the second pack's idx: detected by the checksum, the pack rescanned and
    // the idx rewritten.
    const idxFile = path.join(dir, 'packs', idxsOf(dir)[1]);
    const idx = fs.readFileSync(idxFile);
    const corrupt = Buffer.from(idx);
    corrupt[1044 + 5] ^= 0xff; // inside the first entry's key
    fs.writeFileSync(idxFile, corrupt);
    const rebuilt = createFsBlobStore({ dir, segmentBytes: 256 });
    for (const c of contents) await expectStored(rebuilt, c);
    const rewritten = fs.readFileSync(idxFile);
    expect(rewritten.equals(corrupt)).toBe(false);
    expect(createHash('sha256').update(rewritten.subarray(0, -32)).digest().equals(rewritten.subarray(-32))).toBe(true);
    expect(rewritten.subarray(16, -32).equals(idx.subarray(16, -32))).toBe(true); // same entries
    expect(packsOf(dir).slice(0, packs.length)).toEqual(packs); // nothing deleted
  });

  test('read handles are bounded: the least recently read pack is closed, and reopened when read again', async () => {
    const dir = tmp();
    const openPacks = () =>
      fs.readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return fs.readlinkSync(path.join('/proc/self/fd', fd)).startsWith(path.join(dir, 'packs'));
        } catch {
          return false; // closed meanwhile
        }
      }).length;
    const writer = createFsBlobStore({ dir, segmentBytes: 200, maxOpenPacks: 2 });
    const contents = Array.from({ length: 30 }, (_, i) => Buffer.from(`bounded handle blob ${i} `.repeat(4)));
    for (const c of contents) await writer.put(c); // a pack or so each
    expect(packsOf(dir).length).toBeGreaterThan(10);
    for (const c of contents) await expectStored(writer, c);
    // Evicted handles close in the background: give a close in flight a moment to land.
    const settledCount = async (bound: number) => {
      for (let i = 0; i < 50 && openPacks() > bound; i++) await new Promise((r) => setTimeout(r, 10));
      return openPacks();
    };
    expect(await settledCount(3)).toBeLessThanOrEqual(3); // 2 read handles + the active pack's

    const reader = createFsBlobStore({ dir, maxOpenPacks: 2 });
    for (const c of [...contents, ...contents.reverse()]) await expectStored(reader, c);
    expect(await settledCount(3 + 2)).toBeLessThanOrEqual(3 + 2);
  });

  test('the same content is stored once, put concurrently, sequentially or after a restart', async () => {
    const dir = tmp();
    const blobs = createFsBlobStore({ dir });
    const content = Buffer.from('the same attachment');
    const refs = await Promise.all([blobs.put(content), blobs.put(content), blobs.put(Buffer.from(content))]);
    expect(new Set(refs.map((r) => r.key)).size).toBe(1);
    expect(allPacks(dir).length).toBe(record(content).length);
    await blobs.put(content);
    expect(allPacks(dir).length).toBe(record(content).length);
    const again = createFsBlobStore({ dir });
    await again.put(content);
    expect(allPacks(dir).length).toBe(record(content).length);
    await expectStored(again, content);
  });

  test('an older layout: journal segments are replayed into per-blob files and removed; per-blob files stay readable', async () => {
    const dir = tmp();
    fs.mkdirSync(path.join(dir, 'journal'), { recursive: true });
    const a = Buffer.from('acknowledged by an older version');
    const b = Buffer.from('also acknowledged');
    const torn = record(Buffer.from('never acknowledged')).subarray(0, 50);
    fs.writeFileSync(path.join(dir, 'journal', '000000000001.log'), Buffer.concat([record(a), record(b), torn]));
    const materialised = Buffer.from('materialised by an older version');
    fs.mkdirSync(path.dirname(fileOf(dir, sha(materialised))), { recursive: true });
    fs.writeFileSync(fileOf(dir, sha(materialised)), materialised);

    const blobs = createFsBlobStore({ dir });
    for (const c of [a, b, materialised]) await expectStored(blobs, c);
    expect(fs.readFileSync(fileOf(dir, sha(b))).equals(b)).toBe(true);
    expect(fs.existsSync(path.join(dir, 'journal'))).toBe(false);
    expect(await blobs.has(sha(Buffer.from('never acknowledged')))).toBe(false);
    const c = await blobs.put(Buffer.from('after the upgrade'));
    expect(allPacks(dir).equals(record(Buffer.from('after the upgrade')))).toBe(true);
    expect((await blobs.get(c.key))?.toString()).toBe('after the upgrade');
  });

  test('temporary files a crash left behind are removed at start once a day old; young ones are left alone', async () => {
    const dir = tmp();
    await createFsBlobStore({ dir }).put(Buffer.from('x'));
    const old = path.join(dir, 'tmp', 'leftover.1');
    const young = path.join(dir, 'tmp', 'in-progress.2');
    fs.writeFileSync(old, 'old');
    fs.writeFileSync(young, 'young');
    const dayAndMore = (Date.now() - 25 * 3600 * 1000) / 1000;
    fs.utimesSync(old, dayAndMore, dayAndMore);
    await createFsBlobStore({ dir }).has(sha(Buffer.from('x'))); // start finished
    expect(fs.existsSync(old)).toBe(false);
    expect(fs.existsSync(young)).toBe(true);
  });

  test('unknown and invalid keys', async () => {
    const blobs = createFsBlobStore({ dir: tmp() });
    await blobs.put(Buffer.from('something'));
    for (const key of ['0'.repeat(64), sha(Buffer.from('never stored')), '../../etc/passwd', 'A'.repeat(64), '']) {
      expect(await blobs.get(key)).toBeNull();
      expect(await blobs.has(key)).toBe(false);
      expect(await blobs.open(key)).toBeNull();
    }
  });
});

describe('fs blob store under storage faults', () => {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const KB = 1024;

  it('a put the disk takes only part of fails; the blobs before and after it stay readable (a short write once counted as durable)', async () => {
    const dir = tmp();
    // Files of at most 2 MiB (`ulimit -f`): the third 700 KB blob crosses the limit in the
    // middle of its record (a short write, then EFBIG), as on a disk that fills up.
    const sizes = [700 * KB, 700 * KB, 700 * KB, 10 * KB];
    const child = spawnSync('bash', ['-c', 'ulimit -f 2048 && exec node --import tsx test/support/blob-puts.ts "$@"', 'blob-puts', dir, ...sizes.map(String)], { cwd: root, encoding: 'utf8' });
    expect(child.status).toBe(0); // (stderr may carry a runtime's warnings; the results below are what count)
    const results = JSON.parse(child.stdout) as { ok: boolean; code?: string }[];
    expect(results).toEqual([{ size: sizes[0], ok: true }, { size: sizes[1], ok: true }, { size: sizes[2], ok: false, code: 'EFBIG' }, { size: sizes[3], ok: true }]);

    const blobs = createFsBlobStore({ dir }); // a restart, without the limit
    for (const i of [0, 1, 3]) await expectStored(blobs, Buffer.alloc(sizes[i], i + 1));
    const refused = Buffer.alloc(sizes[2], 3);
    expect(await blobs.has(sha(refused))).toBe(false);
    await blobs.put(refused); // a retry once there is room: stored in full, not "already there"
    await expectStored(blobs, refused);
  });

  it('a store that could not start (its directory unusable) starts by itself once the fault is gone', async () => {
    const parent = tmp();
    const dir = path.join(parent, 'blobs');
    fs.writeFileSync(dir, 'a file where the directory should be');
    const blobs = createFsBlobStore({ dir });
    await expect(blobs.put(Buffer.from('first'))).rejects.toMatchObject({ code: expect.stringMatching(/^E/) });
    fs.rmSync(dir);
    await blobs.put(Buffer.from('second'));
    await expectStored(blobs, Buffer.from('second'));
  });

  it('a large put that fails leaves no temporary file behind (it held the space a retry needs)', async () => {
    const dir = tmp();
    const big = 3 * 1024 * KB; // over PACK_MAX_BLOB: a file of its own, over the 2 MiB limit
    const child = spawnSync('bash', ['-c', 'ulimit -f 2048 && exec node --import tsx test/support/blob-puts.ts "$@"', 'blob-puts', dir, String(big)], { cwd: root, encoding: 'utf8' });
    expect(JSON.parse(child.stdout)).toEqual([{ size: big, ok: false, code: 'EFBIG' }]);
    expect(fs.readdirSync(path.join(dir, 'tmp'))).toEqual([]);
  });
});

describe('fs blob store reads', () => {
  it('a damaged blob (a flipped byte in a pack, a truncated large file) is an error, never other bytes served as the blob', async () => {
    const dir = tmp();
    const small = Buffer.from('a small blob that lives in a pack');
    const large = Buffer.alloc(PACK_MAX_BLOB + 1024, 9);
    const blobs = createFsBlobStore({ dir });
    await blobs.put(small);
    await blobs.put(large);
    expect(await createFsBlobStore({ dir }).has(sha(small))).toBe(true); // a restart indexes the pack (idx file)
    const pack = path.join(dir, 'packs', packsOf(dir)[0]);
    const bytes = fs.readFileSync(pack);
    bytes[bytes.indexOf(small) + 3] ^= 0xff;
    fs.writeFileSync(pack, bytes);
    fs.truncateSync(fileOf(dir, sha(large)), 1000);

    const reopened = createFsBlobStore({ dir }); // trusts the idx: the damage shows on reading
    await expect(reopened.get(sha(small))).rejects.toThrow(/damaged/);
    await expect(reopened.get(sha(large))).rejects.toThrow(/damaged/);
    const opened = await reopened.open(sha(large));
    await expect(drain(opened!.stream)).rejects.toThrow(/damaged/);
  });
});

describe('fs blob store recovery past damage', () => {
  it('a damaged record in the middle of a pack without idx hides only itself, not the blobs after it', async () => {
    const dir = tmp();
    const blobs = createFsBlobStore({ dir }); // never closed: its pack has no idx (as after a crash)
    const contents = ['first blob', 'second blob, to be damaged', 'third blob'].map((t) => Buffer.from(t));
    for (const c of contents) await blobs.put(c);
    const pack = path.join(dir, 'packs', packsOf(dir)[0]);
    const bytes = fs.readFileSync(pack);
    bytes[bytes.indexOf(contents[1]) + 2] ^= 0xff;
    fs.writeFileSync(pack, bytes);

    const reopened = createFsBlobStore({ dir });
    await expectStored(reopened, contents[0]);
    expect(await reopened.has(sha(contents[1]))).toBe(false);
    await expectStored(reopened, contents[2]);
  });
});
