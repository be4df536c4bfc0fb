/**
 * Read model `subscriptions`: the plan and status of each account that ever had a change.
 * No document = the default (free, active): new accounts need no event.
 */
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Projection } from '../projection.js';
import { SUBSCRIPTIONS, type SubscriptionDoc } from '../../services/billing/plans.js';
import { SubscriptionChanged, type SubscriptionChangedData } from '../../services/billing/events.js';

export { SUBSCRIPTIONS, type SubscriptionDoc };

export const subscriptionsProjection: Projection = {
  name: 'subscriptions',
  collections: [{ name: SUBSCRIPTIONS, indexes: [['plan']] }],
  eventTypes: [SubscriptionChanged],
  apply(e: RecordedEvent) {
    const d = e.data as SubscriptionChangedData;
    const id = String(d.pk);
    return [
      {
        collection: SUBSCRIPTIONS,
        id,
        evolve: () => ({ id, pk: d.pk, plan: d.plan, status: d.status, updatedAt: d.at }) satisfies SubscriptionDoc,
      },
    ];
  },
};
