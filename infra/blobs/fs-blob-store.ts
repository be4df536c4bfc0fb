/**
 * Embedded blob store: small blobs live in permanent, append-only pack files (like git's
 * packfiles), large ones in a file of their own.
 *
 * Layout under `dir`:
 * - `packs/<n>.pack` (n: 12 digits, counting up): records "BLB1" | 32-byte SHA-256 |
 *   uint32 BE length | content, for blobs of at most {@link PACK_MAX_BLOB} bytes.
 * - `packs/<n>.idx`: the sorted index of a sealed pack (see {@link encodeIndex}): a header
 *   (flags, the pack length it covers, the count), a 256-entry fan-out table, 40-byte
 *   entries (key | uint32 content offset | uint32 length), a trailing SHA-256 of the file.
 * - `<k[0..2]>/<k[2..4]>/<key>`: large blobs, and small blobs written by older versions
 *   (which materialised every blob into its own file); readable forever.
 * - `tmp/`: temporary files renamed into place (leftovers of a crash older than a day are
 *   removed on start); `journal/`: left by older versions only, replayed into per-blob files
 *   on start and removed.
 *
 * Durability (a put resolves only once the blob survives kill -9 and power loss, which is
 * what lets the SMTP listener answer 250 after an append that refers to it):
 * - Small blobs are appended to the active pack; every put that arrives while a flush is in
 *   progress joins the next one, and a flush is ONE write + ONE fdatasync for all of them
 *   (group commit, like the event store). The fdatasync covers the new bytes and the file
 *   size; the pack's directory entry was fsynced when the pack was created. That is the
 *   only copy: the bytes are never rewritten, moved or deleted. A key already in a known
 *   pack or in flight is not appended again (one only in an old per-blob file, or in a pack
 *   another process wrote since we last looked, may be: space, never correctness).
 * - Large blobs: a temporary file, fsynced, renamed into place, directory fsynced.
 *
 * Why packs: the previous design also wrote each small blob to its own file after the
 * journal had made it durable (mkdir + open + write + close per blob, several thread-pool
 * round trips and a file creation each), and that cost more than everything else on the
 * inbound mail path while buying nothing: the journal already held the bytes durably.
 *
 * Index: the active pack's blobs are in a Map (key → content offset and length). When the
 * pack reaches `segmentBytes` it is sealed: its Map becomes a sorted index Buffer (about
 * 40 bytes per blob, binary-searched, no per-blob JS object), written as `<n>.idx` in the
 * background (tmp + fsync + rename + directory fsync), and a new pack is started. A missing
 * idx only costs a rescan at the next start. Reads are positional reads on a handle per
 * pack, at most {@link MAX_OPEN_PACKS} of them open (least recently read closed first).
 *
 * Recovery (start): each pack's idx is loaded if its checksum holds; a pack without a valid
 * idx, or longer than its idx says, is scanned: records are verified against their SHA-256;
 * a torn tail (never acknowledged) ends the scan, a damaged record in the middle is skipped
 * to the next one that verifies. Every pack
 * found at start is sealed (its idx written when the scan found anything new) and appends
 * always go to a NEW pack, so nothing is ever appended after a torn tail.
 *
 * Several processes may share `dir` (the cluster's gateways and worker share DATA_DIR): a
 * new pack is created with O_EXCL, so each pack has one writer; a read that misses looks
 * for packs (or pack tails) written by other processes since it last looked. An idx marks
 * whether its writer sealed the pack (`final`); packs indexed by recovery may still be
 * appended to by a live process, so their tails are checked again on a miss.
 */
import { createHash, randomUUID } from 'node:crypto';
import { constants as fsConstants, createReadStream } from 'node:fs';
import { mkdir, open, readdir, rmdir, stat, readFile, unlink, writeFile, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform, pipeline } from 'node:stream';
import { BLOB_KEY, type BlobRef, type BlobStore } from '../ports/blob-store.js';
import { fsyncPath, writeFileDurably } from '../durable-file.js';

