/**
 * Files written so that they survive kill -9 and power loss once the call returns: the blob
 * store's large blobs and idx files, the outbox's mails.
 */
import { open, rename, unlink } from 'node:fs/promises';

/** fsyncs a file or a directory (a directory's fsync makes the entries created in it durable). */
export async function fsyncPath(target: string): Promise<void> {
  const handle = await open(target, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Writes `content` to `tmp` (mode 0600), fsynced, then renames it to `target`: a reader never
 * sees half a file. The caller fsyncs the directory. A failure removes `tmp`: a disk that
 * filled up keeps no partial copies, which would hold on to the space a retry needs.
 */
export async function writeFileDurably(tmp: string, content: Uint8Array, target: string): Promise<void> {
  try {
    const handle = await open(tmp, 'wx', 0o600);
    try {
      await handle.writeFile(content);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, target);
  } catch (err) {
    await unlink(tmp).catch(() => {});
    throw err;
  }
}
