/**
 * Read model `device_authorizations`: one document per RFC 8628 device authorization,
 * found by the hash of its device_code (token polling) or of its user_code, and listed by
 * the account that approved it (an audit trail of who let which agent in).
 * Decisions are never taken on this model alone: the service re-reads the stream.
 */
import { streamId, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import type { Projection } from '../projection.js';
import {
  DEVICE_EVENT_TYPES,
  DeviceAuthorizationApproved,
  DeviceAuthorizationDenied,
  DeviceAuthorizationExpired,
  DeviceAuthorizationIntervalIncreased,
  DeviceAuthorizationRedeemed,
  DeviceAuthorizationRequested,
  type ApprovedData,
  type DeniedData,
  type IntervalIncreasedData,
  type RedeemedData,
  type RequestedData,
} from '../../services/device/events.js';

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
  eventTypes: DEVICE_EVENT_TYPES,
  apply(e: RecordedEvent) {
    const id = streamId(e.stream);
    return [
      {
        collection: DEVICE_AUTHORIZATIONS,
        id,
        evolve: (doc) => {
          if (e.type === DeviceAuthorizationRequested) {
            const d = e.data as RequestedData;
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
            case DeviceAuthorizationIntervalIncreased:
              return { ...doc, interval: (e.data as IntervalIncreasedData).interval };
            case DeviceAuthorizationApproved:
            case DeviceAuthorizationDenied: {
              const d = e.data as ApprovedData | DeniedData;
              return { ...doc, status: e.type === DeviceAuthorizationApproved ? 'approved' : 'denied', userPk: d.userPk, decidedAt: d.at };
            }
            case DeviceAuthorizationExpired:
              return { ...doc, status: 'expired' };
            case DeviceAuthorizationRedeemed: {
              const d = e.data as RedeemedData;
              return { ...doc, status: 'redeemed', keyId: d.keyId, redeemedAt: d.at };
            }
            default:
              return doc;
          }
        },
      },
    ];
  },
};
