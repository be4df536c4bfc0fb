/**
 * The keys context: management and identity API keys, the `apikeys` read model, the
 * `findKey`/`touchKey` credential resolvers and GET /api/health/whoami/.
 *
 * Other contexts (the device flow) mint a management key with
 * `createKeys(platform).mint(pk, { kind: 'management', label })`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { ContextFactory } from '../../infra/runtime.js';
import type { Subscription } from '../../infra/ports/event-store.js';
import { apiKeysProjection } from '../../projections/apikeys/index.js';
import { IDENTITIES, type IdentityDoc } from '../../projections/identities/index.js';
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
  let reactor: Subscription | null = null;
  let stopping: AbortController | null = null;
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
      if (role === 'gateway') return;
      // Keys of a deleted identity already fail (findKey checks the identity); this records
      // their revocation in the log. It resumes from its checkpoint, so a start does not
      // re-read every deletion in the log; revoking twice is harmless (at least once).
      const after = await platform.reads.getCheckpoint(REVOCATION_CHECKPOINT);
      stopping = new AbortController();
      const { signal } = stopping;
      reactor = platform.feed.subscribe({ after, group: 'ais-key-revocation', filter: { eventTypes: ['IdentityDeleted'] } }, async (e) => {
        const identityId = (e.data as { identityId: string }).identityId;
        // The checkpoint passes a deletion only once its keys are revoked: a failure (the read
        // models slow to show the revocations) is retried, never skipped.
        for (let attempt = 0; ; attempt++) {
          try {
            await keys.revokeForIdentity(identityId);
            break;
          } catch (err) {
            if (signal.aborted) return; // resumed from the checkpoint at the next start
            platform.logger.warn({ err, identityId, attempt }, 'revoking keys of a deleted identity failed; retrying');
            await sleep(Math.min(30_000, 500 * 2 ** attempt), undefined, { signal }).catch(() => {});
            if (signal.aborted) return;
          }
        }
        await platform.reads.commit(REVOCATION_CHECKPOINT, e.position, []);
      });
      reactor.done.catch((err) => platform.logger.error({ err }, 'key revocation reactor stopped'));
    },
    async stop() {
      stopping?.abort();
      reactor?.close();
    },
  };
};
