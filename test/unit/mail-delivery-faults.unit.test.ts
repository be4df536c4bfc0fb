/**
 * The delivery reactor (services/mail/delivery.ts) on a disk that refuses writes for a
 * while (services/kernel/faults.ts: answered as temporary): a mail is never recorded as
 * failed for want of space. Before, a mail the relay had taken was recorded EmailFailed when
 * writing EmailSent failed, and a full disk under internal delivery failed the mail for good.
 */
import pino from 'pino';
import { createDeliveryReactor } from '../../services/mail/delivery.js';
import { EMAIL_DEFERRED, EMAIL_FAILED, EMAIL_QUEUED, EMAIL_SENT, type EmailQueuedData } from '../../services/mail/events.js';
import { TemporaryMailError } from '../../infra/ports/mailer.js';
import { eventStoreFeed } from '../../infra/ports/event-feed.js';
import type { EventStore } from '../../infra/ports/event-store.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';
import { eventually } from '../support/eventually.js';
import { notFound } from '../../services/gateway/errors.js';

const DOMAIN = 'agents.localhost';
const diskFull = () => Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });

function queued(messageId: string, to: string): EmailQueuedData {
  return {
    identityId: 'id-1',
    messageId,
    threadId: 't-1',
    kind: 'compose',
    replyToMessageId: null,
    internetMessageId: `<${messageId}@${DOMAIN}>`,
    inReplyTo: null,
    references: [],
    from: { address: `scout@${DOMAIN}`, name: '' },
    to: [{ address: to, name: '' }],
    cc: [],
    bcc: [],
    subject: 'Hello',
    html: '<p>Hi</p>',
    text: 'Hi',
    preview: 'Hi',
    attachments: [],
    at: new Date().toISOString(),
  };
}

/**
 * A running reactor on an in-memory log (stopped after each test). `refuse(type)` says
 * whether an append of an event of that type fails with a full disk now; `receive` is
 * internal delivery; `refused` the relay's refusals of a hand-off.
 */
type Refusal = { address: string; reason: string; temporary: boolean };
let running: { stop(): Promise<void> } | null = null;
afterEach(async () => {
  await running?.stop();
  running = null;
});

async function harness(o: {
  refuse?: (type: string) => boolean;
  receive?: () => Promise<void>;
  identityOf?: () => Promise<unknown>;
  refused?: (to: string[]) => Refusal[];
  /** Thrown by the relay instead of taking the mail. */
  relayDown?: () => Error | null;
  maxAttempts?: number;
}) {
  const store = createMemoryEventStore();
  const events: EventStore = {
    ...store,
    append: async (stream, list, options) => {
      if (list.some((e) => o.refuse?.(e.type))) throw diskFull();
      return store.append(stream, list, options);
    },
  };
  const relayed: string[] = [];
  const checkpoints = new Map<string, string>();
  const platform = {
    config: { mailDomain: DOMAIN, smtpRelayUrl: 'smtp://relay.test' },
    logger: pino({ level: 'silent' }),
    events,
    reads: { getCheckpoint: async (name: string) => checkpoints.get(name) ?? null, commit: async (name: string, position: string) => void checkpoints.set(name, position) },
    mailer: {
      send: async (mail: { envelope: { to: string[] } }) => {
        const down = o.relayDown?.();
        if (down) throw down;
        relayed.push(...mail.envelope.to);
        return { via: 'relay', refused: o.refused?.(mail.envelope.to) ?? [] };
      },
    },
  };
  const identity = { id: 'id-1', inbox: `scout@${DOMAIN}` };
  const mail = {
    bodiesOf: async (q: EmailQueuedData) => ({ html: q.html, text: q.text }),
    identityOf: o.identityOf ?? (async () => identity),
    identityByInbox: async (address: string) => (address.endsWith(`@${DOMAIN}`) ? { id: 'id-2', inbox: address } : null),
    receive: o.receive ?? (async () => undefined),
  };
  const reactor = createDeliveryReactor(platform as never, { mail: mail as never, blobs: {} as never, feed: eventStoreFeed(events), options: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: o.maxAttempts } });
  await reactor.start();
  running = reactor;
  /** Queues `q` and waits for its outcome: the types of its delivery stream, and the position it was queued at. */
  const deliver = async (q: EmailQueuedData) => {
    const { position } = (await store.append(`outbox-${q.identityId}`, [{ id: `q-${q.messageId}`, type: EMAIL_QUEUED, data: q }])).events[0];
    const types = await eventually(async () => {
      const found = (await store.readStream(`delivery-${q.messageId}`)).map((e) => e.type);
      return (found.includes(EMAIL_SENT) || found.includes(EMAIL_FAILED)) && found;
    });
    return { types, position };
  };
  return { store, relayed, checkpoints, deliver };
}

