/**
 * Uniqueness the event-sourced way (no read-model index): a value (a username, an inbox
 * address, an identity name) is held by appending to its own reservation stream. The
 * append at `no_stream` (or at the revision of a release) is the atomic check, so it works
 * the same on SQLite and on EventStoreDB, across any number of gateways.
 */
import { createHash } from 'node:crypto';
import { WrongExpectedRevisionError, streamName, type EventStore } from '../../infra/ports/event-store.js';
import { event, expectedFor } from './command.js';

export const RESERVED = 'ValueReserved';
export const RELEASED = 'ValueReleased';

/** Stream of one reserved value. The value is hashed: stream names stay short and safe. */
export function reservationStream(kind: string, value: string): string {
  const digest = createHash('sha256').update(value).digest('base64url');
  return streamName(kind, digest);
}

async function current(store: EventStore, stream: string): Promise<{ owner: string | null; revision: number }> {
  const [last] = await store.readStream(stream, { direction: 'backwards', maxCount: 1 });
  if (!last) return { owner: null, revision: -1 };
  return { owner: last.type === RESERVED ? (last.data as { owner: string }).owner : null, revision: last.revision };
}

/**
 * Holds `value` of `kind` for `owner`. Returns true when now held by `owner` (also when it
 * already was), false when another owner holds it. `permanent` reservations are never
 * released (inbox addresses: a deleted identity's address is never handed out again).
 */
export async function reserve(store: EventStore, kind: string, value: string, owner: string, permanent = false): Promise<boolean> {
  return (await acquire(store, kind, value, owner, permanent)) !== 'taken';
}

/**
 * {@link reserve}, telling whether this call took the value (`acquired`) or `owner` held it
 * already (`held`): only a call that acquired may undo it, or a failed concurrent request of
 * the same owner would release what a successful one relies on.
 */
export async function acquire(store: EventStore, kind: string, value: string, owner: string, permanent = false): Promise<'acquired' | 'held' | 'taken'> {
  const stream = reservationStream(kind, value);
  for (let attempt = 0; attempt < 5; attempt++) {
    const { owner: holder, revision } = await current(store, stream);
    if (holder === owner) return 'held';
    if (holder !== null) return 'taken';
    try {
      await store.append(stream, [event(RESERVED, { kind, owner, permanent })], { expectedRevision: expectedFor(revision) });
      return 'acquired';
    } catch (err) {
      if (!(err instanceof WrongExpectedRevisionError)) throw err;
    }
  }
  return 'taken';
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
