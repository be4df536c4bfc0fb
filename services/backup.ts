/**
 * `npm run backup -- <dir>`: a consistent copy of an embedded DATA_DIR, taken while the
 * service runs (it neither stops nor waits for it). Restoring is starting the service with
 * DATA_DIR=<dir>, or replacing a stopped service's DATA_DIR with <dir> (never copying <dir>'s
 * files into it: its leftover -wal files would be applied to the copied databases).
 *
 * Copying the directory with `cp` while the service writes can tear a SQLite file (a page
 * copied before a commit, the next after it). Here each database is copied as one snapshot
 * (`VACUUM INTO` on a read-only connection), in an order that keeps the copy coherent:
 * - the read models first: their checkpoints are then at or behind the log copied next, so
 *   the restored service catches them up (never a read model ahead of its log);
 * - the event log;
 * - then the blobs: a blob is durable before the event that names it is appended, and blob
 *   files are never rewritten or deleted, so every blob the copied log names is in the copy
 *   (a pack being appended to may end in a torn record, which a start skips, as after a crash);
 * - the key ring (tokens and links stay valid) and the outbox.
 *
 * The copy says it is unfinished (infra/data-dir.ts: a service refuses to start on it) from
 * its first file until its last is durable: a backup killed midway, even by kill -9, never
 * passes for one.
 */
import { accessSync, constants, copyFileSync, existsSync, mkdirSync, readdirSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { loadConfig, ConfigError } from '../infra/config.js';
import { fsyncPath } from '../infra/durable-file.js';
import { openDatabase } from '../infra/sqlite/driver.js';
import { createDirectory, requireEventLog, UNFINISHED_BACKUP } from '../infra/data-dir.js';

const DATABASES = ['read-models.sqlite', 'events.sqlite'] as const; // this order: see above
const DIRECTORIES = ['blobs', 'keys', 'outbox'] as const;

/** Copies `from` into `to` (made), files and directories only, leaving out `skip` names; fsyncs each. */
async function copyTree(from: string, to: string, skip: Set<string> = new Set(), seen: Set<string> = new Set()): Promise<number> {
  // A link back to a directory being copied would copy the tree into itself until the disk fills.
  const real = realpathSync(from);
  if (seen.has(real)) throw new Error(`${from} links back to ${real}, which is being copied: a symbolic link loop`);
  seen = new Set(seen).add(real);
  mkdirSync(to, { mode: 0o700 });
  let bytes = 0;
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    if (skip.has(entry.name)) continue;
    const source = path.join(from, entry.name);
    const target = path.join(to, entry.name);
    // A link (an operator's: the key ring kept elsewhere) is copied as what it points to; one
    // that points nowhere fails the backup rather than leave a key out of it.
    const kind = entry.isSymbolicLink() ? statSync(source) : entry;
    if (kind.isDirectory()) bytes += await copyTree(source, target, new Set(), seen);
    else if (kind.isFile() && !entry.name.endsWith('.tmp')) {
      try {
        copyFileSync(source, target, constants.COPYFILE_EXCL);
      } catch (err) {
        // Gone since the listing: a temporary file renamed into place, by a write the copied
        // log does not name yet (whatever it names was in place before its event).
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw err;
      }
      await fsyncPath(target);
      bytes += statSync(target).size;
    }
  }
  await fsyncPath(to);
  return bytes;
}

