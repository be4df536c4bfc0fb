/**
 * Threads per identity (RFC 5322 §3.6.4), decided when a message is written, because the
 * thread id goes into the event:
 * 1. the message's own Message-ID is already known for this identity (a redelivery): its thread;
 * 2. In-Reply-To, then References from the newest (last) to the oldest, matched against the
 *    Message-IDs of the identity's messages: the thread of the first match;
 * 3. fallback, only for messages that look like replies (a Re:/Fwd: prefix, or reply
 *    headers naming messages we never saw): the latest thread with the same normalised
 *    subject and the same participants (own inbox left out) whose last message is at most
 *    {@link THREAD_FALLBACK_WINDOW_MS} older;
 * 4. otherwise a new thread.
 */
import { hasReplyPrefix, normaliseSubject, participantsKey } from './text.js';

export const THREAD_FALLBACK_WINDOW_MS = 7 * 24 * 3600 * 1000;

export interface ThreadLookup {
  /** Thread of this identity's message with that Message-ID, or null. */
  threadOfMessageId(identityId: string, internetMessageId: string): Promise<string | null>;
  /** The identity's most recent thread with that subject key and participants key. */
  latestThreadBySubject(identityId: string, subjectKey: string, participantsKey: string): Promise<{ threadId: string; lastMessageAt: string } | null>;
}

export interface ThreadInput {
  identityId: string;
  ownInbox: string;
  internetMessageId: string | null;
  inReplyTo: string | null;
  references: string[];
  subject: string;
  /** Every address of the message (from, to, cc). */
  participants: string[];
  at: string;
}

export async function decideThread(lookup: ThreadLookup, m: ThreadInput, newThreadId: () => string): Promise<string> {
  const candidates: string[] = [];
  if (m.internetMessageId) candidates.push(m.internetMessageId);
  if (m.inReplyTo) candidates.push(m.inReplyTo);
  for (const ref of [...m.references].reverse()) if (!candidates.includes(ref)) candidates.push(ref);
  for (const id of candidates) {
    const thread = await lookup.threadOfMessageId(m.identityId, id);
    if (thread) return thread;
  }
  const subjectKey = normaliseSubject(m.subject);
  const looksLikeReply = hasReplyPrefix(m.subject) || m.inReplyTo !== null || m.references.length > 0;
  if (subjectKey && looksLikeReply) {
    const latest = await lookup.latestThreadBySubject(m.identityId, subjectKey, participantsKey(m.participants, m.ownInbox));
    if (latest && Date.parse(m.at) - Date.parse(latest.lastMessageAt) <= THREAD_FALLBACK_WINDOW_MS) return latest.threadId;
  }
  return newThreadId();
}
