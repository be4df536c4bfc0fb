/**
 * The billing context: plans (services/billing/plans.ts), subscription status per account,
 * GET /api/subscription/ and the admin API (enabled by ADMIN_TOKEN).
 */
import type { ContextFactory } from '../../infra/runtime.js';
import { subscriptionsProjection } from '../../projections/subscriptions/index.js';
import { createBilling } from './service.js';
import { billingRoutes } from './routes.js';

export * from './plans.js';
export * from './events.js';
export { createBilling, type Billing } from './service.js';

export const billingContext: ContextFactory = (shared) => {
  const { platform } = shared;
  const billing = createBilling(platform);
  return {
    name: 'billing',
    projections: [subscriptionsProjection],
    module: billingRoutes({ billing, accounts: shared.accounts, auth: () => shared.auth, adminToken: platform.config.adminToken, limiter: platform.limiter }),
  };
};
