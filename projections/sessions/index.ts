/** Read model `sessions`: refresh-token families and dashboard sessions, for cheap checks. */
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import type { Projection } from '../projection.js';

export interface SessionDoc extends Doc {
  userPk: number;
  identity: string | null;
  generation: number;
  tokenId: string;
  expiresAt: string;
  revoked: boolean;
  kind: 'token' | 'cookie';
}

export const SESSIONS = 'sessions';

export const sessionsProjection: Projection = {
  name: 'sessions',
  collections: [{ name: SESSIONS, indexes: [['userPk']] }],
  eventTypes: ['SessionStarted', 'SessionRefreshed', 'SessionRevoked'],
  apply(e: RecordedEvent) {
    const id = e.stream.slice('session-'.length);
    return [
      {
        collection: SESSIONS,
        id,
        evolve: (doc) => {
          const d = e.data;
          if (e.type === 'SessionStarted') {
            return { id, userPk: d.userPk, identity: d.identity ?? null, generation: d.generation, tokenId: d.tokenId, expiresAt: d.expiresAt, revoked: false, kind: d.kind ?? 'token' } satisfies SessionDoc;
          }
          if (!doc) return doc;
          if (e.type === 'SessionRefreshed') return { ...doc, tokenId: d.tokenId, expiresAt: d.expiresAt };
          if (e.type === 'SessionRevoked') return { ...doc, revoked: true };
          return doc;
        },
      },
    ];
  },
};
