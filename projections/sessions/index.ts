/** Read model `sessions`: refresh-token families and dashboard sessions, for cheap checks. */
import { streamId, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import type { Projection } from '../projection.js';
import { SessionRefreshed, SessionRevoked, SessionStarted, type SessionRefreshedData, type SessionStartedData } from '../../services/accounts/events.js';

export interface SessionDoc extends Doc {
  userPk: number;
  identity: string | null;
  generation: number;
  tokenId: string;
  expiresAt: string;
  revoked: boolean;
  kind: 'token' | 'cookie';
  /** The management key handed out with it (device flow), else null. */
  keyId?: string | null;
  /** How it began (`dashboard`, `password`, `device`, …: SessionStarted.via), for the account page's list. */
  via: string;
  startedAt: string;
  /** Its refresh token's last rotation; null until then (a browser session is never refreshed). */
  refreshedAt: string | null;
}

export const SESSIONS = 'sessions';

export const sessionsProjection: Projection = {
  // v2: via, startedAt, refreshedAt (the account page lists a user's live sessions).
  name: 'sessions:v2',
  collections: [{ name: SESSIONS, indexes: [['userPk'], ['keyId'], ['userPk', 'revoked', 'generation', 'expiresAt']] }],
  eventTypes: [SessionStarted, SessionRefreshed, SessionRevoked],
  apply(e: RecordedEvent) {
    const id = streamId(e.stream);
    return [
      {
        collection: SESSIONS,
        id,
        evolve: (doc) => {
          if (e.type === SessionStarted) {
            const d = e.data as SessionStartedData;
            return { id, userPk: d.userPk, identity: d.identity ?? null, generation: d.generation, tokenId: d.tokenId, expiresAt: d.expiresAt, revoked: false, kind: d.kind ?? 'token', keyId: d.keyId ?? null, via: d.via ?? 'password', startedAt: d.at ?? e.recordedAt, refreshedAt: null } satisfies SessionDoc;
          }
          if (!doc) return doc;
          if (e.type === SessionRefreshed) {
            const d = e.data as SessionRefreshedData;
            return { ...doc, tokenId: d.tokenId, expiresAt: d.expiresAt, refreshedAt: d.at ?? e.recordedAt };
          }
          if (e.type === SessionRevoked) return { ...doc, revoked: true };
          return doc;
        },
      },
    ];
  },
};
