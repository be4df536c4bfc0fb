/**
 * The outbound delivery reactor: EmailQueued → EmailSent | EmailFailed.
 *
 * It follows the event log from its own checkpoint (kept in the read store under
 * {@link CHECKPOINT}). Jobs run concurrently; the checkpoint moves only past events whose
 * job finished (a low-water mark), so a restart replays every unfinished one. Effects are
 * idempotent: internal deliveries and the outcome events have ids derived from the message
 * id, and a job whose `delivery-<messageId>` stream already holds an outcome is skipped.
 * Relay hand-off is at-least-once (a crash between the relay's 250 and EmailSent sends the
 * message again, with the same Message-ID). Temporary failures (4xx, connection errors) are
 * retried with exponential backoff; each attempt is an EmailDeliveryDeferred event, so the
 * schedule survives restarts.
 *
 * It follows the log through the EventFeed port (consumer group {@link DELIVERY_GROUP}):
 * embedded, the event store's subscription (the read-store checkpoint is the durable
 * position); cluster, Kafka, where each EmailQueued is reported settled only when its job
 * has an outcome, so the committed offset is the same low-water mark.
 */
import { streamName, streamPrefix, type EventData, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { BlobStore } from '../../infra/ports/blob-store.js';
import { TemporaryMailError, type OutboundAttachment } from '../../infra/ports/mailer.js';
import type { EventFeed } from '../../infra/ports/event-feed.js';
import type { Platform } from '../kernel/platform.js';
import { nowIso } from '../kernel/ids.js';
import { isTemporaryFault } from '../kernel/faults.js';
import { ApiError } from '../gateway/errors.js';
import { createReactor, type JobRun } from '../kernel/reactor.js';
import {
  DELIVERY,
  EMAIL_DEFERRED,
  EMAIL_FAILED,
  EMAIL_QUEUED,
  EMAIL_SENT,
  OUTBOX,
  type EmailDeferredData,
  type EmailFailedData,
  type EmailQueuedData,
  type EmailSentData,
} from './events.js';
import { derivedId, type IdentityDoc, type MailService } from './service.js';
import { domainOf, formatAddress } from './text.js';

export const CHECKPOINT = 'reactor:mail-delivery';
/**
 * How long a temporary failure is retried: a day, as queueing mail services do (RFC 5321
 * §4.5.4.1 suggests 4–5 days for an MTA; this service hands its mail to a relay that queues
 * too). A relay down for an hour must not turn the mail sent meanwhile into failures.
 */
export const RETRY_FOR_MS = 24 * 3600_000;

/** Attempts whose waits (base, doubling, capped at `max`) add up to at least `windowMs`. */
export function attemptsWithin(windowMs: number, baseMs: number, maxMs: number): number {
  let attempts = 1;
  for (let waited = 0; waited < windowMs; attempts++) waited += Math.min(maxMs, baseMs * 2 ** (attempts - 1));
  return attempts;
}
/** The reactor's consumer group on the feed. */
export const DELIVERY_GROUP = 'ais-mail-delivery';

export interface DeliveryOptions {
  /** First retry delay; doubles per attempt up to {@link DeliveryOptions.maxDelayMs}. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Attempts before a temporary failure becomes EmailFailed. Default: as many as fit in {@link RETRY_FOR_MS}. */
  maxAttempts?: number;
  /** Jobs in flight; the subscription waits when this many are running. */
  concurrency?: number;
}

/** External recipients settled by earlier attempts (recorded in EmailDeferred). */
interface DeliveryProgress {
  relayed: string[];
  rejected: { address: string; reason: string }[];
}

interface AttemptOutcome {
  internal: string[];
  /** External recipients handed over, this attempt and before. */
  relayed: string[];
  rejectedLocal: { address: string; reason: string }[];
  rejectedExternal: { address: string; reason: string }[];
  /** External recipients the relay refused with a 4xx, or could not take now: retried alone. */
  pending: { address: string; reason: string }[];
  /** Why the relay (or the outbox) took nothing this attempt, when it could later. */
  outletError: string | null;
  via: EmailSentData['via'];
}

/** Recipients refused, with why, as an attempt's error says it. */
const listed = (refusals: { address: string; reason: string }[]) => refusals.map((r) => `${r.address}: ${r.reason}`).join('; ');

export function createDeliveryReactor(platform: Platform, deps: { mail: MailService; blobs: BlobStore; options?: DeliveryOptions; feed: EventFeed }) {
  const { events, reads, config, mailer } = platform;
  const { feed } = deps;
  const log = platform.logger.child({ component: 'mail-delivery' });
  const baseDelay = deps.options?.baseDelayMs ?? 2_000;
  const maxDelay = deps.options?.maxDelayMs ?? 15 * 60_000;
  const maxAttempts = deps.options?.maxAttempts ?? attemptsWithin(RETRY_FOR_MS, baseDelay, maxDelay);
  const concurrency = deps.options?.concurrency ?? 8;

  const delayFor = (attempt: number) => Math.min(maxDelay, baseDelay * 2 ** Math.max(0, attempt - 1));

  /**
   * One delivery attempt. `progress` is what earlier attempts settled for external
   * recipients (handed over, or refused for good), so a retry after a relay refused some
   * recipients with a 4xx goes to those only. Internal delivery is idempotent (event ids).
   * A relay that took nothing and may later leaves every external recipient pending, so
   * the internal ones, delivered meanwhile, still count when attempts run out.
   */
  async function attempt(q: EmailQueuedData, progress: DeliveryProgress): Promise<AttemptOutcome> {
    const bodies = await deps.mail.bodiesOf(q);
    // Written before the event that names them: missing is damage, not something to send around.
    if ((q.textBlob && bodies.text === null) || (q.htmlBlob && bodies.html === null)) throw new Error(`a body blob of message ${q.messageId} is missing`);
    const everyone = [...q.to, ...q.cc, ...q.bcc];
    const local = everyone.filter((a) => domainOf(a.address) === config.mailDomain);
    const settledBefore = new Set([...progress.relayed, ...progress.rejected.map((r) => r.address)]);
    const external = everyone.filter((a) => domainOf(a.address) !== config.mailDomain && !settledBefore.has(a.address));
    const rejectedLocal: { address: string; reason: string }[] = [];
    const internal: string[] = [];

    const identities: IdentityDoc[] = [];
    for (const a of local) {
      const identity = await deps.mail.identityByInbox(a.address);
      if (identity) {
        identities.push(identity);
        internal.push(a.address);
      } else rejectedLocal.push({ address: a.address, reason: '550 5.1.1 no such mailbox' });
    }
    if (identities.length) {
      // Bcc stays with the sender: recipients see From/To/Cc only.
      await deps.mail.receive(
        identities,
        {
          internetMessageId: q.internetMessageId,
          inReplyTo: q.inReplyTo,
          references: q.references,
          from: q.from,
          to: q.to,
          cc: q.cc,
          replyTo: [],
          subject: q.subject,
          text: bodies.text,
          html: bodies.html,
          attachments: q.attachments.map(({ uuid: _uuid, ...rest }) => rest),
          raw: null,
          via: 'internal',
          sourceMessageId: q.messageId,
          date: q.at,
        },
        `internal:${q.messageId}`,
      );
    }

    const relayed = [...progress.relayed];
    const rejectedExternal = [...progress.rejected];
    const pending: { address: string; reason: string }[] = [];
    let outletError: string | null = null;
    let outlet: 'relay' | 'outbox' | null = relayed.length ? (config.smtpRelayUrl ? 'relay' : 'outbox') : null;
    if (external.length) {
      const attachments: OutboundAttachment[] = [];
      for (const a of q.attachments) {
        const content = await deps.blobs.get(a.blob);
        if (!content) throw new Error(`attachment blob ${a.blob} is missing`);
        attachments.push({ filename: a.filename, contentType: a.contentType, content });
      }
      try {
        const result = await mailer.send({
          // With their display names: nodemailer quotes or encodes them (RFC 5322 §3.4, RFC 2047).
          from: formatAddress(q.from),
          to: q.to.map(formatAddress),
          cc: q.cc.map(formatAddress),
          subject: q.subject,
          html: bodies.html ?? undefined,
          text: bodies.text ?? undefined,
          messageId: q.internetMessageId,
          date: q.at,
          inReplyTo: q.inReplyTo ?? undefined,
          references: q.references.length ? q.references : undefined,
          attachments,
          // Only the external recipients not settled yet go to the relay; local ones were delivered above.
          envelope: { from: q.from.address, to: external.map((a) => a.address) },
        });
        outlet = result.via;
        const refused = new Map(result.refused.map((r) => [r.address.toLowerCase(), r]));
        for (const a of external) {
          const r = refused.get(a.address);
          if (!r) relayed.push(a.address);
          else if (r.temporary) pending.push({ address: a.address, reason: r.reason });
          else rejectedExternal.push({ address: a.address, reason: r.reason });
        }
      } catch (err) {
        const reason = (err as Error).message;
        // Not the recipients' fault: the relay (or the disk under the outbox) may take them later.
        const temporary = err instanceof TemporaryMailError || isTemporaryFault(err);
        if (temporary) outletError = reason;
        for (const a of external) (temporary ? pending : rejectedExternal).push({ address: a.address, reason });
      }
    }
    const via: EmailSentData['via'] = outlet === null ? 'internal' : identities.length ? 'mixed' : outlet;
    return { internal, relayed, rejectedLocal, rejectedExternal, pending, outletError, via };
  }

  /**
   * Outcomes of attempts made but not recorded (the append failed: a full disk), by message
   * id. The job's next run (the reactor runs it again) records the outcome instead of making
   * the attempt again: a relay that took the mail is not handed it once per retry.
   */
  const unrecorded = new Map<string, EventData>();
  async function record(messageId: string, stream: string, event: EventData): Promise<void> {
    try {
      await events.append(stream, [event]);
      unrecorded.delete(messageId);
    } catch (err) {
      unrecorded.set(messageId, event);
      throw err;
    }
  }

  /** True once the message has an outcome; false when stopped first. */
  async function deliver(e: RecordedEvent, run: JobRun): Promise<boolean> {
    const q = e.data as EmailQueuedData;
    const stream = streamName(DELIVERY, q.messageId);
    while (!run.stopped) {
      const history = await events.readStream(stream);
      if (history.some((h) => h.type === EMAIL_SENT || h.type === EMAIL_FAILED)) {
        unrecorded.delete(q.messageId);
        return true;
      }
      const owed = unrecorded.get(q.messageId);
      if (owed) {
        await record(q.messageId, stream, owed); // idempotent by id, should the failed append have gone through
        continue;
      }
      const deferred = history.filter((h) => h.type === EMAIL_DEFERRED);
      const last = deferred[deferred.length - 1]?.data as EmailDeferredData | undefined;
      if (last) {
        // Never longer than the backoff itself: a retryAt recorded under a clock that was
        // ahead (set back since, or another process's) must not hold the mail for that long.
        const wait = Math.min(Date.parse(last.retryAt) - Date.now(), delayFor(last.attempt));
        if (wait > 0) await run.sleep(wait);
        if (run.stopped) return false;
      }
      const attemptNo = deferred.length + 1;
      const progress: DeliveryProgress = { relayed: last?.relayed ?? [], rejected: last?.rejected ?? [] };
      const defer = async (error: string, next: DeliveryProgress) => {
        const data: EmailDeferredData = {
          identityId: q.identityId,
          messageId: q.messageId,
          attempt: attemptNo,
          error,
          retryAt: new Date(Date.now() + delayFor(attemptNo)).toISOString(),
          relayed: next.relayed,
          rejected: next.rejected,
          at: nowIso(),
        };
        await record(q.messageId, stream, { id: derivedId(q.messageId, 'deferred', String(attemptNo)), type: EMAIL_DEFERRED, data });
        log.warn({ messageId: q.messageId, attempt: attemptNo, error }, 'email delivery deferred');
      };
      const fail = async (error: string, rejected: { address: string; reason: string }[]) => {
        const data: EmailFailedData = { identityId: q.identityId, messageId: q.messageId, attempts: attemptNo, error, rejected, at: nowIso() };
        await record(q.messageId, stream, { id: derivedId(q.messageId, 'failed'), type: EMAIL_FAILED, data });
      };
      // Only the attempt's own failures decide the mail's fate. Recording an outcome that
      // fails (the disk is full) throws out of the job, which runs again later and records
      // it then: a mail the relay took was recorded as failed when writing EmailSent failed.
      // Deleting an identity stops its mail that has not gone out yet (also mail queued by a
      // request that raced the deletion). Only "not found" says so: a read that fails (the
      // read store away) is no answer, and throws out of the job too.
      const deleted = await deps.mail.identityOf(q.identityId).then(
        () => false,
        (err) => (err instanceof ApiError && err.status === 404 ? true : Promise.reject(err)),
      );
      if (deleted) {
        await fail('The sending identity was deleted before the message was delivered.', []);
        return true;
      }
      let r: AttemptOutcome;
      try {
        r = await attempt(q, progress);
      } catch (err) {
        if (run.stopped) return false;
        // A full disk or an event store not answering (internal delivery, a blob read) is
        // temporary like a relay's 4xx: the mail waits (services/kernel/faults.ts).
        const temporary = err instanceof TemporaryMailError || isTemporaryFault(err);
        const error = (err as Error).message ?? String(err);
        if (temporary && attemptNo < maxAttempts) {
          await defer(error, progress);
          continue;
        }
        if (!temporary) log.error({ err, messageId: q.messageId }, 'email delivery failed');
        await fail(error, []);
        return true;
      }
      if (r.pending.length && attemptNo < maxAttempts) {
        await defer(r.outletError ?? listed(r.pending), { relayed: r.relayed, rejected: r.rejectedExternal });
        continue;
      }
      // Out of attempts, recipients still refused for now are refused.
      const rejected = [...r.rejectedLocal, ...r.rejectedExternal, ...r.pending];
      if (r.internal.length + r.relayed.length === 0) {
        await fail(r.outletError ?? listed(rejected), rejected);
        return true;
      }
      const data: EmailSentData = {
        identityId: q.identityId,
        messageId: q.messageId,
        internal: r.internal,
        external: r.relayed,
        via: r.via,
        rejected,
        attempts: attemptNo,
        at: nowIso(),
      };
      await record(q.messageId, stream, { id: derivedId(q.messageId, 'sent'), type: EMAIL_SENT, data });
      log.info({ messageId: q.messageId, via: data.via, attempts: attemptNo }, 'email delivered');
      return true;
    }
    return false;
  }

  return createReactor(
    { events, reads, feed, log },
    { checkpoint: CHECKPOINT, group: DELIVERY_GROUP, filter: { eventTypes: [EMAIL_QUEUED], streamPrefixes: [streamPrefix(OUTBOX)] }, concurrency, job: deliver },
  );
}