async function backup(dataDir: string, target: string): Promise<Record<string, number>> {
  requireEventLog(dataDir, 'back up');
  if (existsSync(target) && readdirSync(target).length > 0) throw new Error(`${target} exists and is not empty: name a new directory`);
  createDirectory(target, 0o700);
  const unfinished = path.join(target, UNFINISHED_BACKUP);
  writeFileSync(unfinished, `This backup of ${dataDir} was cut short: part of the data is missing. Take it again.\n`);
  await fsyncPath(unfinished);
  await fsyncPath(target);
  const sizes: Record<string, number> = {};
  for (const name of DATABASES) {
    const source = path.join(dataDir, name);
    if (!existsSync(source)) continue; // read models: rebuilt from the log at the restored start
    try {
      const db = openDatabase(source, { readonly: true });
      try {
        db.prepare('VACUUM INTO ?').run(path.join(target, name));
      } finally {
        db.close();
      }
    } catch (err) {
      // SQLite's words ("unable to open database file", "attempt to write a readonly database") name no file.
      const hint = writable(dataDir) ? '' : ' (DATA_DIR cannot be written: SQLite reads a database in WAL mode only where it can write beside it)';
      throw new Error(`${source}: ${(err as Error).message}${hint}`, { cause: err });
    }
    await fsyncPath(path.join(target, name));
    sizes[name] = statSync(path.join(target, name)).size;
  }
  for (const name of DIRECTORIES) {
    const source = path.join(dataDir, name);
    if (existsSync(source)) sizes[name] = await copyTree(source, path.join(target, name), new Set(['tmp'])); // tmp/: unfinished writes
  }
  await fsyncPath(target); // every name in place before the marker goes
  rmSync(unfinished);
  await fsyncPath(target);
  return sizes;
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** `p` with every symbolic link resolved, for a path that may not exist yet (its nearest existing ancestor resolved). */
function realPath(p: string): string {
  const rest: string[] = [];
  let head = path.resolve(p);
  while (!existsSync(head) && path.dirname(head) !== head) {
    rest.unshift(path.basename(head));
    head = path.dirname(head);
  }
  return path.join(realpathSync(head), ...rest);
}

// The copy holds what DATA_DIR holds (password hashes, SMS texts, the key ring): the
// service user's only, whatever the shell's umask (as services/main.ts does for DATA_DIR).
process.umask(0o077);
const target = process.argv[2];
const USAGE = 'usage: npm run backup -- <new directory>';
if (target === '--help' || target === '-h') {
  process.stdout.write(`${USAGE}\n(a consistent copy of DATA_DIR, taken while the service runs; docs/DEPLOYMENT.md "Backups")\n`);
  process.exit(0);
}
try {
  if (!target || process.argv.length > 3) throw new Error(USAGE);
  // An option, not a directory (a directory of that name is `./-x`).
  if (target.startsWith('-')) throw new Error(`unknown option ${target}; ${USAGE}`);
  const config = loadConfig(process.env);
  if (config.store === 'cluster') {
    throw new Error('this copies the embedded store; in cluster mode back up EventStoreDB and MongoDB with their own tools, and DATA_DIR (key ring, blobs) as files (docs/DEPLOYMENT.md)');
  }
  const dir = path.resolve(target);
  // Through links too: a copy inside what it copies would copy itself until the disk fills.
  const inside = path.relative(realPath(config.dataDir), realPath(dir));
  if (!inside.startsWith('..') && !path.isAbsolute(inside)) throw new Error(`${dir} is inside DATA_DIR: name a directory outside it`);
  const started = Date.now();
  const madeHere = !existsSync(dir);
  const wasEmpty = !madeHere && readdirSync(dir).length === 0;
  // No half backup left to be mistaken for one: the directory as it was (absent, or empty).
  // Once the marker is gone the copy is whole: a late signal (or a failing last fsync) keeps it.
  const whole = () => existsSync(dir) && readdirSync(dir).length > 0 && !existsSync(path.join(dir, UNFINISHED_BACKUP));
  const undo = () => {
    if (whole()) return;
    if (madeHere && existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    else if (wasEmpty) for (const name of readdirSync(dir)) rmSync(path.join(dir, name), { recursive: true, force: true });
  };
  for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143], ['SIGHUP', 129]] as const) {
    process.on(signal, () => {
      const kept = whole();
      undo();
      process.stderr.write(`backup ${kept ? 'stopped' : 'failed'}: stopped by ${signal}; ${kept ? `the copy in ${dir} is whole` : 'nothing was kept'}\n`);
      process.exit(code);
    });
  }
  try {
    const sizes = await backup(path.resolve(config.dataDir), dir);
    process.stdout.write(`${JSON.stringify({ backup: dir, from: path.resolve(config.dataDir), bytes: sizes, ms: Date.now() - started })}\n`);
  } catch (err) {
    try {
      undo();
    } catch (cleanup) {
      // The reason the backup failed is the news; what could not be cleaned up is added to it.
      throw new Error(`${(err as Error).message} (and ${dir} could not be cleaned up: ${(cleanup as Error).message})`, { cause: err });
    }
    throw err;
  }
} catch (err) {
  process.stderr.write(`backup failed: ${err instanceof ConfigError ? err.problems.join('; ') : (err as Error).message}\n`);
  process.exit(1);
}
