/**
 * A reactor: a job per event of the log, run from the reactor's own checkpoint, whose
 * effects must happen once (the embedded process, or the cluster worker). Used by outbound
 * mail delivery, the account mails and the revocation of a deleted identity's keys.
 *
 * - At least once: the checkpoint moves only past events whose job finished (a low-water
 *   mark, {@link reactorJobs}), so a restart resumes every unfinished one; jobs are
 *   idempotent (ids derived from the event's).
 * - Jobs run concurrently, up to `concurrency` at work; a job waiting out a backoff (a mail a
 *   relay keeps deferring) gives its place up meanwhile, so it holds up no other. On a feed that commits positions (Kafka) each event is reported
 *   settled once its job finished, so the committed offset is the same low-water mark.
 * - A job that throws (a full disk, a store that does not answer) is run again after a wait
 *   (1 s doubling to 5 min) for as long as the reactor runs: it left the checkpoint behind, so
 *   waiting for a restart held every later event's progress, and its effect, until one came.
 * - A stop ends every wait a job makes at once (`run.sleep`), lets jobs in flight finish for
 *   up to 5 s, and writes the checkpoint as far as finished jobs allow.
 */
import type { Logger } from 'pino';
import type { AllFilter, EventStore, RecordedEvent, Subscription } from '../../infra/ports/event-store.js';
import type { EventFeed, Pending } from '../../infra/ports/event-feed.js';
import type { ReadStore } from '../../infra/ports/read-store.js';
import { LowWaterMark } from '../../infra/low-water-mark.js';

/** What a job sees of its reactor. */
export interface JobRun {
  /** True once the reactor is stopping: the job returns false (unfinished) at its next step. */
  readonly stopped: boolean;
  /** A wait (a retry's backoff) that a stop ends at once. */
  sleep(ms: number): Promise<void>;
}

export interface ReactorSpec {
  /** The read-store checkpoint (and the name in logs). */
  checkpoint: string;
  /** The consumer group on the feed. */
  group: string;
  filter: AllFilter;
  /**
   * Where a first start (no checkpoint yet, also on a DATA_DIR of a version before the
   * reactor) begins: the log's head (only what happens from now on) rather than its start.
   */
  fromHeadOnFirstStart?: boolean;
  /** Jobs at once; the subscription waits while this many run. Default: no limit. */
  concurrency?: number;
  /**
   * The job of one event: true once it is done for good, false when a stop cut it short. A
   * throw leaves it unfinished: it is logged and the job runs again after a wait.
   */
  job(e: RecordedEvent, run: JobRun): Promise<boolean>;
}

