/**
 * Events of the identities context (stream `identity-<uuid>`, plus `phones-<pk>` for the
 * account's phone slots). Shared names: other contexts react to them (common brief).
 * No secret ever goes into an event.
 */
import { streamName } from '../../infra/ports/event-store.js';

export const IdentityCreated = 'IdentityCreated';
export const IdentityUpdated = 'IdentityUpdated';
export const IdentityDeleted = 'IdentityDeleted';
export const PhoneProvisioned = 'PhoneProvisioned';
export const PhoneReleased = 'PhoneReleased';
/** Stream `phones-<pk>`: a phone slot of the account's plan is taken / given back. */
export const PhoneSlotClaimed = 'PhoneSlotClaimed';
export const PhoneSlotFreed = 'PhoneSlotFreed';

export interface IdentityCreatedData {
  identityId: string;
  ownerPk: number;
  name: string;
  inbox: string;
  phone: string | null;
  at: string;
}

export interface IdentityUpdatedData {
  identityId: string;
  name?: string;
  at: string;
}

export interface IdentityDeletedData {
  identityId: string;
  ownerPk: number;
  at: string;
}

export interface PhoneProvisionedData {
  identityId: string;
  phone: string;
  provider: string;
  /** Provider's handle of the number (Twilio's PN... sid); null for local numbers. */
  providerRef: string | null;
  at: string;
}

export interface PhoneReleasedData {
  identityId: string;
  phone: string;
  provider: string;
  at: string;
}

export interface PhoneSlotData {
  identityId: string;
  at: string;
}

export const IDENTITY = 'identity';
export const identityStream = (id: string) => streamName(IDENTITY, id);
export const phonesStream = (pk: number) => streamName('phones', pk);
