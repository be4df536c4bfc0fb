/**
 * Account commands: registration, sign-in, sessions (refresh-token families), profile,
 * password change and reset, email verification. Each write is an event; reads come from
 * the `users` and `sessions` read models after a read-your-writes wait.
 */
import argon2 from 'argon2';
import { randomBytes } from 'node:crypto';
import { macOf, sameSecret } from '../kernel/secrets.js';
import { streamId, type EventData, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { OutboundMail } from '../../infra/ports/mailer.js';
import type { Page } from '../../infra/ports/read-store.js';
import { outlivedReservations, type Platform } from '../kernel/platform.js';
import { event, execute, loadStream, type Evolver } from '../kernel/command.js';
import { derivedId, newId, nowIso } from '../kernel/ids.js';
import { abandoned, available, hold, holderReservation, movedAway, release, reserve, undo, type Hold, type Reclaim } from '../kernel/reservations.js';
import { keyedSerial, withKeys } from '../kernel/serial.js';
import { ApiError, badRequest, conflict, throttled, tokenExpired, tokenNotValid, tookTooLong } from '../gateway/errors.js';
import type { TokenService } from './tokens.js';
import {
  AccountMailRequested,
  EmailVerificationSent,
  PasswordChangeNotified,
  PasswordResetRequested,
  SessionRefreshed,
  SessionRevoked,
  SessionStarted,
  UserEmailVerified,
  UserNumberAllocated,
  UserPasswordChanged,
  UserProfileUpdated,
  UserRegistered,
  UserSessionsRevoked,
  sessionEvolver,
  sessionStream,
  userEvolver,
  userSequenceStream,
  userStream,
  type AccountMailRequestedData,
  type UserPasswordChangedData,
  type UserRegisteredData,
} from './events.js';
import { failureBudgets } from '../kernel/failure-budgets.js';
import { USERS, externalKeyOf, userDocId, usersProjection, type UserDoc } from '../../projections/users/index.js';
import { SESSIONS, type SessionDoc } from '../../projections/sessions/index.js';
import { throttleAddress } from '../kernel/client-address.js';
import { rememberedCredentials } from './remembered-credentials.js';
import { projectedDoc, settleOrWarn } from '../kernel/read-waits.js';

const USERNAME_IS_AN_EMAIL = "This username is another account's e-mail address.";
/** Why a sign-up is refused for a value another account has (the same from the early look and the reservations). */
const usernameIsAnEmail = () => badRequest({ username: [USERNAME_IS_AN_EMAIL] });
const usernameTaken = () => badRequest({ username: ['A user with that username already exists.'] });
const emailTaken = () => badRequest({ email: ['A user is already registered with this e-mail address.'] });
const externalLinked = () => new ApiError(409, 'conflict', 'This external account is already linked.');

export interface PublicUser {
  pk: number;
  username: string;
  email: string;
  first_name: string;
  last_name: string;
}

export interface TokenPair {
  access: string;
  refresh: string;
  user: PublicUser;
}

export const toPublicUser = (u: Pick<UserDoc, 'pk' | 'username' | 'email' | 'firstName' | 'lastName'>): PublicUser => ({
  pk: u.pk,
  username: u.username,
  email: u.email,
  first_name: u.firstName,
  last_name: u.lastName,
});

/** The holder {@link available} is asked about for an account not created yet: no reservation names it. */
const NO_HOLDER_YET = '';

/** The last user number allocated (they only grow: the last event's is the highest). */
const userNumberEvolver: Evolver<number> = { initial: () => 0, evolve: (_, e) => (e.data as { pk: number }).pk, lastOnly: true };

/**
 * Brute-force limits for sign-in, over 15 minutes. Failures count per account and client
 * address (as Auth0's brute-force protection): a stranger guessing from one address locks
 * that address out of the account, not the owner signing in from another. Guesses spread over
 * many addresses still meet the account's own budget, and one address guessing at many
 * accounts meets the address's.
 */
const LOGIN_WINDOW_S = 15 * 60;
const LOGIN_FAILURES_PER_ACCOUNT_AND_IP = 10;
const LOGIN_FAILURES_PER_ACCOUNT = 100;
const LOGIN_FAILURES_PER_IP = 100;
/** Window of SIGNUP_LIMIT_PER_HOUR (sign-ups per client address). */
const SIGNUP_WINDOW_S = 3600;
/** Lifetime of links sent by mail. */
const VERIFY_LINK_TTL_S = 3 * 24 * 3600;
const RESET_LINK_TTL_S = 3600;
/** A password-change notice still worth sending this long after the change (a relay outage). */
const PASSWORD_NOTICE_TTL_S = 3 * 24 * 3600;

/** The mail an account event asks for, read from the event alone (null: none). */
export function accountMailRequestOf(e: RecordedEvent): AccountMailRequestedData | null {
  if (e.type === AccountMailRequested) return e.data as AccountMailRequestedData;
  if (e.type === UserPasswordChanged) {
    // The owner hears of every password change: one made with a stolen token or cookie
    // (SPEC's change takes no old password) or a reset link from a read mailbox.
    const d = e.data as UserPasswordChangedData;
    return { kind: 'password-changed', exp: Math.floor(Date.parse(d.at) / 1000) + PASSWORD_NOTICE_TTL_S, at: d.at, reason: d.reason };
  }
  if (e.type !== UserRegistered) return null;
  const d = e.data as UserRegisteredData;
  return d.emailVerified || !d.email ? null : { kind: 'verify-email', exp: Math.floor(Date.parse(d.at) / 1000) + VERIFY_LINK_TTL_S, at: d.at };
}


/**
 * A username as it is checked and kept: NFKC-normalised (Django's `normalize_username`), so
 * full-width `ｆｕｌｌ`, ligatures `ﬁ` or a decomposed `é` are the same name as their plain
 * forms. Every way in (the API, the dashboard, an external sign-in) goes through it.
 */
export const normalUsername = (username: string): string => username.normalize('NFKC');

export function createAccounts(platform: Platform, tokens: TokenService, hmacKey: Buffer) {
  const { events: store, reads, progress, config, limiter, logger } = platform;
  const users = reads.collection<UserDoc>(USERS);
  const sessions = reads.collection<SessionDoc>(SESSIONS);
  const hashOptions = { type: argon2.argon2id, memoryCost: config.passwordHashMemoryKiB, timeCost: 2, parallelism: 1 } as const;
  // Verified against when the account does not exist, so timing does not reveal which accounts exist.
  const dummyHash = argon2.hash(randomBytes(16).toString('hex'), hashOptions);

  const hashPassword = (password: string) => argon2.hash(password, hashOptions);

  async function settle(position: string | undefined | null) {
    if (position) await progress.waitFor(position);
  }

  /**
   * Usernames, emails and external subjects reserved by a sign-up that died before its
   * UserRegistered (kernel/reservations.ts) are free again; a username also once its
   * account was renamed after reserving it.
   */
  const accountValue = (kind: 'username' | 'useremail' | 'externalsubject'): Reclaim => ({
    settled: platform.settled,
    async check(holder, value, reservation) {
      const { state: s } = await loadStream(store, userStream(Number(streamId(holder))), userEvolver);
      if (!s.exists) return 'unknown';
      if (kind === 'externalsubject') return s.external && externalKeyOf(s.external.issuer, s.external.subject) === value ? 'holds' : 'gone';
      // An email reservation is the account's email, or the mirror of a username spelling one.
      if (s.username.toLowerCase() === value || (kind === 'useremail' && s.email.toLowerCase() === value)) return 'holds';
      return movedAway(s.namedAt, reservation);
    },
  });
  const reclaim = { username: accountValue('username'), useremail: accountValue('useremail'), externalsubject: accountValue('externalsubject') };

  async function allocatePk(): Promise<number> {
    const stream = userSequenceStream;
    const { result } = await execute(
      store,
      stream,
      userNumberEvolver,
      (last) => {
        const pk = last + 1;
        return { events: [event(UserNumberAllocated, { pk })], result: pk };
      },
      50,
    );
    return result;
  }

  /**
   * The account a login names. The `email` field matches emails only. A `username` field (or
   * HTTP basic) that looks like an email matches an email first: a username may contain `@`,
   * and must not be able to capture the logins of the account whose email it spells (new
   * usernames and emails are also kept from spelling another account's, see
   * {@link crossTaken}).
   */
  async function findByLogin(login: string, field: 'username' | 'email' = 'username'): Promise<UserDoc | null> {
    const key = login.trim().toLowerCase();
    const byEmail = () => (key.includes('@') ? users.findOne({ emailKey: key }) : Promise.resolve(null));
    if (field === 'email') return byEmail();
    // As typed first (an account named before usernames were normalised keeps its sign-in),
    // then normalised (NFKC before case folding, as at registration).
    const normal = normalUsername(login.trim()).toLowerCase();
    return (await byEmail()) ?? (await users.findOne({ usernameKey: key })) ?? (normal === key ? null : await users.findOne({ usernameKey: normal }));
  }

  /**
   * Usernames, emails (one namespace here: a username may spell an email) and external
   * accounts being reserved by a sign-up or a rename in this process, held until its outcome:
   * one that fails after reserving (an email taken, a rename refused) thus never refuses
   * another meanwhile for a value it then gives back. Across gateways the reservations alone
   * decide.
   */
  const valueLocks = keyedSerial();

  /**
   * Whether a username (email) spells another account's email (username). New usernames
   * spelling an email also hold it as an email ({@link mirrorOf}), which makes the check
   * atomic; this read covers accounts from before that, and the other direction.
   */
  async function crossTaken(kind: 'username' | 'useremail', key: string, owner: string | null): Promise<boolean> {
    const other = kind === 'username' ? 'useremail' : 'username';
    const found = await holderReservation(store, other, key);
    if (!found || found.holder === owner) return false;
    return !(await abandoned(reclaim[other], found.holder, key, found.reservation));
  }

  /**
   * A username spelling an email address is also held in the email namespace, so it and a
   * sign-up with that email cannot both succeed (two reservations of one stream, not a
   * read-then-write across two).
   */
  const mirrorOf = (usernameKey: string, ownEmailKey: string): string | null => (usernameKey.includes('@') && usernameKey !== ownEmailKey ? usernameKey : null);

  async function getUser(pk: number): Promise<UserDoc> {
    const u = await users.get(userDocId(pk));
    if (!u) throw tokenNotValid('User not found.');
    return u;
  }

  /** The values a sign-up reserves, as reservations key them. */
  function signUpKeys(input: { username: string; email: string; external?: { issuer: string; subject: string } | null }) {
    const usernameKey = input.username.toLowerCase();
    const emailKey = input.email.toLowerCase();
    const externalKey = input.external ? externalKeyOf(input.external.issuer, input.external.subject) : null;
    return { usernameKey, emailKey, mirror: mirrorOf(usernameKey, emailKey), externalKey };
  }

  /** A look that takes nothing: whether a new account could reserve `key` of `kind` now. */
  const freeForNewAccount = (kind: 'username' | 'useremail' | 'externalsubject', key: string) =>
    available(store, kind, key, NO_HOLDER_YET, reclaim[kind]);

  /**
   * Refuses a sign-up whose username, email or external account is taken, by looking only:
   * the same answers in the same order as the reservations in {@link register}, before any
   * hashing or append, so a sign-up refused for a taken value costs a few reads. The
   * reservations stay the check that decides (two sign-ups of one name at once).
   */
  async function refuseTaken(keys: ReturnType<typeof signUpKeys>): Promise<void> {
    const { usernameKey, emailKey, mirror, externalKey } = keys;
    if (await crossTaken('username', usernameKey, null)) throw usernameIsAnEmail();
    if (await crossTaken('useremail', emailKey, null)) throw emailTaken();
    if (!(await freeForNewAccount('username', usernameKey))) throw usernameTaken();
    if (mirror && !(await freeForNewAccount('useremail', mirror))) throw usernameIsAnEmail();
    if (!(await freeForNewAccount('useremail', emailKey))) throw emailTaken();
    if (externalKey && !(await freeForNewAccount('externalsubject', externalKey))) throw externalLinked();
  }

  /**
   * Counts a sign-up from `ip` that is about to do real work (an Argon2 hash, the account's
   * events) against SIGNUP_LIMIT_PER_HOUR; beyond it, 429. Sign-ups refused before that (a
   * bad body, a taken name) cost no more than any other bad request and are not counted.
   */
  async function spendSignUp(ip: string): Promise<void> {
    const d = await limiter.hit(`signup:ip:${throttleAddress(ip)}`, config.signupLimitPerHour, SIGNUP_WINDOW_S);
    if (!d.allowed) throw throttled(d.retryAfter, `Too many sign-ups from this address. Try again in ${d.retryAfter} seconds.`);
  }

  /**
   * Creates an account. Username and email are unique (case-insensitively) through
   * reservations. `ip`: the client address of a sign-up to throttle (an external sign-in,
   * vouched for by its provider, has none).
   *
   * Order: the cheap look for taken values, the throttle, the hash, then the user number and
   * the reservations. The reservations are held by the account's stream (`user-<pk>`, which
   * reclaiming, renames and deletion go by), so the number comes first; only a sign-up that
   * loses a race after the look spends one without registering.
   */
  async function register(input: {
    username: string;
    email: string;
    password: string | null;
    firstName?: string;
    lastName?: string;
    emailVerified?: boolean;
    external?: { issuer: string; subject: string } | null;
    ip?: string;
  }): Promise<UserDoc> {
    input = { ...input, username: normalUsername(input.username) }; // whichever way it came in
    const keys = signUpKeys(input);
    const { usernameKey, emailKey, mirror, externalKey } = keys;
    await refuseTaken(keys);
    if (input.ip !== undefined) await spendSignUp(input.ip);
    const passwordHash = input.password === null ? null : await hashPassword(input.password);
    // The values it reserves are held in this process until its outcome (see `valueLocks`).
    const held = [usernameKey, emailKey, mirror, externalKey && `external:${externalKey}`].filter((k): k is string => Boolean(k));
    return withKeys(valueLocks, held, async () => {
      const started = Date.now(); // reservations are held from here (the hash may queue under load)
      const pk = await allocatePk();
      const owner = userStream(pk);
      if (await crossTaken('username', usernameKey, owner)) throw usernameIsAnEmail();
      if (await crossTaken('useremail', emailKey, owner)) throw emailTaken();
      if (!(await reserve(store, 'username', usernameKey, owner, false, reclaim.username))) throw usernameTaken();
      const releaseTaken = async () => {
        await release(store, 'username', usernameKey, owner);
        if (mirror) await release(store, 'useremail', mirror, owner);
      };
      if (mirror && !(await reserve(store, 'useremail', mirror, owner, false, reclaim.useremail))) {
        await releaseTaken();
        throw usernameIsAnEmail();
      }
      if (!(await reserve(store, 'useremail', emailKey, owner, false, reclaim.useremail))) {
        await releaseTaken();
        throw emailTaken();
      }
      if (externalKey && !(await reserve(store, 'externalsubject', externalKey, owner, false, reclaim.externalsubject))) {
        await releaseTaken();
        await release(store, 'useremail', emailKey, owner);
        throw externalLinked();
      }
      const data: UserRegisteredData = {
        pk,
        username: input.username,
        email: input.email,
        firstName: input.firstName ?? '',
        lastName: input.lastName ?? '',
        passwordHash,
        emailVerified: input.emailVerified ?? false,
        encryptionSalt: randomBytes(16).toString('base64'),
        external: input.external ?? null,
        at: nowIso(),
      };
      if (outlivedReservations(started)) {
        await releaseTaken();
        await release(store, 'useremail', emailKey, owner);
        throw tookTooLong('The sign-up');
      }
      const appended = await store.append(userStream(pk), [event(UserRegistered, data)], { expectedRevision: 'no_stream' });
      // Answered despite a lag (a 503 would lose the tokens; its retry would find the name taken).
      await settleOrWarn(progress, logger, appended.position, 'sign-up');
      return (await users.get(userDocId(pk))) ?? projectedDoc<UserDoc>(usersProjection, appended.events[0]!, USERS);
    });
  }

  const loginFailures = failureBudgets(limiter);
  const rememberedBasic = rememberedCredentials();

  /**
   * Checks a login (username or email) and password, with brute-force throttling: failures
   * are counted per account (whichever name it is reached by; per login name when it names
   * none) and client address, per account, and per client address, and checks still running
   * count too, so a burst of parallel guesses cannot pass the budget while the hashes are
   * being compared.
   */
  async function checkPassword(login: string, password: string, ip: string, field: 'username' | 'email' = 'username'): Promise<UserDoc | null> {
    return checkPasswordOf(login, password, ip, field, null);
  }

  /**
   * HTTP basic sends the password with every request: a credential verified before against
   * the account's current password hash is taken without argon2id (remembered-credentials.ts).
   * The failure budgets apply as to any check (a locked-out account is refused either way).
   */
  async function checkBasic(login: string, password: string, ip: string): Promise<UserDoc | null> {
    return checkPasswordOf(login, password, ip, 'username', rememberedBasic.tag(login, password));
  }

  async function checkPasswordOf(login: string, password: string, ip: string, field: 'username' | 'email', rememberAs: string | null): Promise<UserDoc | null> {
    const user = await findByLogin(login, field);
    const accountKey = user ? `login:acct:${user.pk}` : `login:name:${login.trim().toLowerCase()}`;
    const budgets = [
      { key: `${accountKey}:ip:${throttleAddress(ip)}`, limit: LOGIN_FAILURES_PER_ACCOUNT_AND_IP, windowS: LOGIN_WINDOW_S },
      { key: accountKey, limit: LOGIN_FAILURES_PER_ACCOUNT, windowS: LOGIN_WINDOW_S },
      { key: `login:ip:${throttleAddress(ip)}`, limit: LOGIN_FAILURES_PER_IP, windowS: LOGIN_WINDOW_S },
    ];
    const refuse = (retryAfter: number) => throttled(retryAfter, `Too many failed sign-in attempts. Try again in ${retryAfter} seconds.`);
    return loginFailures.attempt(budgets, refuse, async (fail) => {
      // A right password in a burst waits for room; a guess beyond the budget is refused.
      if (user && rememberAs !== null && rememberedBasic.holds(rememberAs, user)) {
        platform.metrics.passwordCheck('remembered');
        return user;
      }
      const ok = await argon2.verify(user?.passwordHash ?? (await dummyHash), password).catch(() => false);
      if (!user || !user.passwordHash || !ok) {
        platform.metrics.passwordCheck('refused');
        await fail();
        return null;
      }
      platform.metrics.passwordCheck('verified');
      if (rememberAs !== null) rememberedBasic.remember(rememberAs, user);
      return user;
    });
  }

  /** Starts a session family and returns its first token pair. */
  async function startSession(user: UserDoc, opts: { identity?: string | null; via: string; kind?: 'token' | 'cookie'; keyId?: string }) {
    const sessionId = newId();
    const tokenId = newId();
    const refresh = await tokens.issueRefresh({ userPk: user.pk, sessionId, identity: opts.identity, jti: tokenId });
    const appended = await store.append(
      sessionStream(sessionId),
      [event(SessionStarted, { userPk: user.pk, identity: opts.identity ?? null, generation: user.sessionGeneration, tokenId, expiresAt: refresh.expiresAt, via: opts.via, kind: opts.kind ?? 'token', ...(opts.keyId ? { keyId: opts.keyId } : {}), at: nowIso() })],
      { expectedRevision: 'no_stream' },
    );
    // Tokens are answered once: a lag of the read models is logged, not a 503 that loses them
    // (a device's code is spent by then; a refresh reads the session from the log). A browser's
    // cookie is looked up in the read models at its next page: there a lag is a 503 (sign in again).
    if (opts.kind === 'cookie') await settle(appended.position);
    else await settleOrWarn(progress, logger, appended.position, 'session start');
    const access = await tokens.issueAccess({ userPk: user.pk, sessionId, identity: opts.identity });
    return { sessionId, access: access.token, refresh: refresh.token, refreshExpiresAt: refresh.expiresAt };
  }

  async function tokenPair(user: UserDoc, via: string, identity?: string | null): Promise<TokenPair> {
    const s = await startSession(user, { via, identity });
    return { access: s.access, refresh: s.refresh, user: toPublicUser(user) };
  }

  /** Rotates a refresh token. A spent token revokes its whole family (reuse detection). */
  async function refresh(refreshToken: string): Promise<{ access: string; refresh: string }> {
    const claims = await tokens.verify(refreshToken, 'refresh');
    const user = await users.get(userDocId(claims.userPk));
    if (!user) throw tokenNotValid('User not found.');
    const stream = sessionStream(claims.sessionId);
    let reused = false;
    const { result, position } = await execute(store, stream, sessionEvolver, async (s) => {
      // A dashboard cookie is a browser session, not a refresh token of the API (refreshing it would end the session).
      if (!s.exists || s.userPk !== claims.userPk || s.kind === 'cookie') throw tokenNotValid('Token is invalid');
      if (s.revoked || s.generation !== user.sessionGeneration) throw tokenExpired('Token has been revoked; sign in again.');
      if (s.tokenId !== claims.jti) {
        reused = true;
        return { events: [event(SessionRevoked, { reason: 'refresh_token_reuse', at: nowIso() })], result: null };
      }
      const next = await tokens.issueRefresh({ userPk: claims.userPk, sessionId: claims.sessionId, identity: s.identity, jti: newId() });
      const access = await tokens.issueAccess({ userPk: claims.userPk, sessionId: claims.sessionId, identity: s.identity });
      return {
        events: [event(SessionRefreshed, { tokenId: next.jti, previousTokenId: claims.jti, expiresAt: next.expiresAt, at: nowIso() })],
        result: { access: access.token, refresh: next.token },
      };
    });
    await settle(position); // read-your-writes: verify and the cookie check read the session's current token
    if (reused || !result) {
      logger.warn({ session: claims.sessionId, user: claims.userPk }, 'refresh token reuse: session family revoked');
      throw tokenExpired('Token has been revoked; sign in again.');
    }
    return result;
  }

  /** Ends every session of the user (logout, password change, password reset). */
  async function revokeAllSessions(pk: number, reason: string): Promise<void> {
    const { position } = await execute(store, userStream(pk), userEvolver, (s) => {
      if (!s.exists) return { events: [], result: undefined };
      return { events: [event(UserSessionsRevoked, { reason, at: nowIso() })], result: undefined };
    });
    await settle(position);
  }

  async function revokeSession(sessionId: string, reason: string): Promise<void> {
    await settle(await appendSessionRevoked(sessionId, reason));
  }

  async function appendSessionRevoked(sessionId: string, reason: string): Promise<string | null> {
    const { position } = await execute(store, sessionStream(sessionId), sessionEvolver, (s) => {
      if (!s.exists || s.revoked) return { events: [], result: undefined };
      return { events: [event(SessionRevoked, { reason, at: nowIso() })], result: undefined };
    });
    return position;
  }

  /**
   * Ends the sessions handed out with a management key (a device sign-up) once the key is
   * revoked: the route that revokes it, and the keys context's reactor (at least once, also
   * after a crash or a 503 in between). Every session is ended before the wait for the read
   * models, which a lag may cut short.
   */
  async function revokeSessionsOfKey(keyId: string, reason: string): Promise<void> {
    const bound = await sessions.find({ where: { keyId, revoked: false }, limit: 100 });
    let last: string | null = null;
    for (const s of bound.items) last = (await appendSessionRevoked(s.id, reason)) ?? last;
    await settle(last);
  }

  /**
   * The user's live sessions (browser sessions and token families), the latest signed in or
   * refreshed first (the order of their ends: a refresh moves a session's end on), a page at
   * a time. Ended, expired and older-generation ones (a sign-out everywhere, a password
   * change) are not listed.
   */
  async function listSessions(pk: number, page: { limit: number; cursor?: string | null }): Promise<Page<SessionDoc>> {
    const user = await users.get(userDocId(pk));
    if (!user) return { items: [], next: null };
    return sessions.find({
      where: { userPk: pk, revoked: false, generation: user.sessionGeneration },
      range: { expiresAt: { gt: new Date().toISOString() } },
      orderBy: { field: 'expiresAt', direction: 'desc' },
      limit: page.limit,
      cursor: page.cursor ?? null,
    });
  }

  /** Ends one live session of `pk`'s; false when there is none of that id (another account's, or over). */
  async function endSession(pk: number, sessionId: string, reason: string): Promise<boolean> {
    const target = await liveSession(sessionId);
    if (!target || target.userPk !== pk) return false;
    await revokeSession(sessionId, reason);
    return true;
  }

  /** A live session (cookie sessions of the dashboard, and token families). */
  async function liveSession(sessionId: string): Promise<SessionDoc | null> {
    const s = await sessions.get(sessionId);
    if (!s || s.revoked || Date.parse(s.expiresAt) <= Date.now()) return null;
    const user = await users.get(userDocId(s.userPk));
    if (!user || user.sessionGeneration !== s.generation) return null;
    return s;
  }

  /** One profile update of a user at a time in this process: renames of one user take turns. */
  const profileSerial = keyedSerial();

  async function updateProfile(pk: number, patch: { username?: string; firstName?: string; lastName?: string }): Promise<UserDoc> {
    const normal = patch.username === undefined ? patch : { ...patch, username: normalUsername(patch.username) };
    return profileSerial(String(pk), () => updateProfileNow(pk, normal));
  }

  async function updateProfileNow(pk: number, patch: { username?: string; firstName?: string; lastName?: string }): Promise<UserDoc> {
    const started = Date.now();
    // The user as the log has it (the read model may lag a rename just made).
    const { state: start } = await loadStream(store, userStream(pk), userEvolver);
    if (!start.exists) throw tokenNotValid('User not found.');
    const owner = userStream(pk);
    const emailKey = start.email.toLowerCase();
    const oldKey = start.username.toLowerCase();
    const newKey = patch.username?.toLowerCase();
    const reserving = newKey !== undefined && newKey !== oldKey;
    // The names it moves between are held in this process until its outcome (see `valueLocks`).
    return withKeys(valueLocks, reserving ? [oldKey, newKey!] : [], async () => {
      if (reserving && (await crossTaken('username', newKey!, owner))) throw badRequest({ username: [USERNAME_IS_AN_EMAIL] });
      const taken = reserving ? await hold(store, 'username', newKey!, owner, false, reclaim.username) : null;
      if (taken?.outcome === 'taken') throw badRequest({ username: ['A user with that username already exists.'] });
      const mirror = reserving ? mirrorOf(newKey!, emailKey) : null;
      let mirrored: Hold | null = null;
      let written: string | null;
      try {
        if (mirror) {
          mirrored = await hold(store, 'useremail', mirror, owner, false, reclaim.useremail);
          if (mirrored.outcome === 'taken') throw badRequest({ username: [USERNAME_IS_AN_EMAIL] });
        }
        if (reserving && outlivedReservations(started)) {
          throw tookTooLong('The rename');
        }
        ({ position: written } = await execute(store, userStream(pk), userEvolver, (s) => {
          if (!s.exists) throw tokenNotValid('User not found.');
          // Another process renamed the user since this rename read it: its reservations were
          // decided against a name that is gone (and may have been reclaimed).
          if (reserving && s.username !== start.username) throw conflict('The user was modified concurrently; retry.');
          const changes: Record<string, string> = {};
          if (patch.username !== undefined && patch.username !== s.username) changes.username = patch.username;
          if (patch.firstName !== undefined && patch.firstName !== s.firstName) changes.firstName = patch.firstName;
          if (patch.lastName !== undefined && patch.lastName !== s.lastName) changes.lastName = patch.lastName;
          if (!Object.keys(changes).length) return { events: [], result: undefined };
          return { events: [event(UserProfileUpdated, { ...changes, at: nowIso() })], result: undefined };
        }));
      } catch (err) {
        // Only what this request took, and only if no duplicate of it renewed it meanwhile.
        await undo(store, taken);
        await undo(store, mirrored);
        throw err;
      }
      if (reserving) {
        await release(store, 'username', oldKey, owner);
        const oldMirror = mirrorOf(oldKey, emailKey);
        if (oldMirror) await release(store, 'useremail', oldMirror, owner);
      }
      // Renamed: nothing is undone now, even if the read models are too far behind to show it
      // yet (503 projection_lag; it once gave the new name back, free for another account).
      await settle(written);
      // The user as this write left it (a concurrent later PATCH may already show in the read model).
      const user = await getUser(pk);
      const mine = Object.fromEntries(Object.entries({ username: patch.username, firstName: patch.firstName, lastName: patch.lastName }).filter(([, v]) => v !== undefined));
      return { ...user, ...mine, ...(patch.username !== undefined ? { usernameKey: patch.username.toLowerCase() } : {}) };
    });
  }

  async function setPassword(pk: number, password: string, reason: 'change' | 'reset'): Promise<void> {
    const hash = await hashPassword(password);
    const { position } = await execute(store, userStream(pk), userEvolver, (s) => {
      if (!s.exists) throw tokenNotValid('User not found.');
      return {
        events: [
          event(UserPasswordChanged, { passwordHash: hash, reason, at: nowIso() }),
          event(UserSessionsRevoked, { reason: `password_${reason}`, at: nowIso() }),
        ],
        result: undefined,
      };
    });
    await settle(position);
  }


  function verificationKey(pk: number, email: string, exp: number): string {
    const payload = Buffer.from(JSON.stringify({ pk, exp })).toString('base64url');
    return `${payload}.${macOf(hmacKey, 'verify-email', String(pk), email.toLowerCase(), String(exp))}`;
  }

  /**
   * Asks the account mail reactor for a mail and waits a moment for it to go out (up to 2 s,
   * so a client reading the outbox right after the answer finds it). The answer is the same
   * whether it went out or not: a relay outage delays the mail, it does not fail the request.
   */
  async function requestMail(pk: number, kind: AccountMailRequestedData['kind'], ttlSeconds: number): Promise<void> {
    const request = event<AccountMailRequestedData>(AccountMailRequested, { kind, exp: Math.floor(Date.now() / 1000) + ttlSeconds, at: nowIso() });
    const { nextRevision } = await store.append(userStream(pk), [request]);
    const sent = derivedId(request.id, 'sent');
    for (let pause = 20, deadline = Date.now() + 2_000; Date.now() < deadline; pause = Math.min(pause * 2, 400)) {
      await new Promise((r) => setTimeout(r, Math.min(pause, Math.max(0, deadline - Date.now()))));
      // The record comes after the request (the user stream grows with every sign-out).
      if ((await store.readStream(userStream(pk), { fromRevision: nextRevision + 1 })).some((e) => e.id === sent)) return;
    }
  }

  /**
   * The mail an account event asks for, built now (links are signed when sent, never kept):
   * a sign-up with an unverified email, or an {@link AccountMailRequested}. Null when there
   * is nothing (left) to send: verified meanwhile, link expired, account gone.
   */
  async function accountMailOf(e: RecordedEvent): Promise<AccountMail | null> {
    const request = accountMailRequestOf(e);
    if (!request || request.exp * 1000 < Date.now()) return null;
    const { state: user } = await loadStream(store, e.stream, userEvolver);
    if (!user.exists || !user.email) return null;
    const mail = (recordType: string, subject: string, text: string): AccountMail => ({
      stream: e.stream,
      record: { id: derivedId(e.id, 'sent'), type: recordType, data: { at: nowIso() } },
      mail: { from: `no-reply@${config.mailDomain}`, to: [user.email], subject, text },
    });
    if (request.kind === 'verify-email') {
      if (user.emailVerified) return null;
      const key = verificationKey(user.pk, user.email, request.exp);
      const link = `${config.publicUrl}/verify-email?key=${encodeURIComponent(key)}`;
      return mail(EmailVerificationSent, 'Confirm your email address', `Confirm your email address by opening this link:\n\n${link}\n\nOr send this key to POST /api/auth/social/verify-email/:\n${key}\n`);
    }
    if (request.kind === 'password-changed') {
      const how = request.reason === 'reset' ? 'with a password reset link' : 'by a signed-in client (the dashboard, the API or the CLI)';
      return mail(
        PasswordChangeNotified,
        'Your password was changed',
        `The password of ${user.username} was changed on ${request.at.replace('T', ' ').slice(0, 16)} UTC, ${how}. Its sessions were signed out (a dashboard that changed it stays signed in; an access token already handed out works until it expires, within the hour); API keys keep working.\n\nIf it was you, there is nothing to do.\n\nIf it was not: reset your password at once at ${config.publicUrl}/forgot-password, then look at your API keys at ${config.publicUrl}/keys and revoke any you do not know.\n`,
      );
    }
    const uid = Buffer.from(String(user.pk)).toString('base64url');
    const token = resetToken(user, request.exp);
    const link = `${config.publicUrl}/reset-password?uid=${uid}&token=${token}`;
    return mail(
      PasswordResetRequested,
      'Reset your password',
      `Someone asked to reset the password of ${user.username}. If it was you, open:\n\n${link}\n\nor send uid=${uid} and token=${token} to POST /api/auth/password/reset/confirm/.\nThe link expires in one hour.\n`,
    );
  }

  async function resendVerification(email: string): Promise<void> {
    const user = await users.findOne({ emailKey: email.trim().toLowerCase() });
    // Same answer whether or not the address is known: no account enumeration.
    if (!user || user.emailVerified) return;
    const d = await limiter.hit(`verify-mail:${user.pk}`, 5, 3600);
    if (!d.allowed) return;
    await requestMail(user.pk, 'verify-email', VERIFY_LINK_TTL_S);
  }

  /** Verifies the address a mailed link was made for; the address (the page says whose it was). */
  async function verifyEmail(key: string): Promise<string> {
    const invalid = () => badRequest({ key: ['Invalid or expired verification key.'] });
    const [payload, sig] = key.split('.');
    if (!payload || !sig) throw invalid();
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    } catch {
      throw invalid();
    }
    // Unsigned yet: any JSON at all may come (`null` was a 500).
    const { pk, exp } = (parsed ?? {}) as { pk?: unknown; exp?: unknown };
    if (typeof pk !== 'number' || typeof exp !== 'number' || !Number.isSafeInteger(pk) || !Number.isSafeInteger(exp) || exp * 1000 < Date.now()) throw invalid();
    const user = await users.get(userDocId(pk));
    if (!user || !sameSecret(sig, macOf(hmacKey, 'verify-email', String(pk), user.emailKey, String(exp)))) throw invalid();
    if (user.emailVerified) return user.email;
    const { position } = await execute(store, userStream(user.pk), userEvolver, (s) =>
      s.emailVerified ? { events: [], result: undefined } : { events: [event(UserEmailVerified, { at: nowIso() })], result: undefined },
    );
    await settle(position);
    return user.email;
  }

  // Reset tokens are bound to the current password hash: they die once used (or on any change).
  function resetToken(user: Pick<UserDoc, 'pk' | 'passwordHash'>, exp: number): string {
    return `${exp.toString(36)}-${macOf(hmacKey, 'reset-password', String(user.pk), user.passwordHash ?? '', String(exp))}`;
  }

  async function requestPasswordReset(email: string): Promise<void> {
    const user = await users.findOne({ emailKey: email.trim().toLowerCase() });
    if (!user) return; // same answer either way
    const d = await limiter.hit(`reset-mail:${user.pk}`, 5, 3600);
    if (!d.allowed) return;
    await requestMail(user.pk, 'reset-password', RESET_LINK_TTL_S);
  }

  /** The user a reset link (uid, token) is for, while it is alive; else a 400 naming the dead part. */
  async function resetLinkUser(uid: string, token: string): Promise<UserDoc> {
    let pk = NaN;
    try {
      pk = Number(Buffer.from(uid, 'base64url').toString('utf8'));
    } catch {
      /* invalid below */
    }
    const user = Number.isSafeInteger(pk) ? await users.get(userDocId(pk)) : null;
    if (!user) throw badRequest({ uid: ['Invalid value'] });
    const [exp36] = token.split('-');
    const exp = parseInt(exp36 ?? '', 36);
    if (!Number.isSafeInteger(exp) || exp * 1000 < Date.now() || !sameSecret(token, resetToken(user, exp))) {
      throw badRequest({ token: ['Invalid value'] });
    }
    return user;
  }

  /** Throws (400) unless the reset link can still be used: its page says so before the form. */
  async function checkPasswordReset(uid: string, token: string): Promise<void> {
    await resetLinkUser(uid, token);
  }

  async function confirmPasswordReset(uid: string, token: string, password: string): Promise<void> {
    const user = await resetLinkUser(uid, token);
    await setPassword(user.pk, password, 'reset');
  }

  async function findOrCreateExternal(issuer: string, subject: string, email: string, name: { first?: string; last?: string; username?: string }): Promise<UserDoc> {
    const existing = await users.findOne({ externalKey: externalKeyOf(issuer, subject) });
    if (existing) return existing;
    const base = normalUsername(name.username ?? email.split('@')[0]).replace(/[^\p{L}\p{N}_.@+-]/gu, '').slice(0, 140) || 'user';
    for (let i = 0; i < 5; i++) {
      const username = i === 0 ? base : `${base}${randomBytes(2).toString('hex')}`;
      try {
        return await register({ username, email, password: null, firstName: name.first, lastName: name.last, emailVerified: true, external: { issuer, subject } });
      } catch (err) {
        if (!(err instanceof ApiError) || !err.fields?.username) throw err;
      }
    }
    throw new ApiError(409, 'conflict', 'Could not find a free username for this account.');
  }

  return {
    register,
    checkPassword,
    checkBasic,
    startSession,
    tokenPair,
    refresh,
    revokeAllSessions,
    revokeSession,
    revokeSessionsOfKey,
    listSessions,
    endSession,
    liveSession,
    updateProfile,
    setPassword,
    resendVerification,
    verifyEmail,
    requestPasswordReset,
    checkPasswordReset,
    confirmPasswordReset,
    findOrCreateExternal,
    getUser,
    findUser: (pk: number) => users.get(userDocId(pk)),
    findByLogin,
    loadUserStream: (pk: number) => loadStream(store, userStream(pk), userEvolver),
    accountMailOf,
  };
}

/** A mail of the account (services/accounts/mail.ts sends it, then appends `record`). */
export interface AccountMail {
  stream: string;
  mail: OutboundMail;
  /** Recorded once the relay (or the outbox) took it; its id is derived from the request's. */
  record: EventData;
}

export type Accounts = ReturnType<typeof createAccounts>;
