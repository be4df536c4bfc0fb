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
import { ApiKeyRevoked, type ApiKeyRevokedData } from './events.js';
import { keyRoutes } from './routes.js';

export { createKeys, hashKey, maskKey, type Keys } from './service.js';
export * from './events.js';

/** Checkpoint of the reactor that follows revocations: a deleted identity's keys, a revoked key's sessions. */
const REVOCATION_CHECKPOINT = 'reactor:key-revocation';

export const keysContext: ContextFactory = (shared) => {
  const { platform } = shared;
  const keys = createKeys(platform);
  const identities = platform.reads.collection<IdentityDoc>(IDENTITIES);
  // What follows a revocation, at least once: a failure (the read models slow to show it) is
  // retried, never skipped; doing it twice is harmless.
  // - A deleted identity's keys already fail (findKey checks the identity); their revocation is
  //   recorded in the log.
  // - A revoked key's device sign-up sessions end (the route ends them at once too, but a 503
  //   or a crash between its two steps left the agent signed in, and a retried DELETE is a 404).
  const revocations = createReactor(
    { events: platform.events, reads: platform.reads, feed: platform.feed, log: platform.logger.child({ component: 'key-revocation' }) },
    {
      checkpoint: REVOCATION_CHECKPOINT,
      group: 'ais-key-revocation',
      filter: { eventTypes: [IdentityDeleted, ApiKeyRevoked] },
      concurrency: 1,
      async job(e, run) {
        for (let attempt = 0; !run.stopped; attempt++) {
          try {
            if (e.type === ApiKeyRevoked) {
              // Every session started before the revocation is in the read models by then.
              await platform.progress.waitFor(e.position);
              await shared.accounts.revokeSessionsOfKey((e.data as ApiKeyRevokedData).keyId, 'key_revoked');
            } else {
              await keys.revokeForIdentity((e.data as IdentityDeletedData).identityId);
            }
            return true;
          } catch (err) {
            if (run.stopped) return false;
            platform.logger.warn({ err, event: e.type, attempt }, 'what follows a key revocation failed; retrying');
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
