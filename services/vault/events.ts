/**
 * Events of the vault context. They carry ids, non-secret metadata and `e2e::` ciphertext
 * only: the server never holds a PIN, a key or a plaintext (docs/SECURITY.md).
 *
 * Streams: `encryption-<userPk>` (one per account; its first event is appended at
 * `no_stream`, which makes the one-time upload race-safe) and `vault-<identityUuid>`
 * (password entries and secrets of one identity; appends at the revision read make
 * entry uuids and secret names unique per identity).
 */
import { streamName } from '../../infra/ports/event-store.js';

export const EncryptionKeysUploaded = 'EncryptionKeysUploaded';
export const EncryptionKeysRewrapped = 'EncryptionKeysRewrapped';
export const PasswordEntryCreated = 'PasswordEntryCreated';
export const PasswordEntryUpdated = 'PasswordEntryUpdated';
export const PasswordEntryDeleted = 'PasswordEntryDeleted';
export const VaultSecretCreated = 'VaultSecretCreated';
export const VaultSecretUpdated = 'VaultSecretUpdated';
export const VaultSecretDeleted = 'VaultSecretDeleted';

export const VAULT_EVENT_TYPES = [
  EncryptionKeysUploaded,
  EncryptionKeysRewrapped,
  PasswordEntryCreated,
  PasswordEntryUpdated,
  PasswordEntryDeleted,
  VaultSecretCreated,
  VaultSecretUpdated,
  VaultSecretDeleted,
];

export interface EncryptionKeysUploadedData {
  ownerPk: number;
  publicKey: string;
  verifier: string;
  wrappedKey: string | null;
  recoveryWrappedKey: string | null;
  kdf: string | null;
  at: string;
}

/** A PIN change or a recovery: new verifier and key wraps; the public key stays. */
export interface EncryptionKeysRewrappedData {
  ownerPk: number;
  verifier: string;
  wrappedKey?: string | null;
  recoveryWrappedKey?: string | null;
  kdf?: string | null;
  at: string;
}

export interface PasswordEntryCreatedData {
  identityId: string;
  entryId: string;
  domain: string;
  username: string | null;
  password: string;
  notes: string | null;
  at: string;
}

/** Only the fields that changed are present. */
export interface PasswordEntryUpdatedData {
  identityId: string;
  entryId: string;
  domain?: string;
  username?: string | null;
  password?: string;
  notes?: string | null;
  at: string;
}

export interface PasswordEntryDeletedData {
  identityId: string;
  entryId: string;
  at: string;
}

export interface VaultSecretWrittenData {
  identityId: string;
  secretId: string;
  key: string;
  value: string;
  at: string;
}

export interface VaultSecretDeletedData {
  identityId: string;
  secretId: string;
  key: string;
  at: string;
}

export const encryptionStream = (userPk: number) => streamName('encryption', userPk);
export const vaultStream = (identityId: string) => streamName('vault', identityId);
