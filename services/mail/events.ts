/**
 * Events of the mail context. Streams:
 * - `mailbox-<identityId>`: EmailReceived (inbound SMTP or internal delivery), EmailMarkedRead,
 *   EmailMarkedUnread.
 * - `outbox-<identityId>`: EmailQueued only, so the send limits read a bounded tail of it.
 * - `delivery-<messageId>`: EmailDeliveryDeferred, EmailSent, EmailFailed (the reactor's log).
 * - `attachment-<uuid>`: AttachmentPresigned, AttachmentUploaded.
 * No event carries a secret; bodies are the identity's own mail.
 */
import { streamName } from '../../infra/ports/event-store.js';

export const EMAIL_RECEIVED = 'EmailReceived';
export const EMAIL_QUEUED = 'EmailQueued';
export const EMAIL_SENT = 'EmailSent';
export const EMAIL_FAILED = 'EmailFailed';
export const EMAIL_DEFERRED = 'EmailDeliveryDeferred';
/** A delivery status notification (RFC 3464) came back for a sent message: recipients that failed after the relay took it. */
export const EMAIL_BOUNCED = 'EmailBounced';
export const EMAIL_MARKED_READ = 'EmailMarkedRead';
export const EMAIL_MARKED_UNREAD = 'EmailMarkedUnread';
export const ATTACHMENT_PRESIGNED = 'AttachmentPresigned';
export const ATTACHMENT_UPLOADED = 'AttachmentUploaded';

export const MAILBOX = 'mailbox';
export const OUTBOX = 'outbox';
export const DELIVERY = 'delivery';
export const ATTACHMENT = 'attachment';
export const mailboxStream = (identityId: string) => streamName(MAILBOX, identityId);

export interface EmailAddress {
  address: string;
  name: string;
}

export interface AttachmentRef {
  uuid: string;
  filename: string;
  contentType: string;
  size: number;
  /** Blob key (sha256 hex). */
  blob: string;
  contentId: string | null;
  inline: boolean;
}

/** What both inbound paths (SMTP, internal delivery) record for one recipient identity. */
export interface EmailReceivedData {
  identityId: string;
  /** The identity's inbox address (it may not appear in To/Cc: Bcc, lists). */
  inbox: string;
  messageId: string;
  threadId: string;
  /** RFC 5322 Message-ID with its angle brackets, or null when the sender sent none. */
  internetMessageId: string | null;
  inReplyTo: string | null;
  references: string[];
  /** A delivery report: the Message-ID of the message it returns (it joined that thread; the thread keeps its participants). */
  returns?: string;
  from: EmailAddress;
  to: EmailAddress[];
  cc: EmailAddress[];
  replyTo: EmailAddress[];
  subject: string;
  text: string | null;
  html: string | null;
  /** Bodies over {@link INLINE_BODY_LIMIT} live in the blob store instead. */
  textBlob: string | null;
  htmlBlob: string | null;
  /**
   * The UTF-8 size of a body kept as a blob (null when inline). Absent in events recorded
   * while only bodies over {@link LIST_BODY_LIMIT} were blobs.
   */
  textBytes?: number | null;
  htmlBytes?: number | null;
  preview: string;
  attachments: AttachmentRef[];
  /** The raw MIME as received (SMTP); null for internal delivery. */
  raw: { blob: string; size: number } | null;
  via: 'smtp' | 'internal';
  /** Internal delivery: the sender's outbound message. */
  sourceMessageId: string | null;
  /** The Date header, when valid. */
  date: string | null;
  at: string;
}

export interface EmailQueuedData {
  identityId: string;
  messageId: string;
  threadId: string;
  kind: 'compose' | 'reply' | 'reply_all';
  /** The message replied to, for replies. */
  replyToMessageId: string | null;
  internetMessageId: string;
  inReplyTo: string | null;
  references: string[];
  from: EmailAddress;
  to: EmailAddress[];
  cc: EmailAddress[];
  bcc: EmailAddress[];
  subject: string;
  /** Inline up to {@link INLINE_BODY_LIMIT}; beyond, null with the body in the blob store (`htmlBlob`, `htmlBytes`). */
  html: string | null;
  text: string | null;
  htmlBlob?: string | null;
  textBlob?: string | null;
  htmlBytes?: number | null;
  textBytes?: number | null;
  preview: string;
  attachments: AttachmentRef[];
  at: string;
  /** The request's Idempotency-Key, hashed with the identity, and what it asked (../mail/idempotency.ts). */
  idempotency?: { key: string; fingerprint: string };
}

export interface EmailDeferredData {
  identityId: string;
  messageId: string;
  attempt: number;
  error: string;
  retryAt: string;
  /** External recipients handed over so far, and those refused for good (absent before per-recipient retries). */
  relayed?: string[];
  rejected?: { address: string; reason: string }[];
  at: string;
}

export interface EmailSentData {
  identityId: string;
  messageId: string;
  attempts: number;
  /** Addresses delivered to inboxes of MAIL_DOMAIN. */
  internal: string[];
  /** Addresses handed to the relay (or written to the outbox). */
  external: string[];
  via: 'internal' | 'relay' | 'outbox' | 'mixed';
  rejected: { address: string; reason: string }[];
  at: string;
}

export interface EmailFailedData {
  identityId: string;
  messageId: string;
  attempts: number;
  error: string;
  rejected: { address: string; reason: string }[];
  at: string;
}

export interface EmailBouncedData {
  identityId: string;
  /** The outbound message reported on (its delivery stream holds this event). */
  messageId: string;
  /** The inbound report (a message of the same identity's inbox). */
  reportMessageId: string;
  recipients: { address: string; status: string; diagnostic: string }[];
  at: string;
}

export interface EmailMarkedData {
  identityId: string;
  messages: { messageId: string; threadId: string }[];
  at: string;
}

export interface AttachmentPresignedData {
  attachmentId: string;
  identityId: string;
  filename: string;
  contentType: string;
  size: number;
  expiresAt: string;
  at: string;
}

export interface AttachmentUploadedData {
  attachmentId: string;
  identityId: string;
  blob: string;
  size: number;
  at: string;
}

/**
 * Text or HTML bodies larger than this are stored as blobs, not inline in events and read
 * models: a large body inline was copied, serialised and parsed at every step of the write
 * path (the append, the projection, each index of the message document), which made a
 * 64 KB message cost several times its parse.
 */
export const INLINE_BODY_LIMIT = 16 * 1024;

/** Message lists show bodies up to this size; larger ones are `truncated` there (GET the message or its thread). */
export const LIST_BODY_LIMIT = 256 * 1024;
