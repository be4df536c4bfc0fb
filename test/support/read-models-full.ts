import { jest } from '@jest/globals';
import type { TestServer } from './server.js';

/**
 * Runs `during` while the server's read models cannot be written (their commits refused as
 * by a full disk): the projection runner retries, and a request that waits for them answers
 * 503 `projection_lag` after 5 s, its write made all the same. Commits go through again after.
 */
export async function whileReadModelsFull<T>(server: TestServer, during: () => Promise<T>): Promise<T> {
  const reads = server.runtime.reads;
  const commit = reads.commit.bind(reads);
  let full = true;
  const refuse = jest.spyOn(reads, 'commit').mockImplementation(async (...args) => {
    if (full) throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    return commit(...args);
  });
  try {
    return await during();
  } finally {
    full = false;
    refuse.mockRestore();
  }
}
