/**
 * What every context receives from the composition root (infra/runtime.ts): the ports,
 * never the adapters behind them.
 */
import type { Logger } from 'pino';
import type { Config } from '../../infra/config.js';
import type { EventStore } from '../../infra/ports/event-store.js';
import type { EventFeed } from '../../infra/ports/event-feed.js';
import type { ReadStore } from '../../infra/ports/read-store.js';
import type { Mailer } from '../../infra/ports/mailer.js';
import type { RateLimiter } from '../../infra/ports/rate-limiter.js';

export interface ReadModelProgress {
  /** Resolves once the read models have applied every event up to `position` (read-your-writes). */
  waitFor(position: string, timeoutMs?: number): Promise<void>;
}

export interface Platform {
  config: Config;
  logger: Logger;
  events: EventStore;
  /** How reactors follow the log: the event store (embedded) or Kafka consumer groups (cluster). */
  feed: EventFeed;
  reads: ReadStore;
  progress: ReadModelProgress;
  mailer: Mailer;
  limiter: RateLimiter;
}
