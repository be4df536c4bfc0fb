/**
 * The account mail reactor: sign-up verification and password reset mails.
 *
 * A request is an event first (`UserRegistered` with an unverified email, or
 * `AccountMailRequested`), so a crash or a relay outage delays the mail instead of losing it,
 * and a request never fails because the relay is down (it answered 500 before, and only for
 * known addresses: an account oracle). This reactor follows those events from its own
 * checkpoint, one at a time, builds each mail (signing its link then: no link is ever kept),
 * hands it to the mailer and records it with an id derived from the request's, so a resend
 * after a crash records nothing twice. Temporary failures are retried with backoff (up to 5
 * minutes apart) for as long as the link would still work; a permanent refusal is logged and
 * skipped. Like outbound delivery, it runs in one process: the embedded one, or the worker.
 */
import type { Subscription, RecordedEvent } from '../../infra/ports/event-store.js';
import { TemporaryMailError } from '../../infra/ports/mailer.js';
import type { ContextFactory } from '../../infra/runtime.js';
import { AccountMailRequested, UserRegistered } from './events.js';

export const CHECKPOINT = 'reactor:account-mail';
const GROUP = 'ais-account-mail';
const MAX_DELAY_MS = 5 * 60_000;

export const accountMailContext: ContextFactory = ({ platform, accounts }) => {
  const { events, reads, feed, mailer } = platform;
  const log = platform.logger.child({ component: 'account-mail' });
  let subscription: Subscription | null = null;
  let stopped = false;
  let wake: (() => void) | null = null;
  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        wake = null;
        resolve();
      }, ms);
      wake = () => {
        clearTimeout(timer);
        wake = null;
        resolve();
      };
    });

  async function handle(e: RecordedEvent): Promise<void> {
    for (let attempt = 1; !stopped; attempt++) {
      const job = await accounts.accountMailOf(e);
      if (!job || job.expiresAt < Date.now()) break;
      try {
        await mailer.send(job.mail);
        await events.append(job.stream, [job.record]);
        break;
      } catch (err) {
        if (!(err instanceof TemporaryMailError)) {
          log.error({ err, stream: e.stream, type: e.type }, 'account mail refused; not retried');
          break;
        }
        const delay = Math.min(MAX_DELAY_MS, 1_000 * 2 ** (attempt - 1));
        log.warn({ err: (err as Error).message, stream: e.stream, attempt, retryInMs: delay }, 'account mail deferred');
        await sleep(delay);
      }
    }
    if (!stopped) await reads.commit(CHECKPOINT, e.position, []);
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
      subscription = feed.subscribe({ after, group: GROUP, filter: { eventTypes: [UserRegistered, AccountMailRequested], streamPrefixes: ['user-'] } }, handle);
      subscription.done.catch((err) => log.error({ err }, 'account mail subscription failed'));
    },
    async stop() {
      stopped = true;
      wake?.();
      subscription?.close();
    },
  };
};
