/**
 * The Kafka EventFeed's offset handling without a broker: a fake consumer that follows
 * kafkajs's documented API (`connect`, `subscribe({ topics, fromBeginning })`,
 * `run({ autoCommit, eachMessage })`, `commitOffsets([{ topic, partition, offset }])`,
 * `disconnect`) and delivers messages the way the kafkajs runner does: one `eachMessage`
 * at a time, awaited.
 */
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Pending } from '../../infra/ports/event-feed.js';
import { createKafkaFeed, OffsetWindow, type FeedConsumer } from '../../infra/kafka/feed.js';
import { RELAY_PARTITIONS, nextBatchSize, relayTopicSpec } from '../../infra/kafka/relay.js';
import { toMessage } from '../../infra/kafka/messages.js';

const TOPIC = 'agent-identity.events';

const event = (position: number, stream = 'outbox-1', type = 'EmailQueued'): RecordedEvent => ({
  id: `0190a1b2-0000-7000-8000-${String(position).padStart(12, '0')}`,
  type,
  stream,
  revision: position,
  position: String(position),
  data: { n: position },
  metadata: {},
  recordedAt: '2024-05-01T10:00:00.000Z',
});

type EachMessage = (payload: {
  topic: string;
  partition: number;
  message: { key: Buffer; value: Buffer; offset: string; headers: Record<string, string>; timestamp: string; attributes: number; size: number };
  heartbeat(): Promise<void>;
  pause(): () => void;
}) => Promise<void>;

class FakeConsumer {
  commits: { topic: string; partition: number; offset: string }[] = [];
  subscribed: { topics: string[]; fromBeginning?: boolean } | null = null;
  runConfig: { autoCommit?: boolean } | null = null;
  heartbeats = 0;
  disconnected = false;
  #eachMessage: EachMessage | null = null;
  #running: Promise<void> = Promise.resolve();

  async connect(): Promise<void> {}
  async subscribe(s: { topics: string[]; fromBeginning?: boolean }): Promise<void> {
    this.subscribed = s;
  }
  async run(config: { autoCommit?: boolean; eachMessage: EachMessage }): Promise<void> {
    this.runConfig = config;
    this.#eachMessage = config.eachMessage;
  }
  async commitOffsets(offsets: { topic: string; partition: number; offset: string }[]): Promise<void> {
    this.commits.push(...offsets);
  }
  async disconnect(): Promise<void> {
    this.disconnected = true;
  }

  /** Delivers a message as the runner does: after the previous eachMessage resolved. */
  deliver(offset: number, e: RecordedEvent, partition = 0): Promise<void> {
    const m = toMessage(e);
    this.#running = this.#running.then(async () => {
      while (!this.#eachMessage) await new Promise((r) => setTimeout(r, 1));
      await this.#eachMessage({
        topic: TOPIC,
        partition,
        message: { key: Buffer.from(m.key), value: Buffer.from(m.value), offset: String(offset), headers: m.headers, timestamp: '0', attributes: 0, size: 0 },
        heartbeat: async () => void (this.heartbeats += 1),
        pause: () => () => {},
      });
    });
    return this.#running;
  }

  lastCommit(partition = 0): string | null {
    return this.commits.filter((c) => c.partition === partition).at(-1)?.offset ?? null;
  }
}

const settle = () => new Promise((r) => setTimeout(r, 5));

