/**
 * A projection turns events into read-model documents. It is pure: for an event it names
 * the documents it touches and how each evolves; the runner loads, evolves and commits
 * them together with its checkpoint (see projections/runner.ts).
 */
import type { RecordedEvent } from '../infra/ports/event-store.js';
import type { CollectionSpec, Doc } from '../infra/ports/read-store.js';

export interface DocUpdate {
  collection: string;
  id: string;
  /** Pure: the new document, or null to delete it. Returning `doc` unchanged is a no-op. */
  evolve: (doc: Doc | null) => Doc | null;
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