/** Blobs up to this size go into packs; bigger ones are fsynced in a file of their own. */
export const PACK_MAX_BLOB = 1024 * 1024;
/** A pack is sealed (indexed, then only read) once it is this big. */
export const SEGMENT_BYTES = 64 * 1024 * 1024;
/** Keeps every content offset within the idx's uint32 (a pack ends < 2 × segmentBytes + 1 MiB). */
const MAX_SEGMENT_BYTES = 1024 * 1024 * 1024;

const MAGIC = Buffer.from('BLB1', 'latin1');
const HEADER = MAGIC.length + 32 + 4;
const IDX_MAGIC = Buffer.from('BLX1', 'latin1');
/** idx: magic | uint32 flags | uint64 covered pack length | uint32 count | 256 × uint32 fan-out. */
const IDX_HEAD = 4 + 4 + 8 + 4;
const IDX_FANOUT = IDX_HEAD;
const IDX_ENTRIES = IDX_FANOUT + 256 * 4;
const IDX_ENTRY = 32 + 4 + 4;
const IDX_FINAL = 1;

const packName = (n: number) => `${String(n).padStart(12, '0')}.pack`;
const idxName = (n: number) => `${String(n).padStart(12, '0')}.idx`;
const sha256 = (data: Uint8Array) => createHash('sha256').update(data).digest();

/**
 * A blob's key is the SHA-256 of its content: bytes read back are checked against it, so a
 * damaged file (a flipped bit, a truncation) is an error, never other bytes served as the blob.
 */
function verified(key: string, content: Buffer): Buffer {
  if (sha256(content).toString('hex') !== key) throw damaged(key);
  return content;
}

/** `code: 'blob_damaged'`: a caller that can do without the blob tells it from other failures. */
const damaged = (key: string) => Object.assign(new Error(`blob ${key} is damaged: its content no longer matches its key`), { code: 'blob_damaged' });

/**
 * The same check for a streamed blob. The newest chunk is held back until the end: a damaged
 * blob fails its stream before its last bytes, so a reader (an HTTP answer with the blob's
 * length) never receives the whole length, and cannot take it for the blob.
 */
function verifying(key: string): Transform {
  const hash = createHash('sha256');
  let held: Buffer | null = null;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      const previous = held;
      held = chunk;
      done(null, previous ?? undefined);
    },
    flush(done) {
      if (hash.digest('hex') !== key) return done(damaged(key));
      done(null, held ?? undefined);
    },
  });
}

const isErrno = (err: unknown, code: string) => (err as NodeJS.ErrnoException).code === code;

/** Where a blob's content sits in its pack. */
interface Loc {
  offset: number;
  length: number;
}

/** A sealed pack's index, parsed from (or encoded as) an idx file. */
interface PackIndex {
  buf: Buffer;
  count: number;
  /** Pack bytes the index covers (records after that were added later or are torn). */
  covered: number;
  final: boolean;
}

interface Pack {
  n: number;
  file: string;
  /** Written by this process (never refreshed from disk). */
  own: boolean;
  index: PackIndex | null;
  /** Records not in `index`: the active pack's, or those scanned past the index. */
  tail: Map<string, Loc>;
  /** Bytes known to hold valid records (where the next append or scan starts). */
  size: number;
  /** Read handle (for the active pack: its append handle, opened O_RDWR). */
  handle: FileHandle | null;
  opening: Promise<FileHandle> | null;
  /** Reads using `handle` right now (it is not closed under them). */
  reading: number;
}

