/** Events of the billing context (stream `subscription-<pk>`). */
export const SubscriptionChanged = 'SubscriptionChanged';

export interface SubscriptionChangedData {
  pk: number;
  plan: string;
  status: string;
  previousPlan: string;
  previousStatus: string;
  /** Who changed it: `admin` (the admin API). */
  by: string;
  at: string;
}
