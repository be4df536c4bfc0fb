/**
 * Embedded blob store: one file per blob under `<dir>/<k[0..2]>/<k[2..4]>/<key>`, made
 * durable through a group-committed journal.
 *
 * A put resolves only once the blob survives kill -9 and power loss (what lets the SMTP
 * listener answer 250 after an append that refers to it). Two ways to get there:
 *
 * - **Small blobs** (≤ {@link JOURNAL_MAX_BLOB}, e.g. the raw MIME of ordinary mail): the
 *   bytes are appended to the current journal segment `<dir>/journal/<n>.log`; every put
 *   that arrives while one flush is in progress joins the next one, and a flush is ONE
 *   write + ONE fdatasync for all of them (group commit, like the event store). Once
 *   durable, the blob is written to its own file without an fsync ("materialised"); until
 *   then reads are served from memory. The journal stays the durable copy: when a segment
 *   grows past {@link SEGMENT_BYTES} a new one is started and, in the background, the old
 *   segment's files are fsynced and the segment is deleted. On start, every remaining
 *   segment is replayed (records verified by their SHA-256, a torn tail ignored: it was
 *   never acknowledged), its files written and fsynced, and the segment deleted.
 * - **Large blobs**: a temporary file, fsynced, renamed into place, directory fsynced.
 *
 * Journal record: "BLB1" | 32-byte SHA-256 | uint32 BE length | content.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, readdir, rename, stat, readFile, unlink, writeFile, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { BLOB_KEY, type BlobRef, type BlobStore } from '../ports/blob-store.js';

/** Blobs up to this size go through the journal; bigger ones are fsynced on their own. */
export const JOURNAL_MAX_BLOB = 1024 * 1024;
/** A journal segment is retired (checkpointed, then deleted) once it is this big. */
export const SEGMENT_BYTES = 64 * 1024 * 1024;

const MAGIC = Buffer.from('BLB1', 'latin1');
const HEADER = MAGIC.length + 32 + 4;

