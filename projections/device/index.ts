/**
 * Read model `device_authorizations`: one document per RFC 8628 device authorization,
 * found by the hash of its device_code (token polling) or of its user_code, and listed by
 * the account that approved it (an audit trail of who let which agent in).
 * Decisions are never taken on this model alone: the service re-reads the stream.
 */
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import type { Projection } from '../projection.js';

export interface DeviceAuthorizationDoc extends Doc {
  deviceCodeHash: string;
  userCodeHash: string;
  clientId: string | null;
  status: 'pending' | 'approved' | 'denied' | 'expired' | 'redeemed';
  interval: number;
  expiresAt: string;
  createdAt: string;
  userPk: number | null;
  decidedAt: string | null;
  keyId: string | null;
  redeemedAt: string | null;
}

export const DEVICE_AUTHORIZATIONS = 'device_authorizations';

export const deviceProjection: Projection = {
  name: 'device',
  collections: [{ name: DEVICE_AUTHORIZATIONS, indexes: [['deviceCodeHash'], ['userCodeHash'], ['userPk', 'createdAt']] }],
  eventTypes: [
    'DeviceAuthorizationRequested',
    'DeviceAuthorizationIntervalIncreased',
    'DeviceAuthorizationApproved',
    'DeviceAuthorizationDenied',
    'DeviceAuthorizationExpired',
    'DeviceAuthorizationRedeemed',
  ],
  apply(e: RecordedEvent) {
    const id = e.stream.slice('deviceauth-'.length);
    return [
      {
        collection: DEVICE_AUTHORIZATIONS,
        id,
        evolve: (doc) => {
          const d = e.data;
          if (e.type === 'DeviceAuthorizationRequested') {
            return {
              id,
              deviceCodeHash: d.deviceCodeHash,
              userCodeHash: d.userCodeHash,
              clientId: d.clientId ?? null,
              status: 'pending',
              interval: d.interval,
              expiresAt: d.expiresAt,
              createdAt: d.at,
              userPk: null,
              decidedAt: null,
              keyId: null,
              redeemedAt: null,
            } satisfies DeviceAuthorizationDoc;
          }
          if (!doc) return doc;
          switch (e.type) {
            case 'DeviceAuthorizationIntervalIncreased':
              return { ...doc, interval: d.interval };
            case 'DeviceAuthorizationApproved':
              return { ...doc, status: 'approved', userPk: d.userPk, decidedAt: d.at };
            case 'DeviceAuthorizationDenied':
              return { ...doc, status: 'denied', userPk: d.userPk, decidedAt: d.at };
            case 'DeviceAuthorizationExpired':
              return { ...doc, status: 'expired' };
            case 'DeviceAuthorizationRedeemed':
              return { ...doc, status: 'redeemed', keyId: d.keyId, redeemedAt: d.at };
            default:
              return doc;
          }
        },
      },
    ];
  },
};
