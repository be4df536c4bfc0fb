/**
 * The bookkeeping of a reactor whose jobs run concurrently and may outlive their event (a
 * mail retried with backoff): one slow job must not hold up the others, and a restart must
 * resume every unfinished one. So the checkpoint moves only past events whose job finished
 * (a low-water mark), and every wait a job makes ends at once when the reactor stops.
 * Used by the outbound mail delivery and the account mail reactors.
 */
import type { Logger } from 'pino';
import type { ReadStore } from '../../infra/ports/read-store.js';

export interface ReactorJobs {
  /** Registers the job of the event at `position`; call the result once it ended (`finished`: false when a stop cut it short). */
  track(position: string): (finished: boolean) => void;
  /** A wait that {@link ReactorJobs.wakeAll} ends early. */
  sleep(ms: number): Promise<void>;
  /** Ends every wait now (on stop). */
  wakeAll(): void;
  /** Resolves once the checkpoint writes asked so far are done. */
  flushed(): Promise<void>;
}

export function reactorJobs(deps: { checkpoint: string; reads: ReadStore; log: Logger }): ReactorJobs {
  /** Events received, in order, with whether their job finished. */
  const window: { position: string; done: boolean }[] = [];
  const timers = new Set<{ timer: NodeJS.Timeout; resolve: () => void }>();
  let checkpointWrite: Promise<void> = Promise.resolve();

  function advance(): void {
    let last: string | null = null;
    while (window.length && window[0].done) last = window.shift()!.position;
    if (last === null) return;
    const position = last;
    checkpointWrite = checkpointWrite.then(() => deps.reads.commit(deps.checkpoint, position, [])).catch((err) => deps.log.error({ err }, 'checkpoint write failed'));
  }

  return {
    track(position) {
      const slot = { position, done: false };
      window.push(slot);
      return (finished) => {
        slot.done = finished;
        advance();
      };
    },
    sleep(ms) {
      return new Promise((resolve) => {
        const entry = {
          timer: setTimeout(() => {
            timers.delete(entry);
            resolve();
          }, ms),
          resolve,
        };
        timers.add(entry);
      });
    },
    wakeAll() {
      for (const t of timers) {
        clearTimeout(t.timer);
        t.resolve();
      }
      timers.clear();
    },
    flushed: () => checkpointWrite,
  };
}
