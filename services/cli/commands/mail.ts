// `ais inbox list|show|watch|attachment`, `send`, `reply`, `reply-all`: email.
import { closeSync, openSync, readSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Attachment, EmailMessage } from '../../sdk/client.js';
import { client, type Command, type Ctx } from '../context.js';
import { CliError, EXIT, fileProblem, usage } from '../errors.js';
import { formatBytes, forTerminal, kv, progressReporter, show, table } from '../output.js';
import { watch } from '../watch.js';

/** The selected identity's inbox address (lower case), or null when it cannot be read. */
async function ownInbox(c: ReturnType<typeof client>): Promise<string | null> {
  try {
    const id = c.identity ?? (await c.whoami()).identity;
    return id ? (await c.identities.get(id)).inbox.toLowerCase() : null;
  } catch {
    return null;
  }
}

export const mailCommands: Record<string, Command> = {
  'inbox list': {
    usage: 'ais inbox list [--unread]',
    summary: 'Email threads of the identity, newest first.',
    options: { unread: { type: 'boolean' } },
    async run(ctx, _p, v) {
      const c = client(ctx, { identity: true });
      const list = await c.email.inbox({ unread: !!v.unread });
      if (ctx.json) return show(ctx, list, () => '');
      // Who the thread is with: its participants but the identity itself (the last sender is
      // the identity after it replied, which says nothing).
      const own = await ownInbox(c);
      const rows = list.map((t) => ({ ...t, with: (Array.isArray(t.participants) ? t.participants : []).filter((a) => typeof a === 'string' && a.toLowerCase() !== own).join(', ') || t.from_email }));
      show(ctx, list, () => table(rows as any, ['thread_id', 'with', 'subject', 'unread_count', 'last_message_at']));
    },
  },
  'inbox show': {
    usage: 'ais inbox show <thread_id>',
    summary: 'One thread with its messages (marks them read).',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais inbox show <thread_id>');
      const t = await client(ctx, { identity: true }).email.thread(p[0]);
      const message = (m: any) =>
        [
          `\n--- ${m.id}  ${m.created_dt ?? ''}`,
          `From: ${mailbox(m.from_name, m.from_email ?? m.from ?? '')}`,
          `To: ${[].concat(m.to ?? []).join(', ')}`,
          ...(m.cc?.length ? [`Cc: ${m.cc.join(', ')}`] : []),
          // What became of mail this identity sent (`send` answers before the mailer is done).
          ...(m.direction === 'outbound' ? [`Status: ${m.status}${m.status === 'failed' && m.error ? ` (${m.error})` : ''}`] : []),
          ...(m.attachments ?? []).map((a: any) => `Attachment: ${a.filename} (${a.content_type}, ${formatBytes(a.size)}) [${a.uuid}]`),
          '',
          m.text ?? m.preview ?? '',
        ].join('\n');
      show(ctx, t, () => [kv(t as any, ['thread_id', 'subject']), ...(t.messages ?? []).map(message)].join('\n'));
    },
  },
  'inbox watch': {
    usage: 'ais inbox watch [--count N] [--since ID]',
    summary: 'Print new mail as it arrives (event stream; resumes after disconnects).',
    options: { count: { type: 'string' }, since: { type: 'string' } },
    run: (ctx, _p, v) => watch(ctx, 'email', v, (d) => `${d.from_email}  ${d.subject}  ${d.preview} [message ${d.message_id ?? '?'}, thread ${d.thread_id}]`),
  },
  'inbox attachment': {
    usage: 'ais inbox attachment <attachment_uuid> --out FILE',
    summary: 'Save an attachment (its uuid is in `inbox show`) to FILE.',
    options: { out: { type: 'string' } },
    async run(ctx, p, v) {
      if (!p[0] || !v.out) throw usage(this.usage);
      const { bytes, contentType } = await client(ctx, { identity: true }).email.download(p[0]);
      try {
        writeFileSync(v.out, bytes, { flag: 'wx' }); // never over a file that exists
      } catch (err) {
        const exists = (err as NodeJS.ErrnoException).code === 'EEXIST' ? ' (it is never overwritten: choose another --out name, or remove the file first)' : '';
        throw new CliError('usage', `Cannot write ${v.out}: ${fileProblem(err)}${exists}.`, EXIT.usage);
      }
      show(ctx, { saved: path.resolve(v.out), bytes: bytes.byteLength, content_type: contentType }, () => `Saved ${formatBytes(bytes.byteLength)} (${contentType}) to ${v.out}.`);
    },
  },
  send: {
    usage: 'ais send --to ADDR --subject S (--body TEXT | --body-file F) [--cc A] [--bcc A] [--attach FILE...]',
    summary: 'Compose and send an email, with attachments.',
    options: { to: { type: 'string' }, subject: { type: 'string' }, body: { type: 'string' }, 'body-file': { type: 'string' }, cc: { type: 'string' }, bcc: { type: 'string' }, attach: { type: 'string', multiple: true } },
    async run(ctx, _p, v) {
      if (!v.to) throw usage('ais send --to ADDR --subject S --body TEXT');
      const c = client(ctx, { identity: true });
      const m = await c.email.sendWithAttachments({ to: v.to, subject: v.subject ?? '', body: bodyOf(v), cc: v.cc ?? '', bcc: v.bcc ?? '' }, files(v.attach), progressReporter(ctx));
      showSent(ctx, m);
    },
  },
  reply: replyCommand(false),
  'reply-all': replyCommand(true),
};

