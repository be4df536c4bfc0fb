/**
 * Identities: create (with inbox address and optional phone), rename, delete.
 *
 * Uniqueness is held by reservation streams (services/kernel/reservations.ts), so it holds
 * across any number of concurrent requests and gateways:
 * - `identityname` `<pk>:<lower-cased name>`: per account; released on rename and delete.
 * - `inbox` `<local>@<domain>`: PERMANENT. A deleted identity's address is never handed to
 *   another identity, so nobody can receive mail meant for a former agent.
 * - phone slots of the plan: stream `phones-<pk>`, appended at the revision read, so two
 *   concurrent provisionings cannot both take the last slot.
 */
import { streamId, type EventStore, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Collection, Page } from '../../infra/ports/read-store.js';
import { PhoneProviderError, type AllocatedNumber, type PhoneProvider } from '../../infra/ports/phone-provider.js';
import { outlivedReservations, type Platform } from '../kernel/platform.js';
import { event, execute, loadStream, type Evolver } from '../kernel/command.js';
import { newId, nowIso } from '../kernel/ids.js';
import { available, hold, movedAway, release, reserve, undo, type Reclaim } from '../kernel/reservations.js';
import { keyedSerial, withKeys } from '../kernel/serial.js';
import { unseenWrites } from '../kernel/read-waits.js';
import { ApiError, badRequest, conflict, notFound, tookTooLong } from '../gateway/errors.js';
import { IDENTITIES, type IdentityDoc } from '../../projections/identities/index.js';
import { currentSubscription, isActive, phoneAllowance, planRequiredFor, PLANS, subscriptionInLog, type SubscriptionStatus } from '../billing/plans.js';
import {
  IdentityCreated,
  IdentityDeleted,
  IdentityUpdated,
  PhoneProvisioned,
  PhoneReleased,
  PhoneSlotClaimed,
  PhoneSlotFreed,
  identityStream,
  phonesStream,
  type IdentityCreatedData,
  type IdentityDeletedData,
  type IdentityUpdatedData,
  type PhoneProvisionedData,
  type PhoneReleasedData,
  type PhoneSlotData,
} from './events.js';
import { RESERVED_LOCAL_PARTS, generateLocalPart, normalizeLocalPart } from './email-identifier.js';

const NAME_KIND = 'identityname';
const INBOX_KIND = 'inbox';
const GENERATE_ATTEMPTS = 8;

interface IdentityState {
  exists: boolean;
  deleted: boolean;
  ownerPk: number;
  name: string;
  inbox: string;
  phone: AllocatedNumber | null;
  provider: string | null;
}

export const identityEvolver: Evolver<IdentityState> = {
  initial: () => ({ exists: false, deleted: false, ownerPk: 0, name: '', inbox: '', phone: null, provider: null }),
  evolve(s, e: RecordedEvent) {
    switch (e.type) {
      case IdentityCreated: {
        const d = e.data as IdentityCreatedData;
        return { ...s, exists: true, ownerPk: d.ownerPk, name: d.name, inbox: d.inbox };
      }
      case IdentityUpdated: {
        const d = e.data as IdentityUpdatedData;
        return d.name === undefined ? s : { ...s, name: d.name };
      }
      case PhoneProvisioned: {
        const d = e.data as PhoneProvisionedData;
        return { ...s, phone: { phone: d.phone, providerRef: d.providerRef ?? null }, provider: d.provider };
      }
      case PhoneReleased:
        return { ...s, phone: null, provider: null };
      case IdentityDeleted:
        return { ...s, deleted: true };
      default:
        return s;
    }
  },
};

/** The identities holding a phone slot of the account's plan, each with its claim. */
const slotsEvolver: Evolver<Map<string, RecordedEvent>> = {
  initial: () => new Map(),
  evolve(s, e) {
    const id = (e.data as PhoneSlotData).identityId;
    const next = new Map(s);
    if (e.type === PhoneSlotClaimed) next.set(id, e);
    if (e.type === PhoneSlotFreed) next.delete(id);
    return next;
  },
};

