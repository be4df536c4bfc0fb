/** HTTP surface of mail (SPEC "Email"; DECISIONS "Mail, SMS, events"). Every route is identity-scoped except the signed upload URL. */
import type Router from '@koa/router';
import { pipeline, Transform } from 'node:stream';
import type { Context } from 'koa';
import type { HttpModule } from '../gateway/app.js';
import type { Authenticator } from '../gateway/auth.js';
import { body, created, markOnOpen, pageParams, queryFlag, queryParam, sendPage } from '../gateway/http.js';
import { validator } from '../gateway/validate.js';
import { ApiError, badRequest, notFound, type FieldErrors } from '../gateway/errors.js';
import { continueBody } from '../gateway/protocol.js';
import { isUuid } from '../kernel/ids.js';
import type { BlobStore } from '../../infra/ports/blob-store.js';
import type { Config } from '../../infra/config.js';
import type { Scalar } from '../../infra/ports/read-store.js';
import type { AttachmentDoc, MessageDoc, ThreadDoc } from '../../projections/mail/index.js';
import { LIST_BODY_LIMIT, type EmailAddress } from './events.js';
import { MAX_MESSAGE_BYTES, MAX_RECIPIENTS, type MailService, type MarkedMessage, type SendResult } from './service.js';
import { validIdempotencyKey } from './idempotency.js';
import { addressKey, isEmailAddress, parseAddressList, safeFilename } from './text.js';
import type { BodyBudget } from './body-budget.js';

/** Message bodies one answer carries at most (UTF-16 units or bytes, roughly): lists and the thread view. */
export const ANSWER_BODY_BUDGET = 16 * 1024 * 1024;
/** Blobs of older versions have no recorded size: counted as this much. */
const UNKNOWN_BLOB_WEIGHT = 4 * 1024 * 1024;
const sizeMismatch = (got: number | undefined, presigned: number) =>
  new ApiError(400, 'size_mismatch', got === undefined ? `The upload has more than the ${presigned} bytes presigned.` : `The upload has ${got} bytes; ${presigned} were presigned.`, undefined, { Connection: 'close' });

/** The most messages a thread's answer holds (its newest). */
export const THREAD_MESSAGES = 5000;

interface ComposeBody {
  to: string;
  subject: string;
  body: string;
  cc: string;
  bcc: string;
  attachment_uuids: string[];
}
interface ReplyBody {
  body: string;
  cc: string;
  bcc: string;
  attachment_uuids: string[];
}

const v = {
  compose: validator<ComposeBody>('mail.json#ComposeRequest'),
  reply: validator<ReplyBody>('mail.json#ReplyRequest'),
  patch: validator<{ read: boolean }>('mail.json#MessagePatch'),
  presign: validator<{ filename: string; content_type: string; size: number }>('mail.json#PresignRequest'),
};

const MEDIA_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/;
const baseType = (value: string) => value.split(';')[0].trim().toLowerCase();

/**
 * Lists may come as arrays; the schema speaks the spec's comma-separated strings. Rewrites
 * the request's own parsed body in place (it is nobody else's), so a JSON body stays
 * validated with its JSON types.
 */
function normaliseLists(out: Record<string, unknown>): Record<string, unknown> {
  for (const field of ['to', 'cc', 'bcc']) {
    if (Array.isArray(out[field]) && (out[field] as unknown[]).every((x) => typeof x === 'string')) out[field] = (out[field] as string[]).join(', ');
    if (out[field] === null && field !== 'to') delete out[field]; // optional ones: null is absent; `to` null is refused as null
  }
  if (typeof out.attachment_uuids === 'string') {
    out.attachment_uuids = out.attachment_uuids
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  }
  if (out.attachment_uuids === null) delete out.attachment_uuids;
  return out;
}

/**
 * Entries read of one address field: a bound on the work (each entry is checked against the
 * field's text), with room for duplicates; the message itself takes {@link MAX_RECIPIENTS}.
 */
const ADDRESS_ENTRIES_READ = 3 * MAX_RECIPIENTS;

