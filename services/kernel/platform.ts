/**
 * What every context receives from the composition root (infra/runtime.ts): the ports,
 * never the adapters behind them.
 */
import type { Logger } from 'pino';
import type { Config } from '../../infra/config.js';
import { comparePositions, type EventStore, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { EventFeed } from '../../infra/ports/event-feed.js';
import type { ReadStore } from '../../infra/ports/read-store.js';
import type { Mailer } from '../../infra/ports/mailer.js';
import type { RateLimiter } from '../../infra/ports/rate-limiter.js';
import type { Metrics } from './metrics.js';

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
  /** Operational counters and gauges, served at GET /metrics (services/kernel/metrics.ts). */
  metrics: Metrics;
  /**
   * Whether the request that recorded `e` can no longer be in flight: a reservation so
   * recorded whose holder never used it was abandoned by a crash (services/kernel/reservations.ts).
   */
  settled(e: RecordedEvent): boolean;
}

/** No request that reserves a value takes longer than this (hashing a password, a phone provider call with its timeout). */
export const IN_FLIGHT_LIMIT_MS = 5 * 60_000;

/**
 * Whether a request that took reservations at `startedAt` has run too long to rely on them:
 * past half the in-flight limit (margin for clocks), a reclaim may be near. Such a request
 * gives up before its main event instead of landing on a value another request now holds.
 */
export const outlivedReservations = (startedAt: number): boolean => Date.now() - startedAt > IN_FLIGHT_LIMIT_MS / 2;

/**
 * {@link Platform.settled}: requests older than the in-flight limit are over; in the
 * embedded deployment (one process per DATA_DIR) so is every request of an earlier process,
 * i.e. every event up to the log's head when this one started. That part goes by position,
 * not by time: a restart under a clock set back (an NTP correction) must not keep a crashed
 * request's reservation for as long as the clock was ahead.
 */
export function settledFor(store: 'embedded' | 'cluster', headAtStart: string | null): (e: RecordedEvent) => boolean {
  return (e) => (store === 'embedded' && comparePositions(e.position, headAtStart) <= 0) || Date.parse(e.recordedAt) < Date.now() - IN_FLIGHT_LIMIT_MS;
}
