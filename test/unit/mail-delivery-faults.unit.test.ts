/**
 * The delivery reactor (services/mail/delivery.ts) on a disk that refuses writes for a
 * while (services/kernel/faults.ts: answered as temporary): a mail is never recorded as
 * failed for want of space. Before, a mail the relay had taken was recorded EmailFailed when
 * writing EmailSent failed, and a full disk under internal delivery failed the mail for good.
 */
import pino from 'pino';
import { createDeliveryReactor } from '../../services/mail/delivery.js';
import { EMAIL_DEFERRED, EMAIL_FAILED, EMAIL_QUEUED, EMAIL_SENT, type EmailQueuedData } from '../../services/mail/events.js';
import { eventStoreFeed } from '../../infra/ports/event-feed.js';
import type { EventStore } from '../../infra/ports/event-store.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';
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
 * A reactor on an in-memory log. `refuse(type)` says whether an append of an event of that
 * type fails with a full disk now; `receive` is internal delivery.
 */
type Refusal = { address: string; reason: string; temporary: boolean };

function harness(o: { refuse: (type: string) => boolean; receive?: () => Promise<void>; identityOf?: () => Promise<unknown>; refused?: (to: string[]) => Refusal[] }) {
  const store = createMemoryEventStore();
  const events: EventStore = {
    ...store,
    append: async (stream, list, options) => {
      if (list.some((e) => o.refuse(e.type))) throw diskFull();
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
  const reactor = createDeliveryReactor(platform as never, { mail: mail as never, blobs: {} as never, feed: eventStoreFeed(events), options: { baseDelayMs: 10, maxDelayMs: 10 } });
  const outcome = async (messageId: string, timeoutMs = 15_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const types = (await store.readStream(`delivery-${messageId}`)).map((e) => e.type);
      if (types.includes(EMAIL_SENT) || types.includes(EMAIL_FAILED) || Date.now() > deadline) return types;
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  return { store, reactor, relayed, outcome, checkpoints };
}

test('a mail the relay took is recorded sent once the disk takes the record again, never failed nor sent again', async () => {
  let refusals = 2; // EmailSent refused twice: the job throws and runs again (reactor retry)
  const h = harness({ refuse: (type) => type === EMAIL_SENT && refusals-- > 0 });
  await h.reactor.start();
  try {
    await h.store.append('outbox-id-1', [{ id: 'q-1', type: EMAIL_QUEUED, data: queued('m-1', 'someone@example.com') }]);
    const types = await h.outcome('m-1');
    expect(types).toEqual([EMAIL_SENT]);
    // The job's later runs record the outcome of the attempt made: the relay is not handed it again.
    expect(h.relayed).toEqual(['someone@example.com']);
  } finally {
    await h.reactor.stop();
  }
}, 30_000);

test('internal delivery on a full disk defers the mail, then delivers it; the checkpoint moves past it', async () => {
  let refusals = 2;
  const h = harness({
    refuse: () => false,
    receive: async () => {
      if (refusals-- > 0) throw diskFull();
    },
  });
  await h.reactor.start();
  try {
    const { position } = (await h.store.append('outbox-id-1', [{ id: 'q-2', type: EMAIL_QUEUED, data: queued('m-2', `peer@${DOMAIN}`) }])).events[0];
    expect(await h.outcome('m-2')).toEqual([EMAIL_DEFERRED, EMAIL_DEFERRED, EMAIL_SENT]);
    const deadline = Date.now() + 5_000;
    while (h.checkpoints.get('reactor:mail-delivery') !== position && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(h.checkpoints.get('reactor:mail-delivery')).toBe(position);
  } finally {
    await h.reactor.stop();
  }
}, 30_000);

test('a deferral the disk refuses too is recorded by a later run of its job; the mail is not failed', async () => {
  let receiveFailures = 1;
  let deferRefusals = 1;
  const h = harness({
    refuse: (type) => type === EMAIL_DEFERRED && deferRefusals-- > 0,
    receive: async () => {
      if (receiveFailures-- > 0) throw diskFull();
    },
  });
  await h.reactor.start();
  try {
    await h.store.append('outbox-id-1', [{ id: 'q-3', type: EMAIL_QUEUED, data: queued('m-3', `peer@${DOMAIN}`) }]);
    expect(await h.outcome('m-3')).toEqual([EMAIL_DEFERRED, EMAIL_SENT]);
  } finally {
    await h.reactor.stop();
  }
}, 30_000);

test('a deferral the disk refuses after the relay took the mail is recorded later; the relay is not handed it again', async () => {
  let deferRefusals = 1;
  let laterRefusals = 1;
  // One recipient taken, one refused for now (4xx) once: the deferral records who was taken.
  const h = harness({
    refuse: (type) => type === EMAIL_DEFERRED && deferRefusals-- > 0,
    refused: (to) => (to.includes('later@example.com') && laterRefusals-- > 0 ? [{ address: 'later@example.com', reason: '451 try later', temporary: true }] : []),
  });
  await h.reactor.start();
  try {
    const q = { ...queued('m-4', 'now@example.com'), cc: [{ address: 'later@example.com', name: '' }] };
    await h.store.append('outbox-id-1', [{ id: 'q-4', type: EMAIL_QUEUED, data: q }]);
    expect(await h.outcome('m-4')).toEqual([EMAIL_DEFERRED, EMAIL_SENT]);
    expect(h.relayed).toEqual(['now@example.com', 'later@example.com', 'later@example.com']);
  } finally {
    await h.reactor.stop();
  }
}, 30_000);

test('only "not found" says the sending identity was deleted: a read store that fails holds the mail, then it goes', async () => {
  let failures = 2;
  const h = harness({
    refuse: () => false,
    identityOf: async () => {
      if (failures-- > 0) throw Object.assign(new Error('connection <monitor> to 127.0.0.1:27017 closed'), { name: 'MongoNetworkError' });
      return { id: 'id-1' };
    },
  });
  await h.reactor.start();
  try {
    await h.store.append('outbox-id-1', [{ id: 'q-5', type: EMAIL_QUEUED, data: queued('m-5', 'someone@example.com') }]);
    expect(await h.outcome('m-5')).toEqual([EMAIL_SENT]);
  } finally {
    await h.reactor.stop();
  }
}, 30_000);

test('a deleted sending identity fails its mail, with nothing handed to the relay', async () => {
  const h = harness({ refuse: () => false, identityOf: async () => Promise.reject(notFound('Identity not found.')) });
  await h.reactor.start();
  try {
    await h.store.append('outbox-id-1', [{ id: 'q-6', type: EMAIL_QUEUED, data: queued('m-6', 'someone@example.com') }]);
    expect(await h.outcome('m-6')).toEqual([EMAIL_FAILED]);
    const [failed] = await h.store.readStream('delivery-m-6');
    expect(failed.data.error).toBe('The sending identity was deleted before the message was delivered.');
    expect(h.relayed).toEqual([]);
  } finally {
    await h.reactor.stop();
  }
}, 30_000);
