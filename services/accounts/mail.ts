/**
 * The account mail reactor: sign-up verification and password reset mails.
 *
 * A request is an event first (`UserRegistered` with an unverified email, or
 * `AccountMailRequested`), so a crash or a relay outage delays the mail instead of losing it,
 * and a request never fails because the relay is down (it answered 500 before, and only for
 * known addresses: an account oracle). This reactor follows those events from its own
 * checkpoint, builds each mail (signing its link then: no link is ever kept),
 * hands it to the mailer and records it with an id derived from the request's (a mail
 * already recorded is not sent again after a crash). Each mail is its own job, retried with
 * backoff (up to 5 minutes apart) for as long as its link would still work; a relay's 5xx is
 * logged and not retried. The checkpoint waits for unfinished jobs (services/kernel/
 * reactor-jobs.ts). Like outbound delivery, it runs in one process: the embedded one, or the worker.
 */
import type { Subscription, RecordedEvent } from '../../infra/ports/event-store.js';
import type { Pending } from '../../infra/ports/event-feed.js';
import type { ContextFactory } from '../../infra/runtime.js';
import { reactorJobs } from '../kernel/reactor-jobs.js';
import { AccountMailRequested, UserRegistered } from './events.js';
import { accountMailRequestOf, type AccountMail } from './service.js';

export const CHECKPOINT = 'reactor:account-mail';
const GROUP = 'ais-account-mail';
const MAX_DELAY_MS = 5 * 60_000;

export const accountMailContext: ContextFactory = ({ platform, accounts }) => {
  const { events, reads, feed, mailer } = platform;
  const log = platform.logger.child({ component: 'account-mail' });
  // Each mail is its own job: one address the relay keeps deferring holds up no other mail;
  // the checkpoint waits for it (a restart resumes it).
  const jobs = reactorJobs({ checkpoint: CHECKPOINT, reads, log });
  let subscription: Subscription | null = null;
  let stopped = false;
  let running = 0;

  /** True once the mail went out or needs no sending; false when a stop cut it short. */
  async function run(e: RecordedEvent): Promise<boolean> {
    const request = accountMailRequestOf(e);
    if (!request) return true;
    /** Handed to the mailer, not recorded yet: only the record is retried (never the mail). */
    let sent: AccountMail | null = null;
    for (let attempt = 1; !stopped; attempt++) {
      // Past the link's expiry nothing is worth sending (or recording), whatever failed before.
      if (request.exp * 1000 < Date.now()) return true;
      try {
        if (!sent) {
          const job = await accounts.accountMailOf(e);
          if (!job) return true;
          // Sent before a crash that came before the checkpoint: not again.
          if ((await events.readStream(job.stream)).some((r) => r.id === job.record.id)) return true;
          await mailer.send(job.mail);
          sent = job;
        }
        await events.append(sent.stream, [sent.record]);
        return true;
      } catch (err) {
        if (stopped) return false;
        // A relay's 5xx is a refusal for good; anything else (a 4xx, no connection, a full
        // disk under the outbox, the event store away) may pass.
        if (!sent && ((err as { responseCode?: number }).responseCode ?? 0) >= 500) {
          log.error({ err, stream: e.stream, type: e.type }, 'account mail refused by the relay; not retried');
          return true;
        }
        const delay = Math.min(MAX_DELAY_MS, 1_000 * 2 ** (attempt - 1));
        log.warn({ err: (err as Error).message, stream: e.stream, attempt, retryInMs: delay }, 'account mail deferred');
        await jobs.sleep(delay);
      }
    }
    return false;
  }

  function onEvent(e: RecordedEvent): Promise<Pending> {
    const done = jobs.track(e.position);
    running += 1;
    const settled = run(e).then(
      (finished) => {
        done(finished);
        if (!finished) throw new Error('stopped before the mail went out');
      },
      (err) => {
        done(false); // unfinished: the checkpoint holds and a restart retries it
        log.error({ err, stream: e.stream }, 'account mail job crashed; it resumes after a restart');
        throw err;
      },
    );
    settled.catch(() => {}).finally(() => (running -= 1));
    return Promise.resolve({ settled });
  }

  return {
    name: 'account-mail',
    async start(role) {
      if (role === 'gateway') return;
      stopped = false;
      let after = await reads.getCheckpoint(CHECKPOINT);
      if (after === null) {
        // First start (also on a DATA_DIR of a version before this reactor): mail only what
        // is asked from now on, not every unverified sign-up of the log's past.
        after = await events.headPosition();
        if (after !== null) await reads.commit(CHECKPOINT, after, []);
      }
      subscription = feed.subscribe({ after, group: GROUP, filter: { eventTypes: [UserRegistered, AccountMailRequested], streamPrefixes: ['user-'] } }, onEvent);
      subscription.done.catch((err) => log.error({ err }, 'account mail subscription failed'));
    },
    async stop() {
      stopped = true;
      subscription?.close();
      jobs.wakeAll();
      const deadline = Date.now() + 5_000; // a send in progress finishes (it is recorded, or resent after a restart)
      while (running > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await jobs.flushed();
    },
  };
};
