/**
 * Read model `apikeys`: one document per live API key (revoked keys are removed), found
 * by the SHA-256 hash of the secret in O(1) (index on keyHash).
 */
import { streamId, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import { logOrder, type Projection } from '../projection.js';
import { ApiKeyMinted, ApiKeyRevoked, ApiKeyUsed, type ApiKeyMintedData, type ApiKeyUsedData, type KeyKind } from '../../services/keys/events.js';

export interface ApiKeyDoc extends Doc {
  id: string;
  kind: KeyKind;
  ownerPk: number;
  identityId: string | null;
  label: string;
  maskedKey: string;
  keyHash: string;
  lastUsedAt: string | null;
  createdAt: string;
  /** Log position of the event that made it, as a number: lists sort by it, not by clocks. */
  seq: number;
}

export const APIKEYS = 'apikeys';

export const apiKeysProjection: Projection = {
  // v2: lists order by log position (`seq`) instead of the wall-clock `createdAt`.
  name: 'apikeys:v2',
  collections: [{ name: APIKEYS, indexes: [['keyHash'], ['ownerPk', 'kind', 'seq'], ['identityId']] }],
  eventTypes: [ApiKeyMinted, ApiKeyRevoked, ApiKeyUsed],
  apply(e: RecordedEvent) {
    const id = streamId(e.stream);
    return [
      {
        collection: APIKEYS,
        id,
        evolve: (doc) => {
          switch (e.type) {
            case ApiKeyMinted: {
              if (doc) return doc;
              const d = e.data as ApiKeyMintedData;
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
                seq: logOrder(e),
              } satisfies ApiKeyDoc;
            }
            case ApiKeyUsed: {
              // The latest use in the log's order (the runner never applies an event twice): a
              // time recorded while a clock ran ahead is replaced by the next use, not kept
              // until the clock catches up with it.
              const { at } = e.data as ApiKeyUsedData;
              return doc && doc.lastUsedAt !== at ? { ...doc, lastUsedAt: at } : doc;
            }
            case ApiKeyRevoked:
              return null;
            default:
              return doc;
          }
        },
      },
    ];
  },
};