export interface Reactor {
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Waits before a job that threw runs again: doubling from the first, capped. */
export const JOB_RETRY_FIRST_MS = 1_000;
export const JOB_RETRY_MAX_MS = 5 * 60_000;
/** The wait after a job's `failures`-th failure (0: the first), for jobs that retry within themselves too. */
export const retryWait = (failures: number) => Math.min(JOB_RETRY_MAX_MS, JOB_RETRY_FIRST_MS * 2 ** Math.min(failures, 20));

export function createReactor(deps: { events: EventStore; reads: ReadStore; feed: EventFeed; log: Logger }, spec: ReactorSpec): Reactor {
  const { events, reads, feed, log } = deps;
  const jobs = reactorJobs({ checkpoint: spec.checkpoint, reads, log });
  const limit = spec.concurrency ?? Infinity;
  let subscription: Subscription | null = null;
  let stopped = false;
  let running = 0;
  let slotWaiters: (() => void)[] = [];
  const wakeSlotWaiters = () => {
    const waiters = slotWaiters;
    slotWaiters = [];
    waiters.forEach((w) => w());
  };
  /** A place among the `concurrency` jobs at work (at once when stopping: the job then ends). */
  async function takeSlot(): Promise<void> {
    while (running >= limit && !stopped) await new Promise<void>((resolve) => slotWaiters.push(resolve));
    running += 1;
  }
  function leaveSlot(): void {
    running -= 1;
    wakeSlotWaiters();
  }
  const run: JobRun = {
    get stopped() {
      return stopped;
    },
    // A job waiting out a backoff gives its place up meanwhile: jobs a relay keeps deferring
    // must not stop every other mail (they held all 8 places for the length of their retries).
    async sleep(ms) {
      leaveSlot();
      try {
        await jobs.sleep(ms);
      } finally {
        await takeSlot();
      }
    },
  };

  /** The event's job, run again after a wait each time it throws, until it ends or the reactor stops. */
  async function jobUntilDone(e: RecordedEvent): Promise<boolean> {
    for (let failures = 0; ; failures++) {
      try {
        return await spec.job(e, run);
      } catch (err) {
        if (stopped) {
          log.warn({ err, stream: e.stream, type: e.type }, 'reactor job failed while stopping; the next start runs it again');
          throw err;
        }
        const retryInMs = retryWait(failures);
        log.error({ err, stream: e.stream, type: e.type, failures: failures + 1, retryInMs }, 'reactor job failed; it runs again');
        await run.sleep(retryInMs); // its place among the jobs at work is free meanwhile
        if (stopped) return false;
      }
    }
  }

  async function onEvent(e: RecordedEvent): Promise<Pending> {
    if (stopped) {
      const held = Promise.reject(new Error('stopped before the job ran')); // the feed keeps it for the next run
      held.catch(() => {});
      return { settled: held };
    }
    const done = jobs.track(e.position);
    await takeSlot();
    const settled = jobUntilDone(e).then(
      (finished) => {
        done(finished);
        if (!finished) throw new Error('stopped before the job finished');
      },
      (err) => {
        done(false); // unfinished: the checkpoint holds and the next start runs it again
        throw err;
      },
    );
    settled.catch(() => {}).finally(leaveSlot);
    return { settled };
  }

  return {
    async start() {
      stopped = false;
      let after = await reads.getCheckpoint(spec.checkpoint);
      if (after === null && spec.fromHeadOnFirstStart) {
        // Written at once, also on an empty log ("0": before every event): a restart before
        // the first job finished is no first start, and must not skip that job.
        after = (await events.headPosition()) ?? '0';
        await reads.commit(spec.checkpoint, after, []);
      }
      subscription = feed.subscribe({ after, group: spec.group, filter: spec.filter }, onEvent);
      subscription.done.catch((err) => log.error({ err }, 'reactor subscription failed'));
    },
    async stop() {
      stopped = true;
      subscription?.close();
      jobs.wakeAll();
      wakeSlotWaiters();
      // Jobs in flight finish briefly (their effects are idempotent if cut short).
      const deadline = Date.now() + 5_000;
      while (running > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await jobs.flushed();
    },
  };
}

/**
 * The bookkeeping of jobs that may outlive their event (a mail retried with backoff): the
 * checkpoint moves only past events whose job finished (a low-water mark), and every wait a
 * job makes ends at once when the reactor stops.
 */
interface ReactorJobs {
  /** Registers the job of the event at `position`; call the result once it ended (`finished`: false when a stop cut it short). */
  track(position: string): (finished: boolean) => void;
  /** A wait that {@link ReactorJobs.wakeAll} ends early. */
  sleep(ms: number): Promise<void>;
  /** Ends every wait now (on stop). */
  wakeAll(): void;
  /** Resolves once the checkpoint writes asked so far are done. */
  flushed(): Promise<void>;
}

function reactorJobs(deps: { checkpoint: string; reads: ReadStore; log: Logger }): ReactorJobs {
  /** Events received, in order; bounded by the unfinished jobs. */
  const marks = new LowWaterMark<string>();
  const timers = new Set<{ timer: NodeJS.Timeout; resolve: () => void }>();
  let checkpointWrite: Promise<void> = Promise.resolve();

  function advance(): void {
    const position = marks.advance();
    if (position === null) return;
    checkpointWrite = checkpointWrite.then(() => deps.reads.commit(deps.checkpoint, position, [])).catch((err) => deps.log.error({ err }, 'checkpoint write failed'));
  }

  return {
    track(position) {
      const finish = marks.add(position);
      return (finished) => {
        if (!finished) return; // cut short: the checkpoint holds here
        finish();
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
