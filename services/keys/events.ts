/** Events of the keys context (stream `apikey-<uuid>`). Only the key's SHA-256 hash is recorded, never the key. */
import { streamName } from '../../infra/ports/event-store.js';

export const ApiKeyMinted = 'ApiKeyMinted';
export const ApiKeyRevoked = 'ApiKeyRevoked';
/** Throttled: at most one per key per minute (last_used_at). */
export const ApiKeyUsed = 'ApiKeyUsed';

export type KeyKind = 'management' | 'identity';

export interface ApiKeyMintedData {
  keyId: string;
  kind: KeyKind;
  ownerPk: number;
  identityId?: string;
  label: string;
  maskedKey: string;
  /** Hex SHA-256 of the full key. */
  keyHash: string;
  at: string;
}

export interface ApiKeyRevokedData {
  keyId: string;
  ownerPk: number;
  identityId?: string;
  /** `owner` (the account revoked it) or `identity_deleted`. */
  reason?: string;
  at: string;
}

export interface ApiKeyUsedData {
  keyId: string;
  at: string;
}

export const APIKEY = 'apikey';
export const apiKeyStream = (id: string) => streamName(APIKEY, id);
