/** Service-wide endpoints: health, the OpenAPI document, and the operator's metrics. */
import type Router from '@koa/router';
import type { Context } from 'koa';
import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import type { HttpModule } from './app.js';
import { buildOpenApi } from './openapi.js';
import { operatorTokenGuard } from './operator-token.js';
import type { RateLimiter } from '../../infra/ports/rate-limiter.js';
import type { Metrics } from '../kernel/metrics.js';

export interface SystemDeps {
  metrics: Metrics;
  /** METRICS_TOKEN; null: /metrics does not exist (404), as the admin API without ADMIN_TOKEN. */
  metricsToken: string | null;
  limiter: RateLimiter;
  /** The request's account credential, resolving when valid (403 on /metrics, not a wrong token). */
  principal?: (ctx: Context) => Promise<unknown>;
}

function compiledSchema(): { json: string; gzip: Buffer; etag: string } {
  const json = JSON.stringify(buildOpenApi());
  // Weak: the gzipped and the plain bytes are one document (RFC 9110 §8.8.1).
  return { json, gzip: gzipSync(json), etag: `W/"${createHash('sha256').update(json).digest('base64url').slice(0, 27)}"` };
}

export function systemRoutes(deps: SystemDeps): HttpModule {
  let schema: { json: string; gzip: Buffer; etag: string } | null = null;
  const metricsToken = operatorTokenGuard({ name: 'metrics', secret: deps.metricsToken, limiter: deps.limiter, principal: deps.principal });
  return {
    routes(r: Router) {
      r.get('/api/health/', (ctx) => {
        ctx.body = { status: 'ok' };
      });
      // The same document for every caller until the next deploy: revalidated by its ETag
      // (304), and gzipped for clients that take it (165 KB of JSON, a tenth of it gzipped).
      r.get('/api/schema/', (ctx) => {
        schema ??= compiledSchema();
        ctx.set('Cache-Control', 'no-cache');
        ctx.vary('Accept-Encoding');
        ctx.etag = schema.etag;
        ctx.type = 'application/json; charset=utf-8';
        ctx.status = 200; // Koa judges freshness of a 2xx only
        if (ctx.fresh) {
          ctx.status = 304;
          return;
        }
        if (ctx.acceptsEncodings('gzip', 'identity') === 'gzip') {
          ctx.set('Content-Encoding', 'gzip');
          ctx.body = schema.gzip;
        } else ctx.body = schema.json;
      });
      // Prometheus' conventional path (outside /api/: an operator's, not a client's), scraped
      // with `authorization: { credentials: <METRICS_TOKEN> }`.
      if (!deps.metricsToken) return; // not there at all without METRICS_TOKEN (every method 404)
      r.get('/metrics', async (ctx) => {
        await metricsToken(ctx);
        const { contentType, text } = await deps.metrics.scrape();
        ctx.set('Cache-Control', 'no-store');
        ctx.type = contentType;
        ctx.body = text;
      });
    },
  };
}
