/**
 * Bytes of message bodies held in memory at once: inbound SMTP DATA and attachment uploads
 * are read whole (up to 25 MiB each) before they are parsed and stored. Without a bound, 200
 * unauthenticated SMTP clients sending 25 MiB each held 5 GB. Past it a body is refused for
 * now, which loses nothing: SMTP answers 452 (the sender retries), an upload 503 with
 * Retry-After. Bytes are taken as they arrive (holding the budget means sending the bytes),
 * and one holder (an SMTP client's address, an uploading identity) gets at most a quarter of
 * it, so one sender cannot hold back everyone's mail.
 */
export const BODY_BUDGET_BYTES = 128 * 1024 * 1024;
export const HOLDER_SHARE = 4;

export interface BodyBudget {
  /** Takes `bytes` for `holder` if they fit, its share included; false (nothing taken) when not. */
  take(bytes: number, holder: string): boolean;
  give(bytes: number, holder: string): void;
}

export function bodyBudget(limit = BODY_BUDGET_BYTES): BodyBudget {
  let held = 0;
  const byHolder = new Map<string, number>();
  return {
    take(bytes, holder) {
      const mine = byHolder.get(holder) ?? 0;
      if (held + bytes > limit || mine + bytes > limit / HOLDER_SHARE) return false;
      held += bytes;
      byHolder.set(holder, mine + bytes);
      return true;
    },
    give(bytes, holder) {
      held = Math.max(0, held - bytes);
      const left = (byHolder.get(holder) ?? 0) - bytes;
      if (left > 0) byHolder.set(holder, left);
      else byHolder.delete(holder);
    },
  };
}
