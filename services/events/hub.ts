/**
 * In-process fan-out of the event log to the open streams. ONE catch-up subscription to
 * the store (from its head when the hub starts, filtered to the few event types that
 * matter) feeds every stream of this process: a stream costs a map entry, never a query
 * per event or a poll.
 *
 * Given a feed (cluster mode: Kafka), live events come through it in a consumer group of
 * this process alone ({@link hubGroup}, starting at the log's end), so every gateway sees
 * every event. Replays for Last-Event-ID still read the event store (services/events/index.ts).
 */
import os from 'node:os';
import { randomUUID } from 'node:crypto';
import { streamCategory, streamId, type EventStore, type RecordedEvent, type Subscription } from '../../infra/ports/event-store.js';
import type { EventFeed } from '../../infra/ports/event-feed.js';
import type { ReadModelProgress } from '../kernel/platform.js';
import { SESSION, SessionRevoked, USER, UserPasswordChanged, UserSessionsRevoked } from '../accounts/events.js';
import { IdentityDeleted } from '../identities/events.js';
import { ApiKeyRevoked } from '../keys/events.js';
import { EMAIL_RECEIVED, MAILBOX } from '../mail/events.js';
import { SMSBOX, SmsReceived } from '../sms/events.js';
import { frameOf, type Frame } from './frames.js';

/** A consumer group of this process alone: each gateway must see every event. */
export function hubGroup(): string {
  return `ais-sse-${os.hostname().replace(/[^A-Za-z0-9._-]/g, '_')}-${process.pid}-${randomUUID().slice(0, 8)}`;
}

/** Inbound messages, by the stream category that names their identity. */
export const MESSAGE_TYPES = [EMAIL_RECEIVED, SmsReceived];
/** Events that end streams: the credential or the identity went away. */
const CLOSING_TYPES = [ApiKeyRevoked, IdentityDeleted, SessionRevoked, UserSessionsRevoked, UserPasswordChanged];

/** The identity an inbound-message event belongs to: the id part of its stream. */
export function identityOfMessage(e: RecordedEvent): string | null {
  const category = streamCategory(e.stream);
  if ((e.type === EMAIL_RECEIVED && category === MAILBOX) || (e.type === SmsReceived && category === SMSBOX)) return streamId(e.stream);
  return null;
}

/** The id of a stream of `category` (an account's pk, a session's uuid), or '' for another. */
const idIn = (stream: string, category: string) => (streamCategory(stream) === category ? streamId(stream) : '');

export interface Listener {
  identityId: string;
  /** The API key the stream was opened with, if any: its revocation ends the stream. */
  keyId?: string;
  /** The session of the access token (or cookie) it was opened with, and its account: the end of the session (sign-out, password change) ends the stream. */
  session?: { id: string; userPk: number };
  /** The account whose password authorized it directly (HTTP basic): a password change ends the stream. */
  passwordOf?: number;
  /** An inbound message of its identity: the frame, made once for every stream. */
  deliver(frame: Frame): void;
  /** The credential or the identity went away (or, with `error`, its delivery failed). */
  revoke(reason: string, error?: unknown): void;
}

/**
 * Remembers what was revoked since the hub started, so a stream authorized from a read
 * model that had not seen a revocation yet is still ended when it registers after the
 * hub saw it. Bounded: revocations are rare, and older ones are already in the read models.
 */
const REMEMBERED = 50_000;

/**
 * How long a message event waits for the read models before it goes out anyway: a client
 * that GETs what an event names as it arrives finds it, unless the read models are stuck (a
 * stream is not held up longer for that).
 */
export const READABLE_WAIT_MS = 5_000;

/** Pauses before the subscription is started again after a failure: 1 s, doubling to 30 s. */
const RESTART_FIRST_MS = 1_000;
const RESTART_MAX_MS = 30_000;

export class EventHub {
  readonly #byIdentity = new Map<string, Set<Listener>>();
  readonly #byKey = new Map<string, Set<Listener>>();
  readonly #bySession = new Map<string, Set<Listener>>();
  readonly #bySessionUser = new Map<string, Set<Listener>>();
  readonly #byPassword = new Map<string, Set<Listener>>();
  readonly #revokedKeys = new Set<string>();
  readonly #revokedSessions = new Set<string>();
  /** Per account, the position of the last end of all its sessions the hub saw. */
  readonly #sessionsEnded = new Map<string, string>();
  readonly #deletedIdentities = new Set<string>();
  #subscription: Subscription | null = null;
  /** The position of the last event dispatched (the log's head at start): every later one goes to the listeners added now. */
  #position: string | null = null;
  #stopped = false;
  #restart: NodeJS.Timeout | null = null;
  /** Failures since an event last came through: the restart pause doubles with each. */
  #failures = 0;
  /** The last message delivery waiting for the read models: each waits for the one before (log order). */
  #readable: Promise<void> = Promise.resolve();

