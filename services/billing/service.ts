/** Subscriptions: plan and status per account; every change is a SubscriptionChanged event. */
import type { Platform } from '../kernel/platform.js';
import { event, execute, type Evolver } from '../kernel/command.js';
import { nowIso } from '../kernel/ids.js';
import { phonesUsed } from '../identities/service.js';
import { DEFAULT_SUBSCRIPTION, PLANS, currentSubscription, phoneAllowance, type PlanName, type SubscriptionStatus } from './plans.js';
import { SubscriptionChanged, subscriptionStream, type SubscriptionChangedData } from './events.js';

const subEvolver: Evolver<{ plan: PlanName; status: SubscriptionStatus }> = {
  initial: () => ({ ...DEFAULT_SUBSCRIPTION }),
  evolve: (s, e) => (e.type === SubscriptionChanged ? { plan: (e.data as SubscriptionChangedData).plan as PlanName, status: (e.data as SubscriptionChangedData).status as SubscriptionStatus } : s),
};

export function createBilling(platform: Platform) {
  const { events: store, reads, progress, config } = platform;

  /** GET /api/subscription/ body. */
  async function view(pk: number) {
    const sub = await currentSubscription(reads, pk);
    const used = await phonesUsed(store, pk, platform.settled);
    return {
      plan: sub.plan,
      status: sub.status,
      phone_limit: PLANS[sub.plan].phoneLimit,
      phones_used: used,
      // What may still be provisioned now: nothing unless the subscription is active.
      phones_available: Math.max(0, phoneAllowance(sub) - used),
      email_limit_hour: config.emailLimitHour,
      email_limit_day: config.emailLimitDay,
    };
  }

  /**
   * Sets the plan and/or status; what is left out stays as the log has it (not as the read
   * model does, which may not show a change made just before: it would be undone).
   */
  async function change(pk: number, asked: { plan?: PlanName; status?: SubscriptionStatus }, by: string) {
    const { position } = await execute(store, subscriptionStream(pk), subEvolver, (s) => {
      const next = { plan: asked.plan ?? s.plan, status: asked.status ?? s.status };
      if (s.plan === next.plan && s.status === next.status) return { events: [], result: undefined };
      const data: SubscriptionChangedData = { pk, plan: next.plan, status: next.status, previousPlan: s.plan, previousStatus: s.status, by, at: nowIso() };
      return { events: [event(SubscriptionChanged, data)], result: undefined };
    });
    if (position) await progress.waitFor(position);
    return view(pk);
  }

  return { view, change };
}

export type Billing = ReturnType<typeof createBilling>;