async function fsyncPath(target: string): Promise<void> {
  const handle = await open(target, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

const isErrno = (err: unknown, code: string) => (err as NodeJS.ErrnoException).code === code;

interface Segment {
  n: number;
  file: string;
  handle: FileHandle;
  size: number;
  /** Blobs recorded in this segment (the checkpoint fsyncs their files). */
  keys: Set<string>;
  /** Materialisations of this segment's blobs still in flight. */
  writing: Set<Promise<void>>;
}

interface PendingPut {
  key: string;
  content: Buffer;
  resolve: () => void;
  reject: (err: unknown) => void;
}

export function createFsBlobStore(options: { dir: string }): BlobStore {
  const root = options.dir;
  const tmpDir = path.join(root, 'tmp');
  const journalDir = path.join(root, 'journal');

  const fileOf = (key: string): string => {
    if (!BLOB_KEY.test(key)) throw new Error(`invalid blob key: ${JSON.stringify(key)}`);
    return path.join(root, key.slice(0, 2), key.slice(2, 4), key);
  };

  /** Directories known to exist (saves a mkdir per blob). */
  const madeDirs = new Set<string>();
  async function ensureDir(dir: string): Promise<void> {
    if (madeDirs.has(dir)) return;
    await mkdir(dir, { recursive: true });
    madeDirs.add(dir);
  }

  async function sizeOf(file: string): Promise<number | null> {
    try {
      return (await stat(file)).size;
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return null;
      throw err;
    }
  }

  /** Small blobs accepted but not yet in their own file: content, and when it is durable. */
  const inMemory = new Map<string, { content: Buffer; durable: Promise<void> }>();
  let queue: PendingPut[] = [];
  let flushing = false;
  /** The segment being appended to; null while the next one is being opened. */
  let segment: Segment | null = null;
  let nextSegment: Promise<Segment> | null = null;
  /** Number of the newest segment (segments are numbered upwards). */
  let lastN = 0;

  async function openSegment(n: number): Promise<Segment> {
    const file = path.join(journalDir, `${String(n).padStart(12, '0')}.log`);
    const handle = await open(file, 'a', 0o600);
    await fsyncPath(journalDir); // the segment's directory entry must survive before we rely on it
    return { n, file, handle, size: 0, keys: new Set(), writing: new Set() };
  }

  /** Replays segments left by a previous process, then opens a fresh one. */
  async function recover(): Promise<void> {
    await mkdir(tmpDir, { recursive: true });
    await mkdir(journalDir, { recursive: true });
    const names = (await readdir(journalDir)).filter((f) => /^\d{12}\.log$/.test(f)).sort();
    for (const name of names) {
      const file = path.join(journalDir, name);
      const data = await readFile(file);
      const dirs = new Set<string>();
      for (let at = 0; at + HEADER <= data.length; ) {
        if (!data.subarray(at, at + 4).equals(MAGIC)) break;
        const key = data.subarray(at + 4, at + 36).toString('hex');
        const length = data.readUInt32BE(at + 36);
        const content = data.subarray(at + HEADER, at + HEADER + length);
        if (content.length !== length || createHash('sha256').update(content).digest('hex') !== key) break; // torn tail: never acknowledged
        const target = fileOf(key);
        await ensureDir(path.dirname(target));
        await writeFile(target, content, { mode: 0o600 });
        await fsyncPath(target);
        dirs.add(path.dirname(target));
        at += HEADER + length;
      }
      for (const dir of dirs) await fsyncPath(dir);
      await unlink(file);
    }
    if (names.length) await fsyncPath(journalDir);
    lastN = names.length ? Number(names[names.length - 1].slice(0, 12)) : 0;
    segment = await openSegment(++lastN);
  }
  const ready = recover();
  ready.catch(() => {}); // surfaced by the first call that awaits it

  /** Writes one durable blob into its own file (no fsync: the journal holds it). */
  async function materialise(key: string, content: Buffer): Promise<void> {
    const target = fileOf(key);
    // Exclusive: an existing file is complete (written before, or repaired by recovery).
    // The directory is created only when the first try says it is missing.
    for (let attempt = 0; ; attempt++) {
      try {
        await writeFile(target, content, { flag: 'wx', mode: 0o600 });
        return;
      } catch (err) {
        if (isErrno(err, 'EEXIST')) return;
        if (!isErrno(err, 'ENOENT') || attempt > 0) throw err;
        await mkdir(path.dirname(target), { recursive: true });
      }
    }
  }

  /** Fsyncs a retired segment's files, then deletes the segment. */
  async function checkpoint(old: Segment): Promise<void> {
    await Promise.all([...old.writing]);
    await old.handle.close();
    const dirs = new Set<string>();
    for (const key of old.keys) {
      const target = fileOf(key);
      await fsyncPath(target);
      dirs.add(path.dirname(target));
    }
    for (const dir of dirs) await fsyncPath(dir);
    await unlink(old.file);
    await fsyncPath(journalDir);
  }

  async function flush(): Promise<void> {
    flushing = true;
    try {
      while (queue.length) {
        const batch = queue;
        queue = [];
        let seg: Segment;
        try {
          seg = segment ?? (segment = await nextSegment!);
        } catch (err) {
          nextSegment = openSegment(++lastN); // a later flush tries a fresh one
          nextSegment.catch(() => {});
          for (const p of batch) {
            inMemory.delete(p.key);
            p.reject(err);
          }
          continue;
        }
        try {
          const parts: Buffer[] = [];
          for (const p of batch) {
            const header = Buffer.allocUnsafe(HEADER);
            MAGIC.copy(header, 0);
            header.write(p.key, 4, 32, 'hex');
            header.writeUInt32BE(p.content.length, 36);
            parts.push(header, p.content);
          }
          const bytes = Buffer.concat(parts);
          await seg.handle.write(bytes, 0, bytes.length);
          await seg.handle.datasync();
          seg.size += bytes.length;
        } catch (err) {
          for (const p of batch) {
            inMemory.delete(p.key);
            p.reject(err);
          }
          // The segment may now end in a torn record that recovery would stop at: later
          // records must go to a new segment. The acknowledged ones are checkpointed.
          retire(seg);
          continue;
        }
        for (const p of batch) {
          seg.keys.add(p.key);
          p.resolve();
          const job = materialise(p.key, p.content).then(
            () => {
              inMemory.delete(p.key);
              seg.writing.delete(job);
            },
            () => {
              // Still durable in the journal and readable from memory; recovery writes it.
              seg.writing.delete(job);
            },
          );
          seg.writing.add(job);
        }
        if (seg.size >= SEGMENT_BYTES) retire(seg);
      }
    } finally {
      flushing = false;
    }
  }

  /** Starts a new segment (on the next flush) and checkpoints `seg` in the background. */
  function retire(seg: Segment): void {
    if (segment !== seg) return;
    nextSegment = openSegment(++lastN);
    nextSegment.catch(() => {}); // the next flush awaits it and fails its batch
    segment = null;
    checkpoint(seg).catch(() => {
      /* the segment stays; the next start replays it */
    });
  }

  function journalPut(key: string, content: Buffer): Promise<void> {
    const known = inMemory.get(key);
    if (known) return known.durable;
    const durable = new Promise<void>((resolve, reject) => queue.push({ key, content, resolve, reject }));
    inMemory.set(key, { content, durable });
    if (!flushing) void flush();
    return durable;
  }

  async function directPut(key: string, content: Uint8Array): Promise<void> {
    const file = fileOf(key);
    if ((await sizeOf(file)) === content.byteLength) return;
    const dir = path.dirname(file);
    await ensureDir(dir);
    const tmp = path.join(tmpDir, `${key}.${randomUUID()}`);
    const handle = await open(tmp, 'w', 0o600);
    try {
      await handle.writeFile(content);
      await handle.sync();
    } finally {
      await handle.close();
    }
    try {
      await rename(tmp, file);
    } catch (err) {
      await unlink(tmp).catch(() => {});
      throw err;
    }
    await fsyncPath(dir);
  }

  return {
    async put(content) {
      await ready;
      const key = createHash('sha256').update(content).digest('hex');
      if (content.byteLength <= JOURNAL_MAX_BLOB) {
        // Copy: the caller may reuse its buffer; the journal and the file write happen later.
        await journalPut(key, Buffer.from(content));
      } else {
        await directPut(key, content);
      }
      return { key, size: content.byteLength } satisfies BlobRef;
    },

    async get(key) {
      if (!BLOB_KEY.test(key)) return null;
      await ready;
      const mem = inMemory.get(key);
      if (mem) {
        await mem.durable;
        return Buffer.from(mem.content);
      }
      try {
        return await readFile(fileOf(key));
      } catch (err) {
        if (isErrno(err, 'ENOENT')) return null;
        throw err;
      }
    },

    async open(key) {
      if (!BLOB_KEY.test(key)) return null;
      await ready;
      const mem = inMemory.get(key);
      if (mem) {
        await mem.durable;
        return { size: mem.content.length, stream: Readable.from([mem.content]) };
      }
      const file = fileOf(key);
      const size = await sizeOf(file);
      if (size === null) return null;
      return { size, stream: createReadStream(file) };
    },

    async has(key) {
      if (!BLOB_KEY.test(key)) return false;
      await ready;
      const mem = inMemory.get(key);
      if (mem) return mem.durable.then(
        () => true,
        () => false,
      );
      return (await sizeOf(fileOf(key))) !== null;
    },
  };
}
