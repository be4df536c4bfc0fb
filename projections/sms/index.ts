/**
 * Read models of the SMS context:
 * - `sms_messages`: one document per received message.
 * - `sms_conversations`: one per (identity, peer number); counts its unread messages by
 *   the messages' own `read` changes in the same event (see DocUpdate), so a read marking
 *   is exact even when two readers mark the same messages, and the document does not grow
 *   with its unread messages.
 * - `sms_phones`: the numbers of each identity (one document per identity).
 */
import { comparePositions, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import { createOnce, logOrder, type DocUpdate, type Projection } from '../projection.js';
import { SmsRead, SmsReceived, type SmsReadData, type SmsReceivedData } from '../../services/sms/events.js';
import {
  IdentityCreated,
  IdentityDeleted,
  PhoneProvisioned,
  PhoneReleased,
  type IdentityCreatedData,
  type IdentityDeletedData,
  type PhoneProvisionedData,
  type PhoneReleasedData,
} from '../../services/identities/events.js';

export const SMS_MESSAGES = 'sms_messages';
export const SMS_CONVERSATIONS = 'sms_conversations';
export const SMS_PHONES = 'sms_phones';

export interface SmsMessageDoc extends Doc {
  identityId: string;
  conversationId: string;
  messageSid: string;
  provider: string;
  from: string;
  to: string;
  body: string;
  preview: string;
  mediaUrls: string[];
  read: boolean;
  receivedAt: string;
  /** Log position as a number: a strict order even for messages of the same millisecond. */
  seq: number;
}

export interface SmsConversationDoc extends Doc {
  identityId: string;
  peer: string;
  ourNumber: string;
  preview: string;
  messageCount: number;
  unreadCount: number;
  unread: boolean;
  lastMessageAt: string;
  /** Log position of the last message, as a number (strict newest-first order). */
  lastSeq: number;
  createdAt: string;
  /** Position of the last event applied (guards against applying one twice). */
  position: string;
}

export interface SmsPhonesDoc extends Doc {
  numbers: { number: string; provider: string; createdAt: string }[];
}

export const smsProjection: Projection = {
  // v2: conversations count their unread messages instead of listing their ids.
  name: 'sms:v2',
  collections: [
    { name: SMS_MESSAGES, indexes: [['identityId', 'seq'], ['identityId', 'conversationId', 'seq'], ['identityId', 'read', 'seq']] },
    { name: SMS_CONVERSATIONS, indexes: [['identityId', 'lastSeq'], ['identityId', 'unread', 'lastSeq']] },
    { name: SMS_PHONES },
  ],
  eventTypes: [SmsReceived, SmsRead, IdentityCreated, PhoneProvisioned, PhoneReleased, IdentityDeleted],
  apply(e: RecordedEvent): DocUpdate[] {
    switch (e.type) {
      case SmsReceived: {
        const d = e.data as SmsReceivedData;
        // Made by this event (not seen before): the conversation counts it unread.
        const { update, made } = createOnce(SMS_MESSAGES, {
          id: d.messageId,
          identityId: d.identityId,
          conversationId: d.conversationId,
          messageSid: d.messageSid,
          provider: d.provider,
          from: d.from,
          to: d.to,
          body: d.body,
          preview: d.preview,
          mediaUrls: d.mediaUrls ?? [],
          read: false,
          receivedAt: d.at,
          seq: logOrder(e),
        } satisfies SmsMessageDoc);
        return [
          update,
          {
            collection: SMS_CONVERSATIONS,
            id: d.conversationId,
            evolve: (doc) => {
              const c = doc as SmsConversationDoc | null;
              if (c && comparePositions(e.position, c.position) <= 0) return doc;
              const unreadCount = (c?.unreadCount ?? 0) + (made() ? 1 : 0);
              return {
                id: d.conversationId,
                identityId: d.identityId,
                peer: d.from,
                ourNumber: d.to,
                preview: d.preview,
                messageCount: (c?.messageCount ?? 0) + 1,
                unreadCount,
                unread: unreadCount > 0,
                lastMessageAt: d.at,
                lastSeq: logOrder(e),
                createdAt: c?.createdAt ?? d.at,
                position: e.position,
              } satisfies SmsConversationDoc;
            },
          },
        ];
      }
      case SmsRead: {
        const d = e.data as SmsReadData;
        let changed = 0; // messages this event marked: the conversation's count moves by them
        return [
          ...[...new Set<string>(d.messageIds)].map(
            (id): DocUpdate => ({
              collection: SMS_MESSAGES,
              id,
              evolve: (doc) => {
                if (!doc || doc.read || doc.conversationId !== d.conversationId) return doc;
                changed += 1;
                return { ...doc, read: true };
              },
            }),
          ),
          {
            collection: SMS_CONVERSATIONS,
            id: d.conversationId,
            evolve: (doc) => {
              const c = doc as SmsConversationDoc | null;
              if (!c || !changed || comparePositions(e.position, c.position) <= 0) return doc;
              const unreadCount = Math.max(0, c.unreadCount - changed);
              return { ...c, unreadCount, unread: unreadCount > 0, position: e.position };
            },
          },
        ];
      }
      case IdentityCreated: {
        // Identities created with a number (older events) name no provider: local.
        const d = e.data as IdentityCreatedData & { provider?: string };
        return d.phone ? [addNumber(d.identityId, d.phone, d.provider ?? 'local', d.at)] : [];
      }
      case PhoneProvisioned: {
        const d = e.data as PhoneProvisionedData;
        return [addNumber(d.identityId, d.phone, d.provider ?? 'local', d.at)];
      }
      case PhoneReleased: {
        const d = e.data as PhoneReleasedData;
        return [
          {
            collection: SMS_PHONES,
            id: d.identityId,
            evolve: (doc) => {
              const p = doc as SmsPhonesDoc | null;
              if (!p || !p.numbers.some((n) => n.number === d.phone)) return doc;
              const numbers = p.numbers.filter((n) => n.number !== d.phone);
              return numbers.length ? { ...p, numbers } : null;
            },
          },
        ];
      }
      case IdentityDeleted:
        return [{ collection: SMS_PHONES, id: (e.data as IdentityDeletedData).identityId, evolve: () => null }];
      default:
        return [];
    }
  },
};

function addNumber(identityId: string, number: string, provider: string, at: string): DocUpdate {
  return {
    collection: SMS_PHONES,
    id: identityId,
    evolve: (doc) => {
      const p = doc as SmsPhonesDoc | null;
      if (p?.numbers.some((n) => n.number === number)) return doc;
      return { id: identityId, numbers: [...(p?.numbers ?? []), { number, provider, createdAt: at }] } satisfies SmsPhonesDoc;
    },
  };
}
