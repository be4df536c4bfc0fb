/** What the gateway answers for errors of the ports (services/gateway/app.ts `toApiError`). */
import { toApiError } from '../../services/gateway/app.js';
import { AppendTooLargeError } from '../../infra/eventstoredb/event-store.js';
import { EventStoreUnavailableError, WrongExpectedRevisionError } from '../../infra/ports/event-store.js';

it('maps the event store\'s errors to their answers: a conflict 409, an outage 503, a write over its size limit 413 (not retried: it fails again)', () => {
  const answer = (err: unknown) => {
    const e = toApiError(err);
    return [e.status, e.code];
  };
  expect(answer(new WrongExpectedRevisionError('s-1', 0, 1))).toEqual([409, 'conflict']);
  expect(answer(new EventStoreUnavailableError('down'))).toEqual([503, 'service_unavailable']);
  expect(answer(new AppendTooLargeError('mailbox-1', 1_048_576))).toEqual([413, 'payload_too_large']);
  expect(answer(new Error('anything else'))).toEqual([500, 'server_error']);
});
