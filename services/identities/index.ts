/**
 * The identities context: identities with their inbox address and phone number, the
 * shared `identities` read model, and the `findIdentity` credential resolver.
 */
import type { ContextFactory } from '../../infra/runtime.js';
import { createPhoneProvider } from '../../infra/phone/index.js';
import { identitiesProjection } from '../../projections/identities/index.js';
import { createIdentities } from './service.js';
import { identityRoutes } from './routes.js';

export { phonesUsed, toIdentity, type Identities } from './service.js';
export * from './events.js';

export const identitiesContext: ContextFactory = (shared) => {
  const { platform } = shared;
  const identities = createIdentities(platform, createPhoneProvider(platform.config, platform.events));
  return {
    name: 'identities',
    projections: [identitiesProjection],
    module: identityRoutes({ identities, auth: () => shared.auth, publicUrl: platform.config.publicUrl }),
    resolvers: { findIdentity: identities.findIdentity },
    async start(role) {
      if (role === 'gateway') return; // said once, by the worker (cluster) or the one process
      for (const doc of await identities.heldReservedAddresses()) {
        platform.logger.warn(
          { identityId: doc.id, inbox: doc.inbox, ownerPk: doc.ownerPk },
          'an identity holds an address reserved for the mail domain\'s operators (a certificate authority may send domain validation mail there); it keeps it: delete the identity, or make sure no certificate authority validates MAIL_DOMAIN by email (docs/IDENTITIES.md)',
        );
      }
    },
  };
};
