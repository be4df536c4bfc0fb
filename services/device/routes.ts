/**
 * HTTP surface of the device authorization grant (RFC 8628; SPEC "Sign-up and tokens",
 * DECISIONS "Device authorization") and its RFC 8414 metadata.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { HttpModule } from '../gateway/app.js';
import type { Authenticator } from '../gateway/auth.js';
import { forbidden } from '../gateway/errors.js';
import { body } from '../gateway/http.js';
import { isTrue, validator } from '../gateway/validate.js';
import { DEVICE_GRANT_TYPE, type DeviceService } from './service.js';

const v = {
  request: validator<{ client_id?: string; scope?: string }>('device.json#DeviceAuthorizationRequest'),
  token: validator<{ device_code: string; wait?: boolean | 'true' | 'false'; grant_type?: string; client_id?: string }>('device.json#DeviceTokenRequest'),
  decision: validator<{ user_code: string }>('device.json#DeviceDecision'),
};

export interface DeviceRoutesDeps {
  service: DeviceService;
  auth: () => Authenticator;
  publicUrl: string;
  accessTokenTtl: number;
  page: HttpModule;
}

export function deviceRoutes(deps: DeviceRoutesDeps): HttpModule {
  const { service, publicUrl } = deps;

  /** A person's credential: a user token, the dashboard cookie or basic auth; never an API key. */
  async function human(ctx: Context) {
    const p = await deps.auth().principal(ctx);
    if (p.kind === 'management_key' || p.kind === 'identity_key') {
      throw forbidden('Approving a device needs a user sign-in (JWT or session), not an API key.');
    }
    // A session cookie's writes are CSRF-checked by the authenticator (services/gateway/auth.ts).
    return p;
  }

  return {
    routes(r: Router) {
      r.post('/api/auth/device/', async (ctx) => {
        const b = v.request(await body(ctx));
        const clientId = b.client_id?.trim() || null;
        ctx.body = await service.request({ clientId, ip: ctx.ip });
      });

      r.post('/api/auth/device/token/', async (ctx) => {
        const raw = await body(ctx);
        // RFC 6749 §5.2 / RFC 8628 §3.4: another grant on this endpoint is not ours.
        if (raw.grant_type !== undefined && raw.grant_type !== DEVICE_GRANT_TYPE) {
          ctx.status = 400;
          ctx.body = { error: 'unsupported_grant_type' };
          return;
        }
        const b = v.token(raw);
        const abort = new AbortController();
        // The response closing before we answered means the client went away: stop waiting.
        const onClose = () => abort.abort();
        ctx.res.once('close', onClose);
        try {
          const answer = await service.poll({ deviceCode: b.device_code, wait: isTrue(b.wait), abort: abort.signal });
          ctx.status = answer.status;
          ctx.body = answer.body;
          if (answer.status === 200 && raw.grant_type === DEVICE_GRANT_TYPE) {
            // A standard OAuth client (RFC 6749 §5.1) reads these names; the spec's own stay too.
            const t = answer.body as { access: string; refresh: string };
            ctx.body = { ...answer.body, access_token: t.access, token_type: 'Bearer', expires_in: deps.accessTokenTtl, refresh_token: t.refresh };
          }
        } finally {
          ctx.res.off('close', onClose);
        }
      });

      r.post('/api/auth/device/approve/', async (ctx) => {
        const p = await human(ctx);
        const b = v.decision(await body(ctx));
        await service.decide({ userPk: p.userPk, userCode: b.user_code, action: 'approve', via: p.kind, ip: ctx.ip });
        ctx.body = { detail: 'Device approved. It receives its tokens on its next poll.' };
      });

      r.post('/api/auth/device/deny/', async (ctx) => {
        const p = await human(ctx);
        const b = v.decision(await body(ctx));
        await service.decide({ userPk: p.userPk, userCode: b.user_code, action: 'deny', via: p.kind, ip: ctx.ip });
        ctx.body = { detail: 'Device denied.' };
      });

      // RFC 8414: how a standard OAuth client finds the endpoints.
      r.get('/.well-known/oauth-authorization-server', (ctx) => {
        ctx.set('Cache-Control', 'public, max-age=3600');
        ctx.body = {
          issuer: publicUrl,
          token_endpoint: `${publicUrl}/api/auth/device/token/`,
          device_authorization_endpoint: `${publicUrl}/api/auth/device/`,
          jwks_uri: `${publicUrl}/.well-known/jwks.json`,
          grant_types_supported: [DEVICE_GRANT_TYPE],
          response_types_supported: [],
          token_endpoint_auth_methods_supported: ['none'],
          service_documentation: `${publicUrl}/api/schema/`,
        };
      });

      deps.page.routes(r);
    },
  };
}