/** The identity's state from its own stream, and the position of the event that last named it. */
async function identityHistory(store: EventStore, id: string): Promise<{ state: IdentityState; namedAt: string | null; phonedAt: string | null }> {
  let state = identityEvolver.initial();
  let namedAt: string | null = null;
  let phonedAt: string | null = null;
  for (const e of await store.readStream(identityStream(id))) {
    state = identityEvolver.evolve(state, e);
    if (e.type === IdentityCreated || (e.type === IdentityUpdated && (e.data as IdentityUpdatedData).name !== undefined)) namedAt = e.position;
    if (e.type === PhoneProvisioned) phonedAt = e.position;
  }
  return { state, namedAt, phonedAt };
}

/**
 * Slots whose identity will never hold a phone by them: deleted (its request died before
 * freeing the slot), or without a phone and past any request in flight (a create or
 * provisioning that died between the claim and the phone's event). See kernel/reservations.ts.
 */
async function abandonedSlots(store: EventStore, slots: Map<string, RecordedEvent>, settled: (e: RecordedEvent) => boolean): Promise<Set<string>> {
  const out = new Set<string>();
  for (const [identityId, claim] of slots) {
    const { state } = await identityHistory(store, identityId);
    if (state.deleted || (!state.phone && settled(claim))) out.add(identityId);
  }
  return out;
}

/** Phones the account uses now (its `phones-<pk>` stream, without abandoned slots). */
export async function phonesUsed(store: EventStore, ownerPk: number, settled: (e: RecordedEvent) => boolean): Promise<number> {
  const { state: slots } = await loadStream(store, phonesStream(ownerPk), slotsEvolver);
  return slots.size - (await abandonedSlots(store, slots, settled)).size;
}

export interface CreateIdentityInput {
  name: string;
  emailIdentifier?: string | null;
  provisionPhone?: boolean;
}

/** Names collide case-insensitively and by Unicode equivalence (NFC: "é" and "e\u0301" are one name). */
const nameKeyOf = (ownerPk: number, name: string) => `${ownerPk}:${name.normalize('NFC').toLowerCase()}`;

function cleanName(raw: string): string {
  const name = raw.trim();
  if (!name) throw badRequest({ name: ['This field may not be blank.'] });
  return name;
}

