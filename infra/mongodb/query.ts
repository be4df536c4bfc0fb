/**
 * Pure translations of the ReadStore port's queries to MongoDB, unit-tested without a
 * server. Semantics follow the SQLite adapter and test/contract/read-store.contract.ts:
 * - equality and ranges compare within one JSON type (MongoDB's type bracketing does that);
 * - `null` matches null and missing fields;
 * - sorts put null/missing first ascending (last descending), ties broken by id in the same
 *   direction; keyset cursors are `[sortValue, id]`, base64url JSON like the SQLite ones.
 * Documents are stored as `{ _id: id, ...doc }`; `id` maps to `_id` in queries.
 */
import type { CollectionSpec, Query, Scalar } from '../ports/read-store.js';

export const COLLECTION_NAME = /^[a-z][a-z0-9_]*$/;
const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Collections the adapter keeps for itself. */
export const RESERVED_COLLECTIONS = new Set(['checkpoints', 'leases', 'rate_limits']);

export type MongoFilter = Record<string, unknown>;
export type MongoSort = Record<string, 1 | -1>;

export function collectionName(name: string): string {
  if (typeof name !== 'string' || !COLLECTION_NAME.test(name) || RESERVED_COLLECTIONS.has(name)) {
    throw new Error(`invalid collection name: ${JSON.stringify(name)}`);
  }
  return name;
}

/** The stored field of a top-level port field (`id` is `_id`); rejects `$`, dots and the like. */
export function fieldPath(field: string): string {
  if (typeof field !== 'string' || !FIELD_NAME.test(field) || field === '_id') {
    throw new Error(`invalid field name: ${JSON.stringify(field)}`);
  }
  return field === 'id' ? '_id' : field;
}

function checkScalar(value: unknown, what: string): asserts value is Scalar {
  const ok =
    value === null ||
    typeof value === 'string' ||
    typeof value === 'boolean' ||
    (typeof value === 'number' && Number.isFinite(value));
  if (!ok) throw new Error(`${what} must be a string, finite number, boolean or null`);
}

const RANGE_OPS = { gt: '$gt', gte: '$gte', lt: '$lt', lte: '$lte' } as const;

/** `where` (equality) and `range` → one MongoDB filter (an `$and` of simple conditions). */
export function toMongoFilter(query: Pick<Query, 'where' | 'range'>): MongoFilter {
  const and: MongoFilter[] = [];
  for (const [field, value] of Object.entries(query.where ?? {})) {
    checkScalar(value, `where.${field}`);
    // { f: null } matches null and missing, as the port wants; { f: v } stays within v's type.
    and.push({ [fieldPath(field)]: value });
  }
  for (const [field, bounds] of Object.entries(query.range ?? {})) {
    const path = fieldPath(field);
    for (const [op, value] of Object.entries(bounds ?? {})) {
      const mongoOp = RANGE_OPS[op as keyof typeof RANGE_OPS];
      if (!mongoOp) throw new Error(`invalid range operator: ${op}`);
      if (value === undefined) continue;
      checkScalar(value, `range.${field}.${op}`);
      // Nothing is ordered against null (as in SQLite): an impossible condition.
      and.push(value === null ? { _id: { $exists: false } } : { [path]: { [mongoOp]: value } });
    }
  }
  if (and.length === 0) return {};
  return and.length === 1 ? and[0]! : { $and: and };
}

export function encodeCursor(sortValue: unknown, id: string): string {
  return Buffer.from(JSON.stringify([sortValue === undefined ? null : sortValue, id])).toString('base64url');
}

export function decodeCursor(cursor: string): [Scalar, string] {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (Array.isArray(value) && value.length === 2 && typeof value[1] === 'string') {
      checkScalar(value[0], 'cursor value');
      return value as [Scalar, string];
    }
  } catch {
    // fall through
  }
  throw Object.assign(new Error('invalid cursor'), { code: 'invalid_cursor' });
}

/** Sort on the field then `_id`, both in the query's direction. */
export function sortSpec(orderBy: Query['orderBy']): MongoSort {
  const { field, direction } = orderBy ?? { field: 'id', direction: 'asc' as const };
  if (direction !== 'asc' && direction !== 'desc') throw new Error(`invalid direction: ${String(direction)}`);
  const dir = direction === 'asc' ? 1 : -1;
  const path = fieldPath(field);
  return path === '_id' ? { _id: dir } : { [path]: dir, _id: dir };
}

