/**
 * API keys (SPEC "Key kinds", "API keys"; DECISIONS "Auth"): management keys (`svc_mgmt_`)
 * for the account, identity keys (`svc_id_`) fenced to one identity.
 *
 * - A key is the prefix + 40 base62 characters from a CSPRNG (≈238 bits).
 * - Only its SHA-256 hash is stored (event and read model). A lookup is one indexed read
 *   by hash, confirmed with a timing-safe comparison. The key itself is shown once.
 * - Revocation removes the key from the read model before the DELETE answers, so the next
 *   request with it gets 401 (read-your-writes). A key fenced to a deleted identity is
 *   refused at once (its identity is checked on every lookup) and revoked by a reactor.
 * - last_used_at: an `ApiKeyUsed` event at most once per key per minute (in-memory throttle);
 *   this process's listings also show the uses since (exact right after a use, no write per request).
 */
// A namespace import: `hash` is missing before Node 20.12, and a named import of it would not link.
import * as nodeCrypto from 'node:crypto';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Page } from '../../infra/ports/read-store.js';
import type { Platform } from '../kernel/platform.js';
import { event, execute, type Evolver } from '../kernel/command.js';
import { newId, nowIso, randomBase62 } from '../kernel/ids.js';
import { ApiError, notFound } from '../gateway/errors.js';
import { keyedSerial } from '../kernel/serial.js';
import { lagLogged, unseenWrites } from '../kernel/read-waits.js';
import { KEY_PREFIXES, type KeyRecord } from '../gateway/auth.js';
import { APIKEYS, type ApiKeyDoc } from '../../projections/apikeys/index.js';
import { IDENTITIES, type IdentityDoc } from '../../projections/identities/index.js';
import { createKeyUses } from './key-uses.js';
import {
  ApiKeyMinted,
  ApiKeyRevoked,
  ApiKeyUsed,
  apiKeyStream,
  type ApiKeyMintedData,
  type ApiKeyRevokedData,
  type ApiKeyUsedData,
  type KeyKind,
} from './events.js';

/** Random characters after the prefix: 40 × log2(62) ≈ 238 bits (≥ 160 required). */
export const KEY_SECRET_LENGTH = 40;
export const TOUCH_INTERVAL_MS = 60_000;

/**
 * SHA-256 hex of a key (what is stored and looked up). Checked on every request, so the
 * one-shot `crypto.hash` (Node >= 20.12, no Hash object per call) is used where it exists.
 */
export const hashKey: (secret: string) => string =
  typeof nodeCrypto.hash === 'function'
    ? (secret) => nodeCrypto.hash('sha256', secret, 'hex')
    : (secret) => createHash('sha256').update(secret, 'utf8').digest('hex');

/** Prefix + "…" + at most the last 4 characters of the secret (DECISIONS "Auth"). */
export function maskKey(secret: string): string {
  const prefix = secret.startsWith(KEY_PREFIXES.management) ? KEY_PREFIXES.management : secret.startsWith(KEY_PREFIXES.identity) ? KEY_PREFIXES.identity : '';
  const rest = secret.slice(prefix.length);
  const shown = Math.min(4, Math.floor(rest.length / 4)); // never more than a quarter of the secret
  return `${prefix}…${shown > 0 ? rest.slice(-shown) : ''}`;
}

interface KeyState {
  exists: boolean;
  revoked: boolean;
  kind: KeyKind;
  ownerPk: number;
  identityId?: string;
}

const keyEvolver: Evolver<KeyState> = {
  initial: () => ({ exists: false, revoked: false, kind: 'management', ownerPk: 0 }),
  evolve(s, e) {
    if (e.type === ApiKeyMinted) {
      const d = e.data as ApiKeyMintedData;
      return { exists: true, revoked: false, kind: d.kind, ownerPk: d.ownerPk, identityId: d.identityId };
    }
    if (e.type === ApiKeyRevoked) return { ...s, revoked: true };
    return s;
  },
};

/** A key just minted: what its answer shows (the secret only this once). */
export interface MintedKey {
  keyId: string;
  secret: string;
  label: string;
  maskedKey: string;
  createdAt: string;
}

