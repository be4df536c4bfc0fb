/**
 * Device authorization commands (RFC 8628): request a pair of codes, poll for the grant,
 * approve or deny as a signed-in human. Every transition is an event in `deviceauth-<uuid>`;
 * decisions are taken on the stream itself (read-fold-decide-append with optimistic
 * concurrency), never on the read model, so a code is approved, denied or redeemed once.
 *
 * Long polls (`wait: true`) park an in-process waiter per request: a promise and one timer.
 * A single subscription to the event store wakes the waiters of an authorization when it
 * leaves `pending` (approved, denied, expired), wherever that happened, so many waiting
 * agents cost no polling work.
 */
import { streamId, type Subscription } from '../../infra/ports/event-store.js';
import type { Platform } from '../kernel/platform.js';
import { event, execute, loadStream } from '../kernel/command.js';
import { newId, nowIso } from '../kernel/ids.js';
import { holderOf, reserve } from '../kernel/reservations.js';
import { failureBudgets } from '../kernel/failure-budgets.js';
import { ApiError, fieldError, notFound, throttled } from '../gateway/errors.js';
import { toPublicUser, type Accounts } from '../accounts/service.js';
import { DEVICE_AUTHORIZATIONS, type DeviceAuthorizationDoc } from '../../projections/device/index.js';
import {
  deviceStream,
  DeviceAuthorizationApproved,
  DeviceAuthorizationDenied,
  DeviceAuthorizationExpired,
  DeviceAuthorizationIntervalIncreased,
  DeviceAuthorizationRedeemed,
  DeviceAuthorizationRequested,
  SETTLING_EVENT_TYPES,
  deviceEvolver,
  effectiveStatus,
  type ApprovedData,
  type DeniedData,
  type DeviceAuthState,
  type RedeemedData,
  type RequestedData,
} from './events.js';
import { formatUserCode, hashDeviceCode, hashUserCode, newDeviceCode, newUserCode, normalizeUserCode } from './codes.js';
import { throttleAddress } from '../kernel/client-address.js';
import { withoutControls } from '../kernel/text.js';

/** RFC 8628 §3.4: the grant type a standard client sends to the token endpoint. */
export const DEVICE_GRANT_TYPE = 'urn:ietf:params:oauth:grant-type:device_code';

/** Device code requests per client address (unauthenticated endpoint: bounds the event log growth). */
const REQUESTS_PER_IP = 120;
const REQUESTS_WINDOW_S = 600;
/** RFC 8628 §5.1: wrong user codes per account and per address before 429. */
const WRONG_CODES_PER_USER = 10;
const WRONG_CODES_PER_IP = 50;
const WRONG_CODES_WINDOW_S = 900;
/** RFC 8628 §3.5: each slow_down adds 5 s to the interval; capped so a broken client adds a bounded number of events. */
const SLOW_DOWN_STEP_S = 5;
const MAX_INTERVAL_S = 60;
/** The reservation kind that maps a user code (its HMAC) to its authorization. */
const USER_CODE_RESERVATION = 'deviceusercode';

/** What the device flow needs from the keys context. */
export interface ManagementKeys {
  /** Mints a management key; `key` is the full secret (shown once, to the device). */
  mint(input: { ownerPk: number; label: string }): Promise<{ keyId: string; key: string }>;
  revoke(input: { ownerPk: number; keyId: string }): Promise<void>;
}

export interface DeviceServiceDeps {
  platform: Platform;
  accounts: Accounts;
  hmacKey: Buffer;
  keys: ManagementKeys;
}

/** What the token endpoint answers: RFC 8628 §3.5 error bodies are HTTP 400. */
export interface PollAnswer {
  status: 200 | 400;
  body: Record<string, unknown>;
}

export type DecideAction = 'approve' | 'deny';

const START_AGAIN = 'Start again on your device to get a new one.';
/** Why a code cannot be decided on: the API's answers, and the /device page's before the click. */
export const CODE_MESSAGES = {
  unknown: 'Unknown code. Check the code shown on your device.',
  expired: `This code has expired. ${START_AGAIN}`,
  used: `This code was already used: its device has its tokens. ${START_AGAIN}`,
  decided: (what: 'approved' | 'denied') => `This code was already ${what}. ${START_AGAIN}`,
};

