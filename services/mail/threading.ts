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
  /**
   * The Message-ID of the message a delivery report returns (services/mail/bounces.ts): looked
   * up like a reference (the report joins that thread), never a reason to fall back to the
   * subject (reports about unknown messages from one server are not one conversation).
   */
  returns?: string | null;
  subject: string;
  /** Every address of the message (from, to, cc). */
  participants: string[];
  at: string;
}

/** The Message-IDs that may name the thread, in the order they are tried. */
function candidateIds(m: Pick<ThreadInput, 'internetMessageId' | 'inReplyTo' | 'references' | 'returns'>): string[] {
  const candidates = new Set<string>();
  if (m.internetMessageId) candidates.add(m.internetMessageId);
  if (m.returns) candidates.add(m.returns);
  if (m.inReplyTo) candidates.add(m.inReplyTo);
  for (let i = m.references.length - 1; i >= 0; i--) candidates.add(m.references[i]);
  return [...candidates];
}

/** Whether rule 3 (subject and participants) is consulted when no Message-ID matched. */
function usesSubjectFallback(m: Pick<ThreadInput, 'inReplyTo' | 'references' | 'subject'>): boolean {
  return normaliseSubject(m.subject) !== '' && (hasReplyPrefix(m.subject) || m.inReplyTo !== null || m.references.length > 0);
}

/**
 * Whether the thread of `m` may depend on earlier messages of the same identity with these
 * Message-IDs that the lookup cannot see yet (recorded, not yet in the read models): when
 * `m` names one of them, or when it may fall back to the subject (any earlier message can
 * move a thread's participants or last message time). Every other message can be decided
 * without waiting for them.
 */
export function mayDependOn(m: ThreadInput, earlierMessageIds: (string | null)[]): boolean {
  if (earlierMessageIds.length === 0) return false;
  if (usesSubjectFallback(m)) return true;
  const candidates = new Set(candidateIds(m));
  return earlierMessageIds.some((id) => id !== null && candidates.has(id));
}

export async function decideThread(lookup: ThreadLookup, m: ThreadInput, newThreadId: () => string): Promise<string> {
  for (const id of candidateIds(m)) {
    const thread = await lookup.threadOfMessageId(m.identityId, id);
    if (thread) return thread;
  }
  if (usesSubjectFallback(m)) {
    const latest = await lookup.latestThreadBySubject(m.identityId, normaliseSubject(m.subject), participantsKey(m.participants, m.ownInbox));
    if (latest && Date.parse(m.at) - Date.parse(latest.lastMessageAt) <= THREAD_FALLBACK_WINDOW_MS) return latest.threadId;
  }
  return newThreadId();
}
