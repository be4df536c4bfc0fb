/** Service-wide endpoints: health, the OpenAPI document, and the operator's metrics. */
import type Router from '@koa/router';
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
}

export function systemRoutes(deps: SystemDeps): HttpModule {
  let openapi: unknown = null;
  const metricsToken = operatorTokenGuard({ name: 'metrics', secret: deps.metricsToken, limiter: deps.limiter });
  return {
    routes(r: Router) {
      r.get('/api/health/', (ctx) => {
        ctx.body = { status: 'ok' };
      });
      r.get('/api/schema/', (ctx) => {
        openapi ??= buildOpenApi();
        ctx.body = openapi;
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
