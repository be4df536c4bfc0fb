/**
 * The device context: agent self sign-up through the OAuth 2.0 Device Authorization Grant
 * (RFC 8628), approved by a person on the `/device` page (local password or the external
 * OIDC provider) or through the approve/deny API. Each redeemed approval mints a fresh
 * management key through the keys context. See docs/DEVICE-FLOW.md.
 */
import type { ContextFactory, ContextParts } from '../../infra/runtime.js';
import { deviceProjection } from '../../projections/device/index.js';
import { createKeys } from '../keys/index.js';
import { webSignIn } from '../dashboard/sign-in.js';
import { devicePage } from './page.js';
import { deviceRoutes } from './routes.js';
import { createDeviceService, type DeviceService } from './service.js';

export { DEVICE_GRANT_TYPE, type DeviceService } from './service.js';
export { DEVICE_EVENT_TYPES } from './events.js';

export const deviceContext: ContextFactory = (shared) => {
  const { platform, accounts } = shared;
  const { config } = platform;
  const keys = createKeys(platform);
  const service = createDeviceService({
    platform,
    accounts,
    hmacKey: shared.keys.hmacKey,
    keys: {
      async mint({ ownerPk, label }) {
        // Its secret is answered once, with the device's tokens: not waited for here (a lag of
        // the read models would lose it, and each poll mint another); the session started
        // after it waits for the read models, which apply the log in order (the key included).
        const { keyId, secret } = await keys.mint(ownerPk, { kind: 'management', label }, async () => {});
        return { keyId, key: secret };
      },
      revoke: ({ ownerPk, keyId }) => keys.revoke(ownerPk, 'management', keyId),
    },
  });
  // Signing in (password or the external OIDC provider) is the dashboard's one web sign-in.
  const page = devicePage({ service, accounts, web: webSignIn(shared) });
  const parts: ContextParts & { device: DeviceService } = {
    name: 'device',
    projections: [deviceProjection],
    module: deviceRoutes({ service, auth: () => shared.auth, publicUrl: config.publicUrl, accessTokenTtl: config.accessTokenTtl, page }),
    start: () => service.start(),
    stop: () => service.stop(),
    /** The service itself (tests look at its parked polls). */
    device: service,
  };
  return parts;
};
