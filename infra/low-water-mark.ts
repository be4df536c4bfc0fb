/**
 * How far a consumer of the log may say it is done: positions arrive in log order and finish
 * in any order; the mark is the last position of the longest finished prefix. A reactor's
 * checkpoint (services/kernel/reactor.ts) and a Kafka partition's committed offset
 * (infra/kafka/feed.ts) are both this.
 *
 * What it keeps is bounded by the unfinished positions, not by what arrived since the oldest
 * of them: a finished position stands for the finished ones just before it (the mark passes
 * them together), so those are dropped. A mail retried for a day holds two entries, not one
 * per event of that day.
 */
interface Entry<P> {
  position: P;
  finished: boolean;
  prev: Entry<P> | null;
  next: Entry<P> | null;
}

export class LowWaterMark<P> {
  #head: Entry<P> | null = null;
  #tail: Entry<P> | null = null;
  #size = 0;

  /** Adds the next position (in log order); returns the function that marks it finished. */
  add(position: P): () => void {
    const entry: Entry<P> = { position, finished: false, prev: this.#tail, next: null };
    if (this.#tail) this.#tail.next = entry;
    else this.#head = entry;
    this.#tail = entry;
    this.#size += 1;
    return () => {
      if (entry.finished) return;
      entry.finished = true;
      if (entry.prev?.finished) this.#unlink(entry.prev);
      if (entry.next?.finished) this.#unlink(entry);
    };
  }

  /** Drops the finished prefix; answers its last position (the new mark), or null when none. */
  advance(): P | null {
    let last: P | null = null;
    while (this.#head?.finished) {
      last = this.#head.position;
      this.#unlink(this.#head);
    }
    return last;
  }

  /** Entries kept: at most two per unfinished position, plus one. */
  get size(): number {
    return this.#size;
  }

  #unlink(entry: Entry<P>): void {
    if (entry.prev) entry.prev.next = entry.next;
    else this.#head = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    else this.#tail = entry.prev;
    this.#size -= 1;
  }
}
