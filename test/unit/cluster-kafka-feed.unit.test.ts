/**
 * The Kafka EventFeed's offset handling without a broker: a fake consumer that follows
 * kafkajs's documented API (`connect`, `subscribe({ topics, fromBeginning })`,
 * `run({ autoCommit, eachMessage })`, `commitOffsets([{ topic, partition, offset }])`,
 * `seek`, `on(events.GROUP_JOIN | events.CRASH)`, `disconnect`) and delivers messages the
 * way the kafkajs runner does: one `eachMessage` at a time, awaited. As in kafkajs 2.2.4's
 * source, `run()` emits GROUP_JOIN once assigned (before any fetch), `subscribe` to a topic
 * the cluster lacks throws UNKNOWN_TOPIC_OR_PARTITION, and a crash kafkajs gives up on
 * emits CRASH with `restart: false` after disconnecting.
 */
import { Kafka, logLevel } from 'kafkajs';
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Pending } from '../../infra/ports/event-feed.js';
import { createKafkaFeed, FROM_LATEST_MARGIN_MS, OffsetWindow, type FeedAdmin, type FeedConsumer } from '../../infra/kafka/feed.js';
import { ensureTopic, RELAY_PARTITIONS, RELAY_PRODUCER, nextBatchSize, relayTopicSpec, startKafkaRelay, type RelayAdmin } from '../../infra/kafka/relay.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';
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

type TopicPartitionOffset = { topic: string; partition: number; offset: string };
type Listener = (event: { type: string; payload: unknown }) => void;

class FakeConsumer {
  readonly events = { CRASH: 'consumer.crash', GROUP_JOIN: 'consumer.group_join' };
  commits: TopicPartitionOffset[] = [];
  seeks: TopicPartitionOffset[] = [];
  subscribed: { topics: string[]; fromBeginning?: boolean } | null = null;
  runConfig: { autoCommit?: boolean } | null = null;
  heartbeats = 0;
  disconnected = false;
  /** Between run() and disconnect(): a live consumer. */
  running = false;
  /** What connect() waits for (a slow broker). */
  connecting: Promise<void> = Promise.resolve();
  /** How many subscribe() calls fail because the topic does not exist yet. */
  missingTopic = 0;
  #listeners = new Map<string, Listener[]>();
  #eachMessage: EachMessage | null = null;
  #running: Promise<void> = Promise.resolve();

  async connect(): Promise<void> {
    await this.connecting;
  }
  async subscribe(s: { topics: string[]; fromBeginning?: boolean }): Promise<void> {
    if (this.missingTopic > 0) {
      this.missingTopic -= 1;
      throw Object.assign(new Error('This server does not host this topic-partition'), { name: 'KafkaJSProtocolError', type: 'UNKNOWN_TOPIC_OR_PARTITION', retriable: true });
    }
    this.subscribed = s;
  }
  async run(config: { autoCommit?: boolean; eachMessage: EachMessage }): Promise<void> {
    this.runConfig = config;
    this.running = true;
    this.join();
    this.#eachMessage = config.eachMessage;
  }
  /** Calls to commitOffsets (a round trip each). */
  commitCalls = 0;
  async commitOffsets(offsets: TopicPartitionOffset[]): Promise<void> {
    this.commitCalls += 1;
    await new Promise((r) => setImmediate(r)); // a round trip to the broker
    this.commits.push(...offsets);
  }
  seek(tp: TopicPartitionOffset): void {
    this.seeks.push(tp);
  }
  on(type: string, listener: Listener): () => void {
    this.#listeners.set(type, [...(this.#listeners.get(type) ?? []), listener]);
    return () => {};
  }
  async disconnect(): Promise<void> {
    this.disconnected = true;
    this.running = false;
  }

  #emit(type: string, payload: unknown): void {
    for (const listener of this.#listeners.get(type) ?? []) listener({ type, payload });
  }
  /** The group (re)assigned these partitions: GROUP_JOIN, before the first fetch. */
  join(partitions = [0]): void {
    this.#emit(this.events.GROUP_JOIN, { groupId: 'ais-test', memberAssignment: { [TOPIC]: partitions } });
  }
  /** kafkajs' runner crashed; it disconnected the consumer first unless it restarts it. */
  crash(error: Error, restart: boolean): void {
    if (!restart) this.running = false;
    this.#emit(this.events.CRASH, { error, groupId: 'ais-test', restart });
  }

