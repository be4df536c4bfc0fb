/**
 * Local storage faults: the disk is full or over quota, a file hit its size limit, the
 * filesystem went read-only, descriptors ran out. None is the caller's fault and each may
 * clear by itself (space freed, a remount), so they are answered as temporary: 503 with
 * Retry-After over HTTP, 452 over SMTP, a deferred delivery for mail. An I/O error (EIO) is
 * not among them: it is a broken disk, logged as a server error.
 */
import { EventStoreUnavailableError } from '../../infra/ports/event-store.js';

const STORAGE_FAULTS = new Set([
  ...['ENOSPC', 'EDQUOT', 'EFBIG', 'EROFS', 'EMFILE', 'ENFILE'],
  // SQLite's names: a full disk is SQLITE_FULL; a refused write of another kind (a quota, a
  // file size limit, and also EIO) is SQLITE_IOERR_WRITE, which it does not tell apart.
  ...['SQLITE_FULL', 'SQLITE_IOERR_WRITE'],
]);

export function isStorageFault(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && STORAGE_FAULTS.has(code);
}

/** A write that cannot be made right now but may be later: the event store or the disk refuses it. */
export function isTemporaryFault(err: unknown): boolean {
  return err instanceof EventStoreUnavailableError || isStorageFault(err);
}