interface PendingPut {
  key: string;
  content: Buffer;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * Encodes a sorted idx file: magic "BLX1" | uint32 flags (1 = sealed by its writer) |
 * uint64 covered pack length | uint32 count | fan-out[256] (uint32: entries whose first key
 * byte ≤ i) | count × (32-byte key | uint32 content offset | uint32 length) | SHA-256 of all
 * the preceding bytes.
 */
function encodeIndex(entries: Map<string, Loc>, covered: number, final: boolean): PackIndex {
  const keys = [...entries.keys()].sort();
  const buf = Buffer.alloc(IDX_ENTRIES + keys.length * IDX_ENTRY + 32);
  IDX_MAGIC.copy(buf, 0);
  buf.writeUInt32BE(final ? IDX_FINAL : 0, 4);
  buf.writeBigUInt64BE(BigInt(covered), 8);
  buf.writeUInt32BE(keys.length, 16);
  const fanout = new Uint32Array(256);
  keys.forEach((key, i) => {
    const at = IDX_ENTRIES + i * IDX_ENTRY;
    buf.write(key, at, 32, 'hex');
    const loc = entries.get(key)!;
    buf.writeUInt32BE(loc.offset, at + 32);
    buf.writeUInt32BE(loc.length, at + 36);
    fanout[buf[at]]++;
  });
  for (let b = 0, total = 0; b < 256; b++) buf.writeUInt32BE((total += fanout[b]), IDX_FANOUT + b * 4);
  sha256(buf.subarray(0, buf.length - 32)).copy(buf, buf.length - 32);
  return { buf, count: keys.length, covered, final };
}

/** Parses an idx file, or null when it is not one (bad size, magic or checksum). */
function decodeIndex(buf: Buffer): PackIndex | null {
  if (buf.length < IDX_ENTRIES + 32 || !buf.subarray(0, 4).equals(IDX_MAGIC)) return null;
  const count = buf.readUInt32BE(16);
  if (buf.length !== IDX_ENTRIES + count * IDX_ENTRY + 32) return null;
  if (!sha256(buf.subarray(0, buf.length - 32)).equals(buf.subarray(buf.length - 32))) return null;
  if (buf.readUInt32BE(IDX_FANOUT + 255 * 4) !== count) return null;
  return { buf, count, covered: Number(buf.readBigUInt64BE(8)), final: (buf.readUInt32BE(4) & IDX_FINAL) !== 0 };
}

/** Binary search within the key's fan-out bucket. */
function searchIndex(index: PackIndex, key: Buffer): Loc | null {
  const { buf } = index;
  let lo = key[0] === 0 ? 0 : buf.readUInt32BE(IDX_FANOUT + (key[0] - 1) * 4);
  let hi = buf.readUInt32BE(IDX_FANOUT + key[0] * 4);
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const at = IDX_ENTRIES + mid * IDX_ENTRY;
    const cmp = buf.compare(key, 0, 32, at, at + 32);
    if (cmp === 0) return { offset: buf.readUInt32BE(at + 32), length: buf.readUInt32BE(at + 36) };
    if (cmp < 0) lo = mid + 1;
    else hi = mid;
  }
  return null;
}

/**
 * Verifies the records of `data` (pack bytes from `base`), adding each to `into`. An invalid
 * one is a torn tail (never acknowledged) or a damaged record (a flipped bit on disk): the
 * scan goes on at the next record that verifies, so one damaged record does not hide the
 * ones after it (a record's SHA-256 makes a false match there practically impossible). The
 * search is bounded: bytes that only look like records (a blob's content may hold many fake
 * headers) may cost at most about twice the data in hashing, then the rest counts as torn.
 * Returns the end of the last valid record (bytes from `base`).
 */
function scanRecords(data: Buffer, base: number, into: Map<string, Loc>): number {
  let at = 0;
  let end = 0;
  let budget = 2 * data.length + PACK_MAX_BLOB; // bytes hashed for candidates that fail
  while (at + HEADER <= data.length) {
    const length = data.subarray(at, at + 4).equals(MAGIC) ? data.readUInt32BE(at + 36) : -1;
    const key = data.subarray(at + 4, at + 36);
    const fits = length >= 0 && length <= PACK_MAX_BLOB && at + HEADER + length <= data.length;
    if (fits && sha256(data.subarray(at + HEADER, at + HEADER + length)).equals(key)) {
      into.set(key.toString('hex'), { offset: base + at + HEADER, length });
      at += HEADER + length;
      end = at;
      continue;
    }
    if (fits && (budget -= length) < 0) break;
    const next = data.indexOf(MAGIC, at + 1);
    if (next < 0) break;
    at = next;
  }
  return end;
}

