/**
 * The event store contract against EventStoreDB, when EVENTSTORE_URL is set
 * (e.g. `esdb://localhost:2113?tls=false`; `npm run test:cluster`). Without it, one test
 * says so and passes: no EventStoreDB runs on our machines.
 */
import { openEventStoreDb } from '../../infra/eventstoredb/event-store.js';
import { eventStoreContract } from './event-store.contract.js';

const url = process.env.EVENTSTORE_URL;
const quiet = { warn: () => {}, error: () => {} };

if (url) {
  eventStoreContract(
    'eventstoredb',
    async () => {
      const store = await openEventStoreDb({ url, logger: quiet });
      return { store, cleanup: () => store.close() };
    },
    // EventStoreDB dedupes ids per stream only (no index by id); the port asks no more.
    { idsUniqueAcrossStreams: false },
  );
} else {
  describe('EventStore contract: eventstoredb', () => {
    it('is skipped without EVENTSTORE_URL', () => {
      console.log('SKIPPED: EventStoreDB contract suite (set EVENTSTORE_URL to run)');
      expect(url).toBeFalsy();
    });
  });
}