  /** Delivers a message as the runner does: after the previous eachMessage resolved. */
  deliver(offset: number, e: RecordedEvent, partition = 0): Promise<void> {
    const m = toMessage(e);
    this.#running = this.#running.then(async () => {
      for (let waited = 0; !this.#eachMessage; waited++) {
        if (waited > 2_000) throw new Error('the feed never ran the consumer');
        await new Promise((r) => setTimeout(r, 1));
      }
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

/** The admin a `fromLatest` subscription reads offsets with. */
class FakeAdmin {
  /** The group's committed offsets ('-1': none, a group never seen). */
  groupOffsets: Record<number, string> = { 0: '-1' };
  /** First offset per partition produced at or after the timestamp asked for. */
  offsetsSince: Record<number, string> = { 0: '42' };
  timestamps: number[] = [];
  connected = false;

  async connect(): Promise<void> {
    this.connected = true;
  }
  async disconnect(): Promise<void> {
    this.connected = false;
  }
  async fetchOffsets({ topics }: { groupId: string; topics?: string[] }) {
    return (topics ?? []).map((topic) => ({ topic, partitions: Object.entries(this.groupOffsets).map(([p, offset]) => ({ partition: Number(p), offset, metadata: null })) }));
  }
  async fetchTopicOffsetsByTimestamp(_topic: string, timestamp?: number) {
    this.timestamps.push(timestamp!);
    return Object.entries(this.offsetsSince).map(([p, offset]) => ({ partition: Number(p), offset }));
  }
}

const settle = () => new Promise((r) => setTimeout(r, 5));

/** 'pending' when the promise has not settled within a few ms, else its outcome. */
const outcome = (p: Promise<unknown>) =>
  Promise.race([p.then(() => 'resolved', (e: Error) => `rejected: ${e.message}`), new Promise((r) => setTimeout(() => r('pending'), 20))]);

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

function setup(
  options: { after?: string | null; fromLatest?: boolean; filter?: { eventTypes?: string[] }; prepare?: (c: FakeConsumer, a: FakeAdmin) => void } = {},
) {
  const consumer = new FakeConsumer();
  const admin = new FakeAdmin();
  options.prepare?.(consumer, admin);
  const groups: string[] = [];
  const logged: string[] = [];
  const feed = createKafkaFeed({
    topic: TOPIC,
    heartbeatMs: 5,
    topicRetryMs: 1,
    consumer: (group) => {
      groups.push(group);
      return consumer as unknown as FeedConsumer;
    },
    admin: () => admin as unknown as FeedAdmin,
    logger: { info: (_o, msg) => void logged.push(msg ?? ''), error: (_o, msg) => void logged.push(msg ?? '') },
  });
  const handled: string[] = [];
  let next: (e: RecordedEvent) => Promise<void | Pending> = async () => {};
  const subscribedAt = Date.now();
  const sub = feed.subscribe({ after: options.after ?? null, group: 'ais-test', filter: options.filter, fromLatest: options.fromLatest }, async (e) => {
    handled.push(e.position);
    return next(e);
  });
  return { consumer, admin, groups, logged, sub, handled, subscribedAt, setHandler: (h: typeof next) => (next = h) };
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

  it('coalesces commits: what settles while one is in flight goes in the next, the latest offset per partition (one round trip per batch, not per event)', async () => {
    const { consumer } = setup();
    for (let i = 0; i < 50; i++) await consumer.deliver(100 + i, event(i + 1), i % 2);
    await settle();
    expect([consumer.lastCommit(0), consumer.lastCommit(1)]).toEqual(['149', '150']);
    expect(consumer.commitCalls).toBeLessThanOrEqual(3);
    // Every commit sent moves forward: none of an older offset after a newer one.
    for (const partition of [0, 1]) {
      const offsets = consumer.commits.filter((c) => c.partition === partition).map((c) => Number(c.offset));
      expect(offsets).toEqual([...offsets].sort((a, b) => a - b));
    }
  });

  it('effects that failed hold the offset, also when the message is delivered again (a rebalance)', async () => {
    const { consumer, setHandler } = setup();
    const jobs = settleLater(setHandler);
    await consumer.deliver(5, event(1));
    jobs.get('1')!.reject(new Error('projection failed'));
    await settle();
    consumer.join();
    await consumer.deliver(5, event(1)); // redelivered from the last commit: already handled here
    await settle();
    expect(consumer.commits).toEqual([]);
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

  it('close() while the consumer is still connecting leaves no consumer running', async () => {
    const connected = deferred();
    const { consumer, sub } = setup({ prepare: (c) => void (c.connecting = connected.promise) });
    sub.close();
    await settle();
    connected.resolve();
    await sub.done;
    await settle();
    expect(consumer.running).toBe(false);
    expect(consumer.disconnected).toBe(true);
  });

  it('ends the subscription when kafkajs gives up on the consumer (CRASH without restart)', async () => {
    const { consumer, sub } = setup();
    await consumer.deliver(0, event(1));
    consumer.crash(new Error('restarting crashed'), true); // kafkajs restarts this one itself
    await expect(outcome(sub.done)).resolves.toBe('pending');
    consumer.crash(new Error('not authorized to access group'), false);
    await expect(outcome(sub.done)).resolves.toBe('rejected: not authorized to access group');
    expect(consumer.disconnected).toBe(true);
  });

  it('waits for the relay to create the topic (never auto-created by a consumer), logging it once', async () => {
    const { consumer, sub, handled, logged } = setup({ prepare: (c) => void (c.missingTopic = 3) });
    await expect(outcome(sub.done)).resolves.toBe('pending');
    await consumer.deliver(0, event(1));
    expect(handled).toEqual(['1']);
    expect(consumer.subscribed).toEqual({ topics: [TOPIC], fromBeginning: true });
    expect(logged.filter((m) => /not created yet/.test(m))).toHaveLength(1);
    sub.close();
    await sub.done;
  });

  it('close() while waiting for the topic stops at once, without subscribing', async () => {
    const { consumer, sub } = setup({ prepare: (c) => void (c.missingTopic = Infinity) });
    await settle();
    sub.close();
    await expect(outcome(sub.done)).resolves.toBe('resolved');
    expect(consumer.subscribed).toBeNull();
    expect(consumer.running).toBe(false);
  });

  it('fromLatest: a new group starts at what was produced shortly before subscribe(), not at its first fetch', async () => {
    const { consumer, admin, subscribedAt, handled } = setup({ fromLatest: true, after: '7' });
    await consumer.deliver(42, event(8));
    expect(admin.timestamps).toHaveLength(1);
    expect(admin.timestamps[0]).toBeLessThanOrEqual(subscribedAt - FROM_LATEST_MARGIN_MS + 50);
    expect(admin.timestamps[0]).toBeGreaterThanOrEqual(subscribedAt - FROM_LATEST_MARGIN_MS - 50);
    expect(admin.connected).toBe(false);
    expect(consumer.seeks).toEqual([{ topic: TOPIC, partition: 0, offset: '42' }]); // on GROUP_JOIN, before any fetch
    expect(handled).toEqual(['8']);
    // A rebalance before the first commit would resolve "latest" again: seek again; after it, the commit holds.
    consumer.join();
    expect(consumer.seeks).toHaveLength(2);
    await settle();
    expect(consumer.lastCommit()).toBe('43');
    consumer.join();
    expect(consumer.seeks).toHaveLength(2);
  });

  it('fromLatest: a group with committed offsets keeps them; without fromLatest no seek', async () => {
    const known = setup({ fromLatest: true, prepare: (_c, a) => void (a.groupOffsets = { 0: '17' }) });
    await known.consumer.deliver(17, event(1));
    expect(known.consumer.seeks).toEqual([]);
    const plain = setup();
    await plain.consumer.deliver(0, event(1));
    expect(plain.consumer.seeks).toEqual([]);
    expect(plain.admin.timestamps).toEqual([]);
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

/** An admin on a cluster of `brokers` where the topic exists (with `replicas` per partition) or not. */
function relayAdmin(brokers: number, existing: { replicas: number; partitions?: number } | null) {
  const created: unknown[] = [];
  const admin = {
    connect: async () => {},
    disconnect: async () => {},
    describeCluster: async () => ({ brokers: Array.from({ length: brokers }, (_, i) => ({ nodeId: i, host: `k${i}`, port: 9092 })), controller: 0, clusterId: 'c' }),
    createTopics: async ({ topics }: { topics: unknown[] }) => (existing ? false : (created.push(...topics), true)),
    fetchTopicMetadata: async () => ({
      topics: [{ name: TOPIC, partitions: Array.from({ length: existing?.partitions ?? 1 }, (_, i) => ({ partitionId: i, replicas: Array.from({ length: existing!.replicas }, (_, r) => r) })) }],
    }),
    describeConfigs: async () => ({ resources: [{ configEntries: [{ configName: 'max.message.bytes', configValue: String(8 * 1024 * 1024) }] }] }),
  };
  const warnings: object[] = [];
  const logger = { info: () => {}, warn: (o: object) => void warnings.push(o), error: () => {} };
  return { admin: admin as unknown as RelayAdmin, created, warnings, logger };
}

describe('the relay topic', () => {
  it('has one partition, so its order is the log order', () => {
    expect(RELAY_PARTITIONS).toBe(1);
    expect(relayTopicSpec(TOPIC, 1)).toMatchObject({ topic: TOPIC, numPartitions: 1 });
    expect(relayTopicSpec(TOPIC, 1).configEntries).toContainEqual({ name: 'max.message.bytes', value: String(8 * 1024 * 1024) });
    expect(() => relayTopicSpec('a b', 1)).toThrow(/invalid Kafka topic/);
  });

  it('is replicated 3 times (as many as there are brokers below 3), and acks wait for all but one copy', () => {
    const spec = (brokers: number) => {
      const s = relayTopicSpec(TOPIC, brokers);
      return [s.replicationFactor, s.configEntries!.find((c) => c.name === 'min.insync.replicas')?.value];
    };
    expect(spec(1)).toEqual([1, '1']);
    expect(spec(2)).toEqual([2, '1']);
    expect(spec(3)).toEqual([3, '2']);
    expect(spec(5)).toEqual([3, '2']);
  });

  it('is created with the replication the cluster allows; an existing one with fewer replicas is warned about', async () => {
    const fresh = relayAdmin(3, null);
    await ensureTopic(fresh.admin, TOPIC, fresh.logger);
    expect(fresh.created).toEqual([relayTopicSpec(TOPIC, 3)]);
    expect(fresh.created[0]).toMatchObject({ replicationFactor: 3 });

    const thin = relayAdmin(3, { replicas: 1 });
    await ensureTopic(thin.admin, TOPIC, thin.logger);
    expect(thin.warnings).toEqual([expect.objectContaining({ replicationFactor: 1, wanted: 3 })]);

    const fine = relayAdmin(1, { replicas: 1 });
    await ensureTopic(fine.admin, TOPIC, fine.logger);
    expect(fine.warnings).toEqual([]);
  });

  it('is produced to by an idempotent producer whose retries kafkajs does not warn about', () => {
    const warnings: string[] = [];
    const kafka = new Kafka({ clientId: 't', brokers: ['localhost:9092'], retry: { retries: 8 }, logLevel: logLevel.WARN, logCreator: () => ({ log }) => void warnings.push(log.message) });
    kafka.producer(RELAY_PRODUCER); // kafkajs checks the retries here, before any connection
    expect(RELAY_PRODUCER).toMatchObject({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
    expect(warnings.filter((m) => /Limiting retries/.test(m))).toEqual([]);
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

/** A producer of a Kafka that is away: kafkajs retries each send until the producer is disconnected. */
function stuckProducer() {
  const state = { sends: 0, disconnected: false };
  const producer = {
    connect: async () => {},
    send: () => {
      state.sends += 1;
      return new Promise<never>((_, reject) => {
        const poll = setInterval(() => state.disconnected && (clearInterval(poll), reject(new Error('The producer is disconnected'))), 5);
        poll.unref(); // a stop that hangs fails its test instead of holding jest open
      });
    },
    disconnect: async () => void (state.disconnected = true),
  };
  return { state, producer };
}

/** A relay over `events` sending through `producer`, its first send under way. */
async function relayWithOneSend(producer: unknown, state: { sends: number }, options: { checkpoints?: { get(): Promise<string | null>; set(p: string): Promise<void> }; maxBatch?: number; warnings?: object[]; errors?: object[] } = {}) {
  const events = createMemoryEventStore();
  const relay = await startKafkaRelay({
    brokers: ['kafka:9092'],
    topic: TOPIC,
    events,
    checkpoints: options.checkpoints ?? { get: async () => null, set: async () => {} },
    kafka: { admin: () => relayAdmin(1, { replicas: 1 }).admin, producer: () => producer as never },
    logger: { info: () => {}, warn: (o) => void options.warnings?.push(o), error: (o) => void options.errors?.push(o) },
    stopFlushMs: 50,
    ...(options.maxBatch ? { maxBatch: options.maxBatch } : {}),
  });
  await events.append('outbox-1', [{ id: '0190a1b2-0000-7000-8000-000000000001', type: 'EmailQueued', data: {} }]);
  for (let i = 0; i < 100 && state.sends === 0; i++) await new Promise((r) => setTimeout(r, 5));
  expect(state.sends).toBe(1);
  return relay;
}

describe('the relay stopping', () => {
  it('waits for its last sends no longer than stopFlushMs when Kafka does not take them (retried without end), and keeps its checkpoint at what Kafka acknowledged', async () => {
    let checkpoint: string | null = null;
    const { state, producer } = stuckProducer();
    const warnings: object[] = [];
    const errors: object[] = [];
    const relay = await relayWithOneSend(producer, state, { checkpoints: { get: async () => checkpoint, set: async (p) => void (checkpoint = p) }, warnings, errors });
    await relay.stop(); // returns (it waited for good before)
    expect([state.disconnected, checkpoint, warnings.length, errors]).toEqual([true, null, 1, []]);
    await expect(relay.done).resolves.toBeUndefined(); // a stop, not a failure
  });

  it('does not hang when its subscription waits on a full batch Kafka does not take (the bound covers the subscription\'s end too)', async () => {
    const { state, producer } = stuckProducer();
    const relay = await relayWithOneSend(producer, state, { maxBatch: 1 }); // every event a full batch: the subscription's handler waits for Kafka
    const stopped = relay.stop().then(() => 'stopped');
    expect(await Promise.race([stopped, new Promise((r) => setTimeout(() => r('hung'), 2_000))])).toBe('stopped');
    expect(state.disconnected).toBe(true);
  });
});
