/**
 * Pure mapping between recorded events and Kafka messages, unit-tested without a broker.
 *
 * - Key = the stream name: Kafka's default partitioner hashes the key (murmur2), so every
 *   event of one stream lands in one partition, in order. Order across streams is kept only
 *   within a partition: the relay's topic has ONE (relay.ts RELAY_PARTITIONS), so its order
 *   is the log's order, which projections need (./feed.ts skips by global position).
 * - Value = the RecordedEvent as JSON (data, metadata, revision, position, recordedAt).
 * - Headers repeat what routing needs without parsing the value: id, type, stream, position.
 */
import type { RecordedEvent } from '../ports/event-store.js';

export interface OutgoingMessage {
  key: string;
  value: string;
  headers: Record<string, string>;
}

/** What the relay needs of a consumed Kafka message (kafkajs' KafkaMessage has these). */
export interface IncomingMessage {
  key: Buffer | string | null;
  value: Buffer | string | null;
  offset: string;
  headers?: Record<string, Buffer | string | (Buffer | string)[] | undefined>;
}

export const DEFAULT_TOPIC = 'agent-identity.events';

const TOPIC = /^[A-Za-z0-9._-]{1,249}$/;

export function checkTopic(topic: string): string {
  if (!TOPIC.test(topic) || topic === '.' || topic === '..') throw new Error(`invalid Kafka topic name: ${JSON.stringify(topic)}`);
  return topic;
}

export function messageKey(event: Pick<RecordedEvent, 'stream'>): string {
  return event.stream;
}

export function toMessage(event: RecordedEvent): OutgoingMessage {
  return {
    key: messageKey(event),
    value: JSON.stringify(event),
    headers: { 'event-id': event.id, 'event-type': event.type, stream: event.stream, position: event.position },
  };
}

/** A consumed message → the recorded event it carries; throws on anything malformed. */
export function fromMessage(message: IncomingMessage): RecordedEvent {
  if (message.value === null) throw new Error(`Kafka message at offset ${message.offset} has no value`);
  const text = typeof message.value === 'string' ? message.value : message.value.toString('utf8');
  let event: RecordedEvent;
  try {
    event = JSON.parse(text) as RecordedEvent;
  } catch {
    throw new Error(`Kafka message at offset ${message.offset} is not JSON`);
  }
  const ok =
    event !== null &&
    typeof event === 'object' &&
    typeof event.id === 'string' &&
    typeof event.type === 'string' &&
    typeof event.stream === 'string' &&
    typeof event.position === 'string' &&
    Number.isSafeInteger(event.revision);
  if (!ok) throw new Error(`Kafka message at offset ${message.offset} is not a recorded event`);
  const key = message.key === null ? null : typeof message.key === 'string' ? message.key : message.key.toString('utf8');
  if (key !== null && key !== event.stream) throw new Error(`Kafka message at offset ${message.offset}: key ${key} is not its stream ${event.stream}`);
  return { ...event, metadata: event.metadata ?? {} };
}

/**
 * The offset to commit after handling the message at `offset`: Kafka's committed offset is
 * the NEXT message to read, so a restarted consumer resumes right after what was handled.
 */
export function nextOffset(offset: string): string {
  if (!/^(0|[1-9][0-9]*)$/.test(offset)) throw new Error(`invalid Kafka offset: ${offset}`);
  return (BigInt(offset) + 1n).toString();
}

/** The commit request for the last handled message of a partition. */
export function offsetCommit(topic: string, partition: number, lastHandledOffset: string): { topic: string; partition: number; offset: string } {
  return { topic, partition, offset: nextOffset(lastHandledOffset) };
}

/**
 * Remembers the last position seen per stream so an at-least-once consumer can skip a
 * redelivered event (same stream, revision not above the last one handled). Bounded: the
 * oldest streams are forgotten past `maxStreams` (a forgotten stream's redelivery is then
 * handled again, which idempotent consumers tolerate).
 */
export interface RedeliveryFilter {
  /** False when this stream's revision was already handled here. */
  isNew(event: Pick<RecordedEvent, 'stream' | 'revision'>): boolean;
  /** Records a handled event (call after the handler succeeded). */
  remember(event: Pick<RecordedEvent, 'stream' | 'revision'>): void;
}

export function createRedeliveryFilter(maxStreams = 100_000): RedeliveryFilter {
  const last = new Map<string, number>();
  return {
    isNew(event) {
      const seen = last.get(event.stream);
      return seen === undefined || event.revision > seen;
    },
    remember(event) {
      const seen = last.get(event.stream);
      if (seen !== undefined && event.revision <= seen) return;
      last.delete(event.stream); // re-insert: the Map's order is the recency order
      last.set(event.stream, event.revision);
      if (last.size > maxStreams) last.delete(last.keys().next().value as string);
    },
  };
}
