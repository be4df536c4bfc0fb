/**
 * The mail context's commands: record inbound mail for identities (SMTP and internal
 * delivery share {@link MailService.receive}), queue outbound mail within the send
 * limits, mark read, presign and accept attachment uploads. Every write is an event.
 */
import { macOf, sameSecret } from '../kernel/secrets.js';
import { streamId, streamName, WrongExpectedRevisionError, type AppendResult, type EventData, type Subscription } from '../../infra/ports/event-store.js';
import type { BlobStore } from '../../infra/ports/blob-store.js';
import type { Collection } from '../../infra/ports/read-store.js';
import type { Platform } from '../kernel/platform.js';
import { event } from '../kernel/command.js';
import { derivedId, isUuid, newId, nowIso } from '../kernel/ids.js';
import { keyedSerial } from '../kernel/serial.js';
import { ApiError, badRequest, notFound, throttled } from '../gateway/errors.js';
import {
  ATTACHMENT,
  ATTACHMENT_PRESIGNED,
  ATTACHMENT_UPLOADED,
  DELIVERY,
  EMAIL_BOUNCED,
  EMAIL_FAILED,
  EMAIL_MARKED_READ,
  EMAIL_MARKED_UNREAD,
  EMAIL_QUEUED,
  EMAIL_RECEIVED,
  EMAIL_SENT,
  INLINE_BODY_LIMIT,
  mailboxStream,
  OUTBOX,
  type AttachmentPresignedData,
  type AttachmentRef,
  type AttachmentUploadedData,
  type EmailAddress,
  type EmailBouncedData,
  type EmailMarkedData,
  type EmailQueuedData,
  type EmailReceivedData,
} from './events.js';
import { decideThread, mayDependOn, type ThreadInput, type ThreadLookup } from './threading.js';
import { createSendLimits } from './send-limits.js';
import { createIdempotentSends, idempotencyTag, type EarlierSend, type IdempotencyTag, type KeyLookup } from './idempotency.js';
import type { DeliveryReport } from './bounces.js';
import { addressKey, domainOf, htmlToText, previewOf, replySubject, trimReferences } from './text.js';
import { EMAIL_ATTACHMENTS, EMAIL_MESSAGES, EMAIL_THREADS, type AttachmentDoc, type MessageDoc, type ThreadDoc } from '../../projections/mail/index.js';
import { IDENTITIES, type IdentityDoc } from '../../projections/identities/index.js';
import { settleOrWarn } from '../kernel/read-waits.js';

/** 25 MiB: the inbound message cap (DECISIONS "Mail") and the per-attachment cap. */
export const MAX_MESSAGE_BYTES = 25 * 1024 * 1024;
/** How long compose waits for the outcome of mail that stays within MAIL_DOMAIN. */
const INTERNAL_DELIVERY_WAIT_MS = 5_000;
/** Messages one read-marking event names at most (about 100 bytes each). */
const MARKED_PER_EVENT = 1000;

/** What a read marking needs of a message (a page of a long thread keeps no more). */
export type MarkedMessage = Pick<MessageDoc, 'id' | 'threadId' | 'identityId' | 'direction' | 'read'>;
/** Lifetime of a presigned upload URL. */
export const UPLOAD_URL_TTL_MS = 15 * 60 * 1000;
/** How long an uploaded attachment may be used in a compose request. */
export const ATTACHMENT_TTL_MS = 24 * 3600 * 1000;
/** Recipients per outbound message (To + Cc + Bcc); RFC 5321 §4.5.3.1.8 asks servers to take at least 100. */
export const MAX_RECIPIENTS = 100;
export { derivedId };

/** The shared `identities` read model (owned by the identities context). */
export type { IdentityDoc } from '../../projections/identities/index.js';

/**
 * A message as it arrives for identities, before thread and ids are decided: the recorded
 * EmailReceived data less what is decided per recipient (ids, thread, preview, blob refs).
 */
export type IncomingMail = Omit<EmailReceivedData, 'identityId' | 'inbox' | 'messageId' | 'threadId' | 'textBlob' | 'htmlBlob' | 'preview' | 'attachments' | 'at'> & {
  attachments: Omit<AttachmentRef, 'uuid'>[];
  /** A delivery status notification's failures (services/mail/bounces.ts), when the mail is one. */
  report?: DeliveryReport | null;
};

