/**
 * Commands and queries of the vault context. The server validates the ciphertext format
 * and nothing else: it never holds a key (docs/SECURITY.md).
 */
import { WrongExpectedRevisionError, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Page } from '../../infra/ports/read-store.js';
import type { Platform } from '../kernel/platform.js';
import { event, execute, type Evolver } from '../kernel/command.js';
import { newId, nowIso } from '../kernel/ids.js';
import { ApiError, conflict, fieldError, notFound } from '../gateway/errors.js';
import {
  ENCRYPTION_KEYS,
  PASSWORD_ENTRIES,
  VAULT_SECRETS,
  encryptionDocId,
  scopedDocId,
  type EncryptionKeysDoc,
  type PasswordEntryDoc,
  type VaultSecretDoc,
} from '../../projections/vault/index.js';
import {
  EncryptionKeysRewrapped,
  EncryptionKeysUploaded,
  PasswordEntryCreated,
  PasswordEntryDeleted,
  PasswordEntryUpdated,
  VaultSecretCreated,
  VaultSecretDeleted,
  VaultSecretUpdated,
  type EncryptionKeysRewrappedData,
  type EncryptionKeysUploadedData,
  type PasswordEntryCreatedData,
  type PasswordEntryUpdatedData,
  type VaultSecretWrittenData,
  encryptionStream,
  vaultStream,
} from './events.js';

export interface EncryptionUploadInput {
  public_key: string;
  verifier: string;
  wrapped_key?: string | null;
  recovery_wrapped_key?: string | null;
  kdf?: string | null;
}

export interface EncryptionRewrapInput {
  public_key?: string;
  verifier: string;
  wrapped_key?: string | null;
  recovery_wrapped_key?: string | null;
  kdf?: string | null;
}

export interface PasswordFields {
  domain?: string;
  username?: string | null;
  password?: string;
  notes?: string | null;
}


/** What a write to an identity's vault needs to know: which entry uuids were used, which names are held. */
interface VaultState {
  /** entry uuid → live (false once deleted; a uuid is never reused). */
  entries: Map<string, boolean>;
  /** secret name → secret uuid (live secrets only). */
  secretByKey: Map<string, string>;
  /** secret uuid → name (live secrets only). */
  keyBySecret: Map<string, string>;
}

const vaultEvolver: Evolver<VaultState> = {
  initial: () => ({ entries: new Map(), secretByKey: new Map(), keyBySecret: new Map() }),
  evolve(s, e: RecordedEvent) {
    const d = e.data;
    switch (e.type) {
      case PasswordEntryCreated:
        s.entries.set(d.entryId, true);
        break;
      case PasswordEntryDeleted:
        s.entries.set(d.entryId, false);
        break;
      case VaultSecretCreated:
        s.secretByKey.set(d.key, d.secretId);
        s.keyBySecret.set(d.secretId, d.key);
        break;
      case VaultSecretDeleted:
        s.secretByKey.delete(d.key);
        s.keyBySecret.delete(d.secretId);
        break;
    }
    return s;
  },
  copy: (s) => ({ entries: new Map(s.entries), secretByKey: new Map(s.secretByKey), keyBySecret: new Map(s.keyBySecret) }),
  weight: (s) => s.entries.size + 2 * s.secretByKey.size,
};

interface EncryptionState {
  publicKey: string | null;
  wrapped: boolean;
  recoveryWrapped: boolean;
}

const encryptionEvolver: Evolver<EncryptionState> = {
  initial: () => ({ publicKey: null, wrapped: false, recoveryWrapped: false }),
  evolve: (s, e) => {
    if (e.type === EncryptionKeysUploaded) {
      const d = e.data as EncryptionKeysUploadedData;
      return { publicKey: d.publicKey, wrapped: d.wrappedKey != null, recoveryWrapped: d.recoveryWrappedKey != null };
    }
    if (e.type !== EncryptionKeysRewrapped) return s;
    const d = e.data as EncryptionKeysRewrappedData;
    return { ...s, wrapped: d.wrappedKey === undefined ? s.wrapped : d.wrappedKey !== null, recoveryWrapped: d.recoveryWrappedKey === undefined ? s.recoveryWrapped : d.recoveryWrappedKey !== null };
  },
};