test('a mail the relay took is recorded sent once the disk takes the record again, never failed nor sent again', async () => {
  let refusals = 2; // EmailSent refused twice: the job throws and runs again (reactor retry)
  const h = await harness({ refuse: (type) => type === EMAIL_SENT && refusals-- > 0 });
  expect((await h.deliver(queued('m-1', 'someone@example.com'))).types).toEqual([EMAIL_SENT]);
  // The job's later runs record the outcome of the attempt made: the relay is not handed it again.
  expect(h.relayed).toEqual(['someone@example.com']);
}, 30_000);

test('internal delivery on a full disk defers the mail, then delivers it; the checkpoint moves past it', async () => {
  let refusals = 2;
  const h = await harness({
    receive: async () => {
      if (refusals-- > 0) throw diskFull();
    },
  });
  const { types, position } = await h.deliver(queued('m-2', `peer@${DOMAIN}`));
  expect(types).toEqual([EMAIL_DEFERRED, EMAIL_DEFERRED, EMAIL_SENT]);
  await eventually(() => h.checkpoints.get('reactor:mail-delivery') === position, 5_000);
}, 30_000);

test('a deferral the disk refuses too is recorded by a later run of its job; the mail is not failed', async () => {
  let receiveFailures = 1;
  let deferRefusals = 1;
  const h = await harness({
    refuse: (type) => type === EMAIL_DEFERRED && deferRefusals-- > 0,
    receive: async () => {
      if (receiveFailures-- > 0) throw diskFull();
    },
  });
  expect((await h.deliver(queued('m-3', `peer@${DOMAIN}`))).types).toEqual([EMAIL_DEFERRED, EMAIL_SENT]);
}, 30_000);

test('a deferral the disk refuses after the relay took the mail is recorded later; the relay is not handed it again', async () => {
  let deferRefusals = 1;
  let laterRefusals = 1;
  // One recipient taken, one refused for now (4xx) once: the deferral records who was taken.
  const h = await harness({
    refuse: (type) => type === EMAIL_DEFERRED && deferRefusals-- > 0,
    refused: (to) => (to.includes('later@example.com') && laterRefusals-- > 0 ? [{ address: 'later@example.com', reason: '451 try later', temporary: true }] : []),
  });
  const q = { ...queued('m-4', 'now@example.com'), cc: [{ address: 'later@example.com', name: '' }] };
  expect((await h.deliver(q)).types).toEqual([EMAIL_DEFERRED, EMAIL_SENT]);
  expect(h.relayed).toEqual(['now@example.com', 'later@example.com', 'later@example.com']);
}, 30_000);

test('only "not found" says the sending identity was deleted: a read store that fails holds the mail, then it goes', async () => {
  let failures = 2;
  const h = await harness({
    identityOf: async () => {
      if (failures-- > 0) throw Object.assign(new Error('connection <monitor> to 127.0.0.1:27017 closed'), { name: 'MongoNetworkError' });
      return { id: 'id-1' };
    },
  });
  expect((await h.deliver(queued('m-5', 'someone@example.com'))).types).toEqual([EMAIL_SENT]);
}, 30_000);

test('a deleted sending identity fails its mail, with nothing handed to the relay', async () => {
  const h = await harness({ identityOf: async () => Promise.reject(notFound('Identity not found.')) });
  expect((await h.deliver(queued('m-6', 'someone@example.com'))).types).toEqual([EMAIL_FAILED]);
  const [failed] = await h.store.readStream('delivery-m-6');
  expect(failed.data.error).toBe('The sending identity was deleted before the message was delivered.');
  expect(h.relayed).toEqual([]);
}, 30_000);

test('out of attempts with the relay still down, a mail internal recipients got is sent, the external ones rejected', async () => {
  const h = await harness({ relayDown: () => new TemporaryMailError('connect ECONNREFUSED relay.test:25'), maxAttempts: 2 });
  const q = { ...queued('m-7', `peer@${DOMAIN}`), cc: [{ address: 'someone@example.com', name: '' }] };
  expect((await h.deliver(q)).types).toEqual([EMAIL_DEFERRED, EMAIL_SENT]);
  const [deferred, sent] = await h.store.readStream('delivery-m-7');
  expect(deferred.data.error).toBe('connect ECONNREFUSED relay.test:25');
  expect(sent.data).toMatchObject({ internal: [`peer@${DOMAIN}`], external: [], attempts: 2, rejected: [{ address: 'someone@example.com', reason: 'connect ECONNREFUSED relay.test:25' }] });
}, 30_000);

test('out of attempts with the relay still down, a mail no one got fails, naming the recipients and the reason', async () => {
  const h = await harness({ relayDown: () => new TemporaryMailError('connect ECONNREFUSED relay.test:25'), maxAttempts: 2 });
  expect((await h.deliver(queued('m-8', 'someone@example.com'))).types).toEqual([EMAIL_DEFERRED, EMAIL_FAILED]);
  const [, failed] = await h.store.readStream('delivery-m-8');
  expect(failed.data).toMatchObject({ error: 'connect ECONNREFUSED relay.test:25', attempts: 2, rejected: [{ address: 'someone@example.com', reason: 'connect ECONNREFUSED relay.test:25' }] });
}, 30_000);
