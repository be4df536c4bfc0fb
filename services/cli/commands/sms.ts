// `ais sms list|show|watch`, `phone`.
import { client, type Command } from '../context.js';
import { usage } from '../errors.js';
import { show, table } from '../output.js';
import { watch } from '../watch.js';

export const smsCommands: Record<string, Command> = {
  'sms list': {
    usage: 'ais sms list [--unread]',
    summary: 'SMS conversations of the identity.',
    options: { unread: { type: 'boolean' } },
    async run(ctx, _p, v) {
      const list = await client(ctx, { identity: true }).sms.inbox({ unread: !!v.unread });
      show(ctx, list, () => table(list as any, ['conversation_id', 'peer', 'unread_count', 'preview', 'last_message_at']));
    },
  },
  'sms show': {
    usage: 'ais sms show <conversation_id>',
    summary: 'One SMS conversation with its messages.',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais sms show <conversation_id>');
      const conv = await client(ctx, { identity: true }).sms.conversation(p[0]);
      show(ctx, conv, () => `${conv.peer}\n${table(conv.messages as any, ['created_dt', 'from_number', 'body'])}`);
    },
  },
  'sms watch': {
    usage: 'ais sms watch [--count N] [--since ID]',
    summary: 'Print inbound SMS as they arrive.',
    options: { count: { type: 'string' }, since: { type: 'string' } },
    run: (ctx, _p, v) => watch(ctx, 'sms', v, (d) => `${d.from_number}  ${d.preview} [conversation ${d.conversation_id}]`),
  },
  phone: {
    usage: 'ais phone',
    summary: 'Phone numbers of the identity.',
    async run(ctx) {
      const list = await client(ctx, { identity: true }).sms.phone();
      show(ctx, list, () => table(list as any, ['number', 'provider', 'capabilities', 'created_dt']));
    },
  },
};
