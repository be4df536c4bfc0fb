/**
 * HTTP basic credentials this process verified, so that a client sending its username and
 * password with every request pays argon2id (~20–40 ms of CPU) once, not per request.
 *
 * Kept in memory only, never in events or logs: an entry is keyed by an HMAC of the login
 * and password under a random key of this process (the password itself is not kept, and the
 * key dies with the process), and holds the account and the password hash it was verified
 * against. It answers only while the account found by the same login still has that very
 * hash: a password change or reset, a rename (the login finds another account, or none) or
 * a deletion is seen on the next request, with no invalidation to get right. Entries lapse
 * after `ttlMs` and are then swept (a minute later at most: an HMAC of a password is not left
 * in the heap for a guesser with a memory dump), and the least recently used go first
 * beyond `max`.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { sameSecret } from '../kernel/secrets.js';

export interface RememberedCredentials {
  /** The entry's key for this login and password (an HMAC; compute it once per request). */
  tag(login: string, password: string): string;
  /** True when `tag` was verified against this account's current password hash, recently. */
  holds(tag: string, account: { pk: number; passwordHash: string | null }, nowMs?: number): boolean;
  /** Notes that `tag` verified against the account's current password hash. */
  remember(tag: string, account: { pk: number; passwordHash: string | null }, nowMs?: number): void;
  /** Entries held now (lapsed ones until the next sweep). */
  readonly size: number;
}

const SWEEP_MS = 60_000;

export function rememberedCredentials(opts: { max?: number; ttlMs?: number } = {}): RememberedCredentials {
  const max = opts.max ?? 10_000;
  const ttlMs = opts.ttlMs ?? 10 * 60_000;
  const key = randomBytes(32);
  /** Map order is recency: a hit moves its entry to the end, the oldest go first. */
  const entries = new Map<string, { pk: number; passwordHash: string; until: number }>();
  /** Runs while anything is held: drops what lapsed. */
  let sweeper: NodeJS.Timeout | null = null;
  const sweep = () => {
    const now = Date.now();
    for (const [tag, entry] of entries) if (entry.until <= now) entries.delete(tag);
    if (entries.size === 0 && sweeper) {
      clearInterval(sweeper);
      sweeper = null;
    }
  };

  return {
    tag(login, password) {
      // Lengths first, so no login/password split collides with another.
      return createHmac('sha256', key).update(`${login.length}:${login}${password}`, 'utf8').digest('base64url');
    },
    holds(tag, account, nowMs = Date.now()) {
      const entry = entries.get(tag);
      if (!entry) return false;
      if (entry.until <= nowMs || entry.pk !== account.pk || !account.passwordHash || !sameSecret(account.passwordHash, entry.passwordHash)) {
        entries.delete(tag);
        return false;
      }
      entries.delete(tag);
      entries.set(tag, entry);
      return true;
    },
    get size() {
      return entries.size;
    },
    remember(tag, account, nowMs = Date.now()) {
      if (!account.passwordHash) return;
      entries.delete(tag);
      entries.set(tag, { pk: account.pk, passwordHash: account.passwordHash, until: nowMs + ttlMs });
      while (entries.size > max) entries.delete(entries.keys().next().value!);
      if (!sweeper) {
        sweeper = setInterval(sweep, Math.min(ttlMs, SWEEP_MS));
        sweeper.unref();
      }
    },
  };
}
