/**
 * The CLI's state: `$XDG_CONFIG_HOME/agent-identity/config.json` (default ~/.config/...),
 * written atomically with mode 0600 in a 0700 directory, because it holds tokens, the
 * management key and the device secret of the vault's two-secret key derivation.
 */
import { chmodSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CliError, EXIT } from './errors.js';

export interface CliConfig {
  base_url?: string;
  access?: string;
  refresh?: string;
  management_key?: string;
  /** The default identity (`ais identities use`). */
  identity?: string;
  user?: { pk: number; username: string; email: string };
  /** Vault device secret (SK1-...), kept only on this machine. */
  device_secret?: string;
  /**
   * `ais pin setup` between keeping its keys and showing the recovery key: a setup cut off
   * after its upload shows the key on the next run (matched by the uploaded public key).
   * `device_secret`: the one that setup made, when a login of another account replaced the
   * stored one meanwhile (its own is then no longer `device_secret` above).
   */
  pending_setup?: { recovery_key: string; public_key: string; device_secret?: string };
}

export function configDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(os.homedir(), '.config');
  return path.join(base, 'agent-identity');
}

export function configFile(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(configDir(env), 'config.json');
}

/** The config's fields that hold text. */
const TEXT_FIELDS = ['base_url', 'access', 'refresh', 'management_key', 'identity', 'device_secret'] as const;

export function loadConfig(env: NodeJS.ProcessEnv = process.env): CliConfig {
  const file = configFile(env);
  let config: unknown;
  try {
    config = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw unreadableConfig(file, (err as Error).message);
  }
  // Edited by hand or cut off: said as such, not as a JavaScript error of some command later.
  if (typeof config !== 'object' || config === null || Array.isArray(config)) throw unreadableConfig(file, 'it holds no JSON object');
  const wrong = TEXT_FIELDS.find((field) => field in config && typeof (config as Record<string, unknown>)[field] !== 'string');
  if (wrong) throw unreadableConfig(file, `its ${wrong} is not text`);
  return config as CliConfig;
}

const unreadableConfig = (file: string, why: string) =>
  new CliError('usage', `Cannot read ${file}: ${why}. Repair it, or remove it and log in again (\`ais login\`).`, EXIT.usage);

export function saveConfig(config: CliConfig, env: NodeJS.ProcessEnv = process.env): void {
  const dir = configDir(env);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // Ours alone: a directory made looser before (by hand, by an older release) is tightened.
  if ((statSync(dir).mode & 0o077) !== 0) chmodSync(dir, 0o700);
  const file = configFile(env);
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(config, null, 2) + '\n', { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

export function removeConfig(env: NodeJS.ProcessEnv = process.env): void {
  rmSync(configFile(env), { force: true });
}

/** A lock whose holder is alive but has held it this long is taken over (a hung process). */
const STALE_LOCK_MS = 60_000;
const LOCK_WAIT_MS = 90_000;

/** Whether the process that wrote a lock file is gone (or the lock is ancient). */
function staleLock(content: string, mtimeMs: number): boolean {
  if (Date.now() - mtimeMs > STALE_LOCK_MS) return true;
  const pid = Number(content.trim());
  // No pid yet: being written right now, or its writer died between creating and writing it
  // (writing a pid takes microseconds, so after a second it is the latter).
  if (!Number.isInteger(pid) || pid <= 0) return Date.now() - mtimeMs > 1_000;
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
  // Exists: unless it is a zombie (dead, waiting to be reaped by a parent that never does).
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z') ?? false;
  } catch {
    return false; // no /proc: trust kill()
  }
}

/**
 * Runs `work` holding the config's lock file (`config.json.lock`, created exclusively, with
 * the holder's pid), so ais processes sharing one config refresh their tokens one at a
 * time: refresh tokens rotate, and a second process sending the spent one would revoke the
 * session (RFC 9700). A lock whose process is gone (kill -9) is taken over at once; a live
 * holder is waited for, unless it has held the lock for STALE_LOCK_MS (taken for hung).
 */
export async function withConfigLock<T>(env: NodeJS.ProcessEnv, work: () => Promise<T>): Promise<T> {
  const dir = configDir(env);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const lock = `${configFile(env)}.lock`;
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let content: string;
    let mtimeMs: number;
    try {
      content = readFileSync(lock, 'utf8');
      mtimeMs = statSync(lock).mtimeMs;
    } catch {
      continue; // released meanwhile: try again at once
    }
    if (staleLock(content, mtimeMs)) {
      // Removed only if it is still the stale one (another waiter may have just taken it over).
      try {
        if (readFileSync(lock, 'utf8') === content) rmSync(lock, { force: true });
      } catch {
        // gone already
      }
      continue;
    }
    if (Date.now() > deadline) throw new Error(`${lock} is held by process ${content.trim()}; if no ais command is running, remove it.`);
    await new Promise((resolve) => setTimeout(resolve, 25 + Math.random() * 50));
  }
  try {
    return await work();
  } finally {
    try {
      if (readFileSync(lock, 'utf8').trim() === String(process.pid)) rmSync(lock, { force: true });
    } catch {
      // already gone
    }
  }
}

/**
 * Changes the stored config under its lock, starting from what is stored now: another ais
 * process may have rotated the tokens since this one read it, and writing back the copy
 * read at start would restore a spent refresh token (which ends the session).
 */
export async function updateConfig(env: NodeJS.ProcessEnv, change: (stored: CliConfig) => CliConfig): Promise<CliConfig> {
  return withConfigLock(env, async () => {
    const next = change(loadConfig(env));
    if (Object.keys(next).length === 0) removeConfig(env);
    else saveConfig(next, env);
    return next;
  });
}
