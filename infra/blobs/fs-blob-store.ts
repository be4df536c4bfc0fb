/**
 * Embedded blob store: one file per blob under `<dir>/<k[0..2]>/<k[2..4]>/<key>`.
 *
 * A put writes a temporary file, fsyncs it, renames it into place and fsyncs the
 * directory: once the promise resolves the blob survives kill -9 and power loss, which is
 * what lets the SMTP listener answer 250 after an append that refers to it.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, rename, stat, readFile, unlink } from 'node:fs/promises';
import path from 'node:path';
import { BLOB_KEY, type BlobRef, type BlobStore } from '../ports/blob-store.js';

async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export function createFsBlobStore(options: { dir: string }): BlobStore {
  const root = options.dir;
  const tmpDir = path.join(root, 'tmp');

  const fileOf = (key: string): string => {
    if (!BLOB_KEY.test(key)) throw new Error(`invalid blob key: ${JSON.stringify(key)}`);
    return path.join(root, key.slice(0, 2), key.slice(2, 4), key);
  };

  async function exists(file: string): Promise<number | null> {
    try {
      return (await stat(file)).size;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  return {
    async put(content) {
      const key = createHash('sha256').update(content).digest('hex');
      const file = fileOf(key);
      if ((await exists(file)) === content.byteLength) return { key, size: content.byteLength };
      const dir = path.dirname(file);
      await mkdir(dir, { recursive: true });
      await mkdir(tmpDir, { recursive: true });
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
      await fsyncDir(dir);
      return { key, size: content.byteLength } satisfies BlobRef;
    },

    async get(key) {
      if (!BLOB_KEY.test(key)) return null;
      try {
        return await readFile(fileOf(key));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw err;
      }
    },

    async open(key) {
      if (!BLOB_KEY.test(key)) return null;
      const file = fileOf(key);
      const size = await exists(file);
      if (size === null) return null;
      return { size, stream: createReadStream(file) };
    },

    async has(key) {
      return BLOB_KEY.test(key) && (await exists(fileOf(key))) !== null;
    },
  };
}
