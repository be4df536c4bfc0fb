/**
 * In this process, a write scoped to an identity and that identity's deletion do not
 * overlap: the deletion waits for the writes in flight, and writes arriving meanwhile wait
 * for it (then find the identity gone: 404). Without it, a write racing the DELETE could be
 * answered 2xx for an identity whose deletion had already been answered 204 (a secret
 * stored out of reach, a mail sent from a deleted inbox). Gateways of a cluster each keep
 * their own gate; across them the race stays possible (docs/ARCHITECTURE.md).
 */
export interface IdentityGate {
  /** Holds `identityId` for one write; the returned function lets go (idempotent). */
  enterWrite(identityId: string): Promise<() => void>;
  /** Runs `work` (the deletion) once no write holds the identity, keeping new ones out. */
  exclusive<T>(identityId: string, work: () => Promise<T>): Promise<T>;
}

export function createIdentityGate(): IdentityGate {
  const writers = new Map<string, number>();
  const drained = new Map<string, () => void>();
  const deletions = new Map<string, Promise<unknown>>();

  async function enterWrite(identityId: string): Promise<() => void> {
    for (let deletion = deletions.get(identityId); deletion; deletion = deletions.get(identityId)) {
      await deletion.catch(() => undefined);
    }
    writers.set(identityId, (writers.get(identityId) ?? 0) + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const left = (writers.get(identityId) ?? 1) - 1;
      if (left > 0) return void writers.set(identityId, left);
      writers.delete(identityId);
      drained.get(identityId)?.();
    };
  }

  async function exclusive<T>(identityId: string, work: () => Promise<T>): Promise<T> {
    for (let other = deletions.get(identityId); other; other = deletions.get(identityId)) await other.catch(() => undefined);
    const run = (async () => {
      if (writers.get(identityId)) await new Promise<void>((resolve) => drained.set(identityId, resolve));
      drained.delete(identityId);
      return work();
    })();
    deletions.set(identityId, run);
    try {
      return await run;
    } finally {
      if (deletions.get(identityId) === run) deletions.delete(identityId);
    }
  }

  return { enterWrite, exclusive };
}
