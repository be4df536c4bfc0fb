/**
 * Local phone provider: fictional numbers, so the whole flow runs with zero setup.
 * Numbers are `+1 NPA 555 01XX` (the 555-0100..0199 block is reserved for fiction in the
 * North American Numbering Plan), i.e. 100 numbers per area code, over 800 area codes.
 * Uniqueness comes from `phonenumber` reservation streams; a released number (deleted
 * identity) may later go to another identity.
 */
import { randomInt } from 'node:crypto';
import type { EventStore } from '../ports/event-store.js';
import { PhoneProviderError, type AllocatedNumber, type PhoneProvider } from '../ports/phone-provider.js';
import { release, reserve } from '../../services/kernel/reservations.js';
import { identityStream } from '../../services/identities/events.js';

export const PHONE_RESERVATION = 'phonenumber';

/** Area codes 200..999 without the N11 service codes (211, 311, ... 911). */
const AREA_CODES = Array.from({ length: 800 }, (_, i) => 200 + i).filter((n) => n % 100 !== 11);

/** The i-th number of the fictional range. */
export function localNumber(index: number): string {
  const area = AREA_CODES[Math.floor(index / 100) % AREA_CODES.length];
  return `+1${area}55501${String(index % 100).padStart(2, '0')}`;
}

export const LOCAL_RANGE_SIZE = AREA_CODES.length * 100;

export function createLocalPhoneProvider(store: EventStore): PhoneProvider {
  return {
    name: 'local',
    async allocate(identityId) {
      // Random probing: with few numbers taken almost every first probe wins, and numbers
      // released by deleted identities come back into use.
      for (let attempt = 0; attempt < 64; attempt++) {
        const phone = localNumber(randomInt(LOCAL_RANGE_SIZE));
        if (await reserve(store, PHONE_RESERVATION, phone, identityStream(identityId))) return { phone, providerRef: null };
      }
      throw new PhoneProviderError('No free number in the local range.');
    },
    async release(identityId, number: AllocatedNumber) {
      await release(store, PHONE_RESERVATION, number.phone, identityStream(identityId));
    },
  };
}
