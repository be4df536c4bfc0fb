/**
 * Child process of the blob store's storage-fault tests: puts blobs of the given sizes (each
 * filled with its own byte) into the store at `dir`, one after the other, and prints what
 * each put did as JSON. Run under `ulimit -f`, a put that crosses the file size limit gets a
 * short write and then EFBIG, as on a disk that fills up.
 *   node --import tsx test/support/blob-puts.ts <dir> <size>...
 */
import { createFsBlobStore } from '../../infra/blobs/fs-blob-store.js';

const [dir, ...sizes] = process.argv.slice(2);
const blobs = createFsBlobStore({ dir });
const results: { size: number; ok: boolean; code?: string }[] = [];
for (const [i, size] of sizes.map(Number).entries()) {
  try {
    await blobs.put(Buffer.alloc(size, i + 1));
    results.push({ size, ok: true });
  } catch (err) {
    results.push({ size, ok: false, code: (err as NodeJS.ErrnoException).code });
  }
}
process.stdout.write(JSON.stringify(results));