export interface FsBlobStoreOptions {
  dir: string;
  /** Size at which a pack is sealed and a new one started (default {@link SEGMENT_BYTES}). */
  segmentBytes?: number;
  /** Packs kept open for reading (default {@link MAX_OPEN_PACKS}); the least recently read is closed first. */
  maxOpenPacks?: number;
}

/** Temporary files older than this are leftovers of a crash, removed at start. */
const STALE_TMP_MS = 24 * 3600 * 1000;

/** Read handles kept open: a store of many packs must not hold a descriptor per pack it ever read. */
export const MAX_OPEN_PACKS = 64;

export function createFsBlobStore(options: FsBlobStoreOptions): BlobStore {
  const root = options.dir;
  const tmpDir = path.join(root, 'tmp');
  const packsDir = path.join(root, 'packs');
  const journalDir = path.join(root, 'journal');
  const segmentBytes = Math.max(1, Math.min(options.segmentBytes ?? SEGMENT_BYTES, MAX_SEGMENT_BYTES));

  const fileOf = (key: string): string => {
    if (!BLOB_KEY.test(key)) throw new Error(`invalid blob key: ${JSON.stringify(key)}`);
    return path.join(root, key.slice(0, 2), key.slice(2, 4), key);
  };

  /** Directories known to exist (saves a mkdir per large blob). */
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

  /** Small puts accepted but not yet durable: their content, and when it is durable. */
  const pending = new Map<string, { content: Buffer; durable: Promise<void> }>();
  let queue: PendingPut[] = [];
  let flushing = false;
  /** Every known pack, by number (own ones included). */
  const packs = new Map<number, Pack>();
  /** The same, newest first (recent mail is read most). */
  let packList: Pack[] = [];
  /** The pack being appended to; null while the next one is being opened. */
  let active: Pack | null = null;
  let nextActive: Promise<Pack> | null = null;
  /** Highest pack number seen (new packs count up from it). */
  let lastN = 0;

  function addPack(pack: Pack): void {
    packs.set(pack.n, pack);
    packList = [...packs.values()].sort((a, b) => b.n - a.n);
    lastN = Math.max(lastN, pack.n);
  }

  function locate(key: string): { pack: Pack; loc: Loc } | null {
    let bin: Buffer | null = null;
    for (const pack of packList) {
      let loc = pack.tail.get(key) ?? null;
      if (!loc && pack.index?.count) loc = searchIndex(pack.index, (bin ??= Buffer.from(key, 'hex')));
      if (loc) return { pack, loc };
    }
    return null;
  }

  /** Creates the next pack (O_EXCL: another process sharing the directory may own a number). */
  async function openSegment(): Promise<Pack> {
    for (;;) {
      const n = ++lastN;
      const file = path.join(packsDir, packName(n));
      let handle: FileHandle;
      try {
        // Read-write so the same handle serves reads of the active pack.
        handle = await open(file, fsConstants.O_RDWR | fsConstants.O_APPEND | fsConstants.O_CREAT | fsConstants.O_EXCL, 0o600);
      } catch (err) {
        if (isErrno(err, 'EEXIST')) continue;
        throw err;
      }
      try {
        await fsyncPath(packsDir); // the pack's directory entry must survive before we rely on it
      } catch (err) {
        await handle.close().catch(() => {});
        throw err;
      }
      const pack: Pack = { n, file, own: true, index: null, tail: new Map(), size: 0, handle, opening: null, reading: 0 };
      addPack(pack);
      return pack;
    }
  }

  async function writeIndex(n: number, index: PackIndex): Promise<void> {
    await writeFileDurably(path.join(tmpDir, `${idxName(n)}.${randomUUID()}`), index.buf, path.join(packsDir, idxName(n)));
    await fsyncPath(packsDir);
  }

  async function readIndex(n: number): Promise<PackIndex | null> {
    try {
      return decodeIndex(await readFile(path.join(packsDir, idxName(n))));
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return null;
      throw err;
    }
  }

  /** Packs with a handle open for reading, least recently used first. */
  const openForReading = new Map<Pack, true>();
  const maxOpenPacks = Math.max(1, options.maxOpenPacks ?? MAX_OPEN_PACKS);

  /** Runs `use` with the pack's handle, kept open meanwhile; then closes the least recently read beyond the bound. */
  async function withPackHandle<T>(pack: Pack, use: (handle: FileHandle) => Promise<T>): Promise<T> {
    pack.reading += 1;
    try {
      const handle = await packHandle(pack);
      openForReading.delete(pack);
      openForReading.set(pack, true);
      return await use(handle);
    } finally {
      pack.reading -= 1;
      closeBeyondBound();
    }
  }

  /** Closes the least recently read handles beyond the bound (none in use, not the active pack's). */
  function closeBeyondBound(): void {
    for (const old of openForReading.keys()) {
      if (openForReading.size <= maxOpenPacks) break;
      if (old === active || old.reading > 0 || !old.handle) continue; // the active pack's is its append handle
      openForReading.delete(old);
      const handle = old.handle;
      old.handle = null;
      old.opening = null;
      handle.close().catch(() => {});
    }
  }

  async function packHandle(pack: Pack): Promise<FileHandle> {
    if (pack.handle) return pack.handle;
    pack.opening ??= open(pack.file, 'r').then(
      (handle) => (pack.handle = handle),
      (err) => {
        pack.opening = null;
        throw err;
      },
    );
    return pack.opening;
  }

  /** Scans `pack` from `pack.size` to the end of its file, adding what it finds to its tail. */
  async function scanTail(pack: Pack): Promise<void> {
    // stat first: most packs have nothing past their idx, and need no handle until read.
    const end = await sizeOf(pack.file);
    if (end === null || end <= pack.size) return;
    const data = Buffer.allocUnsafe(end - pack.size);
    const got = await withPackHandle(pack, async (handle) => {
      let read = 0;
      while (read < data.length) {
        const { bytesRead } = await handle.read(data, read, data.length - read, pack.size + read);
        if (bytesRead === 0) break;
        read += bytesRead;
      }
      return read;
    });
    pack.size += scanRecords(data.subarray(0, got), pack.size, pack.tail);
  }

  /** Loads a pack found on disk: its idx when valid, then whatever lies past it. */
  async function loadPack(n: number): Promise<Pack> {
    const file = path.join(packsDir, packName(n));
    const pack: Pack = { n, file, own: false, index: null, tail: new Map(), size: 0, handle: null, opening: null, reading: 0 };
    const [index, size] = await Promise.all([readIndex(n), sizeOf(file)]);
    if (index && size !== null && index.covered <= size) {
      pack.index = index;
      pack.size = index.covered;
    }
    await scanTail(pack);
    return pack;
  }

  /** Pulls in what other processes sharing the directory wrote since the last look. */
  async function refreshOnce(): Promise<void> {
    let names: string[];
    try {
      names = await readdir(packsDir);
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return;
      throw err;
    }
    for (const name of names) {
      const match = /^(\d{12})\.pack$/.exec(name);
      if (!match) continue;
      const n = Number(match[1]);
      const known = packs.get(n);
      if (!known) {
        addPack(await loadPack(n));
      } else if (!known.own && !known.index?.final) {
        // Re-read the idx only when it changed size (its writer sealing the pack), then stop
        // looking at the pack once its idx is final.
        const idxSize = await sizeOf(path.join(packsDir, idxName(n)));
        const index = idxSize !== null && idxSize !== known.index?.buf.length ? await readIndex(n) : null;
        if (index?.final && index.covered >= known.size) {
          known.index = index; // its writer sealed it: no more looking at it
          known.tail = new Map();
          known.size = index.covered;
        }
        await scanTail(known);
      }
    }
  }
  let refreshing: Promise<void> | null = null;
  let refreshAgain: Promise<void> | null = null;
  /** One refresh at a time; a miss during one waits for the next (it must see newer files). */
  function refresh(): Promise<void> {
    if (!refreshing) {
      refreshing = refreshOnce().finally(() => (refreshing = null));
      return refreshing;
    }
    refreshAgain ??= refreshing
      .catch(() => {})
      .then(() => {
        refreshAgain = null;
        return refresh();
      });
    return refreshAgain;
  }

  /** Replays a journal segment left by an older version into per-blob files, then deletes it. */
  async function replayLegacyJournal(): Promise<void> {
    let names: string[];
    try {
      names = (await readdir(journalDir)).filter((f) => /^\d{12}\.log$/.test(f)).sort();
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return;
      throw err;
    }
    for (const name of names) {
      const file = path.join(journalDir, name);
      const records = new Map<string, Loc>();
      const data = await readFile(file);
      scanRecords(data, 0, records); // a torn tail was never acknowledged
      const dirs = new Set<string>();
      for (const [key, { offset, length }] of records) {
        const target = fileOf(key);
        await ensureDir(path.dirname(target));
        await writeFile(target, data.subarray(offset, offset + length), { mode: 0o600 });
        await fsyncPath(target);
        dirs.add(path.dirname(target));
      }
      for (const dir of dirs) await fsyncPath(dir);
      await unlink(file);
    }
    await fsyncPath(journalDir);
    await rmdir(journalDir).then(
      () => fsyncPath(root),
      () => {}, // not empty (something else in it): harmless
    );
  }

  /** Migrates an older layout and indexes every pack on disk (sealing it); appends will go to a new pack. */
  /**
   * Deletes temporary files a crash left behind. Only old ones: on a shared volume a young
   * one may be another process's large put or idx write in progress (seconds, not a day).
   */
  async function removeStaleTemporaries(): Promise<void> {
    const now = Date.now();
    for (const name of await readdir(tmpDir)) {
      const file = path.join(tmpDir, name);
      const info = await stat(file).catch(() => null);
      if (info?.isFile() && now - info.mtimeMs > STALE_TMP_MS) await unlink(file).catch(() => {});
    }
  }

  async function recover(): Promise<void> {
    await mkdir(tmpDir, { recursive: true });
    await mkdir(packsDir, { recursive: true });
    await fsyncPath(root); // the packs directory's own entry
    await removeStaleTemporaries();
    await replayLegacyJournal();
    const numbers = (await readdir(packsDir))
      .map((f) => /^(\d{12})\.pack$/.exec(f))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    for (const n of numbers) {
      if (packs.has(n)) continue; // loaded by an earlier attempt that failed further on
      const pack = await loadPack(n);
      if (!pack.index || pack.tail.size) {
        // Seal it: one sorted index instead of a Map, and no rescan at the next start. Not
        // `final`: a live process sharing the directory may still be appending to it.
        const entries = new Map(pack.tail);
        if (pack.index) for (let i = 0; i < pack.index.count; i++) {
          const at = IDX_ENTRIES + i * IDX_ENTRY;
          entries.set(pack.index.buf.toString('hex', at, at + 32), {
            offset: pack.index.buf.readUInt32BE(at + 32),
            length: pack.index.buf.readUInt32BE(at + 36),
          });
        }
        pack.index = encodeIndex(entries, pack.size, false);
        pack.tail = new Map();
        // Saves the next start a rescan, nothing more: a disk too full for it must not stop the store.
        await writeIndex(n, pack.index).catch(() => {});
      }
      addPack(pack);
    }
    // The first put opens a pack: a start that stores nothing leaves no empty pack behind
    // (empty packs cannot be deleted later: on a shared volume one may be another
    // process's active pack).
  }
  /**
   * The store is usable once recovered. A failed recovery (a storage fault at start) is
   * surfaced by the calls that wait for it, and the next call tries again: the store comes
   * back by itself once the fault clears, without a restart.
   */
  let recovered: Promise<void> | null = null;
  function ready(): Promise<void> {
    if (!recovered) {
      const attempt = recover();
      recovered = attempt;
      attempt.catch(() => {
        if (recovered === attempt) recovered = null;
      });
    }
    return recovered;
  }
  void ready().catch(() => {}); // start now; a failure is surfaced by the first call that needs the store

  /** Seals `seg`: index in memory now, idx file in the background; the next flush uses a new pack. */
  function seal(seg: Pack): void {
    if (active !== seg) return;
    active = null;
    nextActive = openSegment();
    nextActive.catch(() => {}); // the next flush awaits it and fails its batch
    seg.index = encodeIndex(seg.tail, seg.size, true);
    seg.tail = new Map();
    // Its append handle now only serves reads: bounded like every other read handle.
    if (seg.handle) {
      openForReading.delete(seg);
      openForReading.set(seg, true);
      closeBeyondBound();
    }
    writeIndex(seg.n, seg.index).catch(() => {
      /* the next start rescans the pack and writes it */
    });
  }

  /** Takes puts from the queue up to about one segment's worth of bytes (at least one). */
  function takeBatch(): PendingPut[] {
    let bytes = 0;
    let count = 0;
    while (count < queue.length && (count === 0 || bytes + HEADER + queue[count].content.length <= segmentBytes)) {
      bytes += HEADER + queue[count].content.length;
      count++;
    }
    return queue.splice(0, count);
  }

  function fail(batch: PendingPut[], err: unknown): void {
    for (const p of batch) {
      pending.delete(p.key);
      p.reject(err);
    }
  }

  async function flush(): Promise<void> {
    flushing = true;
    try {
      while (queue.length) {
        let seg: Pack;
        try {
          if (!active) {
            active = await (nextActive ??= openSegment());
            nextActive = null;
          }
          seg = active;
        } catch (err) {
          nextActive = null; // a later flush tries a fresh one
          fail(queue.splice(0), err);
          continue;
        }
        const batch = takeBatch();
        const parts: Buffer[] = [];
        const locs: Loc[] = [];
        let offset = seg.size;
        for (const p of batch) {
          const header = Buffer.allocUnsafe(HEADER);
          MAGIC.copy(header, 0);
          header.write(p.key, 4, 32, 'hex');
          header.writeUInt32BE(p.content.length, 36);
          parts.push(header, p.content);
          locs.push({ offset: offset + HEADER, length: p.content.length });
          offset += HEADER + p.content.length;
        }
        const bytes = Buffer.concat(parts);
        let written = 0;
        try {
          // A write may take only part of the bytes (a disk filling up: the rest then fails
          // with ENOSPC), so it is repeated until all are in; only then are they durable.
          while (written < bytes.length) {
            const { bytesWritten } = await seg.handle!.write(bytes, written, bytes.length - written);
            if (bytesWritten === 0) throw Object.assign(new Error('blob pack write made no progress'), { code: 'EIO' });
            written += bytesWritten;
          }
          await seg.handle!.datasync();
        } catch (err) {
          fail(batch, err);
          // Some bytes reached the pack: it may end in a torn record, which a scan stops at,
          // so later records go to a new pack (the acknowledged ones stay where they are).
          // None did (the disk was already full): the pack goes on as it is.
          if (written > 0 || !(await endsAt(seg, seg.size))) seal(seg);
          continue;
        }
        seg.size = offset;
        batch.forEach((p, i) => {
          seg.tail.set(p.key, locs[i]);
          pending.delete(p.key);
          p.resolve();
        });
        if (seg.size >= segmentBytes) seal(seg);
      }
    } finally {
      flushing = false;
    }
  }

  /** Whether the pack's file ends at `size` (nothing was appended past what is known). */
  async function endsAt(pack: Pack, size: number): Promise<boolean> {
    try {
      return (await pack.handle!.stat()).size === size;
    } catch {
      return false;
    }
  }

  function packPut(key: string, content: Uint8Array): Promise<void> {
    const inFlight = pending.get(key);
    if (inFlight) return inFlight.durable;
    if (locate(key)) return Promise.resolve();
    // Copy: the caller may reuse its buffer before the flush writes it.
    const copy = Buffer.from(content);
    const durable = new Promise<void>((resolve, reject) => queue.push({ key, content: copy, resolve, reject }));
    pending.set(key, { content: copy, durable });
    if (!flushing) void flush();
    return durable;
  }

  async function directPut(key: string, content: Uint8Array): Promise<void> {
    const file = fileOf(key);
    if ((await sizeOf(file)) === content.byteLength) return;
    const dir = path.dirname(file);
    await ensureDir(dir);
    await writeFileDurably(path.join(tmpDir, `${key}.${randomUUID()}`), content, file);
    await fsyncPath(dir);
  }

  async function readPacked(key: string, { pack, loc }: { pack: Pack; loc: Loc }): Promise<Buffer> {
    const data = Buffer.allocUnsafe(loc.length);
    await withPackHandle(pack, async (handle) => {
      let got = 0;
      while (got < loc.length) {
        const { bytesRead } = await handle.read(data, got, loc.length - got, loc.offset + got);
        if (bytesRead === 0) throw new Error(`blob pack ${pack.file} is shorter than its index`);
        got += bytesRead;
      }
    });
    return verified(key, data);
  }

  /**
   * Where a durable blob is: a pack, its own file, or (after looking for packs other
   * processes wrote since) a pack again. Waits for a put of the key in flight.
   */
  async function find(key: string): Promise<{ packed: { pack: Pack; loc: Loc } } | { file: string; size: number } | null> {
    await ready();
    const inFlight = pending.get(key);
    if (inFlight) await inFlight.durable.catch(() => {});
    const packed = locate(key);
    if (packed) return { packed };
    const file = fileOf(key);
    const size = await sizeOf(file);
    if (size !== null) return { file, size };
    await refresh();
    const late = locate(key);
    return late ? { packed: late } : null;
  }

  return {
    async put(content) {
      await ready();
      const key = createHash('sha256').update(content).digest('hex');
      if (content.byteLength <= PACK_MAX_BLOB) await packPut(key, content);
      else await directPut(key, content);
      return { key, size: content.byteLength } satisfies BlobRef;
    },

    async get(key) {
      if (!BLOB_KEY.test(key)) return null;
      const found = await find(key);
      if (!found) return null;
      if ('packed' in found) return readPacked(key, found.packed);
      try {
        return verified(key, await readFile(found.file));
      } catch (err) {
        if (isErrno(err, 'ENOENT')) return null;
        throw err;
      }
    },

    async open(key) {
      if (!BLOB_KEY.test(key)) return null;
      const found = await find(key);
      if (!found) return null;
      if ('packed' in found) return { size: found.packed.loc.length, stream: Readable.from([await readPacked(key, found.packed)]) };
      return { size: found.size, stream: pipeline(createReadStream(found.file), verifying(key), () => {}) }; // an error ends the returned stream with it (its reader reports it)
    },

    async has(key) {
      if (!BLOB_KEY.test(key)) return false;
      return (await find(key)) !== null;
    },
  };
}
