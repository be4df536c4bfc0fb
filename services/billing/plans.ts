/**
 * Plans and subscription status (DECISIONS "Plans and admin"). Pure: the identities
 * context imports it to decide phone provisioning; the billing context owns the events.
 */
import type { Collection, Doc, ReadStore } from '../../infra/ports/read-store.js';
import type { EventStore } from '../../infra/ports/event-store.js';
import { subscriptionStream } from './events.js';

export const PLANS = {
  free: { phoneLimit: 0 },
  email: { phoneLimit: 0 },
  developer: { phoneLimit: 3 },
  team: { phoneLimit: 25 },
} as const;

export type PlanName = keyof typeof PLANS;
export const PLAN_NAMES = Object.keys(PLANS) as PlanName[];

/**
 * `active` (and `trialing`): paid add-ons (phones) may be provisioned; every other status
 * (`past_due`: a payment failed; `canceled`: ended; ...) keeps what the account has but adds
 * none. DECISIONS names no statuses: the admin API takes a billing system's usual words
 * (Stripe's, and the spellings `cancelled`, `inactive`, `suspended`, `expired`), kept as given.
 */
export const STATUSES = ['active', 'trialing', 'past_due', 'unpaid', 'incomplete', 'incomplete_expired', 'paused', 'canceled', 'cancelled', 'inactive', 'suspended', 'expired'] as const;
export type SubscriptionStatus = (typeof STATUSES)[number];
const ACTIVE_STATUSES: readonly SubscriptionStatus[] = ['active', 'trialing'];

/** Whether the status allows paid add-ons. */
export const isActive = (status: SubscriptionStatus): boolean => ACTIVE_STATUSES.includes(status);

export interface SubscriptionDoc extends Doc {
  pk: number;
  plan: PlanName;
  status: SubscriptionStatus;
  updatedAt: string;
}

export const SUBSCRIPTIONS = 'subscriptions';

/** A new account (no subscription stream yet) is on `free`, `active`. */
export const DEFAULT_SUBSCRIPTION = { plan: 'free' as PlanName, status: 'active' as SubscriptionStatus };

export async function currentSubscription(reads: ReadStore, pk: number): Promise<{ plan: PlanName; status: SubscriptionStatus }> {
  const doc = await (reads.collection(SUBSCRIPTIONS) as Collection<SubscriptionDoc>).get(String(pk));
  return doc ? { plan: doc.plan, status: doc.status } : { ...DEFAULT_SUBSCRIPTION };
}

/**
 * The subscription as the event log has it now (not the read model, which may lag): for
 * checks that must not be decided on a plan an admin has just changed.
 */
export async function subscriptionInLog(store: EventStore, pk: number): Promise<{ plan: PlanName; status: SubscriptionStatus }> {
  const [last] = await store.readStream(subscriptionStream(pk), { direction: 'backwards', maxCount: 1 });
  if (!last) return { ...DEFAULT_SUBSCRIPTION };
  const d = last.data as { plan: PlanName; status: SubscriptionStatus };
  return { plan: d.plan, status: d.status };
}

/** Phones the subscription allows now: none unless the status is an active one. */
export function phoneAllowance(sub: { plan: PlanName; status: SubscriptionStatus }): number {
  return isActive(sub.status) ? PLANS[sub.plan].phoneLimit : 0;
}

/** The cheapest plan that allows `phones` numbers (what a 402 names as `plan_required`), or null when none does. */
export function planRequiredFor(phones: number): PlanName | null {
  return PLAN_NAMES.find((p) => PLANS[p].phoneLimit >= phones) ?? null;
}