/**
 * The keyset condition "strictly after (value, id)" in the sort order. MongoDB sorts null
 * and missing together, before numbers/strings ascending and after them descending.
 */
export function keysetFilter(orderBy: Query['orderBy'], cursor: string): MongoFilter {
  const { field, direction } = orderBy ?? { field: 'id', direction: 'asc' as const };
  const path = fieldPath(field);
  const [after, afterId] = decodeCursor(cursor);
  const cmp = direction === 'asc' ? '$gt' : '$lt';
  if (path === '_id') return { _id: { [cmp]: afterId } };
  if (after === null) {
    return direction === 'asc'
      ? { $or: [{ [path]: { $ne: null } }, { [path]: null, _id: { $gt: afterId } }] }
      : { [path]: null, _id: { $lt: afterId } };
  }
  const or: MongoFilter[] = [{ [path]: { [cmp]: after } }, { [path]: after, _id: { [cmp]: afterId } }];
  if (direction === 'desc') or.push({ [path]: null });
  return { $or: or };
}

/** The whole find: filter, sort, and limit + 1 (the extra document says whether more remain). */
export function toMongoFind(query: Query): { filter: MongoFilter; sort: MongoSort; limit: number | undefined } {
  const parts: MongoFilter[] = [];
  const base = toMongoFilter(query);
  if (Object.keys(base).length) parts.push(base);
  if (query.cursor) parts.push(keysetFilter(query.orderBy, query.cursor));
  let limit: number | undefined;
  if (query.limit !== undefined) {
    if (!Number.isInteger(query.limit) || query.limit < 1) throw new Error(`invalid limit: ${query.limit}`);
    limit = query.limit + 1;
  }
  const filter = parts.length === 0 ? {} : parts.length === 1 ? parts[0]! : { $and: parts };
  return { filter, sort: sortSpec(query.orderBy), limit };
}

/**
 * The string BSON gives back for `s`: its UTF-8 encoder turns each lone surrogate into U+FFFD
 * (`'k\ud800'` is stored and found as `'k\uFFFD'`), like String.prototype.toWellFormed
 * (ES2024, past this project's lib). Well-formed strings are unchanged.
 */
export function bsonString(s: string): string {
  return s.replace(/\p{Cs}/gu, '\uFFFD');
}

/** Stored document → port document: drops `_id` (the doc carries its own `id`). */
export function fromStored(stored: Record<string, unknown>): Record<string, unknown> & { id: string } {
  const { _id, ...doc } = stored;
  return { ...doc, id: doc.id === undefined ? String(_id) : (doc.id as string) } as Record<string, unknown> & { id: string };
}

/** Port document → stored document. */
export function toStored(doc: { id: string } & Record<string, unknown>): Record<string, unknown> {
  return { _id: doc.id, ...doc };
}

/** Cursor value of a stored document for the sort field (missing = null). */
export function sortValueOf(stored: Record<string, unknown>, orderBy: Query['orderBy']): unknown {
  const path = fieldPath(orderBy?.field ?? 'id');
  const value = stored[path];
  return value === undefined ? null : value;
}

/** One MongoDB index per spec entry: `{ f1: 1, f2: 1, _id: 1 }` (the id breaks sort ties). */
export function indexesOf(spec: CollectionSpec): Array<{ key: Record<string, 1>; name: string }> {
  return (spec.indexes ?? [])
    .filter((fields) => fields.length > 0)
    .map((fields) => {
      const key: Record<string, 1> = {};
      for (const f of fields) key[fieldPath(f)] = 1;
      if (!('_id' in key)) key._id = 1;
      return { key, name: `ix_${fields.join('_')}` };
    });
}

/** Fixed-width form of a position, so the server can compare positions as strings. */
export function paddedPosition(position: string): string {
  if (!/^(0|[1-9][0-9]*)$/.test(position)) throw new Error(`invalid position: ${JSON.stringify(position)}`);
  if (position.length > 40) throw new Error(`position too large: ${position}`);
  return position.padStart(40, '0');
}
