/**
 * Read model `identities` (shared, read-only for other contexts): one document per LIVE
 * identity; a deleted identity's document is removed (its history stays in the log).
 * Other contexts find an identity by uuid (`get`), by inbox address or by phone number.
 */
import { streamId, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import { logOrder, type Projection } from '../projection.js';
import {
  IdentityCreated,
  IdentityDeleted,
  IdentityUpdated,
  PhoneProvisioned,
  PhoneReleased,
  type IdentityCreatedData,
  type IdentityUpdatedData,
  type PhoneProvisionedData,
  type PhoneReleasedData,
} from '../../services/identities/events.js';

export interface IdentityDoc extends Doc {
  id: string;
  ownerPk: number;
  name: string;
  /** Lower-cased name (names are unique per account, case-insensitively). */
  nameKey: string;
  /** Full lower-cased address: local@MAIL_DOMAIN. */
  inbox: string;
  /** E.164 number, or null when none is provisioned. */
  phone: string | null;
  createdAt: string;
  /** Log position of the event that made it, as a number: lists sort by it, not by clocks. */
  seq: number;
}

export const IDENTITIES = 'identities';

export const identitiesProjection: Projection = {
  // v2: the list orders by log position (`seq`) instead of the wall-clock `createdAt`.
  name: 'identities:v2',
  collections: [{ name: IDENTITIES, indexes: [['ownerPk', 'seq'], ['inbox'], ['phone']] }],
  eventTypes: [IdentityCreated, IdentityUpdated, IdentityDeleted, PhoneProvisioned, PhoneReleased],
  apply(e: RecordedEvent) {
    const id = streamId(e.stream);
    return [
      {
        collection: IDENTITIES,
        id,
        evolve: (doc) => {
          switch (e.type) {
            case IdentityCreated: {
              if (doc) return doc; // replay of the same event
              const d = e.data as IdentityCreatedData;
              return {
                id,
                ownerPk: d.ownerPk,
                name: d.name,
                nameKey: String(d.name).toLowerCase(),
                inbox: d.inbox,
                phone: d.phone ?? null,
                createdAt: d.at,
                seq: logOrder(e),
              } satisfies IdentityDoc;
            }
            case IdentityUpdated: {
              const { name } = e.data as IdentityUpdatedData;
              if (!doc || name === undefined) return doc;
              return { ...doc, name, nameKey: String(name).toLowerCase() };
            }
            case PhoneProvisioned:
              return doc ? { ...doc, phone: (e.data as PhoneProvisionedData).phone } : doc;
            case PhoneReleased:
              return doc && doc.phone === (e.data as PhoneReleasedData).phone ? { ...doc, phone: null } : doc;
            case IdentityDeleted:
              return null;
            default:
              return doc;
          }
        },
      },
    ];
  },
};
