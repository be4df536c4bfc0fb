/**
 * The keys context: management and identity API keys, the `apikeys` read model, the
 * `findKey`/`touchKey` credential resolvers and GET /api/health/whoami/.
 *
 * Other contexts (the device flow) mint a management key with
 * `createKeys(platform).mint(pk, { kind: 'management', label })`.
 */
import type { ContextFactory } from '../../infra/runtime.js';
import { createReactor } from '../kernel/reactor.js';
import { apiKeysProjection } from '../../projections/apikeys/index.js';
import { IDENTITIES, type IdentityDoc } from '../../projections/identities/index.js';
import { IdentityDeleted, type IdentityDeletedData } from '../identities/events.js';
import { createKeys } from './service.js';
import { keyRoutes } from './routes.js';

export { createKeys, hashKey, maskKey, type Keys } from './service.js';
export * from './events.js';

/** Checkpoint of the reactor that records the revocation of a deleted identity's keys. */
const REVOCATION_CHECKPOINT = 'reactor:key-revocation';

export const keysContext: ContextFactory = (shared) => {
  const { platform } = shared;
  const keys = createKeys(platform);
  const identities = platform.reads.collection<IdentityDoc>(IDENTITIES);
  // Keys of a deleted identity already fail (findKey checks the identity); this records their
  // revocation in the log, at least once: a failure (the read models slow to show the
  // revocations) is retried, never skipped; revoking twice is harmless.
  const revocations = createReactor(
    { events: platform.events, reads: platform.reads, feed: platform.feed, log: platform.logger.child({ component: 'key-revocation' }) },
    {
      checkpoint: REVOCATION_CHECKPOINT,
      group: 'ais-key-revocation',
      filter: { eventTypes: [IdentityDeleted] },
      concurrency: 1,
      async job(e, run) {
        const { identityId } = e.data as IdentityDeletedData;
        for (let attempt = 0; !run.stopped; attempt++) {
          try {
            await keys.revokeForIdentity(identityId);
            return true;
          } catch (err) {
            if (run.stopped) return false;
            platform.logger.warn({ err, identityId, attempt }, 'revoking keys of a deleted identity failed; retrying');
            await run.sleep(Math.min(30_000, 500 * 2 ** attempt));
          }
        }
        return false;
      },
    },
  );
  return {
    name: 'keys',
    projections: [apiKeysProjection],
    module: keyRoutes({
      keys,
      accounts: shared.accounts,
      auth: () => shared.auth,
      findIdentity: async (id) => {
        const d = await identities.get(id);
        return d ? { id: d.id, ownerPk: d.ownerPk } : null;
      },
      publicUrl: platform.config.publicUrl,
    }),
    resolvers: { findKey: keys.findKey, touchKey: keys.touchKey },
    async start(role) {
      // A reactor whose effects must happen once: the embedded process or the cluster worker.
      if (role !== 'gateway') await revocations.start();
    },
    async stop() {
      await revocations.stop();
    },
    // The uses of requests that finished while the server drained are recorded too.
    drained: () => keys.flushUses(),
  };
};