export function createKeys(platform: Platform) {
  const { events: store, reads, progress, logger } = platform;
  const keys = reads.collection<ApiKeyDoc>(APIKEYS);
  const identities = reads.collection<IdentityDoc>(IDENTITIES);
  const uses = createKeyUses(TOUCH_INTERVAL_MS);
  /** `ApiKeyUsed` appends in flight (a graceful stop waits for them). */
  const inFlight = new Set<Promise<unknown>>();
  /** Records, once an interval, the uses that came within their key's interval (made at the first use). */
  let dueTimer: NodeJS.Timeout | null = null;

  /**
   * Mints a key; the returned `secret` is the only time the full key exists outside the caller.
   * `waitFor` waits for the read models to show it (a caller that must answer the secret
   * whatever happens passes one that does not give up with a throw).
   */
  async function mint(ownerPk: number, input: { kind: KeyKind; label: string; identityId?: string }, waitFor = progress.waitFor.bind(progress)): Promise<MintedKey> {
    const keyId = newId();
    const secret = `${input.kind === 'management' ? KEY_PREFIXES.management : KEY_PREFIXES.identity}${randomBase62(KEY_SECRET_LENGTH)}`;
    const data: ApiKeyMintedData = {
      keyId,
      kind: input.kind,
      ownerPk,
      ...(input.identityId ? { identityId: input.identityId } : {}),
      label: input.label,
      maskedKey: maskKey(secret),
      keyHash: hashKey(secret),
      at: nowIso(),
    };
    const { position } = await store.append(apiKeyStream(keyId), [event(ApiKeyMinted, data)], { expectedRevision: 'no_stream' });
    await waitFor(position);
    return { keyId, secret, label: data.label, maskedKey: data.maskedKey, createdAt: data.at };
  }

  /**
   * Mints a key an account asked for (POST of a key): refused with 403 `key_limit_reached`
   * when it holds KEY_LIMIT live keys already (the read model keeps live keys only). The
   * mints of one account take turns in this process, so concurrent ones cannot pass the limit
   * together; across gateways (cluster mode), by the mints in flight on the others at most.
   * The device flow's keys are not refused (each took a person's approval), but count.
   */
  const mintTurns = keyedSerial();
  /** A mint the read models do not show yet is counted before the account's next. */
  const unseenMints = unseenWrites(progress);
  function mintAsked(ownerPk: number, input: { kind: KeyKind; label: string; identityId?: string }): Promise<MintedKey> {
    const account = String(ownerPk);
    return mintTurns(account, async () => {
      await unseenMints.awaitSeen(account);
      const held = await keys.count({ ownerPk });
      const limit = platform.config.keyLimit;
      if (held >= limit) throw new ApiError(403, 'key_limit_reached', `This account holds ${held} API keys, its limit (${limit}); revoke one, or ask support to raise the limit.`);
      // Its secret is answered once: a lag of the read models is logged, not a 503 that loses
      // it (the key works once they show it).
      return mint(ownerPk, input, (position) => unseenMints.waitFor(account, position).catch(lagLogged(logger, 'key mint')));
    });
  }

  /** Revokes a key of `ownerPk` and `kind`; 404 when it is not one (unknown, revoked, other account). */
  async function revoke(ownerPk: number, kind: KeyKind, keyId: string): Promise<void> {
    const { position } = await execute(store, apiKeyStream(keyId), keyEvolver, (s) => {
      if (!s.exists || s.revoked || s.ownerPk !== ownerPk || s.kind !== kind) throw notFound('Key not found.');
      return { events: [event(ApiKeyRevoked, revokedData(s, keyId, 'owner'))], result: undefined };
    });
    uses.forget(keyId);
    if (position) await progress.waitFor(position);
  }

  const revokedData = (s: KeyState, keyId: string, reason: string): ApiKeyRevokedData => ({
    keyId,
    ownerPk: s.ownerPk,
    ...(s.identityId ? { identityId: s.identityId } : {}),
    reason,
    at: nowIso(),
  });

  /** Revokes every key fenced to a deleted identity (the reactor; idempotent). */
  async function revokeForIdentity(identityId: string): Promise<void> {
    for (;;) {
      const page = await keys.find({ where: { identityId }, limit: 100 });
      if (page.items.length === 0) return;
      let last: string | null = null;
      for (const k of page.items) {
        const { append } = await execute(store, apiKeyStream(k.id), keyEvolver, (s) =>
          s.exists && !s.revoked ? { events: [event(ApiKeyRevoked, revokedData(s, k.id, 'identity_deleted'))], result: undefined } : { events: [], result: undefined },
        );
        if (append) last = append.position;
        uses.forget(k.id);
      }
      if (!last) return; // documents not yet updated by the projection: nothing more to do now
      await progress.waitFor(last);
    }
  }

  async function liveIdentity(id: string, ownerPk: number): Promise<IdentityDoc | null> {
    const doc = await identities.get(id);
    return doc && doc.ownerPk === ownerPk ? doc : null;
  }

  /** The credential resolver: a live key by its full secret, or null. */
  async function findKey(secret: string): Promise<KeyRecord | null> {
    if (secret.length > 200) return null;
    const hash = hashKey(secret);
    const doc = await keys.findOne({ keyHash: hash });
    // Same length by construction (64 hex characters): compared as their bytes.
    if (!doc || !timingSafeEqual(Buffer.from(doc.keyHash, 'latin1'), Buffer.from(hash, 'latin1'))) return null;
    const expectedPrefix = doc.kind === 'management' ? KEY_PREFIXES.management : KEY_PREFIXES.identity;
    if (!secret.startsWith(expectedPrefix)) return null;
    if (doc.kind === 'identity') {
      if (!doc.identityId || !(await liveIdentity(doc.identityId, doc.ownerPk))) return null;
      return { keyId: doc.id, kind: 'identity_key', userPk: doc.ownerPk, identityId: doc.identityId };
    }
    return { keyId: doc.id, kind: 'management_key', userPk: doc.ownerPk };
  }

  /** Records a use, at most once per key per TOUCH_INTERVAL_MS (fire and forget; see ./key-uses.ts). */
  function touchKey(keyId: string): void {
    const now = Date.now();
    if (uses.note(keyId, now, performance.now())) recordUse(keyId, now);
    dueTimer ??= setInterval(() => {
      for (const [id, at] of uses.due(performance.now())) recordUse(id, at);
    }, TOUCH_INTERVAL_MS).unref();
  }

  function recordUse(keyId: string, at: number): void {
    const data: ApiKeyUsedData = { keyId, at: new Date(at).toISOString() };
    const append = store
      .append(apiKeyStream(keyId), [event(ApiKeyUsed, data)], { expectedRevision: 'stream_exists' })
      .catch((err) => logger.warn({ err, keyId }, 'last_used_at not recorded'))
      .finally(() => inFlight.delete(append));
    inFlight.add(append);
  }

  /** On shutdown: records the uses seen since each key's last record, so a restart keeps them. */
  async function flushUses(): Promise<void> {
    if (dueTimer) clearInterval(dueTimer);
    for (const [keyId, at] of uses.due(Infinity)) recordUse(keyId, at);
    await Promise.all(inFlight);
  }

  /** Keys of an account, oldest first; identity keys of deleted identities are left out. */
  async function list(ownerPk: number, kind: KeyKind, page: { limit: number; cursor: string | null }, identityId?: string): Promise<Page<ApiKeyDoc>> {
    const result = await keys.find({
      where: { ownerPk, kind, ...(identityId ? { identityId } : {}) },
      orderBy: { field: 'seq', direction: 'asc' },
      limit: page.limit,
      cursor: page.cursor,
    });
    const live =
      kind === 'management'
        ? result.items
        : (await Promise.all(result.items.map(async (k) => (k.identityId && (await liveIdentity(k.identityId, ownerPk)) ? k : null)))).filter((k): k is ApiKeyDoc => k !== null);
    if (kind === 'management' && !live.some((k) => uses.latest(k.id) !== undefined)) return result; // the cached page as is
    return { items: live.map(withLatestUse), next: result.next };
  }

  /** The key with the latest use this process saw, when newer than the recorded one. */
  function withLatestUse(k: ApiKeyDoc): ApiKeyDoc {
    const seen = uses.latest(k.id);
    if (seen === undefined || (k.lastUsedAt && Date.parse(k.lastUsedAt) >= seen)) return k;
    return { ...k, lastUsedAt: new Date(seen).toISOString() };
  }

  const get = (keyId: string) => keys.get(keyId);

  return { mint, mintAsked, revoke, revokeForIdentity, findKey, touchKey, flushUses, list, get };
}

export type Keys = ReturnType<typeof createKeys>;

export const toIdentityKey = (k: ApiKeyDoc) => ({
  uuid: k.id,
  masked_key: k.maskedKey,
  label: k.label,
  identity: k.identityId,
  last_used_at: k.lastUsedAt,
  created_dt: k.createdAt,
});

export const toManagementKey = (k: ApiKeyDoc) => ({
  uuid: k.id,
  masked_key: k.maskedKey,
  label: k.label,
  last_used_at: k.lastUsedAt,
  created_dt: k.createdAt,
});
