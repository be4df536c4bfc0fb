/** Read model `users`: one document per account, found by pk, username, email or external subject. */
import { streamId, type RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import type { Projection } from '../projection.js';
import {
  UserEmailVerified,
  UserPasswordChanged,
  UserProfileUpdated,
  UserRegistered,
  UserSessionsRevoked,
  type UserPasswordChangedData,
  type UserProfileUpdatedData,
  type UserRegisteredData,
} from '../../services/accounts/events.js';

export interface UserDoc extends Doc {
  pk: number;
  username: string;
  usernameKey: string;
  email: string;
  emailKey: string;
  firstName: string;
  lastName: string;
  passwordHash: string | null;
  emailVerified: boolean;
  sessionGeneration: number;
  encryptionSalt: string;
  externalKey: string | null;
  createdAt: string;
}

export const USERS = 'users';
export const userDocId = (pk: number) => String(pk);
export const externalKeyOf = (issuer: string, subject: string) => `${issuer}#${subject}`;

export const usersProjection: Projection = {
  name: 'users',
  collections: [{ name: USERS, indexes: [['usernameKey'], ['emailKey'], ['externalKey']] }],
  eventTypes: [UserRegistered, UserProfileUpdated, UserPasswordChanged, UserSessionsRevoked, UserEmailVerified],
  apply(e: RecordedEvent) {
    const pk = Number(streamId(e.stream));
    const id = userDocId(pk);
    return [
      {
        collection: USERS,
        id,
        evolve: (doc) => {
          if (e.type === UserRegistered) {
            const d = e.data as UserRegisteredData;
            return {
              id,
              pk: d.pk,
              username: d.username,
              usernameKey: d.username.toLowerCase(),
              email: d.email,
              emailKey: d.email.toLowerCase(),
              firstName: d.firstName,
              lastName: d.lastName,
              passwordHash: d.passwordHash,
              emailVerified: d.emailVerified,
              sessionGeneration: 0,
              encryptionSalt: d.encryptionSalt,
              externalKey: d.external ? externalKeyOf(d.external.issuer, d.external.subject) : null,
              createdAt: d.at,
            } satisfies UserDoc;
          }
          if (!doc) return doc;
          switch (e.type) {
            case UserProfileUpdated: {
              const { at, ...changes } = e.data as UserProfileUpdatedData;
              return { ...doc, ...changes, ...(changes.username ? { usernameKey: changes.username.toLowerCase() } : {}) };
            }
            case UserPasswordChanged:
              return { ...doc, passwordHash: (e.data as UserPasswordChangedData).passwordHash };
            case UserSessionsRevoked:
              return { ...doc, sessionGeneration: (doc.sessionGeneration as number) + 1 };
            case UserEmailVerified:
              return { ...doc, emailVerified: true };
            default:
              return doc;
          }
        },
      },
    ];
  },
};
