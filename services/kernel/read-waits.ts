/**
 * Waiting for the read models after a write, when the wait may give up (503 `projection_lag`)
 * though the write was made.
 */
import type { Logger } from 'pino';
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import type { Projection } from '../../projections/projection.js';
import type { ReadModelProgress } from './platform.js';

/**
 * Waits for the read models; a lag is logged, not thrown: for a write whose answer cannot be
 * given again (a secret or tokens shown once, a code spent) or that was acknowledged already.
 */
export async function settleOrWarn(progress: ReadModelProgress, logger: Logger, position: string | null | undefined, what: string): Promise<void> {
  if (position) await progress.waitFor(position).catch(lagLogged(logger, what));
}

/**
 * The document `projection` makes of `recorded` (the event that creates it, as its append
 * answered it): a write answered before the read models show it answers what they will.
 */
export function projectedDoc<D extends Doc>(projection: Projection, recorded: RecordedEvent, collection: string): D {
  const doc = projection.apply(recorded).find((update) => update.collection === collection)?.evolve(null);
  if (!doc) throw new Error(`${projection.name} makes no ${collection} document of a ${recorded.type}`);
  return doc as D;
}

/** A catch handler that logs a read-model lag (ProjectionLagError) and rethrows anything else. */
export function lagLogged(logger: Logger, what: string): (err: unknown) => void {
  return (err) => {
    if ((err as { code?: string }).code !== 'projection_lag') throw err;
    logger.warn({ what, position: (err as { position?: string }).position }, 'read models lag behind a write that is answered all the same');
  };
}

/**
 * Limits counted from a read model (an account's keys, its identities) miss a write whose
 * wait for the read models gave up (503 `projection_lag`): it was appended all the same. Per
 * key (an account), the last such write's position is kept, and the next counted write of
 * that key waits for it first (answering 503 itself while the read models are still behind),
 * so a count never leaves out a write this process made. Callers take turns per key.
 */
export function unseenWrites(progress: ReadModelProgress) {
  const unseen = new Map<string, string>();
  return {
    /** Waits until the key's last write shows in the read models (ProjectionLagError while it does not). */
    async awaitSeen(key: string): Promise<void> {
      const position = unseen.get(key);
      if (position === undefined) return;
      await progress.waitFor(position);
      if (unseen.get(key) === position) unseen.delete(key);
    },
    /** progress.waitFor for a counted write of `key`: if it gives up, the next awaitSeen(key) waits for it. */
    async waitFor(key: string, position: string): Promise<void> {
      unseen.set(key, position);
      await progress.waitFor(position);
      if (unseen.get(key) === position) unseen.delete(key);
    },
  };
}
