/** Events of the billing context (stream `subscription-<pk>`). */
import { streamName } from '../../infra/ports/event-store.js';
import type { PlanName, SubscriptionStatus } from './plans.js';

export const SubscriptionChanged = 'SubscriptionChanged';

export interface SubscriptionChangedData {
  pk: number;
  plan: PlanName;
  status: SubscriptionStatus;
  previousPlan: PlanName;
  previousStatus: SubscriptionStatus;
  /** Who changed it: `admin` (the admin API). */
  by: string;
  at: string;
}

export const subscriptionStream = (pk: number) => streamName('subscription', pk);
