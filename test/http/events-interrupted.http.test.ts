/**
 * The event stream while the process cannot follow the log (a cluster's server away: its
 * subscription failed): open streams end (their clients resume with Last-Event-ID), a new one
 * is refused with 503 and Retry-After rather than opened dead, and once the subscription runs
 * again streams open and a resume replays what was appended meanwhile.
 * The failure is injected into the process's event store: the SSE hub's first subscription
 * (made at start) fails on demand, as one to a server that went away does.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import type { EventStore, Subscription } from '../../infra/ports/event-store.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { openSse, type SseReader } from '../support/sse-client.js';
import { eventually } from '../support/eventually.js';
import { newId, nowIso } from '../../services/kernel/ids.js';

let s: TestServer;
let failHubSubscription: ((error: Error) => void) | null = null;
/** Set by failHubSubscription, cleared by the test: the server the subscription needs is away. */
let serverAway: Error | null = null;
const readers: SseReader[] = [];
/** What the service logged, one object per line. */
const logged: { level: number; msg: string; status?: number; code?: string }[] = [];

beforeAll(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) logged.push(JSON.parse(line));
      done();
    },
  });
  s = await startTestServer({ SSE_KEEPALIVE_MS: '1000' }, {
    logger: pino({ level: 'info' }, sink),
    extraContexts: [
      ({ platform }) => {
        // Made after the events context, before anything starts: the hub holds this same store.
        const events: EventStore = platform.events;
        const subscribeAll = events.subscribeAll.bind(events);
        let first = true;
        events.subscribeAll = (options, handler): Subscription => {
          // The hub's: it follows the messages the streams carry (the other contexts follow their own events).
          const hubs = options.filter?.eventTypes?.includes('SmsReceived');
          // While the server is away, the hub's attempts to subscribe again fail too (however
          // slow this machine is, the test sees the outage before the hub is back).
          if (hubs && serverAway) {
            const done = Promise.reject(serverAway);
            done.catch(() => {});
            return { done, close: () => {} };
          }
          const inner = subscribeAll(options, handler);
          if (!first || !hubs) return inner;
          first = false;
          const failed = new Promise<void>((_, reject) => (failHubSubscription = (error) => reject((serverAway = error))));
          failed.catch(() => {});
          return { done: Promise.race([inner.done, failed]), close: () => inner.close() };
        };
        return { name: 'fault-injection' };
      },
    ],
  });
});
afterAll(async () => {
  for (const r of readers) r.close();
  await s?.close();
});

async function stream(token: string, identity: string, lastEventId?: string): Promise<SseReader> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, 'x-service-identity': identity };
  if (lastEventId) headers['last-event-id'] = lastEventId;
  const r = await openSse(`${s.url}/api/events/stream/`, headers);
  readers.push(r);
  return r;
}

async function sms(identityId: string, body: string): Promise<string> {
  const data = { identityId, messageId: newId(), conversationId: newId(), messageSid: `SM${newId()}`, from: '+15550001111', to: '+15550002222', body, preview: body, at: nowIso() };
  return (await s.runtime.events.append(`smsbox-${identityId}`, [{ id: newId(), type: 'SmsReceived', data }])).position;
}

test('a failed subscription ends the open streams, refuses new ones with 503, and streams work again once it is back', async () => {
  const { access } = await s.signUp();
  const identity = await s.createIdentity(access, 'listener');
  const open = await stream(access, identity.uuid);
  expect(open.status).toBe(200);
  await new Promise((r) => setTimeout(r, 100)); // registered with the hub
  const before = await sms(identity.uuid, 'before');
  expect((await open.frames(1))[0]).toMatchObject({ event: 'sms', id: before });

  expect(failHubSubscription).not.toBeNull();
  failHubSubscription!(new Error('server went away'));
  await open.ended; // its client resumes from the log

  const refused = await stream(access, identity.uuid);
  expect(refused.status).toBe(503);
  expect(refused.errorBody).toMatchObject({ code: 'service_unavailable', detail: expect.stringMatching(/interrupted/) });
  expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
  // A refusal the service chose, noted as such (a warning), not logged as a failed request.
  const about503 = logged.filter((l) => l.status === 503);
  expect(about503.map((l) => [l.level, l.msg, l.code])).toEqual([[40, 'request refused', 'service_unavailable']]);
  const missed = await sms(identity.uuid, 'while it was down');
  serverAway = null;

  // The hub starts its subscription again after a pause (1 s the first time, longer after each failed attempt).
  const resumed = await eventually(
    async () => {
      const r = await stream(access, identity.uuid, before);
      return r.status === 200 ? r : r.status === 503 && false;
    },
    20_000,
    200,
  );
  expect((await resumed.frames(1))[0]).toMatchObject({ event: 'sms', id: missed });
  const live = await sms(identity.uuid, 'after');
  expect((await resumed.frames(1))[0]).toMatchObject({ event: 'sms', id: live });
}, 30_000);
