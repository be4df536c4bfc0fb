/**
 * Send limits (EMAIL_LIMIT_HOUR, EMAIL_LIMIT_DAY): rolling windows over an identity's
 * outbox stream, which holds one EmailQueued per message sent.
 *
 * The times of each stream's newest sends (oldest first, at most the largest limit) are kept
 * with the revision they were read up to, so a check reads only what was appended since — by
 * this process or another one — instead of the newest `limit` events again: O(new sends)
 * rather than O(EMAIL_LIMIT_DAY) per compose. Bounded (least recently used out); a stream not
 * held is read back from the log. Send times are wall-clock times from the log: none is
 * dropped for its age at one reading of the clock (a clock briefly ahead would drop sends
 * that count again once it is corrected), and one ahead of now (a clock set back since)
 * counts as now, so a full window never answers a wait longer than itself.
 */
import type { EventStore, RecordedEvent } from '../../infra/ports/event-store.js';

export interface SendWindow {
  limit: number;
  ms: number;
  label: string;
}

/** The window that is full at `nowMs`, and when its oldest counted send leaves it; or null. */
export interface FullWindow {
  window: SendWindow;
  freesAt: number;
}

export function createSendLimits(deps: { events: EventStore; windows: SendWindow[]; held?: number }) {
  const windows = deps.windows.filter((w) => w.limit > 0);
  const held = deps.held ?? 2_000;
  /** Newest sends that can matter: a window is full at `limit` sends. */
  const depth = Math.max(1, ...windows.map((w) => w.limit));
  const streams = new Map<string, { revision: number; at: number[] }>();
  const sentAt = (e: RecordedEvent) => Date.parse((e.data as { at: string }).at);

  /** The stream's revision (null: no stream yet) and the times of its newest sends. */
  async function recent(stream: string): Promise<{ revision: number | null; at: number[] }> {
    const known = streams.get(stream);
    let revision: number | null;
    let at: number[];
    if (known) {
      const newer = await deps.events.readStream(stream, { fromRevision: known.revision + 1 });
      revision = newer.length ? newer[newer.length - 1].revision : known.revision;
      at = newer.length ? [...known.at, ...newer.map(sentAt)] : known.at;
      streams.delete(stream); // re-inserted below: most recently used last
    } else {
      const newest = await deps.events.readStream(stream, { direction: 'backwards', maxCount: depth });
      revision = newest.length ? newest[0].revision : null;
      at = newest.map(sentAt).reverse();
    }
    if (at.length > depth) at = at.slice(at.length - depth);
    if (revision !== null) {
      streams.set(stream, { revision, at });
      if (streams.size > held) streams.delete(streams.keys().next().value!);
    }
    return { revision, at };
  }

  /**
   * Reads the stream's recent sends and tells whether one more is allowed at `nowMs`: the
   * revision to append at (so a concurrent send makes the append fail and the check rerun),
   * and the first full window, if any.
   */
  async function check(stream: string, nowMs: number): Promise<{ revision: number | null; full: FullWindow | null }> {
    const { revision, at } = await recent(stream);
    for (const window of windows) {
      const inWindow: number[] = []; // newest first (clocks of other processes may disagree a little)
      for (let i = at.length - 1; i >= 0; i--) if (nowMs - at[i] < window.ms) inWindow.push(Math.min(at[i], nowMs));
      // The oldest of the newest `limit` sends in the window leaves it first.
      if (inWindow.length >= window.limit) return { revision, full: { window, freesAt: inWindow[window.limit - 1] + window.ms } };
    }
    return { revision, full: null };
  }

  return { check, held: () => streams.size };
}

export type SendLimits = ReturnType<typeof createSendLimits>;
