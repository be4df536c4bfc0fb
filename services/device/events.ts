/**
 * Device authorization facts (RFC 8628; SPEC "States and transitions"). One stream per
 * authorization: `deviceauth-<uuid>`. Every transition is an event, so an auditor can
 * replay who let which agent in. No event carries a secret: the device_code appears only
 * as its SHA-256, the user_code only as an HMAC (it is short enough to brute-force a plain
 * hash), and the minted key only by its id.
 */
import { streamName, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Evolver } from '../kernel/command.js';

export const DeviceAuthorizationRequested = 'DeviceAuthorizationRequested';
export const DeviceAuthorizationIntervalIncreased = 'DeviceAuthorizationIntervalIncreased';
export const DeviceAuthorizationApproved = 'DeviceAuthorizationApproved';
export const DeviceAuthorizationDenied = 'DeviceAuthorizationDenied';
export const DeviceAuthorizationExpired = 'DeviceAuthorizationExpired';
export const DeviceAuthorizationRedeemed = 'DeviceAuthorizationRedeemed';

export const DEVICE_EVENT_TYPES = [
  DeviceAuthorizationRequested,
  DeviceAuthorizationIntervalIncreased,
  DeviceAuthorizationApproved,
  DeviceAuthorizationDenied,
  DeviceAuthorizationExpired,
  DeviceAuthorizationRedeemed,
];

/** Transitions a waiting poll must be told about (the code left `pending`). */
export const SETTLING_EVENT_TYPES = [DeviceAuthorizationApproved, DeviceAuthorizationDenied, DeviceAuthorizationExpired];

export const DEVICE_CATEGORY = 'deviceauth';
export const deviceStream = (id: string) => streamName(DEVICE_CATEGORY, id);

export interface RequestedData {
  deviceAuthId: string;
  /** base64url SHA-256 of the device_code. */
  deviceCodeHash: string;
  /** base64url HMAC-SHA256 (server key) of the normalized user_code. */
  userCodeHash: string;
  /** RFC 8628 `client_id`, when the device sent one (public clients: informational). */
  clientId: string | null;
  interval: number;
  expiresAt: string;
  at: string;
}

export interface IntervalIncreasedData {
  deviceAuthId: string;
  /** The new minimum polling interval, seconds (RFC 8628 §3.5 slow_down: +5). */
  interval: number;
  at: string;
}

export interface ApprovedData {
  deviceAuthId: string;
  userPk: number;
  /** How the human proved who they are: `jwt`, `session` (the /device page), `basic`. */
  via: string;
  at: string;
}

export interface DeniedData {
  deviceAuthId: string;
  userPk: number;
  via: string;
  at: string;
}

export interface RedeemedData {
  deviceAuthId: string;
  userPk: number;
  /** The management key minted for the device. */
  keyId: string;
  at: string;
}

export type DeviceStatus = 'none' | 'pending' | 'approved' | 'denied' | 'expired' | 'redeemed';

export interface DeviceAuthState {
  status: DeviceStatus;
  id: string;
  deviceCodeHash: string;
  userCodeHash: string;
  clientId: string | null;
  interval: number;
  expiresAt: string;
  userPk: number | null;
  requestedAt: string;
}

export const deviceEvolver: Evolver<DeviceAuthState> = {
  initial: () => ({ status: 'none', id: '', deviceCodeHash: '', userCodeHash: '', clientId: null, interval: 0, expiresAt: '', userPk: null, requestedAt: '' }),
  evolve: (s, e: RecordedEvent) => {
    switch (e.type) {
      case DeviceAuthorizationRequested: {
        const d = e.data as RequestedData;
        return { ...s, status: 'pending', id: d.deviceAuthId, deviceCodeHash: d.deviceCodeHash, userCodeHash: d.userCodeHash, clientId: d.clientId, interval: d.interval, expiresAt: d.expiresAt, requestedAt: d.at };
      }
      case DeviceAuthorizationIntervalIncreased:
        return { ...s, interval: (e.data as { interval: number }).interval };
      case DeviceAuthorizationApproved:
        return { ...s, status: 'approved', userPk: (e.data as ApprovedData).userPk };
      case DeviceAuthorizationDenied:
        return { ...s, status: 'denied', userPk: (e.data as DeniedData).userPk };
      case DeviceAuthorizationExpired:
        return { ...s, status: 'expired' };
      case DeviceAuthorizationRedeemed:
        return { ...s, status: 'redeemed' };
      default:
        return s;
    }
  },
};

/**
 * The status as of `now`: a pending or approved-but-unredeemed code past its lifetime is
 * expired even before the DeviceAuthorizationExpired event is recorded (it is recorded
 * lazily, when someone observes it).
 */
export function effectiveStatus(s: DeviceAuthState, now: number): DeviceStatus {
  if ((s.status === 'pending' || s.status === 'approved') && Date.parse(s.expiresAt) <= now) return 'expired';
  return s.status;
}
