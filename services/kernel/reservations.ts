/**
 * Uniqueness the event-sourced way (no read-model index): a value (a username, an inbox
 * address, an identity name) is held by appending to its own reservation stream. The
 * append at `no_stream` (or at the revision of a release) is the atomic check, so it works
 * the same on SQLite and on EventStoreDB, across any number of gateways.
 *
 * A reservation and the event that puts the value to use (IdentityCreated, UserRegistered,
 * a rename) are appended to different streams, so a process killed between the two leaves
 * a value reserved by a holder that never uses it. Such a reservation is reclaimed by the
 * next request that wants the value ({@link Reclaim}): the holder's own stream says whether
 * it uses the value; when it shows the holder gone (deleted, moved to another value) the
 * value is free, and when it shows nothing yet the reservation is either a request still in
 * flight or an abandoned one — abandoned once it is older than any request can be, or
 * older than the process itself in the embedded deployment (one process: nothing from
 * before its start is still running).
 */
import { createHash } from 'node:crypto';
import { WrongExpectedRevisionError, comparePositions, streamName, type EventData, type EventStore, type RecordedEvent } from '../../infra/ports/event-store.js';
import { event, expectedFor } from './command.js';

export const RESERVED = 'ValueReserved';
export const RELEASED = 'ValueReleased';

/** Stream of one reserved value. The value is hashed: stream names stay short and safe. */
export function reservationStream(kind: string, value: string): string {
  const digest = createHash('sha256').update(value).digest('base64url');
  return streamName(kind, digest);
}

/** What a holder's own stream says about a value it reserved. */
export type HolderState =
  /** it uses the value */
  | 'holds'
  /** it never will again (deleted; or it moved to another value after reserving this one) */
  | 'gone'
  /** it does not use it yet: a request in flight, or one that died before its main event */
  | 'unknown';

/** How to tell an abandoned reservation from a live one. */
export interface Reclaim {
  check(holder: string, value: string, reservation: RecordedEvent): Promise<HolderState>;
  /** Whether the request that recorded this reservation can no longer be in flight. */
  settled(e: RecordedEvent): boolean;
}

/**
 * For a holder that exists but does not use the value now: `namedAt` is the position of the
 * holder's event that last set its value. Set after the reservation, the holder moved on
 * ('gone'); before it, the reservation may be a move still in flight ('unknown').
 */
export function movedAway(namedAt: string | null, reservation: RecordedEvent): HolderState {
  return comparePositions(namedAt, reservation.position) > 0 ? 'gone' : 'unknown';
}

/** Whether a reservation of `holder` may be taken over: its holder is gone, or it is abandoned. */
export async function abandoned(reclaim: Reclaim, holder: string, value: string, reservation: RecordedEvent): Promise<boolean> {
  const state = await reclaim.check(holder, value, reservation);
  return state === 'gone' || (state === 'unknown' && reclaim.settled(reservation));
}

async function current(store: EventStore, stream: string): Promise<{ owner: string | null; revision: number; last: RecordedEvent | null }> {
  const [last] = await store.readStream(stream, { direction: 'backwards', maxCount: 1 });
  if (!last) return { owner: null, revision: -1, last: null };
  return { owner: last.type === RESERVED ? (last.data as { owner: string }).owner : null, revision: last.revision, last };
}

/**
 * Holds `value` of `kind` for `owner`. Returns true when now held by `owner` (also when it
 * already was), false when another owner holds it. `permanent` reservations are never
 * released (inbox addresses: a deleted identity's address is never handed out again).
 */
export async function reserve(store: EventStore, kind: string, value: string, owner: string, permanent = false, reclaim?: Reclaim): Promise<boolean> {
  return (await acquire(store, kind, value, owner, permanent, reclaim)) !== 'taken';
}

/**
 * {@link reserve}, telling whether this call took the value (`acquired`) or `owner` held it
 * already (`held`): only a call that acquired may undo it ({@link undo}), or a failed
 * concurrent request of the same owner would release what a successful one relies on.
 */
export async function acquire(store: EventStore, kind: string, value: string, owner: string, permanent = false, reclaim?: Reclaim): Promise<'acquired' | 'held' | 'taken'> {
  return (await hold(store, kind, value, owner, permanent, reclaim)).outcome;
}