/** A device authorization as the person deciding on it sees it (services/device/page.ts). */
export interface AuthorizationView {
  id: string;
  userCode: string;
  status: ReturnType<typeof effectiveStatus>;
  requestedAt: string;
  expiresAt: string;
  clientId: string | null;
  /** The account that approved or denied it (null while pending). */
  userPk: number | null;
}


export function createDeviceService(deps: DeviceServiceDeps) {
  const { platform, accounts, hmacKey } = deps;
  const { events: store, reads, config, limiter, logger } = platform;
  const docs = reads.collection<DeviceAuthorizationDoc>(DEVICE_AUTHORIZATIONS);

  /** Last non-waiting poll per authorization (slow_down detection); pruned when codes expire. */
  const lastPoll = new Map<string, { at: number; expiresAt: number }>();
  /** Parked long polls per authorization. */
  const waiters = new Map<string, Set<() => void>>();
  let subscription: Subscription | null = null;
  let sweeper: NodeJS.Timeout | null = null;
  let stopped = false;

  async function settle(position: string | null | undefined) {
    if (position) await platform.progress.waitFor(position);
  }

  function wake(id: string): void {
    const set = waiters.get(id);
    if (!set) return;
    waiters.delete(id);
    for (const fn of set) fn();
  }

  /** Waiting polls one device code may have parked at once (see poll). */
  const WAITERS_PER_CODE = 2;

  /** Parks until the authorization settles, `ms` passes, the client goes away or the service stops. */
  function park(id: string, ms: number, abort: AbortSignal | undefined): { promise: Promise<void>; cancel: () => void } {
    let done!: () => void;
    const promise = new Promise<void>((resolve) => (done = resolve));
    const timer = setTimeout(() => finish(), Math.max(0, ms));
    const onAbort = () => finish();
    const set = waiters.get(id) ?? new Set();
    waiters.set(id, set);
    function finish() {
      clearTimeout(timer);
      abort?.removeEventListener('abort', onAbort);
      const s = waiters.get(id);
      if (s) {
        s.delete(finish);
        if (s.size === 0) waiters.delete(id);
      }
      done();
    }
    set.add(finish);
    abort?.addEventListener('abort', onAbort, { once: true });
    if (stopped || abort?.aborted) finish();
    return { promise, cancel: finish };
  }

  // ---- request (RFC 8628 §3.1, §3.2) ----

  async function request(input: { clientId: string | null; ip: string }) {
    const d = await limiter.hit(`device:request:${throttleAddress(input.ip)}`, REQUESTS_PER_IP, REQUESTS_WINDOW_S);
    if (!d.allowed) throw throttled(d.retryAfter, `Too many device authorization requests. Try again in ${d.retryAfter} seconds.`);
    const id = newId();
    const deviceCode = newDeviceCode();
    let userCode = '';
    let userCodeHash = '';
    // The reservation makes a user code name one authorization only, for ever (20^8 codes: a
    // collision is rare, and then another code is drawn).
    for (let attempt = 0; attempt < 8 && !userCode; attempt++) {
      const candidate = newUserCode();
      const h = hashUserCode(hmacKey, candidate);
      if (await reserve(store, USER_CODE_RESERVATION, h, id, true)) {
        userCode = candidate;
        userCodeHash = h;
      }
    }
    if (!userCode) throw new ApiError(503, 'service_unavailable', 'Could not allocate a user code; retry.', undefined, { 'Retry-After': '1' });
    const now = Date.now();
    const data: RequestedData = {
      deviceAuthId: id,
      deviceCodeHash: hashDeviceCode(deviceCode),
      userCodeHash,
      clientId: input.clientId,
      interval: config.devicePollInterval,
      expiresAt: new Date(now + config.deviceCodeTtl * 1000).toISOString(),
      at: new Date(now).toISOString(),
    };
    const appended = await store.append(deviceStream(id), [event(DeviceAuthorizationRequested, data)], { expectedRevision: 'no_stream' });
    await settle(appended.position);
    const shown = formatUserCode(userCode);
    const verificationUri = `${config.publicUrl}/device`;
    return {
      device_code: deviceCode,
      user_code: shown,
      verification_uri: verificationUri,
      verification_uri_complete: `${verificationUri}?user_code=${shown}`,
      expires_in: config.deviceCodeTtl,
      interval: config.devicePollInterval,
    };
  }

  // ---- shared transitions ----

  /** Records the lazy expiry of an authorization observed past its lifetime. */
  async function recordExpiry(id: string): Promise<void> {
    const { position } = await execute(store, deviceStream(id), deviceEvolver, (s) => {
      const already = s.status === 'expired' || s.status === 'none' || s.status === 'denied' || s.status === 'redeemed';
      if (already || effectiveStatus(s, Date.now()) !== 'expired') return { events: [], result: undefined };
      return { events: [event(DeviceAuthorizationExpired, { deviceAuthId: id, at: nowIso() })], result: undefined };
    });
    lastPoll.delete(id);
    await settle(position);
  }

  async function load(id: string): Promise<DeviceAuthState> {
    return (await loadStream(store, deviceStream(id), deviceEvolver)).state;
  }

  // ---- token polling (RFC 8628 §3.4, §3.5) ----

  const err = (error: string, extra: Record<string, unknown> = {}): PollAnswer => ({ status: 400, body: { error, ...extra } });
  const expiredAnswer = () =>
    err('expired_token', {
      code: 'device_code_expired',
      detail: 'The device code has expired (it lives expires_in seconds from its request). Request a new one at POST /api/auth/device/.',
    });

  async function poll(input: { deviceCode: string; wait: boolean; abort?: AbortSignal }): Promise<PollAnswer> {
    const doc = await docs.findOne({ deviceCodeHash: hashDeviceCode(input.deviceCode) });
    if (!doc) return err('invalid_grant');
    const id = doc.id;
    let state = await load(id);
    let status = effectiveStatus(state, Date.now());

    // One agent waits on its code at a time (a retry may overlap): more waiting polls of one
    // code would each hold a socket for DEVICE_WAIT_MAX, so they count as ordinary polls.
    const mayWait = (waiters.get(id)?.size ?? 0) < WAITERS_PER_CODE;
    if (status === 'pending' && input.wait && config.deviceWaitMax > 0 && mayWait) {
      // Park first, then look again: an approval landing in between still wakes us.
      const untilExpiry = Date.parse(state.expiresAt) - Date.now() + 25;
      const parked = park(id, Math.min(config.deviceWaitMax * 1000, untilExpiry), input.abort);
      state = await load(id);
      status = effectiveStatus(state, Date.now());
      if (status === 'pending') await parked.promise;
      else parked.cancel();
      state = await load(id);
      status = effectiveStatus(state, Date.now());
    } else if (status === 'pending') {
      // RFC 8628 §3.5: polled faster than the interval → slow_down, and the interval grows by
      // 5 s for this and later requests. Waiting polls never count as too fast. Measured on a
      // monotonic clock: a wall clock set back must not make a poll on time look early.
      const now = performance.now();
      const previous = lastPoll.get(id);
      lastPoll.set(id, { at: now, expiresAt: Date.parse(state.expiresAt) });
      if (previous && state.interval > 0 && now - previous.at < state.interval * 1000) {
        await increaseInterval(id);
        return err('slow_down');
      }
    }

    switch (status) {
      case 'pending':
        return err('authorization_pending');
      case 'denied':
        lastPoll.delete(id);
        return err('access_denied');
      case 'expired':
        await recordExpiry(id);
        return expiredAnswer();
      case 'redeemed':
      case 'none':
        return err('invalid_grant');
      case 'approved':
        return redeem(id, state);
    }
  }

  async function increaseInterval(id: string): Promise<void> {
    const { position } = await execute(store, deviceStream(id), deviceEvolver, (s) => {
      if (s.status !== 'pending' || s.interval >= MAX_INTERVAL_S) return { events: [], result: undefined };
      const interval = Math.min(MAX_INTERVAL_S, s.interval + SLOW_DOWN_STEP_S);
      return { events: [event(DeviceAuthorizationIntervalIncreased, { deviceAuthId: id, interval, at: nowIso() })], result: undefined };
    });
    await settle(position);
  }

  /** Runs `fn` alone per authorization in this process (concurrent polls of one code queue up). */
  const locks = new Map<string, Promise<unknown>>();
  async function exclusive<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const before = locks.get(id) ?? Promise.resolve();
    const run = before.catch(() => undefined).then(fn);
    const tail = run.catch(() => undefined);
    locks.set(id, tail);
    try {
      return await run;
    } finally {
      if (locks.get(id) === tail) locks.delete(id);
    }
  }

  /**
   * Spends an approved code. The key is minted first so the Redeemed event can name it;
   * then one redeem wins the append (optimistic concurrency, across gateways too). A loser
   * revokes the key it minted: that secret was never shown to anyone.
   */
  async function redeem(id: string, observed: DeviceAuthState): Promise<PollAnswer> {
    const user = observed.userPk === null ? null : await accounts.findUser(observed.userPk);
    if (!user) return err('invalid_grant');
    return exclusive(id, async () => {
      const fresh = await load(id);
      const status = effectiveStatus(fresh, Date.now());
      if (status === 'expired') {
        await recordExpiry(id);
        return expiredAnswer();
      }
      if (status !== 'approved') return err('invalid_grant');
      // Told apart in the key list by the minute and the client's own name (`ais-cli (host)`);
      // within the 100 characters of a label.
      const stamp = `Device sign-up ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`;
      // The client_id is the device's unchecked word: no control or bidi character reaches a terminal's key list.
      const client = fresh.clientId && withoutControls(fresh.clientId).trim();
      const label = client ? [...`${stamp} (${client})`].slice(0, 100).join('') : stamp;
      const minted = await deps.keys.mint({ ownerPk: user.pk, label });
      const { result: won } = await execute(store, deviceStream(id), deviceEvolver, (s) => {
        if (s.status !== 'approved' || effectiveStatus(s, Date.now()) !== 'approved') return { events: [], result: false };
        const data: RedeemedData = { deviceAuthId: id, userPk: user.pk, keyId: minted.keyId, at: nowIso() };
        return { events: [event(DeviceAuthorizationRedeemed, data)], result: true };
      });
      if (!won) {
        await deps.keys.revoke({ ownerPk: user.pk, keyId: minted.keyId }).catch((error) => logger.warn({ err: error, keyId: minted.keyId }, 'unused device key not revoked'));
        if (effectiveStatus(await load(id), Date.now()) === 'expired') {
          await recordExpiry(id);
          return expiredAnswer();
        }
        return err('invalid_grant');
      }
      lastPoll.delete(id);
      // The code is spent: from here the answer must carry the tokens and key. The session's
      // start waits for the read models (the key and this redeem before it, in log order) and
      // logs a lag instead of answering 503 (the next poll would get invalid_grant).
      const session = await accounts.startSession(user, { via: 'device', kind: 'token', keyId: minted.keyId });
      logger.info({ deviceAuthId: id, userPk: user.pk, keyId: minted.keyId }, 'device authorization redeemed');
      return { status: 200, body: { access: session.access, refresh: session.refresh, management_key: minted.key, user: toPublicUser(user) } };
    });
  }

  // ---- the human's side (RFC 8628 §3.3) ----

  const wrongCodes = failureBudgets(limiter);
  /**
   * Wrong codes are counted per account and per address (RFC 8628 §5.1): those decided on
   * (`guess`), and apart from them those only looked at by the /device page (`look`). A page
   * anyone can link to must not spend the budget of the decisions: a site sending a signed-in
   * person's browser to ten made-up codes would lock their approvals for 15 minutes.
   */
  const budgetsOf = (kind: 'guess' | 'look', userPk: number, ip: string) => [
    { key: `device:${kind}:user:${userPk}`, limit: WRONG_CODES_PER_USER, windowS: WRONG_CODES_WINDOW_S },
    { key: `device:${kind}:ip:${throttleAddress(ip)}`, limit: WRONG_CODES_PER_IP, windowS: WRONG_CODES_WINDOW_S },
  ];
  const tooManyWrongCodes = (retryAfter: number) => throttled(retryAfter, `Too many wrong codes. Try again in ${retryAfter} seconds.`);

  /**
   * The authorization a user code names, for a signed-in person about to decide on it. A
   * malformed or unknown code counts as a wrong guess (RFC 8628 §5.1) in the budget of `kind`.
   */
  async function locate(input: { userPk: number; userCode: string; ip: string }, kind: 'guess' | 'look'): Promise<{ normalized: string; id: string }> {
    return wrongCodes.attempt(budgetsOf(kind, input.userPk, input.ip), tooManyWrongCodes, async (fail) => {
      const normalized = normalizeUserCode(input.userCode);
      if (!normalized) {
        await fail();
        throw fieldError('user_code', 'Enter the 8-letter code shown on your device (XXXX-XXXX).');
      }
      const id = await holderOf(store, USER_CODE_RESERVATION, hashUserCode(hmacKey, normalized));
      if (!id) {
        await fail();
        throw notFound(CODE_MESSAGES.unknown);
      }
      return { normalized, id };
    });
  }

  /** What the /device page shows before the decision: the state, the device's own name for itself, its times. */
  async function inspect(input: { userPk: number; userCode: string; ip: string }): Promise<AuthorizationView> {
    const { normalized, id } = await locate(input, 'look');
    const s = await load(id);
    return { id, userCode: formatUserCode(normalized), status: effectiveStatus(s, Date.now()), requestedAt: s.requestedAt, expiresAt: s.expiresAt, clientId: s.clientId, userPk: s.userPk };
  }

  /**
   * Approves or denies the authorization named by `userCodeInput` on behalf of `userPk`.
   * Repeating the same decision by the same account is a no-op; anything else on a
   * settled code is a 409.
   */
  async function decide(input: { userPk: number; userCode: string; action: DecideAction; via: string; ip: string }): Promise<{ userCode: string; clientId: string | null }> {
    const { normalized, id } = await locate(input, 'guess');
    type Outcome = 'done' | 'expired' | 'conflict' | 'used';
    const { result, position, state } = await execute<DeviceAuthState, Outcome>(store, deviceStream(id), deviceEvolver, (s) => {
      const status = effectiveStatus(s, Date.now());
      if (status === 'none') return { events: [], result: 'conflict' };
      if (status === 'expired') {
        return s.status === 'expired'
          ? { events: [], result: 'expired' }
          : { events: [event(DeviceAuthorizationExpired, { deviceAuthId: id, at: nowIso() })], result: 'expired' };
      }
      if (status === 'pending') {
        const at = nowIso();
        return input.action === 'approve'
          ? { events: [event(DeviceAuthorizationApproved, { deviceAuthId: id, userPk: input.userPk, via: input.via, at } satisfies ApprovedData)], result: 'done' }
          : { events: [event(DeviceAuthorizationDenied, { deviceAuthId: id, userPk: input.userPk, via: input.via, at } satisfies DeniedData)], result: 'done' };
      }
      // Repeating one's own decision is fine while the device has not collected its tokens;
      // after that the code is used up (an "approved" answer would promise tokens it never gets).
      const same = s.userPk === input.userPk && ((input.action === 'approve' && status === 'approved') || (input.action === 'deny' && status === 'denied'));
      return { events: [], result: same ? 'done' : status === 'redeemed' ? 'used' : 'conflict' };
    });
    await settle(position);
    if (result === 'expired') throw new ApiError(400, 'device_code_expired', CODE_MESSAGES.expired);
    if (result === 'used') throw new ApiError(409, 'conflict', CODE_MESSAGES.used);
    if (result === 'conflict') {
      const what = state.status === 'denied' ? 'denied' : 'approved';
      throw new ApiError(409, 'conflict', CODE_MESSAGES.decided(what));
    }
    logger.info({ deviceAuthId: id, userPk: input.userPk, action: input.action, via: input.via }, 'device authorization decided');
    return { userCode: formatUserCode(normalized), clientId: state.clientId };
  }

  // ---- lifecycle ----

  async function start(): Promise<void> {
    stopped = false;
    const head = await store.headPosition();
    subscription = store.subscribeAll({ after: head, filter: { eventTypes: SETTLING_EVENT_TYPES } }, (e) => {
      wake(streamId(e.stream));
    });
    subscription.done.catch((error) => logger.error({ err: error }, 'device authorization subscription failed'));
    sweeper = setInterval(() => {
      const now = Date.now();
      for (const [id, p] of lastPoll) if (p.expiresAt <= now) lastPoll.delete(id);
    }, 60_000);
    sweeper.unref();
  }

  async function stop(): Promise<void> {
    stopped = true;
    subscription?.close();
    subscription = null;
    if (sweeper) clearInterval(sweeper);
    // Release every parked poll: they answer `authorization_pending` and the server can drain.
    for (const id of [...waiters.keys()]) wake(id);
  }

  return { request, poll, decide, inspect, start, stop, waitingCount: () => [...waiters.values()].reduce((n, s) => n + s.size, 0) };
}

export type DeviceService = ReturnType<typeof createDeviceService>;
