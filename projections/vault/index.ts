/**
 * Read models of the vault context: `encryption_keys` (one per account), `password_entries`
 * and `vault_secrets` (per identity). Documents hold ciphertext only. Entry and secret
 * documents are keyed `<identityUuid>:<uuid>`, so an identity can only ever address its own.
 */
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import { logOrder, type DocUpdate, type Projection } from '../projection.js';
import {
  EncryptionKeysRewrapped,
  EncryptionKeysUploaded,
  PasswordEntryCreated,
  PasswordEntryDeleted,
  PasswordEntryUpdated,
  VAULT_EVENT_TYPES,
  VaultSecretCreated,
  VaultSecretDeleted,
  VaultSecretUpdated,
  type EncryptionKeysRewrappedData,
  type EncryptionKeysUploadedData,
  type PasswordEntryCreatedData,
  type PasswordEntryUpdatedData,
  type VaultSecretWrittenData,
} from '../../services/vault/events.js';

export const ENCRYPTION_KEYS = 'encryption_keys';
export const PASSWORD_ENTRIES = 'password_entries';
export const VAULT_SECRETS = 'vault_secrets';

export interface EncryptionKeysDoc extends Doc {
  ownerPk: number;
  publicKey: string;
  verifier: string;
  wrappedKey: string | null;
  recoveryWrappedKey: string | null;
  kdf: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface PasswordEntryDoc extends Doc {
  identityId: string;
  entryId: string;
  domain: string;
  username: string | null;
  password: string;
  notes: string | null;
  createdAt: string;
  updatedAt: string;
  /** Log position of the event that made it, as a number: lists sort by it, not by clocks. */
  seq: number;
}

export interface VaultSecretDoc extends Doc {
  identityId: string;
  secretId: string;
  key: string;
  value: string;
  createdAt: string;
  updatedAt: string;
  /** Log position of the event that made it, as a number: lists sort by it, not by clocks. */
  seq: number;
}

export const encryptionDocId = (ownerPk: number) => String(ownerPk);
export const scopedDocId = (identityId: string, id: string) => `${identityId}:${id}`;

export const vaultProjection: Projection = {
  // v2: lists order by log position (`seq`) instead of the wall-clock `createdAt`.
  name: 'vault:v2',
  collections: [
    { name: ENCRYPTION_KEYS },
    { name: PASSWORD_ENTRIES, indexes: [['identityId', 'seq']] },
    { name: VAULT_SECRETS, indexes: [['identityId', 'seq'], ['identityId', 'key']] },
  ],
  eventTypes: VAULT_EVENT_TYPES,
  apply(e: RecordedEvent): DocUpdate[] {
    switch (e.type) {
      case EncryptionKeysUploaded: {
        const d = e.data as EncryptionKeysUploadedData;
        const id = encryptionDocId(d.ownerPk);
        return [
          {
            collection: ENCRYPTION_KEYS,
            id,
            evolve: (doc) =>
              doc ??
              ({
                id,
                ownerPk: d.ownerPk,
                publicKey: d.publicKey,
                verifier: d.verifier,
                wrappedKey: d.wrappedKey,
                recoveryWrappedKey: d.recoveryWrappedKey,
                kdf: d.kdf,
                createdAt: d.at,
                updatedAt: d.at,
              } satisfies EncryptionKeysDoc),
          },
        ];
      }
      case EncryptionKeysRewrapped: {
        const d = e.data as EncryptionKeysRewrappedData;
        return [
          {
            collection: ENCRYPTION_KEYS,
            id: encryptionDocId(d.ownerPk),
            evolve: (doc) =>
              doc && {
                ...doc,
                verifier: d.verifier,
                ...(d.wrappedKey !== undefined ? { wrappedKey: d.wrappedKey } : {}),
                ...(d.recoveryWrappedKey !== undefined ? { recoveryWrappedKey: d.recoveryWrappedKey } : {}),
                ...(d.kdf !== undefined ? { kdf: d.kdf } : {}),
                updatedAt: d.at,
              },
          },
        ];
      }
      case PasswordEntryCreated: {
        const d = e.data as PasswordEntryCreatedData;
        const id = scopedDocId(d.identityId, d.entryId);
        return [
          {
            collection: PASSWORD_ENTRIES,
            id,
            evolve: (doc) =>
              doc ??
              ({
                id,
                identityId: d.identityId,
                entryId: d.entryId,
                domain: d.domain,
                username: d.username,
                password: d.password,
                notes: d.notes,
                createdAt: d.at,
                updatedAt: d.at,
                seq: logOrder(e),
              } satisfies PasswordEntryDoc),
          },
        ];
      }
      case PasswordEntryUpdated: {
        const { identityId, entryId, at, ...changes } = e.data as PasswordEntryUpdatedData;
        return [{ collection: PASSWORD_ENTRIES, id: scopedDocId(identityId, entryId), evolve: (doc) => doc && { ...doc, ...changes, updatedAt: at } }];
      }
      case PasswordEntryDeleted: {
        const d = e.data as { identityId: string; entryId: string };
        return [{ collection: PASSWORD_ENTRIES, id: scopedDocId(d.identityId, d.entryId), evolve: () => null }];
      }
      case VaultSecretCreated:
      case VaultSecretUpdated: {
        const d = e.data as VaultSecretWrittenData;
        const id = scopedDocId(d.identityId, d.secretId);
        return [
          {
            collection: VAULT_SECRETS,
            id,
            evolve: (doc) =>
              doc
                ? { ...doc, key: d.key, value: d.value, updatedAt: d.at }
                : ({ id, identityId: d.identityId, secretId: d.secretId, key: d.key, value: d.value, createdAt: d.at, updatedAt: d.at, seq: logOrder(e) } satisfies VaultSecretDoc),
          },
        ];
      }
      case VaultSecretDeleted: {
        const d = e.data as { identityId: string; secretId: string };
        return [{ collection: VAULT_SECRETS, id: scopedDocId(d.identityId, d.secretId), evolve: () => null }];
      }
      default:
        return [];
    }
  },
};
