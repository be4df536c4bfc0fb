/**
 * Operational metrics in the Prometheus text format (prom-client), served at `GET /metrics`
 * to holders of METRICS_TOKEN (services/gateway/system.ts).
 *
 * One registry per runtime (tests run several runtimes in one process); the process-level
 * metrics (CPU, memory, event loop delay, GC) are collected once per process and merged in
 * at scrape time. Contexts count what they do through {@link Metrics}; values that are read
 * rather than counted (projection checkpoints, open event streams) are gauges whose value is
 * asked for at scrape time, so nothing is kept up to date between scrapes.
 *
 * Labels are bounded by the code, never by input: a route is its pattern
 * (`/api/identities/:uuid/`), an unknown path is `unmatched`, an event type is one of ours.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

export type PasswordCheckResult = 'verified' | 'refused' | 'remembered';

export type SmtpOutcome = 'accepted' | 'rejected' | 'failed' | 'recipient_rejected' | 'connection_refused';

/** A gauge's samples, asked for at scrape time: a number, or one value per label set. */
export type GaugeReading = number | Array<{ labels: Record<string, string>; value: number }>;

export interface Metrics {
  /** One answered HTTP request (`route`: the router's pattern, or `unmatched`). */
  httpRequest(method: string, route: string, status: number, seconds: number): void;
  /** One message's outcome at the end of DATA (per recipient identity when accepted), a recipient refused at RCPT, or a connection refused (too many from its address). */
  smtpMessage(outcome: SmtpOutcome, count?: number): void;
  /**
   * Events appended to the store by this process, by type: also what the reactors did
   * (`EmailSent`, `EmailDeliveryDeferred`, `EmailFailed`, `EmailBounced` for outbound mail), so they count nothing else.
   */
  eventsAppended(events: readonly { type: string }[]): void;
  /** One password check (sign-in, HTTP basic): verified by argon2id, refused, or remembered (an HTTP basic credential verified before: no argon2id). */
  passwordCheck(result: PasswordCheckResult): void;
  /** A gauge read at scrape time (the callback must be cheap and must not throw). */
  gauge(name: string, help: string, labelNames: string[], read: () => GaugeReading | Promise<GaugeReading>): void;
  /** The exposition text and its content type. */
  scrape(): Promise<{ contentType: string; text: string }>;
}

const PREFIX = 'ais_';
let processRegistry: Registry | null = null;

/** prom-client's gauges named like counters (`promtool check metrics` refuses them); each has a `…` twin without `_total`. */
const MISNAMED_DEFAULTS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

/**
 * Process-wide metrics, registered once whatever the number of runtimes, from the start of
 * the first runtime that counts (not its first scrape: CPU and GC would count from then).
 */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry, prefix: PREFIX });
    for (const name of MISNAMED_DEFAULTS) processRegistry.removeSingleMetric(`${PREFIX}${name}`);
  }
  return processRegistry;
}

/** Metrics nobody can read (no METRICS_TOKEN) cost nothing: every call is a no-op. */
const DISABLED: Metrics = {
  httpRequest() {},
  smtpMessage() {},
  eventsAppended() {},
  passwordCheck() {},
  gauge() {},
  scrape: async () => ({ contentType: 'text/plain; version=0.0.4; charset=utf-8', text: '' }),
};

export function createMetrics(options: { enabled: boolean } = { enabled: true }): Metrics {
  if (!options.enabled) return DISABLED;
  processMetrics();
  const registry = new Registry();
  const requests = new Counter({ name: `${PREFIX}http_requests_total`, help: 'HTTP requests answered, by method, route pattern and status.', labelNames: ['method', 'route', 'status'], registers: [registry] });
  const durations = new Histogram({
    name: `${PREFIX}http_request_duration_seconds`,
    help: 'Time from the request until its handler answered (a streamed body, as an event stream, goes on after), by method and route pattern.',
    labelNames: ['method', 'route'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const smtp = new Counter({ name: `${PREFIX}smtp_messages_total`, help: 'Inbound SMTP: messages at the end of DATA accepted (per recipient identity), rejected (5xx, nothing kept) or failed (4xx, the sender retries); recipients refused at RCPT (recipient_rejected); connections refused, too many from one address (connection_refused).', labelNames: ['outcome'], registers: [registry] });
  const appended = new Counter({ name: `${PREFIX}events_appended_total`, help: 'Events appended to the event store by this process, by type.', labelNames: ['type'], registers: [registry] });

  const passwordChecks = new Counter({ name: `${PREFIX}password_checks_total`, help: 'Password checks (sign-in, HTTP basic) by result: verified (argon2id matched), refused (it did not, or no such account), remembered (an HTTP basic credential this process verified against the same password hash: no argon2id).', labelNames: ['result'], registers: [registry] });

  const appendedChildren = new Map<string, Counter.Internal>();
  // Children by label values: a request looks its pair up in a map instead of hashing labels.
  const requestChildren = new Map<string, { count: Counter.Internal; time: Histogram.Internal<'method' | 'route'> }>();

  return {
    httpRequest(method, route, status, seconds) {
      const key = `${method} ${status} ${route}`;
      let child = requestChildren.get(key);
      if (!child) {
        child = { count: requests.labels(method, route, String(status)), time: durations.labels(method, route) };
        requestChildren.set(key, child);
      }
      child.count.inc();
      child.time.observe(seconds);
    },
    smtpMessage(outcome, count = 1) {
      if (count > 0) smtp.inc({ outcome }, count);
    },
    eventsAppended(events) {
      for (const { type } of events) {
        let child = appendedChildren.get(type);
        if (!child) appendedChildren.set(type, (child = appended.labels(type)));
        child.inc();
      }
    },
    passwordCheck(result) {
      passwordChecks.inc({ result });
    },
    gauge(name, help, labelNames, read) {
      new Gauge({
        name: `${PREFIX}${name}`,
        help,
        labelNames,
        registers: [registry],
        async collect() {
          const reading = await read();
          this.reset();
          if (typeof reading === 'number') this.set(reading);
          else for (const { labels, value } of reading) this.set(labels, value);
        },
      });
    },
    async scrape() {
      const merged = Registry.merge([processMetrics(), registry]);
      return { contentType: merged.contentType, text: await merged.metrics() };
    },
  };
}