function replyCommand(all: boolean): Command {
  return {
    usage: `ais ${all ? 'reply-all' : 'reply'} <message_id> (--body TEXT | --body-file F) [--cc A] [--bcc A] [--attach FILE...]`,
    summary: all ? 'Reply to every recipient of a message.' : 'Reply to the sender of a message.',
    options: { body: { type: 'string' }, 'body-file': { type: 'string' }, cc: { type: 'string' }, bcc: { type: 'string' }, attach: { type: 'string', multiple: true } },
    async run(ctx, p, v) {
      if (!p[0]) throw usage(this.usage);
      const c = client(ctx, { identity: true });
      const m = await c.email.sendWithAttachments({ replyTo: p[0], all, body: bodyOf(v), ...(v.cc ? { cc: v.cc } : {}), ...(v.bcc ? { bcc: v.bcc } : {}) }, files(v.attach), progressReporter(ctx));
      showSent(ctx, m);
    },
  };
}

/** `Bob <bob@example.org>`, or the address alone when the sender gave no name. */
function mailbox(name: string | undefined | null, address: string): string {
  if (!name || name === address) return address;
  // A name with specials is quoted, as in a header (RFC 5322 §3.2.4).
  return `${/[()<>\[\]:;@\\,."]/.test(name) ? JSON.stringify(name) : name} <${address}>`;
}

/**
 * What `send` and the replies answered. Mail between inboxes of the service is delivered at
 * once (`sent`, or refused for an address without an inbox); mail to other domains is queued
 * for the service's mailer. A recipient refused already ends the command in `not_delivered`
 * (exit 1) after the message is shown with --json: a script must not take it for sent.
 */
function showSent(ctx: Ctx, m: EmailMessage): void {
  const rejected = m.rejected ?? [];
  const refused = m.status === 'failed' || rejected.length > 0;
  if (!refused || ctx.json) show(ctx, m, () => sentLine(m));
  if (!refused) return;
  const why = m.error ? ` (${m.error})` : '';
  const message = m.status === 'failed' ? `Not sent${why}: ${m.id}` : `Not delivered to ${rejected.join(', ')}${why}; the other recipients got it: ${m.id}`;
  throw new CliError('not_delivered', forTerminal(message), EXIT.error, { id: m.id, thread_id: m.thread_id, status: m.status, rejected, error: m.error ?? null });
}

function sentLine(m: EmailMessage): string {
  const domain = (a: string) => a.slice(a.lastIndexOf('@') + 1).toLowerCase();
  const own = domain(m.from_email ?? m.from ?? '');
  const all = [...(m.to ?? []), ...(m.cc ?? []), ...(m.bcc ?? [])];
  const internal = all.length > 0 && all.every((a) => domain(a) === own);
  if (m.status === 'sent') return internal ? `Delivered: ${m.id}` : `Sent: ${m.id}`;
  return `Queued for delivery: ${m.id} (the service's mailer sends it; \`ais inbox show ${m.thread_id}\` shows its status)`;
}

/** An attachment's most bytes (the presign's limit), and a body's (the API's for a request). */
const MAX_ATTACHMENT_BYTES = 25 * 1024 * 1024;
const MAX_BODY_BYTES = 1024 * 1024;

/**
 * A file's bytes, at most `max` of them: a pipe or `/dev/stdin` is read as given, and a file
 * without end (`/dev/zero`) is refused once past the limit instead of read forever.
 */
function readAtMost(file: string, max: number, what: string): Buffer {
  const chunks: Buffer[] = [];
  let total = 0;
  const fd = openSync(file, 'r');
  try {
    for (;;) {
      const chunk = Buffer.allocUnsafe(64 * 1024);
      const n = readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) return Buffer.concat(chunks, total);
      total += n;
      if (total > max) throw new CliError('usage', `The ${what} ${file} is larger than ${formatBytes(max)}, the most the service takes.`, EXIT.usage);
      chunks.push(chunk.subarray(0, n));
    }
  } finally {
    closeSync(fd);
  }
}

function bodyOf(v: Record<string, any>): string {
  // Both given: one of them was meant not to be sent (the file went, silently).
  if (v.body !== undefined && v['body-file'] !== undefined) throw new CliError('usage', 'Give --body TEXT or --body-file FILE, not both.', EXIT.usage);
  if (v['body-file']) {
    try {
      return readAtMost(v['body-file'], MAX_BODY_BYTES, 'body file').toString('utf8');
    } catch (err) {
      if (err instanceof CliError) throw err;
      throw new CliError('usage', `Cannot read the body file ${v['body-file']}: ${fileProblem(err)}.`, EXIT.usage);
    }
  }
  if (v.body === undefined) throw usage('--body TEXT or --body-file FILE is required');
  return v.body;
}

const TYPES: Record<string, string> = { '.txt': 'text/plain', '.pdf': 'application/pdf', '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.json': 'application/json', '.csv': 'text/csv', '.html': 'text/html', '.zip': 'application/zip' };
function files(paths: string[] | undefined): Attachment[] {
  return (paths ?? []).map((p) => {
    let data: Buffer;
    try {
      data = readAtMost(p, MAX_ATTACHMENT_BYTES, 'attachment');
    } catch (err) {
      if (err instanceof CliError) throw err;
      throw new CliError('usage', `Cannot read the attachment ${p}: ${fileProblem(err)}.`, EXIT.usage);
    }
    return { filename: path.basename(p), content_type: TYPES[path.extname(p).toLowerCase()] ?? 'application/octet-stream', data };
  });
}
