/**
 * The account mail reactor: sign-up verification and password reset mails, and the notice
 * that a password changed.
 *
 * A request is an event first (`UserRegistered` with an unverified email,
 * `AccountMailRequested`, or `UserPasswordChanged`), so a crash or a relay outage delays the mail instead of losing it,
 * and a request never fails because the relay is down (it answered 500 before, and only for
 * known addresses: an account oracle). This reactor follows those events from its own
 * checkpoint, builds each mail (signing its link then: no link is ever kept),
 * hands it to the mailer and records it with an id derived from the request's (a mail
 * already recorded is not sent again after a crash). Each mail is its own job, retried with
 * backoff (up to 5 minutes apart) for as long as its link would still work; a relay's 5xx is
 * logged and not retried. The checkpoint waits for unfinished jobs (services/kernel/
 * reactor.ts). Like outbound delivery, it runs in one process: the embedded one, or the worker.
 */
import { streamPrefix, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { ContextFactory } from '../../infra/runtime.js';
import { createReactor, retryWait, type JobRun } from '../kernel/reactor.js';
import { AccountMailRequested, USER, UserPasswordChanged, UserRegistered } from './events.js';
import { accountMailRequestOf, type AccountMail } from './service.js';

export const CHECKPOINT = 'reactor:account-mail';
const GROUP = 'ais-account-mail';

export const accountMailContext: ContextFactory = ({ platform, accounts }) => {
  const { events, reads, feed, mailer } = platform;
  const log = platform.logger.child({ component: 'account-mail' });

  /** True once the mail went out or needs no sending; false when a stop cut it short. */
  async function send(e: RecordedEvent, run: JobRun): Promise<boolean> {
    const request = accountMailRequestOf(e);
    if (!request) return true;
    /** Handed to the mailer, not recorded yet: only the record is retried (never the mail). */
    let sent: AccountMail | null = null;
    for (let attempt = 1; !run.stopped; attempt++) {
      // Past the link's expiry nothing is worth sending (or recording), whatever failed before.
      if (request.exp * 1000 < Date.now()) return true;
      try {
        if (!sent) {
          const job = await accounts.accountMailOf(e);
          if (!job) return true;
          // Sent before a crash that came before the checkpoint: not again.
          // (The record is appended after the request, to the request's stream.)
          if ((await events.readStream(job.stream, { fromRevision: e.revision + 1 })).some((r) => r.id === job.record.id)) return true;
          await mailer.send(job.mail);
          sent = job;
        }
        await events.append(sent.stream, [sent.record]);
        return true;
      } catch (err) {
        if (run.stopped) return false;
        // A relay's 5xx is a refusal for good; anything else (a 4xx, no connection, a full
        // disk under the outbox, the event store away) may pass.
        if (!sent && ((err as { responseCode?: number }).responseCode ?? 0) >= 500) {
          log.error({ err, stream: e.stream, type: e.type }, 'account mail refused by the relay; not retried');
          return true;
        }
        const delay = retryWait(attempt - 1);
        log.warn({ err: (err as Error).message, stream: e.stream, attempt, retryInMs: delay }, 'account mail deferred');
        await run.sleep(delay);
      }
    }
    return false;
  }

  // Each mail is its own job: one address the relay keeps deferring holds up no other mail.
  // A first start (also on a DATA_DIR of a version before this reactor) mails only what is
  // asked from then on, not every unverified sign-up of the log's past.
  const reactor = createReactor(
    { events, reads, feed, log },
    { checkpoint: CHECKPOINT, group: GROUP, filter: { eventTypes: [UserRegistered, AccountMailRequested, UserPasswordChanged], streamPrefixes: [streamPrefix(USER)] }, fromHeadOnFirstStart: true, job: send },
  );

  return {
    name: 'account-mail',
    async start(role) {
      if (role !== 'gateway') await reactor.start();
    },
    async stop() {
      await reactor.stop();
    },
  };
};
