/**
 * Bytes of message bodies held in memory at once: inbound SMTP DATA and attachment uploads
 * are read whole (up to 25 MiB each) before they are parsed and stored. Without a bound, 200
 * unauthenticated SMTP clients sending 25 MiB each held 5 GB. Past it a body is refused for
 * now, which loses nothing: SMTP answers 452 (the sender retries), an upload 503 with
 * Retry-After.
 */
export const BODY_BUDGET_BYTES = 128 * 1024 * 1024;

export interface BodyBudget {
  /** Takes `bytes` if they fit; false (nothing taken) when they do not. */
  take(bytes: number): boolean;
  give(bytes: number): void;
}

export function bodyBudget(limit = BODY_BUDGET_BYTES): BodyBudget {
  let held = 0;
  return {
    take(bytes) {
      if (held + bytes > limit) return false;
      held += bytes;
      return true;
    },
    give(bytes) {
      held = Math.max(0, held - bytes);
    },
  };
}
