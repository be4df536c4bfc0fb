/** The Kafka relay's pure parts: message keys and values, partitioning, offsets, redelivery. */
import { Partitioners } from 'kafkajs';
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import {
  checkTopic,
  createRedeliveryFilter,
  DEFAULT_TOPIC,
  fromMessage,
  messageKey,
  nextOffset,
  offsetCommit,
  toMessage,
} from '../../infra/kafka/messages.js';

const event = (stream: string, revision: number, position: number): RecordedEvent => ({
  id: `0190a1b2-0000-7000-8000-${String(position).padStart(12, '0')}`,
  type: 'EmailReceived',
  stream,
  revision,
  position: String(position),
  data: { subject: 'héllo 🤖', n: revision },
  metadata: { actor: 'a' },
  recordedAt: '2024-05-01T10:00:00.000Z',
});

describe('Kafka messages', () => {
  it('keys by stream and carries the whole recorded event', () => {
    const e = event('mailbox-1', 3, 42);
    const message = toMessage(e);
    expect(message.key).toBe('mailbox-1');
    expect(messageKey(e)).toBe('mailbox-1');
    expect(message.headers).toEqual({ 'event-id': e.id, 'event-type': 'EmailReceived', stream: 'mailbox-1', position: '42' });
    expect(fromMessage({ key: Buffer.from(message.key), value: Buffer.from(message.value), offset: '7' })).toEqual(e);
  });

  it('puts every event of a stream in one partition (order per stream kept)', () => {
    const partitioner = Partitioners.DefaultPartitioner();
    const partitionMetadata = Array.from({ length: 12 }, (_, i) => ({ partitionErrorCode: 0, partitionId: i, leader: 0, replicas: [0], isr: [0] }));
    const partitionOf = (stream: string, revision: number) =>
      partitioner({ topic: DEFAULT_TOPIC, partitionMetadata, message: { key: toMessage(event(stream, revision, revision + 1)).key, value: 'x' } });
    const streams = Array.from({ length: 50 }, (_, i) => `identity-${i}`);
    const used = new Set<number>();
    for (const stream of streams) {
      const first = partitionOf(stream, 0);
      used.add(first);
      for (let r = 1; r < 5; r++) expect(partitionOf(stream, r)).toBe(first);
    }
    expect(used.size).toBeGreaterThan(1); // streams spread over partitions
  });

  it('refuses malformed messages', () => {
    expect(() => fromMessage({ key: null, value: null, offset: '1' })).toThrow(/no value/);
    expect(() => fromMessage({ key: null, value: 'not json', offset: '1' })).toThrow(/not JSON/);
    expect(() => fromMessage({ key: null, value: '{"id":"x"}', offset: '1' })).toThrow(/not a recorded event/);
    const e = event('user-1', 0, 1);
    expect(() => fromMessage({ key: 'user-2', value: JSON.stringify(e), offset: '1' })).toThrow(/not its stream/);
    expect(fromMessage({ key: null, value: JSON.stringify({ ...e, metadata: undefined }), offset: '1' }).metadata).toEqual({});
  });

  it('validates topic names', () => {
    expect(checkTopic(DEFAULT_TOPIC)).toBe(DEFAULT_TOPIC);
    for (const bad of ['', '.', '..', 'a b', 'x'.repeat(250), 'a/b']) expect(() => checkTopic(bad)).toThrow(/invalid Kafka topic/);
  });
});

describe('Kafka offsets', () => {
  it('commits the offset AFTER the handled message (the next one to read)', () => {
    expect(nextOffset('0')).toBe('1');
    expect(nextOffset('41')).toBe('42');
    expect(nextOffset('9223372036854775806')).toBe('9223372036854775807'); // beyond 2^53, exact
    expect(offsetCommit('t', 3, '99')).toEqual({ topic: 't', partition: 3, offset: '100' });
    for (const bad of ['', '-1', '1.5', 'x', '01']) expect(() => nextOffset(bad)).toThrow(/invalid Kafka offset/);
  });
});

describe('redelivery filter (at-least-once consumers)', () => {
  it('skips a redelivered revision of a stream once it was handled', () => {
    const filter = createRedeliveryFilter();
    const e0 = event('s-1', 0, 1);
    const e1 = event('s-1', 1, 2);
    expect(filter.isNew(e0)).toBe(true);
    filter.remember(e0);
    expect(filter.isNew(e0)).toBe(false);
    expect(filter.isNew(e1)).toBe(true);
    expect(filter.isNew(event('s-2', 0, 3))).toBe(true);
  });

  it('does not mark an event whose handler failed (it is retried)', () => {
    const filter = createRedeliveryFilter();
    const e = event('s-1', 0, 1);
    expect(filter.isNew(e)).toBe(true);
    // handler threw: remember() not called
    expect(filter.isNew(e)).toBe(true);
  });

  it('forgets the least recently used streams past its bound', () => {
    const filter = createRedeliveryFilter(2);
    filter.remember(event('a-1', 5, 1));
    filter.remember(event('b-1', 5, 2));
    filter.remember(event('a-1', 6, 3)); // a is now the most recent
    filter.remember(event('c-1', 0, 4)); // evicts b
    expect(filter.isNew(event('b-1', 5, 2))).toBe(true);
    expect(filter.isNew(event('a-1', 6, 3))).toBe(false);
    expect(filter.isNew(event('c-1', 0, 4))).toBe(false);
  });
});
