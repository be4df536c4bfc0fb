/**
 * Read models of the mail context: `email_threads`, `email_messages`, `email_attachments`.
 * Threads are per identity; a message belongs to one identity (an internal delivery makes
 * an outbound copy for the sender and an inbound copy for each recipient identity).
 * Thread documents remember the position of the last event applied, so replaying an event
 * changes nothing; message and attachment updates are idempotent by construction.
 * A thread counts its unread messages by the messages' own `read` changes in the same event
 * (see DocUpdate): no list of ids in the thread, which grew with every unread mail (a thread
 * of a sender that nobody reads: each new mail rewrote the whole list).
 */
import { comparePositions, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import { createOnce, logOrder, type DocUpdate, type Projection } from '../projection.js';
import {
  ATTACHMENT_PRESIGNED,
  ATTACHMENT_UPLOADED,
  EMAIL_BOUNCED,
  EMAIL_DEFERRED,
  EMAIL_FAILED,
  EMAIL_MARKED_READ,
  EMAIL_MARKED_UNREAD,
  EMAIL_QUEUED,
  EMAIL_RECEIVED,
  EMAIL_SENT,
  type AttachmentPresignedData,
  type AttachmentRef,
  type AttachmentUploadedData,
  type EmailAddress,
  type EmailBouncedData,
  type EmailDeferredData,
  type EmailFailedData,
  type EmailMarkedData,
  type EmailQueuedData,
  type EmailReceivedData,
  type EmailSentData,
} from '../../services/mail/events.js';
import { addressKey, normaliseSubject, participantsKey } from '../../services/mail/text.js';

export const EMAIL_THREADS = 'email_threads';
export const EMAIL_MESSAGES = 'email_messages';
export const EMAIL_ATTACHMENTS = 'email_attachments';

export interface ThreadDoc extends Doc {
  identityId: string;
  subject: string;
  subjectKey: string;
  participantsKey: string;
  /** The first {@link PARTICIPANTS_KEPT} addresses seen in the thread. */
  participants: string[];
  messageCount: number;
  unreadCount: number;
  unread: boolean;
  preview: string;
  lastFrom: EmailAddress;
  lastMessageId: string;
  lastMessageAt: string;
  createdAt: string;
  /** Log position of the last message, as a number: lists sort by it (newest first), not by clocks. */
  lastSeq: number;
  /** Position of the last event applied (replay guard). */
  pos: string;
}

export interface MessageDoc extends Doc {
  identityId: string;
  threadId: string;
  direction: 'inbound' | 'outbound';
  status: 'received' | 'queued' | 'sent' | 'failed';
  from: EmailAddress;
  to: EmailAddress[];
  cc: EmailAddress[];
  bcc: EmailAddress[];
  replyTo: EmailAddress[];
  subject: string;
  text: string | null;
  html: string | null;
  textBlob: string | null;
  htmlBlob: string | null;
  /** Sizes of blob bodies (null: inline, or unknown — an event from before sizes, over 256 KiB). */
  textBytes?: number | null;
  htmlBytes?: number | null;
  preview: string;
  attachments: AttachmentRef[];
  read: boolean;
  internetMessageId: string | null;
  inReplyTo: string | null;
  references: string[];
  via: string;
  raw: { blob: string; size: number } | null;
  attempts: number;
  error: string | null;
  rejected: { address: string; reason: string }[];
  /** Recipients a delivery report said failed after the relay took them (kept apart: a later EmailSent rewrites `rejected`). */
  bounces?: { address: string; reason: string }[];
  sentAt: string | null;
  createdAt: string;
  /** Log position of the event that made it, as a number: a strict order that a clock set back cannot upset. */
  seq: number;
}

export interface AttachmentDoc extends Doc {
  identityId: string;
  filename: string;
  contentType: string;
  size: number;
  /** pending: presigned, not uploaded; uploaded: ready for compose; received: part of an inbound mail. */
  status: 'pending' | 'uploaded' | 'received';
  blob: string | null;
  expiresAt: string | null;
  messageId: string | null;
  createdAt: string;
}

/** A thread's document keeps this many participants (a mailing list's thread would grow without end). */
export const PARTICIPANTS_KEPT = 100;

function addresses(list: EmailAddress[]): string[] {
  return list.map((a) => a.address.toLowerCase());
}

/**
 * A new message's document, then its thread's update (in this order: the thread counts the
 * message as unread only when this event made it, see DocUpdate).
 */
function messageAndThread(e: RecordedEvent, message: MessageDoc, m: ThreadInput): DocUpdate[] {
  const { update, made } = createOnce(EMAIL_MESSAGES, message);
  return [update, threadUpdate(e, m, () => made() && !message.read)];
}

interface ThreadInput {
  identityId: string;
  inbox: string;
  threadId: string;
  messageId: string;
  subject: string;
  from: EmailAddress;
  to: EmailAddress[];
  cc: EmailAddress[];
  preview: string;
  at: string;
  returns?: string;
}

/** The update of a thread for one new message; `unread()`: whether it adds an unread one. */
function threadUpdate(e: RecordedEvent, m: ThreadInput, unread: () => boolean): DocUpdate {
  const everyone = [m.from.address.toLowerCase(), ...addresses(m.to), ...addresses(m.cc)];
  return {
    collection: EMAIL_THREADS,
    id: m.threadId,
    evolve: (doc) => {
      const t = doc as ThreadDoc | null;
      if (t && comparePositions(e.position, t.pos) <= 0) return doc;
      // Events arrive in log order and older positions were skipped above: this message is
      // the thread's newest, whatever the clocks said (a clock set back must not demote it).
      const participants = [...(t?.participants ?? [])];
      for (const a of everyone) if (a && participants.length < PARTICIPANTS_KEPT && !participants.includes(a)) participants.push(a);
      const unreadCount = (t?.unreadCount ?? 0) + (unread() ? 1 : 0);
      return {
        id: m.threadId,
        identityId: m.identityId,
        subject: t?.subject || m.subject,
        subjectKey: t?.subjectKey || normaliseSubject(m.subject),
        // A delivery report in the thread says nothing of who the conversation is with.
        participantsKey: m.returns && t ? t.participantsKey : participantsKey(everyone, m.inbox),
        participants,
        messageCount: (t?.messageCount ?? 0) + 1,
        unreadCount,
        unread: unreadCount > 0,
        preview: m.preview,
        lastFrom: m.from,
        lastMessageId: m.messageId,
        lastMessageAt: m.at,
        createdAt: t?.createdAt ?? m.at,
        lastSeq: logOrder(e),
        pos: e.position,
      } satisfies ThreadDoc;
    },
  };
}

function patchMessage(id: string, patch: (m: MessageDoc) => Partial<MessageDoc> | null): DocUpdate {
  return {
    collection: EMAIL_MESSAGES,
    id,
    evolve: (doc) => {
      if (!doc) return doc;
      const changes = patch(doc as MessageDoc);
      return changes ? { ...doc, ...changes } : doc;
    },
  };
}

/**
 * A delivery report's failed recipients (only the message's own: a report may name an alias
 * it was forwarded to) are kept as the message's bounces, whatever came first: the report or
 * the delivery's outcome (a relay may bounce before its 250 is recorded, a deferred recipient's
 * later EmailSent rewrites `rejected`).
 */
function bounced(m: MessageDoc, d: EmailBouncedData): Partial<MessageDoc> | null {
  if (m.direction !== 'outbound') return null;
  const recipients = new Set([...m.to, ...m.cc, ...m.bcc].map((a) => addressKey(a.address)));
  const bounces = [...(m.bounces ?? [])];
  const known = new Set(bounces.map((b) => addressKey(b.address)));
  for (const r of d.recipients) {
    const key = addressKey(r.address);
    if (!recipients.has(key) || known.has(key)) continue;
    bounces.push({ address: r.address, reason: [r.status, r.diagnostic].filter(Boolean).join(' ') });
    known.add(key);
  }
  return bounces.length === (m.bounces ?? []).length ? null : withBounces({ ...m, bounces });
}

/**
 * A sent message's state with its bounces: they are among the refused, and once none of its
 * recipients is left it failed, with the remote servers' words.
 */
function withBounces(m: MessageDoc): Partial<MessageDoc> {
  const bounces = m.bounces ?? [];
  if (!bounces.length) return {};
  const refused = new Set([...m.rejected, ...bounces].map((r) => addressKey(r.address)));
  const noneLeft = [...m.to, ...m.cc, ...m.bcc].every((a) => refused.has(addressKey(a.address)));
  if (m.status !== 'sent' || !noneLeft) return { bounces };
  return { bounces, status: 'failed', error: `Bounced after the relay took it: ${bounces.map((b) => `${b.address}: ${b.reason}`).join('; ')}` };
}

function received(e: RecordedEvent): DocUpdate[] {
  const d = e.data as EmailReceivedData;
  const message: MessageDoc = {
    id: d.messageId,
    identityId: d.identityId,
    threadId: d.threadId,
    direction: 'inbound',
    status: 'received',
    from: d.from,
    to: d.to,
    cc: d.cc,
    bcc: [],
    replyTo: d.replyTo,
    subject: d.subject,
    text: d.text,
    html: d.html,
    textBlob: d.textBlob,
    htmlBlob: d.htmlBlob,
    textBytes: d.textBytes ?? null,
    htmlBytes: d.htmlBytes ?? null,
    preview: d.preview,
    attachments: d.attachments,
    read: false,
    internetMessageId: d.internetMessageId,
    inReplyTo: d.inReplyTo,
    references: d.references,
    via: d.via,
    raw: d.raw,
    attempts: 0,
    error: null,
    rejected: [],
    sentAt: d.date,
    createdAt: d.at,
    seq: logOrder(e),
  };
  return [
    ...messageAndThread(e, message, d),
    ...d.attachments.map(
      (a): DocUpdate => ({
        collection: EMAIL_ATTACHMENTS,
        id: a.uuid,
        evolve: (doc) =>
          doc ??
          ({
            id: a.uuid,
            identityId: d.identityId,
            filename: a.filename,
            contentType: a.contentType,
            size: a.size,
            status: 'received',
            blob: a.blob,
            expiresAt: null,
            messageId: d.messageId,
            createdAt: d.at,
          } satisfies AttachmentDoc),
      }),
    ),
  ];
}

function queued(e: RecordedEvent): DocUpdate[] {
  const d = e.data as EmailQueuedData;
  const message: MessageDoc = {
    id: d.messageId,
    identityId: d.identityId,
    threadId: d.threadId,
    direction: 'outbound',
    status: 'queued',
    from: d.from,
    to: d.to,
    cc: d.cc,
    bcc: d.bcc,
    replyTo: [],
    subject: d.subject,
    text: d.text,
    html: d.html,
    textBlob: d.textBlob ?? null,
    htmlBlob: d.htmlBlob ?? null,
    textBytes: d.textBytes ?? null,
    htmlBytes: d.htmlBytes ?? null,
    preview: d.preview,
    attachments: d.attachments,
    read: true,
    internetMessageId: d.internetMessageId,
    inReplyTo: d.inReplyTo,
    references: d.references,
    via: 'outbound',
    raw: null,
    attempts: 0,
    error: null,
    rejected: [],
    sentAt: null,
    createdAt: d.at,
    seq: logOrder(e),
  };
  return messageAndThread(e, message, { ...d, inbox: d.from.address });
}

/**
 * A marking: each inbound message not yet in that state changes, then each thread's unread
 * count moves by the messages of this event that changed in it (two readers marking the
 * same message count it once).
 */
function marked(e: RecordedEvent, read: boolean): DocUpdate[] {
  const d = e.data as EmailMarkedData;
  const changedIn = new Map<string, number>(); // thread id → messages this event changed in it
  const threadIds = new Set(d.messages.map((m) => m.threadId));
  return [
    ...d.messages.map(
      (m): DocUpdate => ({
        collection: EMAIL_MESSAGES,
        id: m.messageId,
        evolve: (doc) => {
          const message = doc as MessageDoc | null;
          // Only the identity's own message, in the thread the event names (whose count moves).
          if (!message || message.read === read || message.direction !== 'inbound' || message.threadId !== m.threadId || message.identityId !== d.identityId) return doc;
          changedIn.set(m.threadId, (changedIn.get(m.threadId) ?? 0) + 1);
          return { ...message, read };
        },
      }),
    ),
    ...[...threadIds].map(
      (threadId): DocUpdate => ({
        collection: EMAIL_THREADS,
        id: threadId,
        evolve: (doc) => {
          const t = doc as ThreadDoc | null;
          const changed = changedIn.get(threadId) ?? 0;
          if (!t || !changed || comparePositions(e.position, t.pos) <= 0) return doc;
          const unreadCount = Math.max(0, t.unreadCount + (read ? -changed : changed));
          return { ...t, unreadCount, unread: unreadCount > 0, pos: e.position };
        },
      }),
    ),
  ];
}

export const mailProjection: Projection = {
  // v2: lists order by log position (`seq`, `lastSeq`) instead of the wall-clock times.
  // v3: threads count unread messages instead of listing their ids; participants bounded.
  name: 'mail:v3',
  collections: [
    {
      name: EMAIL_THREADS,
      indexes: [
        ['identityId', 'lastSeq'],
        ['identityId', 'unread', 'lastSeq'],
        ['identityId', 'subjectKey', 'participantsKey', 'lastSeq'],
      ],
    },
    {
      name: EMAIL_MESSAGES,
      indexes: [['identityId', 'seq'], ['identityId', 'read', 'seq'], ['threadId', 'seq'], ['threadId', 'read', 'seq'], ['identityId', 'internetMessageId']],
    },
    { name: EMAIL_ATTACHMENTS, indexes: [['identityId']] },
  ],
  eventTypes: [
    EMAIL_RECEIVED,
    EMAIL_QUEUED,
    EMAIL_SENT,
    EMAIL_FAILED,
    EMAIL_DEFERRED,
    EMAIL_BOUNCED,
    EMAIL_MARKED_READ,
    EMAIL_MARKED_UNREAD,
    ATTACHMENT_PRESIGNED,
    ATTACHMENT_UPLOADED,
  ],
  apply(e: RecordedEvent): DocUpdate[] {
    switch (e.type) {
      case EMAIL_RECEIVED:
        return received(e);
      case EMAIL_QUEUED:
        return queued(e);
      case EMAIL_SENT: {
        const d = e.data as EmailSentData;
        return [
          patchMessage(d.messageId, (m) => {
            const sent: Partial<MessageDoc> = { status: 'sent', sentAt: d.at, attempts: d.attempts, rejected: d.rejected, error: null };
            return { ...sent, ...withBounces({ ...m, ...sent }) };
          }),
        ];
      }
      case EMAIL_FAILED: {
        const d = e.data as EmailFailedData;
        return [patchMessage(d.messageId, () => ({ status: 'failed', attempts: d.attempts, error: d.error, rejected: d.rejected }))];
      }
      case EMAIL_BOUNCED: {
        const d = e.data as EmailBouncedData;
        return [patchMessage(d.messageId, (m) => bounced(m, d))];
      }
      case EMAIL_DEFERRED: {
        const d = e.data as EmailDeferredData;
        return [patchMessage(d.messageId, (m) => (m.status !== 'queued' ? null : { attempts: d.attempt, error: d.error }))];
      }
      case EMAIL_MARKED_READ:
        return marked(e, true);
      case EMAIL_MARKED_UNREAD:
        return marked(e, false);
      case ATTACHMENT_PRESIGNED: {
        const d = e.data as AttachmentPresignedData;
        const doc: AttachmentDoc = {
          id: d.attachmentId,
          identityId: d.identityId,
          filename: d.filename,
          contentType: d.contentType,
          size: d.size,
          status: 'pending',
          blob: null,
          expiresAt: d.expiresAt,
          messageId: null,
          createdAt: d.at,
        };
        return [{ collection: EMAIL_ATTACHMENTS, id: d.attachmentId, evolve: (current) => current ?? doc }];
      }
      case ATTACHMENT_UPLOADED: {
        const d = e.data as AttachmentUploadedData;
        return [
          {
            collection: EMAIL_ATTACHMENTS,
            id: d.attachmentId,
            evolve: (doc) => (doc && doc.status === 'pending' ? { ...doc, status: 'uploaded', blob: d.blob, size: d.size } : doc),
          },
        ];
      }
      default:
        return [];
    }
  },
};