function recipients(fields: Record<string, string | undefined>, required: string[] = []): Record<string, EmailAddress[]> {
  const errors: FieldErrors = {};
  const out: Record<string, EmailAddress[]> = {};
  for (const [field, value] of Object.entries(fields)) {
    const { addresses, invalid, tooMany } = parseAddressList(value ?? '', ADDRESS_ENTRIES_READ);
    if (tooMany) errors[field] = [`At most ${MAX_RECIPIENTS} recipients per message.`];
    else if (invalid.length) errors[field] = invalid.map((a) => `Enter a valid email address: "${a}".`);
    else if (required.includes(field) && addresses.length === 0) errors[field] = ['This field is required.'];
    out[field] = addresses;
  }
  if (Object.keys(errors).length) throw badRequest(errors);
  return out;
}

const without = (list: EmailAddress[], exclude: string[]) => {
  const keys = new Set(exclude.map(addressKey));
  const out: EmailAddress[] = [];
  for (const a of list) {
    const k = addressKey(a.address);
    if (keys.has(k)) continue;
    keys.add(k);
    out.push(a);
  }
  return out;
};

export function mailRoutes(deps: { mail: MailService; blobs: BlobStore; config: Config; budget: BodyBudget; auth: () => Authenticator }): HttpModule {
  const { mail, blobs, config } = deps;
  const { threads, messages, attachments } = mail.collections;
  /** Attachments whose upload is being read in this process. */
  const uploading = new Set<string>();

  /** PUBLIC_URL, or the request's own origin when PUBLIC_URL names an ephemeral port 0 (tests). */
  const baseUrl = (ctx: Context) => (/:0$/.test(config.publicUrl) ? `${ctx.protocol}://${ctx.host}` : config.publicUrl);
  const identityOf = async (ctx: Context) => (await deps.auth().identity(ctx)).identityId;

  // download_url names the identity too, so it works as given with a management key or a user token.
  const attachmentOut = (base: string, identityId: string) => (a: { uuid: string; filename: string; contentType: string; size: number; contentId?: string | null; inline?: boolean }) => ({
    uuid: a.uuid,
    filename: a.filename,
    content_type: a.contentType,
    size: a.size,
    inline: a.inline ?? false,
    content_id: a.contentId ?? null,
    download_url: `${base}/api/email-attachments/${a.uuid}/?identity=${identityId}`,
  });

  /** What a body weighs in an answer: inline ones by length, blobs by their recorded size. */
  const bodyWeight = (inline: string | null, blob: string | null, bytes: number | null | undefined) => (blob ? (bytes ?? UNKNOWN_BLOB_WEIGHT) : (inline?.length ?? 0));
  /**
   * Whether a body fits a list (LIST_BODY_LIMIT): a blob by its recorded size (none recorded:
   * an older version's blob, over the limit), an inline body by its own (events of older
   * versions kept bodies up to 16 MiB inline).
   */
  const fitsList = (inline: string | null, blob: string | null, bytes: number | null | undefined) =>
    blob ? bytes != null && bytes <= LIST_BODY_LIMIT : inline === null || inline.length <= LIST_BODY_LIMIT / 3 || Buffer.byteLength(inline) <= LIST_BODY_LIMIT;
  /** One message with its bodies (loaded by mail.bodiesOf). */
  const messageOut = (base: string, bodies: { text: string | null; html: string | null }) => (m: MessageDoc) => messageFields(base, m, bodies);
  /** `bodies`: loaded (thread, message), undefined (the document's inline ones), null (left out of a list). */
  const messageFields = (base: string, m: MessageDoc, bodies: { text: string | null; html: string | null } | null | undefined) => ({
    uuid: m.id,
    id: m.id,
    thread_id: m.threadId,
    direction: m.direction,
    status: m.status,
    from: m.from.address,
    from_email: m.from.address,
    from_name: m.from.name,
    to: m.to.map((a) => a.address),
    cc: m.cc.map((a) => a.address),
    bcc: m.bcc.map((a) => a.address),
    reply_to: m.replyTo.map((a) => a.address),
    subject: m.subject,
    preview: m.preview,
    text: bodies ? bodies.text : bodies === null ? null : m.text,
    html: bodies ? bodies.html : bodies === null ? null : m.html,
    // Bodies over LIST_BODY_LIMIT are kept out of the message list (null here): GET the message, or its thread.
    truncated: bodies === null || (!bodies && Boolean(m.textBlob || m.htmlBlob)),
    attachments: m.attachments.map(attachmentOut(base, m.identityId)),
    read: m.read,
    message_id: m.internetMessageId,
    in_reply_to: m.inReplyTo,
    references: m.references,
    error: m.error,
    // Refused by the relay, and bounced after it took them (a report arriving later).
    rejected: [...new Set([...m.rejected, ...(m.bounces ?? [])].map((r) => r.address))],
    sent_at: m.sentAt,
    created_dt: m.createdAt,
  });

  const threadOut = (t: ThreadDoc) => ({
    thread_id: t.id,
    uuid: t.id,
    subject: t.subject,
    preview: t.preview,
    participants: t.participants,
    from_email: t.lastFrom.address,
    from_name: t.lastFrom.name,
    message_count: t.messageCount,
    unread_count: t.unreadCount,
    unread: t.unread,
    last_message_at: t.lastMessageAt,
    created_dt: t.createdAt,
  });

  /**
   * Messages as one answer shows them. Their bodies are included while they fit
   * ANSWER_BODY_BUDGET, in `order` (a thread: newest first); the others are left out
   * (`truncated`: GET the message). In a list (`listLimit`) a body over LIST_BODY_LIMIT is
   * always left out. Without the budget a long thread of large mails made an answer too
   * large to serialise (a 500 after minutes of work and a gigabyte of memory).
   */
  async function withBodies(base: string, list: MessageDoc[], opts: { listLimit: boolean; newestFirst: boolean }) {
    let left = ANSWER_BODY_BUDGET;
    const included = new Array<boolean>(list.length).fill(false);
    const indexes = list.map((_, i) => i);
    for (const i of opts.newestFirst ? indexes.reverse() : indexes) {
      const m = list[i];
      const weight = bodyWeight(m.text, m.textBlob, m.textBytes) + bodyWeight(m.html, m.htmlBlob, m.htmlBytes);
      const overList = opts.listLimit && !(fitsList(m.text, m.textBlob, m.textBytes) && fitsList(m.html, m.htmlBlob, m.htmlBytes));
      if (overList || weight > left) continue;
      left -= weight;
      included[i] = true;
    }
    return Promise.all(
      list.map(async (m, i) => messageFields(base, m, !included[i] ? null : m.textBlob || m.htmlBlob ? await mail.bodiesOf(m) : undefined)),
    );
  }

  async function ownMessage(identityId: string, id: string): Promise<MessageDoc> {
    const m = isUuid(id) ? await messages().get(id.toLowerCase()) : null;
    if (!m || m.identityId !== identityId) throw notFound('Message not found.');
    return m;
  }

  /**
   * A thread's newest {@link THREAD_MESSAGES} messages, oldest first: the ones a reader is
   * after. Older ones of a longer thread are listed by GET /api/email-messages/?thread_id=.
   */
  async function threadMessages(threadId: string): Promise<MessageDoc[]> {
    const newest: MessageDoc[] = [];
    let cursor: string | null = null;
    do {
      const page = await messages().find({ where: { threadId }, orderBy: { field: 'seq', direction: 'desc' }, limit: 200, cursor });
      newest.push(...page.items);
      cursor = page.next;
    } while (cursor && newest.length < THREAD_MESSAGES);
    return newest.slice(0, THREAD_MESSAGES).reverse();
  }

  /**
   * Marks every unread message of a thread read, however many: a page at a time, marked by the
   * thousand (a thread of a sender nobody reads can hold hundreds of thousands; held at once,
   * their documents took the process's memory).
   */
  async function markThreadRead(identityId: string, threadId: string): Promise<void> {
    let batch: MarkedMessage[] = [];
    let cursor: string | null = null;
    do {
      const page = await messages().find({ where: { threadId, read: false }, orderBy: { field: 'seq', direction: 'desc' }, limit: 200, cursor });
      for (const m of page.items) batch.push({ id: m.id, threadId: m.threadId, identityId: m.identityId, direction: m.direction, read: m.read });
      cursor = page.next;
      if (batch.length >= 1000 || !cursor) {
        await mail.markRead(identityId, batch, true);
        batch = [];
      }
    } while (cursor);
  }

  /** The `Idempotency-Key` header of a send, if given (./idempotency.ts). */
  function idempotencyKeyOf(ctx: Context): string | undefined {
    const key = ctx.get('idempotency-key');
    if (key === '') return undefined;
    if (!validIdempotencyKey(key)) throw new ApiError(400, 'invalid_idempotency_key', 'Idempotency-Key takes 1 to 255 visible ASCII characters (a UUID, for example).');
    return key;
  }

  /** A send's 201: the message (again, for a repeated Idempotency-Key, said by `Idempotent-Replayed`). */
  async function answerSent(ctx: Context, { message, replayed }: SendResult): Promise<void> {
    if (replayed) ctx.set('Idempotent-Replayed', 'true');
    created(ctx, messageOut(baseUrl(ctx), await mail.bodiesOf(message))(message), `/api/email-messages/${message.id}/`);
  }

  async function reply(ctx: Context, all: boolean): Promise<void> {
    const identityId = await identityOf(ctx);
    const original = await ownMessage(identityId, ctx.params.id);
    const b = v.reply(normaliseLists(await body(ctx)));
    const extra = recipients({ cc: b.cc, bcc: b.bcc });
    const identity = await mail.identityOf(identityId);
    const own = identity.inbox;
    // RFC 5322 §3.6.3: answer Reply-To when present, else From; replying to our own mail goes to its recipients.
    // Addresses as kept now (older versions kept internationalised domains in Unicode).
    const keyed = (list: EmailAddress[]) => list.map((a) => ({ ...a, address: addressKey(a.address) }));
    const target = keyed(original.direction === 'inbound' ? (original.replyTo.length ? original.replyTo : [original.from]) : original.to);
    let to = without(all ? [...target, ...(original.direction === 'inbound' ? keyed(original.to) : [])] : target, all ? [own] : []);
    if (to.length === 0) to = without(target.length ? target : [original.from], []);
    // A sender header without a usable address (`From: bad <not an address>`, no From at all),
    // or one outbound mail cannot reach (a UTF-8 local part needs SMTPUTF8, RFC 6531).
    const unusable = to.filter((a) => !isEmailAddress(a.address));
    to = to.filter((a) => isEmailAddress(a.address));
    if (to.length === 0) {
      const utf8 = unusable.find((a) => /[^\x00-\x7f]/.test(a.address));
      throw badRequest({
        non_field_errors: [utf8 ? `${utf8.address} cannot be answered: outbound mail does not support addresses with non-ASCII local parts (SMTPUTF8).` : 'The original message has no address to reply to.'],
      });
    }
    const cc = all ? without([...keyed(original.cc), ...extra.cc], [own, ...to.map((a) => a.address)]) : without(extra.cc, to.map((a) => a.address));
    const bcc = without(extra.bcc, [...to, ...cc].map((a) => a.address));
    await answerSent(
      ctx,
      await mail.send(identityId, {
        to,
        cc,
        bcc,
        subject: original.subject,
        html: b.body,
        attachmentIds: b.attachment_uuids,
        kind: all ? 'reply_all' : 'reply',
        original,
        idempotencyKey: idempotencyKeyOf(ctx),
      }),
    );
  }

  return {
    routes(r: Router) {
      r.get('/api/email-inbox/', async (ctx) => {
        const identityId = await identityOf(ctx);
        const { limit, cursor } = pageParams(ctx);
        const where: Record<string, Scalar> = queryFlag(ctx, 'unread') ? { identityId, unread: true } : { identityId };
        const page = await threads().find({ where, orderBy: { field: 'lastSeq', direction: 'desc' }, limit, cursor });
        sendPage(ctx, page, threadOut, config.publicUrl);
      });

      r.get('/api/email-inbox/:thread_id/', async (ctx) => {
        const identityId = await identityOf(ctx);
        const id = ctx.params.thread_id;
        let thread = isUuid(id) ? await threads().get(id.toLowerCase()) : null;
        if (!thread || thread.identityId !== identityId) throw notFound('Thread not found.');
        let list = await threadMessages(thread.id);
        // Opening a thread marks its messages read (DECISIONS "Mail, SMS, events"), those older than the answer holds too.
        if (thread.unreadCount > 0 && (await markOnOpen(ctx, () => markThreadRead(identityId, thread!.id)))) {
          thread = (await threads().get(thread.id)) ?? thread;
          list = await threadMessages(thread.id);
        }
        ctx.body = { ...threadOut(thread), messages: await withBodies(baseUrl(ctx), list, { listLimit: false, newestFirst: true }) };
      });

      r.get('/api/email-messages/', async (ctx) => {
        const identityId = await identityOf(ctx);
        const { limit, cursor } = pageParams(ctx);
        const where: Record<string, Scalar> = queryFlag(ctx, 'unread') ? { identityId, read: false } : { identityId };
        // One thread's messages, as ?conversation_id= filters SMS messages.
        const thread = queryParam(ctx, 'thread_id');
        if (thread) {
          if (!isUuid(thread)) throw badRequest({ thread_id: ['Must be a valid UUID.'] });
          where.threadId = thread.toLowerCase();
        }
        const page = await messages().find({ where, orderBy: { field: 'seq', direction: 'desc' }, limit, cursor });
        const items = await withBodies(baseUrl(ctx), page.items, { listLimit: true, newestFirst: false });
        sendPage(ctx, { ...page, items }, (item) => item, config.publicUrl);
      });

      r.post('/api/email-messages/compose/', async (ctx) => {
        const identityId = await identityOf(ctx);
        const b = v.compose(normaliseLists(await body(ctx)));
        // A header holds one line: a line break would be folded away on the wire and kept in the copy here.
        if (/[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]/.test(b.subject)) throw badRequest({ subject: ['The subject cannot contain line breaks or other control characters.'] });
        const list = recipients({ to: b.to, cc: b.cc, bcc: b.bcc }, ['to']);
        await answerSent(
          ctx,
          await mail.send(identityId, {
            to: list.to,
            cc: without(list.cc, list.to.map((a) => a.address)),
            bcc: without(list.bcc, [...list.to, ...list.cc].map((a) => a.address)),
            subject: b.subject,
            html: b.body,
            attachmentIds: b.attachment_uuids,
            kind: 'compose',
            idempotencyKey: idempotencyKeyOf(ctx),
          }),
        );
      });

      r.get('/api/email-messages/:id/', async (ctx) => {
        const identityId = await identityOf(ctx);
        let m = await ownMessage(identityId, ctx.params.id);
        if (!m.read && (await markOnOpen(ctx, () => mail.markRead(identityId, [m], true)))) m = (await messages().get(m.id)) ?? m;
        ctx.body = messageOut(baseUrl(ctx), await mail.bodiesOf(m))(m);
      });

      r.patch('/api/email-messages/:id/', async (ctx) => {
        const identityId = await identityOf(ctx);
        let m = await ownMessage(identityId, ctx.params.id);
        const b = v.patch(await body(ctx));
        await mail.markRead(identityId, [m], b.read);
        m = (await messages().get(m.id)) ?? m;
        ctx.body = messageOut(baseUrl(ctx), await mail.bodiesOf(m))(m);
      });

      r.post('/api/email-messages/:id/reply/', (ctx) => reply(ctx, false));
      r.post('/api/email-messages/:id/reply-all/', (ctx) => reply(ctx, true));

      r.post('/api/email-attachments/presign/', async (ctx) => {
        const identityId = await identityOf(ctx);
        const b = v.presign(await body(ctx));
        // Parameters (`; charset=utf-8`) are allowed and dropped: the upload is matched on the type.
        const contentType = baseType(b.content_type);
        if (!MEDIA_TYPE.test(contentType)) throw badRequest({ content_type: ['Enter a valid media type, e.g. "application/pdf".'] });
        created(ctx, await mail.presign(identityId, { filename: safeFilename(b.filename), content_type: contentType, size: b.size }, baseUrl(ctx)));
      });

      // The signed URL is the credential (no Authorization), like an S3 presigned PUT.
      r.put('/api/email-attachments/:uuid/upload/', async (ctx) => {
        const id = String(ctx.params.uuid).toLowerCase();
        if (!isUuid(id)) throw notFound('Attachment not found.');
        mail.checkUploadSignature(id, queryParam(ctx, 'expires'), queryParam(ctx, 'signature'));
        const { presigned, revision, uploaded } = await mail.pendingUpload(id);
        if (uploaded) throw new ApiError(409, 'already_uploaded', 'This attachment was already uploaded.');
        const type = baseType(ctx.get('content-type'));
        if (type !== presigned.contentType) {
          throw new ApiError(400, 'content_type_mismatch', `Content-Type must be "${presigned.contentType}", as presigned.`);
        }
        // Nothing keeps an encoding with the blob: gzip bytes would reach recipients as the file.
        const encoding = (ctx.get('content-encoding') || 'identity').trim().toLowerCase();
        if (encoding !== 'identity') throw new ApiError(415, 'unsupported_media_type', `Unsupported Content-Encoding "${encoding}": upload the file's own bytes.`);
        const tooLarge = () => new ApiError(413, 'payload_too_large', 'Attachments are limited to 25 MiB.', undefined, { Connection: 'close' });
        const declared = Number(ctx.get('content-length') || NaN);
        if (declared > MAX_MESSAGE_BYTES) throw tooLarge();
        if (Number.isFinite(declared) && declared !== presigned.size) throw sizeMismatch(declared, presigned.size);
        // One upload of an attachment at a time: a second would read (and hold) the same bytes again.
        if (uploading.has(id)) throw new ApiError(409, 'upload_in_progress', 'This attachment is being uploaded by another request.');
        uploading.add(id);
        const holder = `upload:${presigned.identityId}`;
        let held = 0;
        try {
          continueBody(ctx.req);
          const chunks: Buffer[] = [];
          // Read no further than the presigned size, taking the body budget as bytes arrive.
          // By events, not `for await`: leaving that loop early destroys the request and its
          // socket, and the client, still sending, got a reset instead of the refusal (the
          // gateway reads a refused body's rest before answering: app.ts).
          await new Promise<void>((resolve, reject) => {
            const req = ctx.req;
            const finish = (error?: ApiError) => {
              req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
              if (error) {
                req.pause();
                reject(error);
              } else resolve();
            };
            const onData = (chunk: Buffer) => {
              if (held + chunk.length > presigned.size) return finish(sizeMismatch(undefined, presigned.size));
              if (!deps.budget.take(chunk.length, holder)) {
                return finish(new ApiError(503, 'service_unavailable', 'Too many uploads are in progress; try again shortly.', undefined, { 'Retry-After': '5', Connection: 'close' }));
              }
              held += chunk.length;
              chunks.push(chunk);
            };
            const onEnd = () => finish();
            const onError = () => finish(new ApiError(400, 'parse_error', 'Could not read the upload body.'));
            const onClose = () => (req.complete ? finish() : onError());
            req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
          });
          if (held !== presigned.size) throw sizeMismatch(held, presigned.size);
          await mail.completeUpload(id, presigned.identityId, Buffer.concat(chunks), revision);
          ctx.body = { uuid: id, filename: presigned.filename, content_type: presigned.contentType, size: held, status: 'uploaded' };
        } finally {
          deps.budget.give(held, holder);
          uploading.delete(id);
        }
      });

      r.get('/api/email-attachments/:uuid/', async (ctx) => {
        const identityId = await identityOf(ctx);
        const id = String(ctx.params.uuid).toLowerCase();
        const doc: AttachmentDoc | null = isUuid(id) ? await attachments().get(id) : null;
        if (!doc || doc.identityId !== identityId || !doc.blob) throw notFound('Attachment not found.');
        // The ETag is the content's SHA-256 (its bytes never change): a client that has them
        // (If-None-Match) gets 304 without the body (RFC 9110 §13.1.2; evaluated whatever the
        // request's Cache-Control says, which is for caches, not for the origin).
        const etag = `"${doc.blob}"`;
        ctx.set('ETag', etag);
        const known = ctx.get('if-none-match');
        if (known && (known.trim() === '*' || known.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag))) {
          ctx.status = 304;
          return;
        }
        const type = MEDIA_TYPE.test(doc.contentType) ? doc.contentType : 'application/octet-stream';
        const name = safeFilename(doc.filename);
        ctx.set('Accept-Ranges', 'bytes');
        ctx.set('Content-Disposition', `attachment; filename="${name.replace(/[^\x20-\x7e]/g, '_')}"; filename*=UTF-8''${encodeURIComponent(name)}`);
        // A download cut off resumes where it stopped (RFC 9110 §14: one range; If-Range with
        // the ETag; GET only, a HEAD ignores Range). The part is streamed out of the whole
        // blob's read, which goes on to the end: its hash is checked as for a whole download,
        // and the answer ends only then (a damaged blob breaks it off), in constant memory.
        const range = ctx.method === 'GET' ? rangeOf(ctx.get('range'), ctx.get('if-range'), etag) : null;
        const blob = await blobs.open(doc.blob);
        if (!blob) throw notFound('Attachment content is missing.');
        ctx.set('Content-Type', type);
        if (range && blob.size > 0) {
          const part = satisfiable(range, blob.size);
          if (!part) {
            blob.stream.destroy();
            ctx.remove('Content-Disposition'); // an error, not the file
            throw new ApiError(416, 'range_not_satisfiable', `The range is outside the attachment's ${blob.size} bytes.`, undefined, { 'Content-Range': `bytes */${blob.size}` });
          }
          ctx.status = 206;
          ctx.set('Content-Range', `bytes ${part.start}-${part.end}/${blob.size}`);
          ctx.set('Content-Length', String(part.end - part.start + 1));
          const cut = slice(part.start, part.end);
          pipeline(blob.stream, cut, () => undefined); // an error of the read reaches `cut`, and so the answer
          ctx.body = cut;
          return;
        }
        ctx.set('Content-Length', String(blob.size));
        ctx.body = blob.stream;
      });
    },
  };
}