  /** `readModels`: message events reach the streams once the read models hold them (none given: at once). */
  constructor(
    private readonly store: EventStore,
    private readonly onFailure: (error: unknown) => void,
    private readonly feed?: EventFeed,
    private readonly readModels?: ReadModelProgress,
  ) {}

  get size(): number {
    let n = 0;
    for (const set of this.#byIdentity.values()) n += set.size;
    return n;
  }

  /**
   * Where a listener added now starts: every event after this position reaches it, none
   * before. A live stream tells its client this as its first id, so a client cut off before
   * its first event resumes from there instead of from whenever it reconnects.
   */
  get position(): string | null {
    return this.#position;
  }

  /**
   * Whether live events reach listeners added now: false from a failure of the subscription
   * (a cluster's server away) until it is running again, so a stream is not opened dead.
   */
  get live(): boolean {
    return this.#subscription !== null;
  }

  async start(): Promise<void> {
    this.#stopped = false;
    const head = await this.store.headPosition();
    this.#position = head;
    const filter = { eventTypes: [...MESSAGE_TYPES, ...CLOSING_TYPES] };
    const sub = this.feed
      ? this.feed.subscribe({ after: head, group: hubGroup(), filter, fromLatest: true }, async (e) => this.#dispatch(e))
      : this.store.subscribeAll({ after: head, filter }, (e) => this.#dispatch(e));
    this.#subscription = sub;
    sub.done.catch((error) => {
      if (this.#subscription !== sub) return; // closed by stop()
      this.#subscription = null;
      sub.close(); // nothing more from it, whatever the failure left running
      this.onFailure(error); // the streams open now are ended: their clients resume with Last-Event-ID from the log
      this.#restartLater();
    });
  }

  /** Starts again (from the log's head then) after a pause that grows while it keeps failing. */
  #restartLater(): void {
    if (this.#stopped) return;
    const delay = Math.min(RESTART_MAX_MS, RESTART_FIRST_MS * 2 ** this.#failures++);
    this.#restart = setTimeout(() => {
      this.#restart = null;
      if (this.#stopped) return;
      this.start().catch((error: unknown) => {
        this.onFailure(error);
        this.#restartLater();
      });
    }, delay);
    this.#restart.unref();
  }

  stop(): void {
    this.#stopped = true;
    if (this.#restart) clearTimeout(this.#restart);
    this.#restart = null;
    this.#subscription?.close();
    this.#subscription = null;
  }

  /** Adds a listener; false (and nothing added) when its key or identity is already gone. */
  add(l: Listener): boolean {
    if (this.#deletedIdentities.has(l.identityId) || (l.keyId && this.#revokedKeys.has(l.keyId)) || (l.session && this.#revokedSessions.has(l.session.id))) return false;
    addTo(this.#byIdentity, l.identityId, l);
    if (l.keyId) addTo(this.#byKey, l.keyId, l);
    if (l.session) {
      addTo(this.#bySession, l.session.id, l);
      addTo(this.#bySessionUser, String(l.session.userPk), l);
    }
    if (l.passwordOf !== undefined) addTo(this.#byPassword, String(l.passwordOf), l);
    return true;
  }

  remove(l: Listener): void {
    removeFrom(this.#byIdentity, l.identityId, l);
    if (l.keyId) removeFrom(this.#byKey, l.keyId, l);
    if (l.session) {
      removeFrom(this.#bySession, l.session.id, l);
      removeFrom(this.#bySessionUser, String(l.session.userPk), l);
    }
    if (l.passwordOf !== undefined) removeFrom(this.#byPassword, String(l.passwordOf), l);
  }

  /**
   * The position of the last end of all `userPk`'s sessions this hub saw (sign-out, password
   * change or reset), if any: a stream about to open waits for the read models to show it
   * before it checks its session, and compares it again once registered.
   */
  sessionsEndedAt(userPk: number): string | undefined {
    return this.#sessionsEnded.get(String(userPk));
  }

  /** Every listener (for shutdown). */
  all(): Listener[] {
    return [...this.#byIdentity.values()].flatMap((s) => [...s]);
  }

  #dispatch(e: RecordedEvent): void {
    this.#position = e.position;
    this.#failures = 0;
    switch (e.type) {
      case ApiKeyRevoked: {
        const keyId = String(e.data?.keyId ?? '');
        remember(this.#revokedKeys, keyId);
        for (const l of [...(this.#byKey.get(keyId) ?? [])]) l.revoke('key revoked');
        return;
      }
      case IdentityDeleted: {
        const identityId = String(e.data?.identityId ?? '');
        remember(this.#deletedIdentities, identityId);
        for (const l of [...(this.#byIdentity.get(identityId) ?? [])]) l.revoke('identity deleted');
        return;
      }
      case SessionRevoked: {
        // One session family revoked (a reused refresh token): its streams end with it.
        const sessionId = idIn(e.stream, SESSION);
        remember(this.#revokedSessions, sessionId);
        for (const l of [...(this.#bySession.get(sessionId) ?? [])]) l.revoke('session ended');
        return;
      }
      case UserSessionsRevoked: {
        // Sign-out, password change or reset end every session of the account: their streams too.
        const pk = idIn(e.stream, USER);
        this.#sessionsEnded.delete(pk); // re-inserted last: the map drops its oldest entries first
        this.#sessionsEnded.set(pk, e.position);
        if (this.#sessionsEnded.size > REMEMBERED) this.#sessionsEnded.delete(this.#sessionsEnded.keys().next().value!);
        for (const l of [...(this.#bySessionUser.get(pk) ?? [])]) l.revoke('sessions ended');
        return;
      }
      case UserPasswordChanged: {
        // Streams authorized by the old password itself (HTTP basic).
        const pk = idIn(e.stream, USER);
        for (const l of [...(this.#byPassword.get(pk) ?? [])]) l.revoke('password changed');
        return;
      }
      default: {
        const identityId = identityOfMessage(e);
        if (!identityId) return;
        // The listeners of now: one added from here on starts after this position.
        const listeners = [...(this.#byIdentity.get(identityId) ?? [])];
        const frame = listeners.length ? frameOf(e) : null;
        if (frame) this.#deliverWhenReadable(frame, listeners);
      }
    }
  }

  /**
   * Hands `frame` to `listeners` once the read models hold its event, in log order: the
   * message and thread an event names answer a GET sent as it arrives (they answered 404
   * for some ms). Only the frame waits, not the event (its bodies). A listener whose delivery
   * throws is ended alone; the others still get the frame.
   */
  #deliverWhenReadable(frame: Frame, listeners: Listener[]): void {
    const deliver = () => {
      for (const l of listeners) {
        try {
          l.deliver(frame);
        } catch (error) {
          l.revoke('delivery failed', error);
        }
      }
    };
    const readModels = this.readModels;
    if (!readModels) return deliver();
    // The wait counts from now, not from its turn: events piled up behind read models that are
    // stuck go out together when the first one's wait ends, not one wait after another.
    const deadline = performance.now() + READABLE_WAIT_MS;
    this.#readable = this.#readable
      .then(() => untilReadable(readModels, frame.position, deadline))
      .then(deliver)
      .catch((error: unknown) => this.onFailure(error));
  }
}

/**
 * Resolves once the read models hold `position`, or at `deadline` (performance.now() time),
 * whichever comes first; never rejects: read models that failed or lag do not hold a stream up.
 */
export async function untilReadable(readModels: ReadModelProgress, position: string, deadline: number): Promise<void> {
  const left = deadline - performance.now();
  if (left > 0) await readModels.waitFor(position, left).catch(() => {});
}

function addTo(map: Map<string, Set<Listener>>, key: string, l: Listener): void {
  let set = map.get(key);
  if (!set) map.set(key, (set = new Set()));
  set.add(l);
}

function removeFrom(map: Map<string, Set<Listener>>, key: string, l: Listener): void {
  const set = map.get(key);
  if (!set) return;
  set.delete(l);
  if (set.size === 0) map.delete(key);
}

function remember(set: Set<string>, value: string): void {
  if (!value) return;
  set.add(value);
  if (set.size > REMEMBERED) set.delete(set.values().next().value as string);
}
