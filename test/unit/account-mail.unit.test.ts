/**
 * The account mail reactor (services/accounts/mail.ts) against a store whose appends fail
 * for a while: a mail handed to the mailer is never sent again because recording it failed.
 */
import pino from 'pino';
import { accountMailContext } from '../../services/accounts/mail.js';
import { AccountMailRequested } from '../../services/accounts/events.js';
import type { RecordedEvent } from '../../infra/ports/event-store.js';

function harness(failingAppends: number) {
  const sends: string[] = [];
  const appended: string[] = [];
  let failures = failingAppends;
  const events: RecordedEvent[] = ['a', 'b', 'c'].map((who, i) => ({
    id: `req-${who}`,
    stream: `user-${i + 1}`,
    type: AccountMailRequested,
    data: { kind: 'reset-password', exp: Math.floor(Date.now() / 1000) + 3600, at: new Date().toISOString() },
    position: String(i + 1),
    revision: 0,
    metadata: {},
    created: new Date().toISOString(),
  })) as unknown as RecordedEvent[];
  const platform = {
    logger: pino({ level: 'silent' }),
    mailer: { send: async (mail: { to: string[] }) => void sends.push(mail.to[0]) },
    events: {
      headPosition: async () => null,
      readStream: async (stream: string) => appended.filter((id) => id.startsWith(stream)).map((id) => ({ id: id.split('|')[1] })),
      append: async (stream: string, list: { id: string }[]) => {
        if (failures-- > 0) throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
        appended.push(...list.map((e) => `${stream}|${e.id}`));
      },
    },
    reads: { getCheckpoint: async () => null, commit: async () => undefined },
    feed: {
      subscribe: (_o: unknown, handler: (e: RecordedEvent) => Promise<unknown>) => {
        void (async () => {
          for (const e of events) await handler(e);
        })();
        return { close: () => undefined, done: new Promise<void>(() => undefined) };
      },
    },
  };
  const accounts = {
    accountMailOf: async (e: RecordedEvent) => ({
      stream: e.stream,
      record: { id: `${e.id}-sent`, type: 'PasswordResetRequested', data: {} },
      mail: { from: 'no-reply@x', to: [`${e.stream}@example.com`], subject: 'Reset your password', text: 'link' },
    }),
  };
  const context = accountMailContext({ platform, accounts } as never) as { start(role: string): Promise<void>; stop(): Promise<void> };
  return { context, sends, appended };
}

test('a mail whose record fails to append is recorded later, never sent twice', async () => {
  const { context, sends, appended } = harness(3);
  await context.start('all');
  const deadline = Date.now() + 20_000;
  while (appended.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  await context.stop();
  expect(appended).toHaveLength(3);
  expect(sends.sort()).toEqual(['user-1@example.com', 'user-2@example.com', 'user-3@example.com']);
}, 30_000);
