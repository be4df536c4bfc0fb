/**
 * The HTTP gateway: a Koa app of two layers: one edge middleware (request id, security
 * headers, trailing-slash folding, error mapping, 404/405 shapes, access log), then one
 * router holding every context's routes (./router.ts).
 * createApp takes everything it needs as arguments; only the composition root
 * (infra/runtime.ts) decides which adapters those are.
 */
import Koa, { type Context, type Next } from 'koa';
import type Router from '@koa/router';
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { ApiError, notFound } from './errors.js';
import { IndexedRouter } from './router.js';
import { drainRefusedBody } from './body.js';
import { API_HEADERS, SECURITY_HEADERS } from './protocol.js';
import { isStorageFault } from '../kernel/faults.js';
import { WrongExpectedRevisionError, EventStoreUnavailableError } from '../../infra/ports/event-store.js';
import type { Metrics } from '../kernel/metrics.js';

export interface HttpModule {
  /** Adds the module's routes. Paths are written with their trailing slash. */
  routes(router: Router): void;
  /**
   * A page for a browser's GET outside /api/ that found nothing (404) or only a form (405):
   * answers `ctx` and returns true, or returns false to leave the spec's JSON error.
   */
  errorPage?(ctx: Context, error: ApiError): Promise<boolean>;
}

export interface AppDeps {
  logger: Logger;
  modules: HttpModule[];
  /**
   * Proxies in front (TRUST_PROXY): their X-Forwarded-Proto makes ctx.secure, and the client
   * address is the entry they appended to X-Forwarded-For (the last `trustProxy` ones; entries
   * before them are the client's own claims, never trusted). 0: the socket's address.
   */
  trustProxy?: number;
  /** Counts each answer (method, route pattern, status, time): GET /metrics. */
  metrics?: Pick<Metrics, 'httpRequest'>;
}

/** Pages (dashboard, /device) set their own Content-Security-Policy. */
const PAGE_HEADERS = SECURITY_HEADERS;

/** What a socket says when the client went away before the answer was all sent. */
const CLIENT_GONE = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED', 'ERR_STREAM_PREMATURE_CLOSE']);

/** Every route served: method and path (the OpenAPI coverage test reads it). */
export type RouteTable = Array<{ method: string; path: string }>;

