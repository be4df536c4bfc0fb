/**
 * Account facts. Streams: `user-<pk>` (the account), `userseq-global` (pk allocation),
 * `session-<uuid>` (one refresh-token family or dashboard session).
 * No event carries a secret: passwords appear only as argon2id hashes, tokens not at all.
 */
import { streamName, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Evolver } from '../kernel/command.js';

export const UserRegistered = 'UserRegistered';
export const UserProfileUpdated = 'UserProfileUpdated';
export const UserPasswordChanged = 'UserPasswordChanged';
export const UserSessionsRevoked = 'UserSessionsRevoked';
export const UserEmailVerified = 'UserEmailVerified';
/** A mail sent by the account mail reactor (kept under these names: older versions sent first, then recorded). */
export const PasswordResetRequested = 'PasswordResetRequested';
export const EmailVerificationSent = 'EmailVerificationSent';
/** The owner was told by mail that the account's password changed. */
export const PasswordChangeNotified = 'PasswordChangeNotified';
/**
 * A reset or verification mail asked for: the intent, appended before anything is sent, so
 * a crash or a relay outage delays the mail instead of losing it (services/accounts/mail.ts).
 * It holds when the link expires, never the link: links are signed when the mail is built.
 */
export const AccountMailRequested = 'AccountMailRequested';
export interface AccountMailRequestedData {
  /** `password-changed` is never appended: it is read off a `UserPasswordChanged` (service.ts accountMailRequestOf). */
  kind: 'verify-email' | 'reset-password' | 'password-changed';
  /** Unix seconds: the link's expiry, signed into it (a notice: until when it is worth sending). */
  exp: number;
  at: string;
  /** password-changed: `change` or `reset`. */
  reason?: string;
}
export const UserNumberAllocated = 'UserNumberAllocated';

export const USER = 'user';
export const SESSION = 'session';
export const userStream = (pk: number) => streamName(USER, pk);
export const sessionStream = (id: string) => streamName(SESSION, id);
/** Allocates account numbers (pk): one stream for all. */
export const userSequenceStream = streamName('userseq', 'global');

export const SessionStarted = 'SessionStarted';
export const SessionRefreshed = 'SessionRefreshed';
export const SessionRevoked = 'SessionRevoked';

export interface UserRegisteredData {
  pk: number;
  username: string;
  email: string;
  firstName: string;
  lastName: string;
  /** argon2id hash; null for accounts created through an external identity provider. */
  passwordHash: string | null;
  emailVerified: boolean;
  /** Server-made salt for the client-side vault key derivation (SPEC Authentication 7). */
  encryptionSalt: string;
  /** External identity (issuer + subject) for accounts created by OIDC sign-in. */
  external?: { issuer: string; subject: string } | null;
  at: string;
}

export interface UserProfileUpdatedData {
  username?: string;
  firstName?: string;
  lastName?: string;
  at: string;
}

export interface UserPasswordChangedData {
  /** argon2id hash. */
  passwordHash: string;
  reason: string;
  at: string;
}

export interface SessionStartedData {
  userPk: number;
  /** The identity a device-flow session is bound to, if any. */
  identity: string | null;
  /** The account's session generation when it started: a later UserSessionsRevoked ends it. */
  generation: number;
  /** The current refresh token's id (jti); never the token. */
  tokenId: string;
  expiresAt: string;
  via?: string;
  /** Absent in events written before dashboard sessions existed: `token`. */
  kind?: 'token' | 'cookie';
  /** The management key handed out with the session (the device flow): revoking it ends the session. */
  keyId?: string;
  at: string;
}

export interface SessionRefreshedData {
  tokenId: string;
  previousTokenId: string;
  expiresAt: string;
  at: string;
}

export interface UserState {
  exists: boolean;
  pk: number;
  username: string;
  email: string;
  firstName: string;
  lastName: string;
  passwordHash: string | null;
  emailVerified: boolean;
  /** Bumped by every UserSessionsRevoked: sessions of an older generation are dead. */
  sessionGeneration: number;
  /** Position of the event that last set the username (reservations: kernel/reservations.ts). */
  namedAt: string | null;
  /** The external provider's subject the account was made for, if any. */
  external: UserRegisteredData['external'];
}

export const userEvolver: Evolver<UserState> = {
  initial: () => ({
    exists: false,
    pk: 0,
    username: '',
    email: '',
    firstName: '',
    lastName: '',
    passwordHash: null,
    emailVerified: false,
    sessionGeneration: 0,
    namedAt: null,
    external: null,
  }),
  evolve: (s, e: RecordedEvent) => {
    switch (e.type) {
      case UserRegistered: {
        const d = e.data as UserRegisteredData;
        return { ...s, exists: true, pk: d.pk, username: d.username, email: d.email, firstName: d.firstName, lastName: d.lastName, passwordHash: d.passwordHash, emailVerified: d.emailVerified, namedAt: e.position, external: d.external ?? null };
      }
      case UserProfileUpdated: {
        const d = e.data as Pick<UserProfileUpdatedData, 'username' | 'firstName' | 'lastName'>;
        return { ...s, ...d, namedAt: d.username !== undefined ? e.position : s.namedAt };
      }
      case UserPasswordChanged:
        return { ...s, passwordHash: (e.data as UserPasswordChangedData).passwordHash };
      case UserSessionsRevoked:
        return { ...s, sessionGeneration: s.sessionGeneration + 1 };
      case UserEmailVerified:
        return { ...s, emailVerified: true };
      default:
        return s;
    }
  },
};

export interface SessionState {
  exists: boolean;
  userPk: number;
  identity: string | null;
  generation: number;
  tokenId: string;
  expiresAt: string;
  revoked: boolean;
  kind: 'token' | 'cookie';
}

export const sessionEvolver: Evolver<SessionState> = {
  initial: () => ({ exists: false, userPk: 0, identity: null, generation: 0, tokenId: '', expiresAt: '', revoked: false, kind: 'token' }),
  evolve: (s, e) => {
    switch (e.type) {
      case SessionStarted: {
        const d = e.data as SessionStartedData;
        return { ...s, exists: true, userPk: d.userPk, identity: d.identity, generation: d.generation, tokenId: d.tokenId, expiresAt: d.expiresAt, kind: d.kind ?? 'token' };
      }
      case SessionRefreshed: {
        const d = e.data as SessionRefreshedData;
        return { ...s, tokenId: d.tokenId, expiresAt: d.expiresAt };
      }
      case SessionRevoked:
        return { ...s, revoked: true };
      default:
        return s;
    }
  },
};