function deferred(): { promise: Promise<void>; resolve(): void; reject(e: Error): void } {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/** Makes every handled event settle only when the test resolves its job (by position). */
function settleLater(setHandler: (h: (e: RecordedEvent) => Promise<void | Pending>) => unknown): Map<string, ReturnType<typeof deferred>> {
  const jobs = new Map<string, ReturnType<typeof deferred>>();
  setHandler(async (e) => {
    const job = deferred();
    jobs.set(e.position, job);
    return { settled: job.promise };
  });
  return jobs;
}

function setup(options: { after?: string | null; fromLatest?: boolean; filter?: { eventTypes?: string[] } } = {}) {
  const consumer = new FakeConsumer();
  const groups: string[] = [];
  const feed = createKafkaFeed({
    topic: TOPIC,
    heartbeatMs: 5,
    consumer: (group) => {
      groups.push(group);
      return consumer as unknown as FeedConsumer;
    },
  });
  const handled: string[] = [];
  let next: (e: RecordedEvent) => Promise<void | Pending> = async () => {};
  const sub = feed.subscribe({ after: options.after ?? null, group: 'ais-test', filter: options.filter, fromLatest: options.fromLatest }, async (e) => {
    handled.push(e.position);
    return next(e);
  });
  return { consumer, groups, sub, handled, setHandler: (h: typeof next) => (next = h) };
}

describe('Kafka event feed', () => {
  it('joins the group with manual commits, from the beginning unless fromLatest', async () => {
    const a = setup();
    await a.consumer.deliver(0, event(1));
    expect(a.groups).toEqual(['ais-test']);
    expect(a.consumer.subscribed).toEqual({ topics: [TOPIC], fromBeginning: true });
    expect(a.consumer.runConfig?.autoCommit).toBe(false);
    const b = setup({ fromLatest: true });
    await b.consumer.deliver(0, event(1));
    expect(b.consumer.subscribed?.fromBeginning).toBe(false);
  });

  it('commits the next offset only after the handler resolved', async () => {
    const { consumer, setHandler } = setup();
    const gate = deferred();
    setHandler(() => gate.promise);
    const delivered = consumer.deliver(10, event(1));
    await settle();
    expect(consumer.commits).toEqual([]);
    gate.resolve();
    await delivered;
    await settle();
    expect(consumer.commits).toEqual([{ topic: TOPIC, partition: 0, offset: '11' }]);
  });

  it('commits up to the watermark: never past an event whose effects are not settled', async () => {
    const { consumer, setHandler } = setup();
    const jobs = settleLater(setHandler);
    for (let i = 0; i < 4; i++) await consumer.deliver(i, event(i + 1));
    await settle();
    expect(consumer.commits).toEqual([]);
    jobs.get('2')!.resolve();
    jobs.get('3')!.resolve();
    await settle();
    expect(consumer.commits).toEqual([]); // 1 is still running
    jobs.get('1')!.resolve();
    await settle();
    expect(consumer.lastCommit()).toBe('3'); // offsets 0..2 done: next to read is 3
    jobs.get('4')!.reject(new Error('job crashed'));
    await settle();
    expect(consumer.lastCommit()).toBe('3'); // a failed job holds the commit (redelivered after a restart)
  });

  it('skips positions at or below `after` and non-matching events, committing past them', async () => {
    const { consumer, handled } = setup({ after: '2', filter: { eventTypes: ['EmailQueued'] } });
    await consumer.deliver(0, event(1));
    await consumer.deliver(1, event(2));
    await consumer.deliver(2, event(3, 'identity-1', 'IdentityCreated'));
    await consumer.deliver(3, event(4));
    await settle();
    expect(handled).toEqual(['4']);
    expect(consumer.lastCommit()).toBe('4');
  });

  it('skips a redelivery after a rebalance; it counts as settled only with its first delivery', async () => {
    const { consumer, handled, setHandler } = setup();
    const jobs = settleLater(setHandler);
    await consumer.deliver(0, event(1));
    await consumer.deliver(1, event(2));
    jobs.get('1')!.resolve();
    await settle();
    expect(consumer.lastCommit()).toBe('1');
    // Rebalance: the partition comes back from the committed offset (1).
    await consumer.deliver(1, event(2));
    await consumer.deliver(2, event(3));
    await settle();
    expect(handled).toEqual(['1', '2', '3']); // 2 was not handled twice
    jobs.get('3')!.resolve();
    await settle();
    expect(consumer.lastCommit()).toBe('1'); // 2's job is still running
    jobs.get('2')!.resolve();
    await settle();
    expect(consumer.lastCommit()).toBe('3');
  });

  it('skips a batch the relay published twice (same positions at later offsets)', async () => {
    const { consumer, handled } = setup();
    for (let i = 0; i < 3; i++) await consumer.deliver(i, event(i + 1));
    for (let i = 3; i < 6; i++) await consumer.deliver(i, event(i - 2)); // republished 1..3
    await consumer.deliver(6, event(4));
    await settle();
    expect(handled).toEqual(['1', '2', '3', '4']);
    expect(consumer.lastCommit()).toBe('7');
  });

  it('keeps a watermark per partition', async () => {
    const { consumer, setHandler } = setup();
    const jobs = settleLater(setHandler);
    await consumer.deliver(5, event(1), 0);
    await consumer.deliver(9, event(2), 1);
    jobs.get('2')!.resolve();
    await settle();
    expect(consumer.commits).toEqual([{ topic: TOPIC, partition: 1, offset: '10' }]);
  });

  it('heartbeats while a slow handler runs', async () => {
    const { consumer, setHandler } = setup();
    // The handler runs until the feed has beaten twice (or 5 s pass): no race with a loaded
    // machine's timers (a fixed 40 ms handler saw one beat under load on Node 24).
    setHandler(
      () =>
        new Promise((resolve) => {
          const until = Date.now() + 5_000;
          const check = () => (consumer.heartbeats > 1 || Date.now() > until ? resolve(undefined) : setTimeout(check, 5));
          check();
        }),
    );
    await consumer.deliver(0, event(1));
    expect(consumer.heartbeats).toBeGreaterThan(1);
  });

  it('ends the subscription when the handler throws, without committing it', async () => {
    const { consumer, sub, handled, setHandler } = setup();
    setHandler(async (e) => {
      if (e.position === '2') throw new Error('handler broke');
    });
    await consumer.deliver(0, event(1));
    await consumer.deliver(1, event(2));
    await consumer.deliver(2, event(3));
    await expect(sub.done).rejects.toThrow(/handler broke/);
    expect(handled).toEqual(['1', '2']);
    expect(consumer.lastCommit()).toBe('1');
    expect(consumer.disconnected).toBe(true);
  });

  it('ends the subscription on a malformed message', async () => {
    const { consumer, sub } = setup();
    const bad = { ...event(1), revision: 'x' } as unknown as RecordedEvent;
    await consumer.deliver(0, bad);
    await expect(sub.done).rejects.toThrow(/not a recorded event/);
  });

  it('close() waits for pending commits, then disconnects', async () => {
    const { consumer, sub } = setup();
    await consumer.deliver(0, event(1));
    sub.close();
    await sub.done;
    expect(consumer.lastCommit()).toBe('1');
    expect(consumer.disconnected).toBe(true);
  });
});

describe('OffsetWindow', () => {
  it('returns the last offset of the settled prefix', () => {
    const w = new OffsetWindow();
    const a = w.add('0');
    const b = w.add('1');
    const c = w.add('2');
    expect(c()).toBeNull();
    expect(a()).toBe('0');
    expect(b()).toBe('2');
    expect(w.pending).toBe(0);
  });

  it('keeps what it holds bounded by the unsettled messages', () => {
    const w = new OffsetWindow();
    const first = w.add('0');
    for (let offset = 1; offset <= 1_000; offset++) expect(w.add(String(offset))()).toBeNull();
    expect(w.pending).toBe(2);
    expect(first()).toBe('1000');
    expect(w.pending).toBe(0);
  });

  it('restarts on a redelivered offset; settlements of the old window are ignored', () => {
    const w = new OffsetWindow();
    const old = w.add('4');
    w.add('5');
    const again = w.add('4');
    expect(old()).toBeNull();
    expect(again()).toBe('4');
  });
});

describe('the relay topic', () => {
  it('has one partition, so its order is the log order', () => {
    expect(RELAY_PARTITIONS).toBe(1);
    expect(relayTopicSpec(TOPIC)).toMatchObject({ topic: TOPIC, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: String(8 * 1024 * 1024) }] });
    expect(() => relayTopicSpec('a b')).toThrow(/invalid Kafka topic/);
  });

  it('sends a backlog in batches the broker takes: bounded by count and by bytes, never empty', () => {
    const kib = 1024;
    expect(nextBatchSize(Array(2000).fill(100), 500, 900 * kib)).toBe(500);
    expect(nextBatchSize(Array(2000).fill(16 * kib), 500, 900 * kib)).toBe(56); // 56 × 16 KiB ≤ 900 KiB < 57 × 16 KiB
    expect(nextBatchSize([2000 * kib, 1], 500, 900 * kib)).toBe(1); // one large event goes alone
    expect(nextBatchSize([1, 2000 * kib], 500, 900 * kib)).toBe(1);
    expect(nextBatchSize([], 500, 900 * kib)).toBe(0);
  });
});