export interface SendRequest {
  to: EmailAddress[];
  cc: EmailAddress[];
  bcc: EmailAddress[];
  subject: string;
  html: string;
  attachmentIds: string[];
  kind: EmailQueuedData['kind'];
  /** The message answered, for replies. */
  original?: MessageDoc;
  /** The request's `Idempotency-Key` header, if it sent one (./idempotency.ts). */
  idempotencyKey?: string;
}

/** A send's message; `replayed` when an earlier request with the same Idempotency-Key made it. */
export interface SendResult {
  message: MessageDoc;
  replayed: boolean;
}

export function createMailService(platform: Platform, deps: { blobs: BlobStore; hmacKey: Buffer }) {
  const { events, reads, config } = platform;
  const { blobs } = deps;
  const identities = () => reads.collection<IdentityDoc>(IDENTITIES);
  const threads = (): Collection<ThreadDoc> => reads.collection<ThreadDoc>(EMAIL_THREADS);
  const messages = (): Collection<MessageDoc> => reads.collection<MessageDoc>(EMAIL_MESSAGES);
  const attachmentDocs = (): Collection<AttachmentDoc> => reads.collection<AttachmentDoc>(EMAIL_ATTACHMENTS);
  const serial = keyedSerial();

  const lookup: ThreadLookup = {
    async threadOfMessageId(identityId, internetMessageId) {
      return (await messages().findOne({ identityId, internetMessageId }))?.threadId ?? null;
    },
    async latestThreadBySubject(identityId, subjectKey, participantsKey) {
      const page = await threads().find({ where: { identityId, subjectKey, participantsKey }, orderBy: { field: 'lastSeq', direction: 'desc' }, limit: 1 });
      const t = page.items[0];
      return t ? { threadId: t.id, lastMessageAt: t.lastMessageAt } : null;
    },
  };

  /** Waits for the read models; a lag is logged, not thrown (the write itself is durable). */
  const settle = (position: string): Promise<void> => settleOrWarn(platform.progress, platform.logger, position, 'mail');

  async function storeBody(body: string | null): Promise<{ inline: string | null; blob: string | null; bytes: number | null }> {
    if (body === null || Buffer.byteLength(body) <= INLINE_BODY_LIMIT) return { inline: body, blob: null, bytes: null };
    const ref = await blobs.put(Buffer.from(body, 'utf8'));
    return { inline: null, blob: ref.key, bytes: ref.size };
  }

  /**
   * Per identity, the messages being recorded whose EmailReceived may not be in the read
   * models yet, which thread decisions read. A decision that could depend on one of them
   * ({@link mayDependOn}) waits until they are visible; every other decision goes ahead, so
   * an identity's mail is not queued behind the projections.
   */
  const unsettled = new Map<string, Set<{ internetMessageId: string | null; visible: Promise<void> }>>();

  /** Decides the thread of `input` once the unseen earlier messages it may depend on are visible. */
  async function decideAfterDependencies(input: ThreadInput): Promise<string> {
    const earlier = [...(unsettled.get(input.identityId) ?? [])];
    if (mayDependOn(input, earlier.map((e) => e.internetMessageId))) await Promise.all(earlier.map((e) => e.visible));
    return decideThread(lookup, input, newId);
  }

  /**
   * Records `mail` in the mailbox of each identity (one EmailReceived each), durably, and
   * resolves once the read models show it.
   * `eventKey` makes the event ids deterministic: recording the same mail again for the
   * same identity (a redelivery, a reactor retry) appends nothing new.
   */
  async function receive(recipients: IdentityDoc[], mail: IncomingMail, eventKey: string, at = nowIso()): Promise<EmailReceivedData[]> {
    // Both in one group commit of the blob store when both are large.
    const [text, html] = await Promise.all([storeBody(mail.text), storeBody(mail.html)]);
    const preview = previewOf(mail.text, mail.html);
    const seen = new Set<string>();
    const unique = recipients.filter((r) => !seen.has(r.id) && seen.add(r.id));
    return Promise.all(
      unique.map(async (identity) => {
        const input: ThreadInput = {
          identityId: identity.id,
          ownInbox: identity.inbox,
          internetMessageId: mail.internetMessageId,
          inReplyTo: mail.inReplyTo,
          references: mail.references,
          // A bounce joins the thread of the message it returns (reports carry no In-Reply-To).
          returns: mail.report?.originalMessageId ?? null,
          subject: mail.subject,
          participants: [mail.from.address, ...mail.to.map((a) => a.address), ...mail.cc.map((a) => a.address)],
          at,
        };
        let markVisible!: () => void;
        const self = { internetMessageId: mail.internetMessageId, visible: new Promise<void>((resolve) => (markVisible = resolve)) };
        // One decision at a time per identity, each seeing the messages decided before it.
        const threadId = await serial(identity.id, async () => {
          const decided = await decideAfterDependencies(input);
          let mine = unsettled.get(identity.id);
          if (!mine) unsettled.set(identity.id, (mine = new Set()));
          mine.add(self);
          return decided;
        });
        const settled = () => {
          const mine = unsettled.get(identity.id);
          mine?.delete(self);
          if (mine?.size === 0) unsettled.delete(identity.id);
          markVisible();
        };
        const messageId = newId();
        const data: EmailReceivedData = {
          identityId: identity.id,
          inbox: identity.inbox,
          messageId,
          threadId,
          internetMessageId: mail.internetMessageId,
          inReplyTo: mail.inReplyTo,
          references: mail.references,
          ...(mail.report ? { returns: mail.report.originalMessageId } : {}),
          from: mail.from,
          to: mail.to,
          cc: mail.cc,
          replyTo: mail.replyTo,
          subject: mail.subject,
          text: text.inline,
          html: html.inline,
          textBlob: text.blob,
          htmlBlob: html.blob,
          textBytes: text.bytes,
          htmlBytes: html.bytes,
          preview,
          attachments: mail.attachments.map((a, i) => ({ ...a, uuid: derivedId(messageId, 'attachment', String(i)) })),
          raw: mail.raw,
          via: mail.via,
          sourceMessageId: mail.sourceMessageId,
          date: mail.date,
          at,
        };
        try {
          const append = await events.append(mailboxStream(identity.id), [{ id: derivedId(eventKey, identity.id), type: EMAIL_RECEIVED, data }], {
            expectedRevision: 'any',
          });
          await settle(append.position);
          const received = append.events[0].data as EmailReceivedData;
          if (mail.report) await recordBounce(identity, mail.report, received.messageId, derivedId(eventKey, identity.id, 'bounce'));
          return received;
        } finally {
          settled();
        }
      }),
    );
  }

  /**
   * A delivery report received by `identity` about one of its own sent messages: its failed
   * recipients are recorded on that message's delivery stream (the relay's 250 said nothing
   * of them). A report about no message of this identity is only mail. At least once: the
   * event's id comes from the report's, so a report received again records nothing new.
   */
  async function recordBounce(identity: IdentityDoc, report: DeliveryReport, reportMessageId: string, eventId: string): Promise<void> {
    // Mail to MAIL_DOMAIN was delivered here, never through the relay: it cannot bounce.
    const relayed = report.failed.filter((r) => domainOf(r.address) !== config.mailDomain);
    if (!relayed.length) return;
    const page = await messages().find({ where: { identityId: identity.id, internetMessageId: report.originalMessageId, direction: 'outbound' }, limit: 1 });
    const original = page.items[0];
    if (!original) return;
    const data: EmailBouncedData = { identityId: identity.id, messageId: original.id, reportMessageId, recipients: relayed, at: nowIso() };
    const append = await events.append(streamName(DELIVERY, original.id), [{ id: eventId, type: EMAIL_BOUNCED, data }], { expectedRevision: 'any' });
    await settle(append.position);
  }

  /**
   * The bodies of a message (an event or a read-model document), from the blob store where
   * {@link storeBody} put them; a blob that is missing reads as null.
   */
  async function bodiesOf(m: { text: string | null; html: string | null; textBlob?: string | null; htmlBlob?: string | null }): Promise<{ text: string | null; html: string | null }> {
    const load = async (inline: string | null, blob: string | null | undefined) => {
      if (!blob) return inline;
      // Lost from the blob store (a deleted or damaged file): the rest of the message (and of
      // a list holding it) is still worth showing, but the loss must not pass unnoticed.
      const content = await blobs.get(blob).catch((err: { code?: string }) => {
        if (err.code !== 'blob_damaged') throw err;
        return null;
      });
      if (!content) platform.logger.error({ blob }, 'mail body missing or damaged in the blob store');
      return content?.toString('utf8') ?? null;
    };
    const [text, html] = await Promise.all([load(m.text, m.textBlob), load(m.html, m.htmlBlob)]);
    return { text, html };
  }

  async function identityOf(identityId: string): Promise<IdentityDoc> {
    const identity = await identities().get(identityId);
    if (!identity) throw notFound('Identity not found.');
    return identity;
  }

  /** The live identity behind an inbox address of MAIL_DOMAIN, or null. */
  async function identityByInbox(address: string): Promise<IdentityDoc | null> {
    return identities().findOne({ inbox: addressKey(address) });
  }

  async function resolveAttachments(identityId: string, ids: string[], now: string): Promise<AttachmentRef[]> {
    const errors: string[] = [];
    const refs: AttachmentRef[] = [];
    for (const id of [...new Set(ids)]) {
      if (!isUuid(id)) {
        errors.push(`"${id}" is not a valid UUID.`);
        continue;
      }
      const history = await events.readStream(streamName(ATTACHMENT, id.toLowerCase()));
      const presigned = history.find((e) => e.type === ATTACHMENT_PRESIGNED)?.data as AttachmentPresignedData | undefined;
      const uploaded = history.find((e) => e.type === ATTACHMENT_UPLOADED)?.data as AttachmentUploadedData | undefined;
      if (!presigned || presigned.identityId !== identityId) errors.push(`Attachment ${id} does not exist.`);
      else if (!uploaded) errors.push(`Attachment ${id} has not been uploaded.`);
      else if (Date.parse(now) - Date.parse(uploaded.at) > ATTACHMENT_TTL_MS) errors.push(`Attachment ${id} has expired; upload it again.`);
      else
        refs.push({ uuid: presigned.attachmentId, filename: presigned.filename, contentType: presigned.contentType, size: uploaded.size, blob: uploaded.blob, contentId: null, inline: false });
    }
    if (!errors.length && refs.reduce((n, a) => n + a.size, 0) > MAX_MESSAGE_BYTES) errors.push('Attachments exceed 25 MiB in total.');
    if (errors.length) throw badRequest({ attachment_uuids: errors });
    return refs;
  }

  const sendLimits = createSendLimits({
    events,
    windows: [
      { limit: config.emailLimitHour, ms: 3600_000, label: 'hour' },
      { limit: config.emailLimitDay, ms: 86_400_000, label: 'day' },
    ],
  });

  /** Checks the identity's send limits at `now`: 429 when a window is full; else the outbox revision read. */
  async function withinLimits(identityId: string, now: string): Promise<number | null> {
    const nowMs = Date.parse(now);
    const { revision, full } = await sendLimits.check(streamName(OUTBOX, identityId), nowMs);
    if (full) {
      const wait = Math.max(1, Math.ceil((full.freesAt - nowMs) / 1000));
      throw throttled(wait, `Email send limit reached: at most ${full.window.limit} emails per ${full.window.label} per identity. Try again in ${wait} seconds.`);
    }
    return revision;
  }

  const idempotentSends = createIdempotentSends({ events });

  /** The send an earlier request with `tag`'s key made (422 when it asked for something else), if any, and the outbox revision read. */
  async function earlierSend(identityId: string, tag: IdempotencyTag, now: string): Promise<KeyLookup> {
    const found = await idempotentSends.lookup(streamName(OUTBOX, identityId), tag.key, Date.parse(now));
    if (found.earlier && found.earlier.fingerprint !== tag.fingerprint) {
      throw new ApiError(422, 'idempotency_key_reused', 'This Idempotency-Key was sent with another request in the last 24 hours: use a new key for a new send.');
    }
    return found;
  }

  /**
   * Appends to the identity's outbox if the rolling windows allow it (./send-limits.ts) and
   * no send with the same Idempotency-Key is there (else answers that send). The key is
   * checked before the limits (a retry of the send that used up the hour is answered, not
   * refused), and both on every attempt, at one revision: the append at that revision makes
   * them hold under concurrent sends, across processes too (another's append between the two
   * reads, or before the append, makes them run again).
   */
  async function appendWithinLimits(identityId: string, ev: EventData, now: string, tag: IdempotencyTag | null): Promise<AppendResult | EarlierSend> {
    const stream = streamName(OUTBOX, identityId);
    for (let attempt = 0; ; attempt++) {
      const key = tag && (await earlierSend(identityId, tag, now));
      if (key?.earlier) return key.earlier;
      const revision = await withinLimits(identityId, now);
      if (key && key.revision !== revision) {
        // Appended between the two reads (another process): the key was not looked at there.
        if (attempt >= 10) throw new ApiError(503, 'service_unavailable', 'The outbox is too busy right now; send again shortly.', undefined, { 'Retry-After': '1' });
        continue;
      }
      try {
        return await events.append(stream, [ev], { expectedRevision: revision ?? 'no_stream' });
      } catch (err) {
        if (!(err instanceof WrongExpectedRevisionError) || attempt >= 10) throw err;
      }
    }
  }

  async function send(identityId: string, req: SendRequest, now = nowIso()): Promise<SendResult> {
    const identity = await identityOf(identityId);
    // What was asked (not when): a retry of it carries the same fingerprint.
    const tag = req.idempotencyKey === undefined ? null : idempotencyTag(identityId, req.idempotencyKey, [req.kind, req.original?.id ?? null, req.to, req.cc, req.bcc, req.subject, req.html, req.attachmentIds]);
    const replay = async (earlier: EarlierSend): Promise<SendResult> => ({ message: await waitForDoc(earlier.messageId), replayed: true });
    // Before the limits: a retry of the hour's last send is answered, not refused.
    const known = tag && (await earlierSend(identityId, tag, now)).earlier;
    if (known) return replay(known);
    if (req.to.length + req.cc.length + req.bcc.length > MAX_RECIPIENTS) {
      throw badRequest({ non_field_errors: [`At most ${MAX_RECIPIENTS} recipients per message.`] });
    }
    const attachments = await resolveAttachments(identityId, req.attachmentIds, now);
    // Refused before the body is converted and stored: a sender past its limit would still
    // write blobs nobody reads (the check that decides is the append's, below). A retry whose
    // first send went out meanwhile (a client that timed out) finds it now.
    try {
      await withinLimits(identityId, now);
    } catch (err) {
      const meanwhile = tag && (await earlierSend(identityId, tag, now)).earlier;
      if (meanwhile) return replay(meanwhile);
      throw err;
    }
    // Large bodies go to the blob store as inbound ones do (one group commit for both).
    const text = htmlToText(req.html);
    const [textBody, htmlBody] = await Promise.all([storeBody(text), storeBody(req.html)]);
    const queued: { earlier: EarlierSend } | { messageId: string; position: string } = await serial(identityId, async () => {
      const messageId = newId();
      const internetMessageId = `<${messageId}@${config.mailDomain}>`;
      const original = req.original;
      const inReplyTo = original?.internetMessageId ?? null;
      // RFC 5322 §3.6.4: the parent's References (or its In-Reply-To) followed by the parent's id.
      const parentRefs = original ? (original.references.length ? original.references : original.inReplyTo ? [original.inReplyTo] : []) : [];
      const references = inReplyTo ? trimReferences([...parentRefs.filter((r) => r !== inReplyTo), inReplyTo]) : [];
      const from: EmailAddress = { address: identity.inbox, name: identity.name };
      const subject = original ? replySubject(original.subject) : req.subject;
      const threadInput: ThreadInput = {
        identityId,
        ownInbox: identity.inbox,
        internetMessageId: null,
        inReplyTo: null,
        references: [],
        subject,
        participants: [from.address, ...req.to.map((a) => a.address), ...req.cc.map((a) => a.address)],
        at: now,
      };
      const threadId = original?.threadId ?? (await decideAfterDependencies(threadInput));
      const data: EmailQueuedData = {
        identityId,
        messageId,
        threadId,
        kind: req.kind,
        replyToMessageId: original?.id ?? null,
        internetMessageId,
        inReplyTo,
        references,
        from,
        to: req.to,
        cc: req.cc,
        bcc: req.bcc,
        subject,
        html: htmlBody.inline,
        text: textBody.inline,
        htmlBlob: htmlBody.blob,
        textBlob: textBody.blob,
        htmlBytes: htmlBody.bytes,
        textBytes: textBody.bytes,
        preview: previewOf(text, req.html),
        attachments,
        at: now,
        ...(tag ? { idempotency: tag } : {}),
      };
      const append = await appendWithinLimits(identityId, event(EMAIL_QUEUED, data), now, tag);
      if (!('position' in append)) return { earlier: append };
      await settle(append.position);
      return { messageId, position: append.position };
    });
    if ('earlier' in queued) return replay(queued.earlier);
    // Mail that stays within MAIL_DOMAIN is delivered in moments: answer with its outcome
    // (sent or failed), so the recipients can read it as soon as the sender has the 201.
    const everyone = [...req.to, ...req.cc, ...req.bcc];
    if (everyone.length && everyone.every((a) => domainOf(a.address) === config.mailDomain)) {
      const outcome = await deliveryOutcome(queued.messageId, INTERNAL_DELIVERY_WAIT_MS);
      if (outcome) await settle(outcome);
    }
    return { message: await waitForDoc(queued.messageId), replayed: false };
  }

  // ---- delivery outcomes of internal sends -------------------------------------------

  /** Senders waiting for the outcome of their message, by message id. */
  const outcomeWaiters = new Map<string, (position: string | null) => void>();
  /** One subscription for every waiting sender (one each would hold a stream per send on EventStoreDB). */
  let outcomes: Subscription | null = null;

  async function start(): Promise<void> {
    if (outcomes) return;
    const subscription = events.subscribeAll({ after: await events.headPosition(), filter: { eventTypes: [EMAIL_SENT, EMAIL_FAILED] } }, (e) => {
      outcomeWaiters.get(streamId(e.stream))?.(e.position);
    });
    outcomes = subscription;
    subscription.done.catch((err: unknown) => {
      if (outcomes !== subscription) return;
      platform.logger.error({ err }, 'mail: the delivery outcome subscription failed; internal sends answer queued');
      outcomes = null;
      for (const resolve of outcomeWaiters.values()) resolve(null);
    });
  }

  function stop(): void {
    outcomes?.close();
    outcomes = null;
    for (const resolve of outcomeWaiters.values()) resolve(null);
  }

  /**
   * Position of the delivery outcome (EmailSent / EmailFailed) of a queued message, once
   * the delivery reactor (in this process or a cluster worker) records it; null after
   * `timeoutMs` (the message stays queued and is delivered later as usual).
   */
  async function deliveryOutcome(messageId: string, timeoutMs: number): Promise<string | null> {
    if (!outcomes) return null;
    let timer: NodeJS.Timeout | undefined;
    const outcome = new Promise<string | null>((resolve) => {
      timer = setTimeout(() => resolve(null), timeoutMs);
      outcomeWaiters.set(messageId, resolve);
    });
    try {
      // Waiting first, then looking: an outcome recorded before the wait began is in the
      // stream; one recorded after reaches the waiter.
      const recorded = (await events.readStream(streamName(DELIVERY, messageId))).findLast((e) => e.type === EMAIL_SENT || e.type === EMAIL_FAILED);
      return recorded ? recorded.position : await outcome;
    } finally {
      clearTimeout(timer);
      outcomeWaiters.delete(messageId);
    }
  }

  /** The message's document: at once when the read models have it (they usually do), else polled for up to 5 s. */
  async function waitForDoc(messageId: string): Promise<MessageDoc> {
    for (let i = 0; i < 50; i++) {
      const doc = await messages().get(messageId);
      if (doc) return doc;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new ApiError(503, 'projection_lag', 'The message was queued but is not readable yet; retry shortly.', undefined, { 'Retry-After': '1' });
  }

  /** Marks inbound messages read or unread; messages already in that state are left out. */
  async function markRead(identityId: string, docs: MarkedMessage[], read: boolean, now = nowIso()): Promise<void> {
    const changed = docs.filter((m) => m.identityId === identityId && m.direction === 'inbound' && m.read !== read);
    // A thread opened with thousands unread: events of a bounded size (EventStoreDB refuses appends over 1 MiB).
    let position: string | null = null;
    for (let i = 0; i < changed.length; i += MARKED_PER_EVENT) {
      const data: EmailMarkedData = { identityId, messages: changed.slice(i, i + MARKED_PER_EVENT).map((m) => ({ messageId: m.id, threadId: m.threadId })), at: now };
      position = (await events.append(mailboxStream(identityId), [event(read ? EMAIL_MARKED_READ : EMAIL_MARKED_UNREAD, data)])).position;
    }
    if (position) await settle(position);
  }

  // ---- attachments -------------------------------------------------------------------

  const sign = (attachmentId: string, expires: number): string => macOf(deps.hmacKey, 'email-attachment-upload', attachmentId, String(expires));

  async function presign(identityId: string, input: { filename: string; content_type: string; size: number }, baseUrl: string, now = nowIso()) {
    await identityOf(identityId);
    const attachmentId = newId();
    const expiresMs = Date.parse(now) + UPLOAD_URL_TTL_MS;
    const expires = Math.floor(expiresMs / 1000);
    const expiresAt = new Date(expires * 1000).toISOString();
    const data: AttachmentPresignedData = {
      attachmentId,
      identityId,
      filename: input.filename,
      contentType: input.content_type,
      size: input.size,
      expiresAt,
      at: now,
    };
    const append = await events.append(streamName(ATTACHMENT, attachmentId), [event(ATTACHMENT_PRESIGNED, data)], { expectedRevision: 'no_stream' });
    await settle(append.position);
    const url = `${baseUrl}/api/email-attachments/${attachmentId}/upload/?expires=${expires}&signature=${sign(attachmentId, expires)}`;
    return {
      uuid: attachmentId,
      upload_url: url,
      method: 'PUT' as const,
      headers: { 'Content-Type': input.content_type },
      expires_at: expiresAt,
      filename: input.filename,
      content_type: input.content_type,
      size: input.size,
    };
  }

  /** Checks an upload URL's signature and expiry (the signature is the credential). */
  function checkUploadSignature(attachmentId: string, expiresRaw: unknown, signature: unknown, nowMs = Date.now()): void {
    const expires = typeof expiresRaw === 'string' && /^\d{1,12}$/.test(expiresRaw) ? Number(expiresRaw) : NaN;
    const valid = Number.isFinite(expires) && typeof signature === 'string' && sameSecret(signature, sign(attachmentId, expires));
    if (!valid) throw new ApiError(403, 'signature_invalid', 'The upload URL signature is not valid.');
    if (nowMs > expires * 1000) throw new ApiError(403, 'upload_url_expired', 'The upload URL has expired; presign again.');
  }

  /** The presign record of an attachment (for the upload handler's checks). */
  async function pendingUpload(attachmentId: string): Promise<{ presigned: AttachmentPresignedData; revision: number; uploaded: boolean }> {
    const history = await events.readStream(streamName(ATTACHMENT, attachmentId));
    const first = history[0];
    if (!first || first.type !== ATTACHMENT_PRESIGNED) throw notFound('Attachment not found.');
    return {
      presigned: first.data as AttachmentPresignedData,
      revision: history[history.length - 1].revision,
      uploaded: history.some((e) => e.type === ATTACHMENT_UPLOADED),
    };
  }

  async function completeUpload(attachmentId: string, identityId: string, content: Buffer, revision: number, now = nowIso()): Promise<void> {
    const blob = await blobs.put(content);
    const data: AttachmentUploadedData = { attachmentId, identityId, blob: blob.key, size: blob.size, at: now };
    try {
      const append = await events.append(streamName(ATTACHMENT, attachmentId), [event(ATTACHMENT_UPLOADED, data)], { expectedRevision: revision });
      await settle(append.position);
    } catch (err) {
      if (err instanceof WrongExpectedRevisionError) throw new ApiError(409, 'already_uploaded', 'This attachment was already uploaded.');
      throw err;
    }
  }

  return {
    start,
    stop,
    receive,
    send,
    bodiesOf,
    markRead,
    presign,
    checkUploadSignature,
    pendingUpload,
    completeUpload,
    identityOf,
    identityByInbox,
    lookup,
    collections: { threads, messages, attachments: attachmentDocs },
  };
}

export type MailService = ReturnType<typeof createMailService>;