export function createVault(platform: Platform) {
  const { events: store, reads, progress } = platform;
  const encryptionKeys = reads.collection<EncryptionKeysDoc>(ENCRYPTION_KEYS);
  const entries = reads.collection<PasswordEntryDoc>(PASSWORD_ENTRIES);
  const secrets = reads.collection<VaultSecretDoc>(VAULT_SECRETS);

  async function settle(position: string | undefined | null) {
    if (position) await progress.waitFor(position);
  }

  // --- encryption metadata (per account) ---------------------------------------------------

  const encryptionOf = (userPk: number) => encryptionKeys.get(encryptionDocId(userPk));

  /** The one-time upload: the append at `no_stream` is the check, so two racing POSTs cannot both win. */
  async function uploadEncryption(userPk: number, input: EncryptionUploadInput): Promise<EncryptionKeysDoc> {
    const data: EncryptionKeysUploadedData = {
      ownerPk: userPk,
      publicKey: input.public_key,
      verifier: input.verifier,
      wrappedKey: input.wrapped_key ?? null,
      recoveryWrappedKey: input.recovery_wrapped_key ?? null,
      kdf: input.kdf ?? null,
      at: nowIso(),
    };
    try {
      const append = await store.append(encryptionStream(userPk), [event(EncryptionKeysUploaded, data)], { expectedRevision: 'no_stream' });
      await settle(append.position);
    } catch (err) {
      if (err instanceof WrongExpectedRevisionError) {
        throw conflict('Encryption keys were already uploaded for this account; use PUT /api/encryption/ to re-wrap them.');
      }
      throw err;
    }
    return (await encryptionOf(userPk))!;
  }

  async function rewrapEncryption(userPk: number, input: EncryptionRewrapInput): Promise<EncryptionKeysDoc> {
    const { position } = await execute(
      store,
      encryptionStream(userPk),
      encryptionEvolver,
      ({ publicKey, wrapped, recoveryWrapped }) => {
        if (publicKey === null) throw new ApiError(404, 'encryption_missing', 'No encryption keys were uploaded for this account yet; POST /api/encryption/ first.');
        if (input.public_key !== undefined && input.public_key !== publicKey) throw fieldError('public_key', 'The public key cannot change; only the verifier and the key wraps can.');
        // Clearing a wrap would leave the vault key nowhere (nor any way to set up again).
        if (input.wrapped_key === null && wrapped) throw fieldError('wrapped_key', 'A key wrap, once set, can be replaced but not removed.');
        if (input.recovery_wrapped_key === null && recoveryWrapped) throw fieldError('recovery_wrapped_key', 'A key wrap, once set, can be replaced but not removed.');
        const data: EncryptionKeysRewrappedData = { ownerPk: userPk, verifier: input.verifier, at: nowIso() };
        if (input.wrapped_key !== undefined) data.wrappedKey = input.wrapped_key;
        if (input.recovery_wrapped_key !== undefined) data.recoveryWrappedKey = input.recovery_wrapped_key;
        if (input.kdf !== undefined) data.kdf = input.kdf;
        return { events: [event(EncryptionKeysRewrapped, data)], result: undefined };
      },
    );
    await settle(position);
    return (await encryptionOf(userPk))!;
  }

  // --- password entries (per identity) ------------------------------------------------------

  const getEntry = (identityId: string, entryId: string) => entries.get(scopedDocId(identityId, entryId));

  function listEntries(identityId: string, page: { limit: number; cursor: string | null }): Promise<Page<PasswordEntryDoc>> {
    return entries.find({ where: { identityId }, orderBy: { field: 'seq', direction: 'asc' }, limit: page.limit, cursor: page.cursor });
  }

  async function createEntry(identityId: string, input: PasswordFields & { uuid?: string }): Promise<PasswordEntryDoc> {
    const entryId = (input.uuid ?? newId()).toLowerCase();
    const { position } = await execute(store, vaultStream(identityId), vaultEvolver, (s) => {
      if (s.entries.has(entryId)) throw conflict('A password entry with this uuid already exists.');
      const data: PasswordEntryCreatedData = {
        identityId,
        entryId,
        domain: input.domain!,
        username: input.username ?? null,
        password: input.password!,
        notes: input.notes ?? null,
        at: nowIso(),
      };
      return { events: [event(PasswordEntryCreated, data)], result: undefined };
    });
    await settle(position);
    return (await getEntry(identityId, entryId))!;
  }

  /** `changes` holds only the fields to set (PUT passes all four). */
  async function updateEntry(identityId: string, entryId: string, changes: PasswordFields): Promise<PasswordEntryDoc> {
    const { append, position, result: at } = await execute(store, vaultStream(identityId), vaultEvolver, (s) => {
      if (s.entries.get(entryId) !== true) throw notFound('Password entry not found.');
      const data: PasswordEntryUpdatedData = { identityId, entryId, ...changes, at: nowIso() };
      return { events: Object.keys(changes).length ? [event(PasswordEntryUpdated, data)] : [], result: data.at };
    });
    await settle(position);
    const doc = await getEntry(identityId, entryId);
    if (!doc) throw notFound('Password entry not found.');
    // The entry as this write left it (a concurrent later write may already show in the read model).
    return append ? { ...doc, ...changes, updatedAt: at } : doc;
  }

  async function deleteEntry(identityId: string, entryId: string): Promise<void> {
    const { position } = await execute(store, vaultStream(identityId), vaultEvolver, (s) => {
      if (s.entries.get(entryId) !== true) throw notFound('Password entry not found.');
      return { events: [event(PasswordEntryDeleted, { identityId, entryId, at: nowIso() })], result: undefined };
    });
    await settle(position);
  }

  // --- secrets (per identity) ---------------------------------------------------------------

  const getSecret = (identityId: string, secretId: string) => secrets.get(scopedDocId(identityId, secretId));

  function listSecrets(identityId: string, page: { limit: number; cursor: string | null }, key?: string): Promise<Page<VaultSecretDoc>> {
    return secrets.find({ where: key === undefined ? { identityId } : { identityId, key }, orderBy: { field: 'seq', direction: 'asc' }, limit: page.limit, cursor: page.cursor });
  }

  /** Creates or replaces the secret named `key`; names are unique per identity (the stream revision guards it). */
  async function upsertSecret(identityId: string, key: string, value: string): Promise<{ doc: VaultSecretDoc; created: boolean }> {
    const { append, position, result } = await execute(store, vaultStream(identityId), vaultEvolver, (s) => {
      const existing = s.secretByKey.get(key);
      const secretId = existing ?? newId();
      const data: VaultSecretWrittenData = { identityId, secretId, key, value, at: nowIso() };
      return { events: [event(existing ? VaultSecretUpdated : VaultSecretCreated, data)], result: { secretId, created: !existing, at: data.at } };
    });
    await settle(position);
    // The secret as this write left it: a concurrent later upsert may already show in the
    // read model, and its value is not this request's answer.
    const read = await getSecret(identityId, result.secretId);
    const doc: VaultSecretDoc = read
      ? { ...read, value, updatedAt: result.at }
      : { id: scopedDocId(identityId, result.secretId), identityId, secretId: result.secretId, key, value, createdAt: result.at, updatedAt: result.at, seq: Number(append?.position ?? 0) };
    return { doc, created: result.created };
  }

  async function deleteSecret(identityId: string, secretId: string): Promise<void> {
    const { position } = await execute(store, vaultStream(identityId), vaultEvolver, (s) => {
      const key = s.keyBySecret.get(secretId);
      if (key === undefined) throw notFound('Secret not found.');
      return { events: [event(VaultSecretDeleted, { identityId, secretId, key, at: nowIso() })], result: undefined };
    });
    await settle(position);
  }

  return {
    encryptionOf,
    uploadEncryption,
    rewrapEncryption,
    getEntry,
    listEntries,
    createEntry,
    updateEntry,
    deleteEntry,
    getSecret,
    listSecrets,
    upsertSecret,
    deleteSecret,
  };
}

export type Vault = ReturnType<typeof createVault>;
