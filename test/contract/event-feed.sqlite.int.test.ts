/** The EventFeed contract against the embedded feed: the SQLite event store's subscriptions. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { eventStoreFeed } from '../../infra/ports/event-feed.js';
import { openSqliteEventStore } from '../../infra/sqlite/event-store.js';
import { eventFeedContract } from './event-feed.contract.js';

eventFeedContract('event store (sqlite)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-feed-'));
  const store = await openSqliteEventStore({ file: path.join(dir, 'events.db'), logger: { warn: () => {}, error: () => {} } });
  return {
    feed: eventStoreFeed(store),
    store,
    cleanup: async () => {
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});