export function createIdentities(platform: Platform, phones: PhoneProvider) {
  const { events: store, reads, progress, config, logger } = platform;
  const identities = reads.collection<IdentityDoc>(IDENTITIES);

  const nameTaken = () => conflict('An identity with this name already exists in your account.');
  const serial = keyedSerial();

  /**
   * Creates and renames take these in this process: a create its account and its name, a
   * rename both its names. One that fails late (402 for the plan, 503 for the phone provider)
   * thus never refuses another meanwhile for the name or the limit's slot it held: every
   * outcome is one the requests taken one by one could have had. Across gateways (cluster
   * mode) the reservations still decide names, but concurrent creates may pass the limit by
   * the creates in flight on the other gateways.
   */
  const locks = keyedSerial();
  /** A create that answered 503 `projection_lag` made its identity all the same: counted before the next. */
  const unseenCreates = unseenWrites(progress);
  async function checkIdentityLimit(ownerPk: number): Promise<void> {
    const held = await identities.count({ ownerPk });
    if (held >= config.identityLimit) {
      throw new ApiError(403, 'identity_limit_reached', `This account holds ${held} identities, its limit (${config.identityLimit}); delete one, or ask support to raise the limit.`);
    }
  }

  /** A name reservation is free again once its identity is deleted or was renamed after it. */
  const names: Reclaim = {
    settled: platform.settled,
    async check(holder, value, reservation) {
      const { state, namedAt } = await identityHistory(store, streamId(holder));
      if (!state.exists) return 'unknown';
      if (state.deleted) return 'gone';
      if (nameKeyOf(state.ownerPk, state.name) === value) return 'holds';
      return movedAway(namedAt, reservation);
    },
  };
  /** Inbox addresses stay with their identity for good, deleted or not; only one never created frees its address. */
  const inboxes: Reclaim = {
    settled: platform.settled,
    async check(holder, value) {
      const { state } = await identityHistory(store, streamId(holder));
      return !state.exists ? 'unknown' : state.inbox === value ? 'holds' : 'gone';
    },
  };

  /** Takes a phone slot of the plan for `identityId`, or answers 402; true when this call took it (false: it held one already). */
  async function claimSlot(ownerPk: number, identityId: string): Promise<boolean> {
    const sub = await currentSubscription(reads, ownerPk);
    const allowance = phoneAllowance(sub);
    const { result } = await execute(store, phonesStream(ownerPk), slotsEvolver, async (slots) => {
      if (slots.has(identityId)) return { events: [], result: false };
      // Full: slots abandoned by a crash are freed in the same append as the claim.
      const stale = slots.size >= allowance ? await abandonedSlots(store, slots, platform.settled) : new Set<string>();
      if (slots.size - stale.size >= allowance) throw paymentRequired(sub, slots.size - stale.size + 1);
      const at = nowIso();
      const frees = [...stale].map((id) => event(PhoneSlotFreed, { identityId: id, at } satisfies PhoneSlotData));
      return { events: [...frees, event(PhoneSlotClaimed, { identityId, at } satisfies PhoneSlotData)], result: true };
    }, 20);
    if (!result) return false;
    // The plan was read before the claim: an admin may have downgraded or cancelled it in
    // between. Checked again against the log after the claim, so no slot outlives a change
    // that leaves no room for it (a concurrent downgrade may refuse a claim; never the reverse).
    // A failure here gives the slot back too: the caller only frees what this call says it took.
    try {
      const latest = await subscriptionInLog(store, ownerPk);
      if (latest.plan !== sub.plan || latest.status !== sub.status) {
        const used = await phonesUsed(store, ownerPk, platform.settled);
        if (used > phoneAllowance(latest)) throw paymentRequired(latest, used);
      }
    } catch (err) {
      await freeSlot(ownerPk, identityId).catch(() => undefined);
      throw err;
    }
    return true;
  }

  async function freeSlot(ownerPk: number, identityId: string): Promise<void> {
    await execute(store, phonesStream(ownerPk), slotsEvolver, (slots) => ({
      events: slots.has(identityId) ? [event(PhoneSlotFreed, { identityId, at: nowIso() } satisfies PhoneSlotData)] : [],
      result: undefined,
    }), 20);
  }

  function paymentRequired(sub: { plan: string; status: SubscriptionStatus }, phonesWanted: number): ApiError {
    // A plan that would help: none when the current plan has room and only the status is wrong.
    const roomy = (PLANS as Record<string, { phoneLimit: number }>)[sub.plan]?.phoneLimit >= phonesWanted;
    const planRequired = roomy ? null : planRequiredFor(phonesWanted);
    const wanted = phonesWanted === 1 ? 'a phone number' : `${phonesWanted} phone numbers`;
    const detail =
      !isActive(sub.status)
        ? `Your subscription is ${sub.status}; phone numbers need an active subscription.`
        : planRequired
          ? `Your plan (${sub.plan}) does not include ${wanted}; upgrade to ${planRequired}.`
          : `No plan includes ${wanted} (the largest, team, has ${PLANS.team.phoneLimit}); release a number first (DELETE /api/identities/{uuid}/phone/).`;
    // plan_required only names a plan that would help (none beyond the largest).
    return new ApiError(402, 'payment_required', detail, undefined, undefined, planRequired ? { plan_required: planRequired } : undefined);
  }

  /** Refuses early (before a slot is claimed) when the plan has no room for one more phone. */
  async function precheckPhone(ownerPk: number): Promise<void> {
    const sub = await currentSubscription(reads, ownerPk);
    const used = await phonesUsed(store, ownerPk, platform.settled);
    if (used >= phoneAllowance(sub)) throw paymentRequired(sub, used + 1);
  }

  async function allocateNumber(identityId: string): Promise<AllocatedNumber> {
    try {
      return await phones.allocate(identityId);
    } catch (err) {
      if (err instanceof PhoneProviderError) {
        logger.error({ err, identityId, provider: phones.name }, 'phone allocation failed');
        throw new ApiError(503, 'phone_unavailable', 'No phone number could be provisioned right now; retry later.', undefined, { 'Retry-After': '30' });
      }
      throw err;
    }
  }

  const inboxTaken = () => conflict('This email address is already taken (addresses are never reused, not even after their identity is deleted).');

  /** The address asked for (null: none, one is generated); a bad or reserved one refused before anything is taken. */
  function askedAddress(emailIdentifier: string | null | undefined): string | null {
    if (emailIdentifier === undefined || emailIdentifier === null) return null;
    const local = normalizeLocalPart(emailIdentifier);
    if ('error' in local) throw badRequest({ email_identifier: [local.error] });
    const address = `${local.value}@${config.mailDomain}`;
    if (RESERVED_LOCAL_PARTS.has(local.value)) throw conflict(`The address ${address} is reserved for the mail domain's operators (RFC 2142, and the addresses certificate authorities mail); choose another.`);
    return address;
  }

  /** Reserves the address asked for (`asked`), or one generated from the name when none was. */
  async function reserveInbox(identityId: string, name: string, asked: string | null): Promise<string> {
    if (asked !== null) {
      if (!(await reserve(store, INBOX_KIND, asked, identityStream(identityId), true, inboxes))) throw inboxTaken();
      return asked;
    }
    for (let attempt = 0; attempt < GENERATE_ATTEMPTS; attempt++) {
      const inbox = `${generateLocalPart(name, attempt < 4 ? 4 : 8)}@${config.mailDomain}`;
      if (await reserve(store, INBOX_KIND, inbox, identityStream(identityId), true, inboxes)) return inbox;
    }
    throw conflict('Could not generate a free email address; pass email_identifier.');
  }

  async function create(ownerPk: number, input: CreateIdentityInput): Promise<IdentityDoc> {
    const name = cleanName(input.name);
    // Refusals in this order: the input (400), what is taken (409), the account's limit (403),
    // the plan (402). The plan's slot is claimed before the inbox, whose reservation is never
    // given back.
    const asked = askedAddress(input.emailIdentifier);
    const nameKey = nameKeyOf(ownerPk, name);
    return withKeys(locks, [`account:${ownerPk}`, `name:${nameKey}`], () => createNow(ownerPk, name, nameKey, asked, input.provisionPhone === true));
  }

  async function createNow(ownerPk: number, name: string, nameKey: string, asked: string | null, provisionPhone: boolean): Promise<IdentityDoc> {
    const id = newId();
    const owner = identityStream(id);
    const started = Date.now();
    if (!(await reserve(store, NAME_KIND, nameKey, owner, false, names))) throw nameTaken();

    let slot = false;
    let number: AllocatedNumber | null = null;
    let created: { position: string };
    try {
      // The account's limit, like its plan, is said after what is taken: the address asked for
      // is looked at first (reserved only below: its reservation is never given back).
      if (asked !== null && !(await available(store, INBOX_KIND, asked, owner, inboxes))) throw inboxTaken();
      await unseenCreates.awaitSeen(String(ownerPk));
      await checkIdentityLimit(ownerPk);
      if (provisionPhone) {
        await precheckPhone(ownerPk);
        slot = await claimSlot(ownerPk, id);
      }
      const inbox = await reserveInbox(id, name, asked);
      if (provisionPhone) number = await allocateNumber(id);
      if (outlivedReservations(started)) throw tookTooLong('The request');
      const at = nowIso();
      const evs = [event(IdentityCreated, { identityId: id, ownerPk, name, inbox, phone: number?.phone ?? null, at } satisfies IdentityCreatedData)];
      if (number) {
        evs.push(event(PhoneProvisioned, { identityId: id, phone: number.phone, provider: phones.name, providerRef: number.providerRef, at } satisfies PhoneProvisionedData) as never);
      }
      created = await store.append(identityStream(id), evs, { expectedRevision: 'no_stream' });
    } catch (err) {
      // Undo what this attempt took (the inbox reservation is permanent by design; it is
      // reclaimed later, as it belongs to no identity: see `inboxes`).
      await release(store, NAME_KIND, nameKey, owner).catch(() => undefined);
      if (number) await phones.release(id, number).catch((e) => logger.warn({ err: e, identityId: id }, 'phone release failed'));
      if (slot) await freeSlot(ownerPk, id).catch(() => undefined);
      throw err;
    }
    // Created: nothing is undone now, even if the read models are too far behind to show it
    // yet (503 projection_lag); the account's next create counts it all the same.
    await unseenCreates.waitFor(String(ownerPk), created.position);
    return (await identities.get(id))!;
  }

  async function load(id: string) {
    const s = await loadStream(store, identityStream(id), identityEvolver);
    if (!s.state.exists || s.state.deleted) throw notFound('Identity not found.');
    return s;
  }

  /**
   * Renames and/or provisions a phone. Owner checks are the caller's (routes). The phone
   * comes first, with the new name already reserved: a refusal (402 plan, 409 name) leaves
   * the identity as it was.
   */
  async function update(id: string, input: { name?: string; provisionPhone?: boolean }): Promise<IdentityDoc> {
    // One update of an identity at a time in this process: a retried or duplicated request
    // then sees the first one's outcome (its name, its phone) instead of racing it.
    return serial(id, () => updateNow(id, input));
  }

  async function updateNow(id: string, input: { name?: string; provisionPhone?: boolean }): Promise<IdentityDoc> {
    const started = Date.now();
    const { state, position: loadedAt } = await load(id);
    const owner = identityStream(id);
    const name = input.name !== undefined ? cleanName(input.name) : state.name;
    const renaming = name !== state.name;
    const oldKey = nameKeyOf(state.ownerPk, state.name);
    const newKey = nameKeyOf(state.ownerPk, name);
    const reserving = renaming && newKey !== oldKey;
    // The names it moves between are held (see `locks`), so a create of either waits for its outcome.
    return withKeys(locks, reserving ? [`name:${oldKey}`, `name:${newKey}`] : [], async () => {
      const taken = reserving ? await hold(store, NAME_KIND, newKey, owner, false, names) : null;
      if (taken?.outcome === 'taken') throw nameTaken();
      // Nothing to change (the same name, a phone it has): the answer still waits for what the
      // stream says, as an identical update just before (another gateway's) may be on its way.
      let position: string | null = loadedAt;
      try {
        if (input.provisionPhone && !state.phone) position = (await provisionPhone(id, state.ownerPk)) ?? position;
        if (renaming) {
          if (outlivedReservations(started)) throw tookTooLong('The request');
          const { append } = await execute(store, identityStream(id), identityEvolver, (s) => {
            if (!s.exists || s.deleted) throw notFound('Identity not found.');
            if (s.name !== state.name) throw conflict('The identity was modified concurrently; retry.');
            return { events: [event(IdentityUpdated, { identityId: id, name, at: nowIso() } satisfies IdentityUpdatedData)], result: undefined };
          });
          position = append?.position ?? position;
        }
      } catch (err) {
        // Only what this request took, and only if no duplicate of it (another process) renewed
        // it meanwhile to rename with it.
        await undo(store, taken).catch(() => undefined);
        throw err;
      }
      if (reserving) await release(store, NAME_KIND, oldKey, owner);
      if (position) await progress.waitFor(position);
      return (await identities.get(id))!;
    });
  }

  async function provisionPhone(id: string, ownerPk: number): Promise<string | null> {
    await precheckPhone(ownerPk);
    const started = Date.now();
    const claimed = await claimSlot(ownerPk, id);
    let number: AllocatedNumber | null = null;
    try {
      number = await allocateNumber(id);
      if (outlivedReservations(started)) throw tookTooLong('The request');
      const n = number;
      const { append } = await execute(store, identityStream(id), identityEvolver, (s) => {
        if (!s.exists || s.deleted) throw notFound('Identity not found.');
        if (s.phone) throw conflict('This identity already has a phone number.');
        return { events: [event(PhoneProvisioned, { identityId: id, phone: n.phone, provider: phones.name, providerRef: n.providerRef, at: nowIso() } satisfies PhoneProvisionedData)], result: undefined };
      });
      return append?.position ?? null;
    } catch (err) {
      if (number) await phones.release(id, number).catch(() => undefined);
      // The slot only if this request claimed it: a concurrent one that got the phone holds it.
      if (claimed) await freeSlot(ownerPk, id).catch(() => undefined);
      throw err;
    }
  }

  /** After its PhoneReleased: the number to the provider (a failure leaves it reserved, logged), the slot to the plan. */
  async function givePhoneBack(id: string, ownerPk: number, phone: NonNullable<IdentityState['phone']>): Promise<void> {
    await phones.release(id, phone).catch((err) => logger.warn({ err, identityId: id }, 'phone release failed; the number stays reserved'));
    await freeSlot(ownerPk, id);
  }

  /** Deletes: the read model drops it at once (keys fenced to it stop working), the phone is released. */
  async function remove(id: string): Promise<void> {
    const { result: state, append } = await execute(store, identityStream(id), identityEvolver, (s) => {
      if (!s.exists || s.deleted) throw notFound('Identity not found.');
      const at = nowIso();
      const evs = [];
      if (s.phone) evs.push(event(PhoneReleased, { identityId: id, phone: s.phone.phone, provider: s.provider ?? phones.name, at } satisfies PhoneReleasedData));
      evs.push(event(IdentityDeleted, { identityId: id, ownerPk: s.ownerPk, at } satisfies IdentityDeletedData));
      return { events: evs, result: s };
    });
    try {
      if (append) await progress.waitFor(append.position);
    } finally {
      // Deleted even when the read models are too far behind to show it yet (503): its name
      // and phone go back all the same.
      await release(store, NAME_KIND, nameKeyOf(state.ownerPk, state.name), identityStream(id));
      if (state.phone) await givePhoneBack(id, state.ownerPk, state.phone);
    }
  }

  /**
   * Gives up the identity's phone number (its SMS history stays): the number goes back to the
   * provider and its slot to the plan. 404 when it has none. Owner checks are the caller's.
   */
  function releasePhone(id: string): Promise<void> {
    return serial(id, async () => {
      const { result: state, append } = await execute(store, identityStream(id), identityEvolver, (s) => {
        if (!s.exists || s.deleted) throw notFound('Identity not found.');
        if (!s.phone) throw notFound('This identity has no phone number.');
        return { events: [event(PhoneReleased, { identityId: id, phone: s.phone.phone, provider: s.provider ?? phones.name, at: nowIso() } satisfies PhoneReleasedData)], result: s };
      });
      try {
        if (append) await progress.waitFor(append.position);
      } finally {
        // Released even when the read models are too far behind to show it yet (503): a retry
        // finds no phone, so nothing else would give the number back.
        await givePhoneBack(id, state.ownerPk, state.phone!);
      }
    });
  }

  const get = (id: string) => identities.get(id);

  function list(ownerPk: number, page: { limit: number; cursor: string | null }): Promise<Page<IdentityDoc>> {
    return identities.find({ where: { ownerPk }, orderBy: { field: 'seq', direction: 'asc' }, limit: page.limit, cursor: page.cursor });
  }

  async function findIdentity(id: string): Promise<{ id: string; ownerPk: number } | null> {
    const doc = await identities.get(id);
    return doc ? { id: doc.id, ownerPk: doc.ownerPk } : null;
  }

  /**
   * Identities holding an address reserved since they took it (RESERVED_LOCAL_PARTS grew:
   * admin@ and the other addresses certificate authorities mail). They keep it, so the
   * operator is told at each start, to move them if a certificate authority may write there.
   */
  async function heldReservedAddresses(): Promise<IdentityDoc[]> {
    const found = await Promise.all([...RESERVED_LOCAL_PARTS].map((local) => identities.findOne({ inbox: `${local}@${config.mailDomain}` })));
    return found.filter((doc): doc is IdentityDoc => doc !== null);
  }

  return { create, update, releasePhone, remove, get, list, findIdentity, heldReservedAddresses, collection: identities as Collection<IdentityDoc> };
}

export type Identities = ReturnType<typeof createIdentities>;

export const toIdentity = (d: IdentityDoc) => ({ uuid: d.id, name: d.name, inbox: d.inbox, phone: d.phone ?? null, created_dt: d.createdAt });