const RANGE_HEADER_MAX = 100;

/**
 * The one byte range a `Range` header asks for (`bytes=a-b`, `bytes=a-`, `bytes=-n`), or null
 * to answer the whole body: no header, another unit, several ranges, an invalid one, or an
 * `If-Range` that names other bytes (RFC 9110 §13.1.5: then the whole, current representation).
 */
export function rangeOf(header: string, ifRange: string, etag: string): { start: number | null; end: number | null } | null {
  // One range is a few dozen characters: a longer header is no range we serve, and is never
  // matched (a regular expression is no place for a client's 16 KB).
  if (header.length > RANGE_HEADER_MAX) return null;
  // Whitespace only where one split of it exists (`\s*(\d*)\s*` backtracks over a run of it).
  const m = /^\s*bytes\s*=\s*(?:(\d+)\s*)?-\s*(?:(\d+)\s*)?$/i.exec(header);
  if (!m || (m[1] === undefined && m[2] === undefined)) return null;
  if (ifRange && ifRange.trim() !== etag) return null;
  const r = { start: m[1] === undefined ? null : Number(m[1]), end: m[2] === undefined ? null : Number(m[2]) };
  // `bytes=5-3` is no valid range: ignored (the whole body), as RFC 7233 asked.
  return r.start !== null && r.end !== null && r.end < r.start ? null : r;
}

/** The bytes `start`..`end` of what passes through (the rest is read and dropped). */
function slice(start: number, end: number): Transform {
  let at = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      const from = Math.max(start - at, 0);
      const to = Math.min(end + 1 - at, chunk.length);
      at += chunk.length;
      done(null, to > from ? chunk.subarray(from, to) : undefined);
    },
  });
}

/** The range's first and last byte within `size`, or null when it cannot be satisfied (416). */
export function satisfiable(r: { start: number | null; end: number | null }, size: number): { start: number; end: number } | null {
  if (r.start === null) {
    // `-n`: the last n bytes.
    const n = Math.min(r.end ?? 0, size);
    return n > 0 ? { start: size - n, end: size - 1 } : null;
  }
  if (r.start >= size) return null;
  return { start: r.start, end: Math.min(r.end ?? size - 1, size - 1) };
}
