/**
 * Read model `apikeys`: one document per live API key (revoked keys are removed), found
 * by the SHA-256 hash of the secret in O(1) (index on keyHash).
 */
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import type { Projection } from '../projection.js';

export interface ApiKeyDoc extends Doc {
  id: string;
  kind: 'management' | 'identity';
  ownerPk: number;
  identityId: string | null;
  label: string;
  maskedKey: string;
  keyHash: string;
  lastUsedAt: string | null;
  createdAt: string;
}

export const APIKEYS = 'apikeys';

export const apiKeysProjection: Projection = {
  name: 'apikeys',
  collections: [{ name: APIKEYS, indexes: [['keyHash'], ['ownerPk', 'kind', 'createdAt'], ['identityId']] }],
  eventTypes: ['ApiKeyMinted', 'ApiKeyRevoked', 'ApiKeyUsed'],
  apply(e: RecordedEvent) {
    const id = e.stream.slice('apikey-'.length);
    const d = e.data;
    return [
      {
        collection: APIKEYS,
        id,
        evolve: (doc) => {
          switch (e.type) {
            case 'ApiKeyMinted':
              if (doc) return doc;
              return {
                id,
                kind: d.kind,
                ownerPk: d.ownerPk,
                identityId: d.identityId ?? null,
                label: d.label,
                maskedKey: d.maskedKey,
                keyHash: d.keyHash,
                lastUsedAt: null,
                createdAt: d.at,
              } satisfies ApiKeyDoc;
            case 'ApiKeyUsed':
              // Out-of-order or replayed uses never move the time backwards.
              if (!doc || (doc.lastUsedAt && String(doc.lastUsedAt) >= d.at)) return doc;
              return { ...doc, lastUsedAt: d.at };
            case 'ApiKeyRevoked':
              return null;
            default:
              return doc;
          }
        },
      },
    ];
  },
};
