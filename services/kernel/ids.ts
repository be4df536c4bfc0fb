/** Identifier and clock helpers shared by every context. */
import { v5 as uuidv5, v7 as uuidv7, validate as uuidValidate } from 'uuid';
import { randomBytes } from 'node:crypto';

/** Time-ordered UUID (v7): ids sort by creation, which keeps indexes and pages cheap. */
export const newId = (): string => uuidv7();

/** Namespace of ids derived from other ids (idempotent event ids of retried effects). */
const ID_NAMESPACE = '3a0e3a53-6f5c-4c55-9a43-2f6a1f0c9a11';
/** The same parts, the same id (UUID v5): an effect retried after a crash appends the same event, which the store drops. */
export const derivedId = (...parts: string[]): string => uuidv5(parts.join('\u0000'), ID_NAMESPACE);

export const isUuid = (value: unknown): value is string => typeof value === 'string' && uuidValidate(value);

/** ISO 8601 UTC with milliseconds (DECISIONS "Wire conventions"). */
export const nowIso = (): string => new Date().toISOString();

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Uniform random base62 string from a CSPRNG (rejection sampling: no modulo bias). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248) out += BASE62[byte % 62]; // 248 = 62 * 4
      if (out.length === length) break;
    }
  }
  return out;
}
