/**
 * A projection turns events into read-model documents. It is pure: for an event it names
 * the documents it touches and how each evolves; the runner loads, evolves and commits
 * them together with its checkpoint (see projections/runner.ts).
 */
import type { RecordedEvent } from '../infra/ports/event-store.js';
import type { CollectionSpec, Doc } from '../infra/ports/read-store.js';

/**
 * One document's change for one event. The runner evolves an event's updates once each, in
 * the order `apply` returned them: a later update may use what an earlier one of the same
 * event saw (a thread counts the messages whose `read` this event changed), which keeps a
 * count exact without a list of ids in the document.
 */
export interface DocUpdate {
  collection: string;
  id: string;
  /** The new document, or null to delete it. Returning `doc` unchanged is a no-op. Depends only on `doc` and the event (and on earlier updates of the same event, see above). */
  evolve: (doc: Doc | null) => Doc | null;
}

/**
 * Creates `doc` unless a document with its id is there (an event seen again changes nothing).
 * `made()`, read by a later update of the same event, says whether this event made it: what
 * a conversation counts a new message by.
 */
export function createOnce(collection: string, doc: Doc): { update: DocUpdate; made: () => boolean } {
  let made = false;
  const evolve = (current: Doc | null): Doc => {
    if (current) return current;
    made = true;
    return doc;
  };
  return { update: { collection, id: doc.id, evolve }, made: () => made };
}

export interface Projection {
  /** Unique, stable; names the checkpoint. Bump a `:vN` suffix to force a rebuild. */
  name: string;
  collections: CollectionSpec[];
  /** Event types this projection reads; others are skipped without a call. */
  eventTypes: string[];
  apply(event: RecordedEvent): DocUpdate[];
}

/**
 * The event's place in the log as a number, for read models to sort by (`seq`, `lastSeq`):
 * a strict order that a wall clock set back cannot upset. Embedded positions are exact; a
 * cluster position (EventStoreDB: commit × 2^64 + prepare) loses its low bits, so events of
 * one append may tie (lists break ties by id) while appends stay in order.
 */
export const logOrder = (e: RecordedEvent): number => Number(e.position);