/** What {@link hold} did, with the revision of the reservation stream it left (for {@link undo}). */
export interface Hold {
  outcome: 'acquired' | 'held' | 'taken';
  kind: string;
  value: string;
  owner: string;
  revision: number;
}

/**
 * Undoes a hold that acquired, unless the reservation changed since: a concurrent request of
 * the same owner renewed it because it relies on it (a duplicate rename that succeeded while
 * this one failed), or another owner reclaimed it. Appended at the revision the hold left.
 */
export async function undo(store: EventStore, taken: Hold | null): Promise<void> {
  if (!taken || taken.outcome !== 'acquired') return;
  try {
    await store.append(reservationStream(taken.kind, taken.value), [event(RELEASED, { kind: taken.kind, owner: taken.owner })], { expectedRevision: taken.revision });
  } catch (err) {
    if (!(err instanceof WrongExpectedRevisionError)) throw err;
  }
}

/**
 * Whether {@link hold} would let `owner` have `value` now (nobody holds it, `owner` does, or
 * its holder's reservation may be reclaimed): a look that takes nothing, for refusing early.
 */
export async function available(store: EventStore, kind: string, value: string, owner: string, reclaim?: Reclaim): Promise<boolean> {
  const { owner: holder, last } = await current(store, reservationStream(kind, value));
  return holder === null || holder === owner || (reclaim !== undefined && (await abandoned(reclaim, holder, value, last!)));
}

/** {@link acquire}, keeping what {@link undo} needs. */
export async function hold(store: EventStore, kind: string, value: string, owner: string, permanent = false, reclaim?: Reclaim): Promise<Hold> {
  const stream = reservationStream(kind, value);
  const result = (outcome: Hold['outcome'], revision: number): Hold => ({ outcome, kind, value, owner, revision });
  for (let attempt = 0; attempt < 5; attempt++) {
    const { owner: holder, revision, last } = await current(store, stream);
    const events: EventData[] = [event(RESERVED, { kind, owner, permanent })];
    if (holder === owner) {
      // Held already, maybe by a reservation its holder moved away from (a rename that died
      // before releasing it), which another request may be reclaiming right now. Renewed at
      // the revision read: after this, it is newer than the holder's last move, and a
      // concurrent reclaim and this renewal cannot both land.
      if (!reclaim) return result('held', revision);
      try {
        const appended = await store.append(stream, events, { expectedRevision: revision });
        return result('held', appended.nextRevision);
      } catch (err) {
        if (!(err instanceof WrongExpectedRevisionError)) throw err;
        continue;
      }
    }
    if (holder !== null) {
      if (!reclaim || !(await abandoned(reclaim, holder, value, last!))) return result('taken', revision);
      // Released and taken in one append, at the revision the check saw.
      events.unshift(event(RELEASED, { kind, owner: holder, reclaimed: true }));
    }
    try {
      const appended = await store.append(stream, events, { expectedRevision: expectedFor(revision) });
      return result('acquired', appended.nextRevision);
    } catch (err) {
      if (!(err instanceof WrongExpectedRevisionError)) throw err;
    }
  }
  return result('taken', -1);
}

/** Releases `value` if `owner` holds it and the reservation is not permanent. */
export async function release(store: EventStore, kind: string, value: string, owner: string): Promise<void> {
  const stream = reservationStream(kind, value);
  for (let attempt = 0; attempt < 5; attempt++) {
    const [last] = await store.readStream(stream, { direction: 'backwards', maxCount: 1 });
    if (!last || last.type !== RESERVED) return;
    const data = last.data as { owner: string; permanent?: boolean };
    if (data.owner !== owner || data.permanent) return;
    try {
      await store.append(stream, [event(RELEASED, { kind, owner })], { expectedRevision: last.revision });
      return;
    } catch (err) {
      if (!(err instanceof WrongExpectedRevisionError)) throw err;
    }
  }
}

/** Current holder of a value, or null. */
export async function holderOf(store: EventStore, kind: string, value: string): Promise<string | null> {
  return (await current(store, reservationStream(kind, value))).owner;
}

/** Current holder of a value with its reservation (to ask {@link abandoned}), or null. */
export async function holderReservation(store: EventStore, kind: string, value: string): Promise<{ holder: string; reservation: RecordedEvent } | null> {
  const { owner, last } = await current(store, reservationStream(kind, value));
  return owner && last ? { holder: owner, reservation: last } : null;
}