export function createApp(deps: AppDeps): Koa & { routeTable: RouteTable } {
  const app = new Koa({ proxy: (deps.trustProxy ?? 0) > 0, maxIpsCount: deps.trustProxy ?? 0 });
  const log = deps.logger;

  // Case-sensitive, as Django's URLs are: the gateway's checks of `/api/` (CSRF, API headers,
  // trailing-slash folding) must see the path the route answers (`/API/...` once bypassed them).
  const router = new IndexedRouter({ sensitive: true });
  for (const m of deps.modules) m.routes(router);
  // 405 with Allow, and OPTIONS answers, only matter for requests no route answered: run
  // there, after the routes (the router has recorded the paths that matched).
  const allowedMethods = router.allowedMethods();
  const answered = async () => {};
  const errorPages = deps.modules.flatMap((m) => (m.errorPage ? [m.errorPage.bind(m)] : []));
  /** A browser (it asks for HTML by name; fetch and curl send *\/*) visiting a page address that has none. */
  const pageWanted = (ctx: Context, err: ApiError) =>
    (err.status === 404 || err.status === 405) && (ctx.method === 'GET' || ctx.method === 'HEAD') && !ctx.path.startsWith('/api/') && ctx.get('accept').includes('text/html');

  // One edge middleware (each Koa layer costs a closure and a promise on every request):
  // request id, security headers, trailing-slash folding, error mapping, 404 shape, access log.
  app.use(async (ctx: Context, next: Next) => {
    const started = performance.now();
    const incoming = ctx.get('x-request-id');
    const id = incoming && /^[\w.-]{1,128}$/.test(incoming) ? incoming : randomUUID();
    ctx.state.requestId = id;
    const api = ctx.path.startsWith('/api/');
    ctx.set(api ? API_HEADERS : PAGE_HEADERS);
    ctx.set('X-Request-Id', id);
    if (ctx.secure) ctx.set('Strict-Transport-Security', 'max-age=63072000; includeSubDomains');
    // DECISIONS: a path without its trailing slash is the same resource (no redirect).
    if (api && !ctx.path.endsWith('/')) ctx.path = `${ctx.path}/`;
    let failure: unknown;
    let refusal: ApiError | undefined;
    try {
      // One path, one resource: `/api/identities//` is no spelling of the list (Django: 404).
      if (api && ctx.path.includes('//')) throw notFound();
      await next();
      // Unanswered: 404 for unknown paths; 405 (with Allow, set by allowedMethods) for a known
      // path with another method; both in the spec's error shape.
      if (ctx.body === undefined || ctx.body === null || ctx.body === '') {
        if (ctx.status === 404) {
          await allowedMethods(ctx as never, answered);
          // OPTIONS is answered for every known path (with Allow), so Allow names it too, as DRF's does.
          const allow = ctx.response.get('Allow');
          if (allow && !allow.split(/,\s*/).includes('OPTIONS')) ctx.set('Allow', `${allow}, OPTIONS`);
          // The router's OPTIONS answer is an empty string, which Koa types text/plain: no content, no type.
          if (ctx.method === 'OPTIONS' && ctx.response.status === 200) ctx.remove('Content-Type');
        }
        if (ctx.status === 404) throw notFound();
        if (ctx.status === 405 || ctx.status === 501) throw new ApiError(405, 'method_not_allowed', `Method "${ctx.method}" not allowed.`);
      } else if (typeof ctx.body === 'object' && !Buffer.isBuffer(ctx.body) && typeof (ctx.body as { pipe?: unknown }).pipe !== 'function') {
        // Serialised here rather than by Koa after this middleware: a failure (an answer
        // over V8's string limit) is then a logged 500 in the error shape, not Koa's
        // silent plain-text one. Content-Type is already JSON (set with the object).
        ctx.body = JSON.stringify(ctx.body);
      }
    } catch (raw) {
      failure = raw;
      refusal = toApiError(raw);
      let paged = false;
      if (pageWanted(ctx, refusal)) {
        for (const page of errorPages) if ((paged = await page(ctx, refusal).catch(() => false))) break;
      }
      if (!paged) answerError(ctx, refusal);
    } finally {
      // A write held its identity (services/gateway/identity-gate.ts): its answer is decided.
      (ctx.state.releaseIdentity as (() => void) | undefined)?.();
    }
    // By the router's pattern, never the path (ids would make a label per resource).
    const route = (ctx as { _matchedRoute?: unknown })._matchedRoute;
    deps.metrics?.httpRequest(ctx.method, typeof route === 'string' ? route : 'unmatched', ctx.status, (performance.now() - started) / 1000);
    // Only method, path and status: headers and bodies may carry secrets. Most requests log
    // nothing, so the request's child logger is made only when a line is written.
    if (ctx.status >= 500 || log.isLevelEnabled('debug')) {
      const line = { method: ctx.method, path: ctx.path, status: ctx.status, ms: Math.round((performance.now() - started) * 10) / 10 };
      const child = log.child({ req_id: id });
      // A 5xx the code chose (an ApiError: overloaded, shutting down; read models behind) is a
      // refusal to note, not a failure; anything else thrown (a store away, a full disk), or a 500, is.
      const chosen = failure instanceof ApiError || (failure as { code?: unknown } | null)?.code === 'projection_lag';
      if (ctx.status >= 500 && ctx.status !== 500 && chosen && refusal) child.warn({ ...line, code: refusal.code, detail: refusal.detail }, 'request refused');
      else if (ctx.status >= 500) child.error({ ...line, err: failure }, 'request failed');
      else child.debug(line, 'request');
    }
    // A refusal that closes the connection (a body over its limit) while the body still comes:
    // its bounded rest is read first, so the client gets the answer rather than a reset.
    // (Measured above without that wait; a shutdown's own Connection: close does not wait.)
    if (refusal?.headers?.Connection === 'close') await drainRefusedBody(ctx.req);
  });

  app.use(router.routes());

  // Errors were answered by the edge middleware; Koa's own handler stays silent. What Koa
  // reports is what failed after the middleware was done: a body stream that broke off (a
  // damaged blob). Once the answer has started, the client must see a broken transfer, not
  // wait for the rest of a response that will never end (Koa leaves it open).
  // A client that goes away mid-answer (a dropped download, a closed stream) is reported here
  // too: that is no failure of ours, and says nothing worth a log line.
  app.silent = true;
  app.on('error', (err: Error & { headerSent?: boolean; code?: string }, ctx?: Context) => {
    if (CLIENT_GONE.has(err.code ?? '') || ctx?.state.failedAfterStart) return;
    if (ctx) ctx.state.failedAfterStart = true; // one line per answer (the socket reports it again)
    log.error({ err, req_id: ctx?.state.requestId, path: ctx?.path }, 'answer failed after it started');
    if (err.headerSent && ctx && !ctx.res.writableEnded) ctx.res.destroy(err);
  });
  const routeTable: RouteTable = router.stack.flatMap((layer) =>
    layer.methods.filter((m) => m !== 'HEAD').map((method) => ({ method: method.toLowerCase(), path: String(layer.path) })),
  );
  return Object.assign(app, { routeTable });
}

function answerError(ctx: Context, err: ApiError): void {
  ctx.status = err.status;
  for (const [k, v] of Object.entries(err.headers ?? {})) ctx.set(k, v);
  ctx.body = err.body();
}

/** Maps anything thrown to the spec's error shapes; unknown errors become a generic 500. */
export function toApiError(raw: unknown): ApiError {
  if (raw instanceof ApiError) return raw;
  if (raw instanceof WrongExpectedRevisionError) {
    return new ApiError(409, 'conflict', 'The resource was modified concurrently; retry the request.');
  }
  if (raw instanceof EventStoreUnavailableError) {
    return new ApiError(503, 'service_unavailable', 'The service is temporarily unavailable; retry shortly.', undefined, { 'Retry-After': '1' });
  }
  if (isStorageFault(raw)) {
    return new ApiError(503, 'service_unavailable', 'The service cannot store data right now; retry shortly.', undefined, { 'Retry-After': '1' });
  }
  const e = raw as { status?: number; statusCode?: number; expose?: boolean; message?: string; code?: string };
  if (e?.code === 'projection_lag') {
    return new ApiError(503, 'projection_lag', 'The change was saved but is not readable yet; retry shortly.', undefined, { 'Retry-After': '1' });
  }
  if (e?.code === 'invalid_cursor') return new ApiError(400, 'invalid', 'Invalid cursor.', { cursor: ['Invalid cursor.'] });
  // EventStoreDB's MaxAppendSize (1 MiB by default): the same write fails again, so not a 503.
  if (e?.code === 'append_too_large') return new ApiError(413, 'payload_too_large', 'The change is larger than the event store takes in one write.');
  const status = e?.status ?? e?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const code = status === 404 ? 'not_found' : status === 405 ? 'method_not_allowed' : status === 413 ? 'payload_too_large' : 'invalid';
    return new ApiError(status, code, e.expose && e.message ? e.message : 'Bad request.');
  }
  return new ApiError(500, 'server_error', 'A server error occurred.');
}
