/**
 * What a DATA_DIR must hold before a service starts on it. A start on a partial directory
 * would not fail: it would create what is missing (a new key ring) and serve, with every
 * token, session and signed link of the old keys silently ended, or attachments gone.
 */
import { accessSync, constants, existsSync, mkdirSync, renameSync } from 'node:fs';
import path from 'node:path';
import { openDatabase } from './sqlite/driver.js';
import { UNREADABLE_DATABASE } from './sqlite/read-store.js';

/** Written first into a backup's directory by services/backup.ts, removed once the copy is whole. */
/**
 * `mkdir -p` one level at a time: Node's recursive mkdir never returns when a parent refuses
 * children with ENOENT (e.g. under /proc), so a bad DATA_DIR (or backup target) would hang
 * instead of failing with a line naming it.
 */
export function createDirectory(dir: string, mode?: number): void {
  const missing: string[] = [];
  for (let d = path.resolve(dir); !existsSync(d); d = path.dirname(d)) {
    missing.unshift(d);
    if (path.dirname(d) === d) break;
  }
  for (const d of missing) mkdirSync(d, mode === undefined ? undefined : { mode });
}

/** Maintenance commands (backup, rebuild) need an event log: a DATA_DIR without one is a mistyped one. */
export function requireEventLog(dir: string, purpose: string): void {
  try {
    accessSync(path.join(dir, 'events.sqlite'), constants.R_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // Only a log that is not there is "none": one this user may not read is said as such.
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new Error(`DATA_DIR: ${dir} holds no event log (events.sqlite): nothing to ${purpose}`);
    throw Object.assign(new Error(`DATA_DIR: ${path.join(dir, 'events.sqlite')} cannot be read by this user (${code})`), { path: dir, code });
  }
}

/**
 * Moves a read-model database SQLite cannot read (no database, damaged) aside with its WAL
 * and shared memory, so a rebuild can make a new one; returns where it went, or null when
 * the file is readable or absent. Nothing is deleted: read models are rebuilt from the log,
 * but what was there stays for a look.
 */
export function setAsideUnreadable(file: string, now = new Date()): string | null {
  if (!existsSync(file)) return null;
  try {
    const db = openDatabase(file, { readonly: true });
    try {
      db.prepare('SELECT count(*) FROM sqlite_master').get();
      return null;
    } finally {
      db.close();
    }
  } catch (err) {
    if (!UNREADABLE_DATABASE.test((err as { code?: string }).code ?? '')) throw err;
  }
  const aside = `${file}.unreadable-${now.toISOString().replace(/[:.]/g, '-')}`;
  for (const suffix of ['-wal', '-shm']) if (existsSync(file + suffix)) renameSync(file + suffix, aside + suffix);
  renameSync(file, aside);
  return aside;
}

export const UNFINISHED_BACKUP = 'BACKUP-UNFINISHED';

/** The directories the service writes under DATA_DIR (besides its databases): its own, 0700. */
export const SERVICE_DIRS = ['keys', 'blobs', 'outbox'];

/**
 * Throws (with `path` and the system's `code`) when `dir`, or a directory the service writes
 * in it, cannot be written: said plainly at start, instead of SQLite's "unable to open
 * database file" or "attempt to write a readonly database", or a first mail refused later.
 */
export function requireWritable(dir: string): void {
  for (const d of [dir, ...SERVICE_DIRS.map((name) => path.join(dir, name)).filter((d) => existsSync(d))]) {
    try {
      accessSync(d, constants.W_OK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? 'EACCES';
      const why = code === 'EROFS' ? 'it is on a read-only file system' : 'this user may not write it';
      throw Object.assign(new Error(`${path.resolve(d)} cannot be written: ${why} (${code})`), { path: d, code });
    }
  }
}

/** Throws (with `path`: the directory) when a service must not start on `dir`. */
export function refusePartialDataDir(dir: string, embedded: boolean): void {
  const refuse = (message: string) => Object.assign(new Error(message), { path: dir, code: 'EPARTIAL' });
  if (existsSync(path.join(dir, UNFINISHED_BACKUP))) {
    throw refuse(`an unfinished backup (its copy was cut short, so part of the data is missing): restore a finished backup, or take the backup again`);
  }
  // Cluster: the log is in EventStoreDB, which cannot be asked before the ports are open;
  // its gateways share one DATA_DIR, whose keys/ the first start made.
  if (embedded && !existsSync(path.join(dir, 'keys')) && hasEvents(path.join(dir, 'events.sqlite'))) {
    throw refuse(
      'keys/ is missing, but the event log has events: their tokens, sessions and signed links need those keys. ' +
        'Put keys/ back (from the backup), or create the empty directory keys/ to start with new keys (every token and link ends)',
    );
  }
}

function hasEvents(file: string): boolean {
  if (!existsSync(file)) return false;
  const db = openDatabase(file, { readonly: true });
  try {
    const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'").get();
    return table !== undefined && db.prepare('SELECT 1 FROM events LIMIT 1').get() !== undefined;
  } finally {
    db.close();
  }
}
