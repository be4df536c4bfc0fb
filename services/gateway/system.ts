/** Service-wide endpoints: health and the OpenAPI document. */
import type Router from '@koa/router';
import type { HttpModule } from './app.js';
import { buildOpenApi } from './openapi.js';

export function systemRoutes(): HttpModule {
  let openapi: unknown = null;
  return {
    routes(r: Router) {
      r.get('/api/health/', (ctx) => {
        ctx.body = { status: 'ok' };
      });
      r.get('/api/schema/', (ctx) => {
        openapi ??= buildOpenApi();
        ctx.body = openapi;
      });
    },
  };
}
