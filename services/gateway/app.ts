/**
 * The HTTP gateway: a Koa app whose middleware is, in order, request id + access log,
 * error mapping, security headers, trailing-slash folding, then the contexts' routers.
 * createApp takes everything it needs as arguments; only the composition root
 * (infra/runtime.ts) decides which adapters those are.
 */
import Koa, { type Context, type Next } from 'koa';
import Router from '@koa/router';
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { ApiError, notFound } from './errors.js';
import { WrongExpectedRevisionError, EventStoreUnavailableError } from '../../infra/ports/event-store.js';

export interface HttpModule {
  /** Adds the module's routes. Paths are written with their trailing slash. */
  routes(router: Router): void;
}

export interface AppDeps {
  logger: Logger;
  modules: HttpModule[];
  /** Behind a TLS-terminating proxy: trust X-Forwarded-* for ctx.ip and ctx.secure. */
  trustProxy?: boolean;
}

/** Paths outside /api/ that keep their exact spelling (no trailing-slash folding). */
const EXACT_PATH = /^\/(\.well-known\/|static\/|favicon)/;

/** Every route served: method and path (the OpenAPI coverage test reads it). */
export type RouteTable = Array<{ method: string; path: string }>;

export function createApp(deps: AppDeps): Koa & { routeTable: RouteTable } {
  const app = new Koa({ proxy: deps.trustProxy ?? false });
  const log = deps.logger;

  app.use(async (ctx: Context, next: Next) => {
    const started = process.hrtime.bigint();
    const incoming = ctx.get('x-request-id');
    const id = /^[\w.-]{1,128}$/.test(incoming) ? incoming : randomUUID();
    ctx.state.requestId = id;
    ctx.set('X-Request-Id', id);
    ctx.state.log = log.child({ req_id: id });
    try {
      await next();
    } finally {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      // Only method, path and status: headers and bodies may carry secrets.
      if (log.isLevelEnabled('debug') || ctx.status >= 500) {
        ctx.state.log[ctx.status >= 500 ? 'error' : 'debug']({ method: ctx.method, path: ctx.path, status: ctx.status, ms: Math.round(ms * 10) / 10 }, 'request');
      }
    }
  });

  app.use(errorMiddleware);

  app.use(async (ctx: Context, next: Next) => {
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.set('Referrer-Policy', 'no-referrer');
    ctx.set('X-Frame-Options', 'DENY');
    ctx.set('Cross-Origin-Opener-Policy', 'same-origin');
    if (ctx.secure) ctx.set('Strict-Transport-Security', 'max-age=63072000; includeSubDomains');
    await next();
    if (ctx.path.startsWith('/api/')) {
      ctx.set('Cache-Control', 'no-store');
      if (!ctx.response.get('Content-Security-Policy')) ctx.set('Content-Security-Policy', "default-src 'none'; frame-ancestors 'none'");
    }
  });

  // DECISIONS: a path without its trailing slash is the same resource (no redirect).
  app.use(async (ctx: Context, next: Next) => {
    if (!ctx.path.endsWith('/') && ctx.path.startsWith('/api/') && !EXACT_PATH.test(ctx.path)) ctx.path = `${ctx.path}/`;
    await next();
  });

  // Unmatched paths: 404 in the spec's shape (allowedMethods below turns known paths into 405).
  app.use(async (ctx: Context, next: Next) => {
    await next();
    if (ctx.status === 404 && (ctx.body === undefined || ctx.body === null)) throw notFound();
  });

  const router = new Router();
  for (const m of deps.modules) m.routes(router);
  app.use(
    router.allowedMethods({
      throw: true,
      methodNotAllowed: () => new ApiError(405, 'method_not_allowed', 'Method not allowed.'),
      notImplemented: () => new ApiError(405, 'method_not_allowed', 'Method not allowed.'),
    }),
  );
  app.use(router.routes());

  // Errors were answered by errorMiddleware; Koa's own handler stays silent.
  app.silent = true;
  const routeTable: RouteTable = router.stack.flatMap((layer) =>
    layer.methods.filter((m) => m !== 'HEAD').map((method) => ({ method: method.toLowerCase(), path: String(layer.path) })),
  );
  return Object.assign(app, { routeTable });
}

async function errorMiddleware(ctx: Context, next: Next): Promise<void> {
  try {
    await next();
  } catch (raw) {
    const err = toApiError(raw);
    if (err.status >= 500) {
      (ctx.state.log ?? console).error({ err: raw, method: ctx.method, path: ctx.path }, 'unhandled error');
    }
    ctx.status = err.status;
    for (const [k, v] of Object.entries(err.headers ?? {})) ctx.set(k, v);
    if (err.status === 405) ctx.set('Allow', ctx.response.get('Allow') || '');
    ctx.body = err.body();
  }
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
  const e = raw as { status?: number; statusCode?: number; expose?: boolean; message?: string; code?: string };
  if (e?.code === 'projection_lag') {
    return new ApiError(503, 'projection_lag', 'The change was saved but is not readable yet; retry shortly.', undefined, { 'Retry-After': '1' });
  }
  if (e?.code === 'invalid_cursor') return new ApiError(400, 'invalid', 'Invalid cursor.', { cursor: ['Invalid cursor.'] });
  const status = e?.status ?? e?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const code = status === 404 ? 'not_found' : status === 405 ? 'method_not_allowed' : status === 413 ? 'payload_too_large' : 'invalid';
    return new ApiError(status, code, e.expose && e.message ? e.message : 'Bad request.');
  }
  return new ApiError(500, 'server_error', 'A server error occurred.');
}
