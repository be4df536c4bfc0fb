/**
 * A thread longer than its answer holds (two agents answering each other for days): the
 * answer shows the newest messages, and opening it marks every message read, older ones too.
 */
import { startTestServer, type TestServer } from '../support/server.js';
import type { MailParts } from '../../services/mail/index.js';
import { THREAD_MESSAGES } from '../../services/mail/routes.js';

let server: TestServer;
beforeAll(async () => (server = await startTestServer({ PASSWORD_HASH_MEMORY_KIB: '1024' })));
afterAll(() => server.close());

test('a thread of more messages than its answer holds shows the newest, and opening it marks them all read', async () => {
  const { access: token } = await server.signUp();
  const alice = (await server.api('POST', '/api/identities/', { token, body: { name: 'Long talker' } })).body;
  const { mail } = server.runtime.parts.find((p) => p.name === 'mail') as MailParts;
  const identity = (await mail.identityByInbox(alice.inbox))!;
  const total = THREAD_MESSAGES + 3;
  const root = '<root@peer.example>';
  const message = (i: number) => ({
    internetMessageId: i === 0 ? root : `<m${i}@peer.example>`,
    inReplyTo: i === 0 ? null : root,
    references: i === 0 ? [] : [root],
    subject: i === 0 ? 'Ping' : 'Re: Ping',
    from: { address: 'peer@peer.example', name: 'Peer' },
    to: [{ address: alice.inbox, name: '' }],
    cc: [],
    replyTo: [],
    text: `message ${i}`,
    html: null,
    attachments: [],
    raw: null,
    via: 'smtp' as const,
    sourceMessageId: null,
    date: null,
  });
  await mail.receive([identity], message(0), 'test:long-0');
  for (let i = 1; i < total; i += 100) {
    await Promise.all(Array.from({ length: Math.min(100, total - i) }, (_, k) => mail.receive([identity], message(i + k), `test:long-${i + k}`)));
  }

  const [thread] = (await server.api('GET', '/api/email-inbox/', { token, identity: alice.uuid })).body;
  expect([thread.message_count, thread.unread_count]).toEqual([total, total]);
  const opened = await server.api('GET', `/api/email-inbox/${thread.thread_id}/`, { token, identity: alice.uuid });
  expect(opened.status).toBe(200);
  const texts: string[] = opened.body.messages.map((m: { text: string }) => m.text);
  expect(texts).toHaveLength(THREAD_MESSAGES);
  expect(texts.at(-1)).toBe(`message ${total - 1}`); // the newest is there, oldest first as always
  expect(texts[0]).toBe('message 3');

  const after = (await server.api('GET', '/api/email-inbox/?unread=true', { token, identity: alice.uuid })).body;
  expect(after).toEqual([]);
  const oldest = (await server.api('GET', `/api/email-messages/?thread_id=${thread.thread_id}&unread=true`, { token, identity: alice.uuid })).body;
  expect(oldest).toEqual([]);
}, 120_000);
