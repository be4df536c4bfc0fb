/** projections/sms: given events, the read models; applying an event twice changes nothing. */
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import { smsProjection, SMS_CONVERSATIONS, SMS_MESSAGES, SMS_PHONES } from '../../projections/sms/index.js';
import { normalizeNumber, previewOf } from '../../services/sms/events.js';

let position = 0;
const recorded = (type: string, data: Record<string, unknown>): RecordedEvent => ({
  id: `e${++position}`,
  type,
  stream: `smsbox-${data.identityId}`,
  revision: position,
  position: String(position),
  data,
  metadata: {},
  recordedAt: new Date().toISOString(),
});

/** A tiny in-memory runner: applies the projection's updates to a map of documents. */
function run(events: RecordedEvent[], docs = new Map<string, Doc>()) {
  for (const e of events) {
    for (const u of smsProjection.apply(e)) {
      const key = `${u.collection}/${u.id}`;
      const next = u.evolve(docs.get(key) ?? null);
      if (next) docs.set(key, next);
      else docs.delete(key);
    }
  }
  return docs;
}

const received = (messageId: string, from = '+15550001') =>
  recorded('SmsReceived', { identityId: 'i1', messageId, conversationId: 'c1', messageSid: `SM${messageId}`, provider: 'local', from, to: '+15559999', body: `body ${messageId}`, preview: `body ${messageId}`, mediaUrls: [], at: new Date().toISOString() });

describe('sms projection', () => {
  it('counts messages and unread ones per conversation', () => {
    const docs = run([received('m1'), received('m2')]);
    expect(docs.get(`${SMS_CONVERSATIONS}/c1`)).toMatchObject({ messageCount: 2, unreadCount: 2, unread: true, preview: 'body m2', peer: '+15550001' });
    expect(docs.get(`${SMS_MESSAGES}/m1`)).toMatchObject({ read: false, conversationId: 'c1' });
  });

  it('is idempotent: the same SmsReceived twice changes nothing', () => {
    const e = received('m1');
    const once = run([e]);
    const snapshot = JSON.stringify([...once]);
    run([e], once);
    expect(JSON.stringify([...once])).toBe(snapshot);
  });

  it('two readers marking the same messages read do not eat a newer unread message', () => {
    const read = (ids: string[]) => recorded('SmsRead', { identityId: 'i1', conversationId: 'c1', messageIds: ids, at: new Date().toISOString() });
    const docs = run([received('m1'), received('m2'), read(['m1', 'm2']), received('m3'), read(['m1', 'm2'])]);
    expect(docs.get(`${SMS_CONVERSATIONS}/c1`)).toMatchObject({ messageCount: 3, unreadCount: 1, unread: true });
    expect(docs.get(`${SMS_MESSAGES}/m2`)).toMatchObject({ read: true });
    expect(docs.get(`${SMS_MESSAGES}/m3`)).toMatchObject({ read: false });
  });

  it("a conversation's document does not grow with its unread messages", () => {
    const docs = run([received('n100')]);
    const size = () => JSON.stringify(docs.get(`${SMS_CONVERSATIONS}/c1`)).length;
    const first = size();
    run(Array.from({ length: 99 }, (_, i) => received(`n${101 + i}`)), docs);
    expect(docs.get(`${SMS_CONVERSATIONS}/c1`)).toMatchObject({ messageCount: 100, unreadCount: 100 });
    expect(size()).toBeLessThan(first + 20); // counts and positions a few digits longer; a list of ids would be ~700 more
  });

  it('phones follow PhoneProvisioned, PhoneReleased and IdentityDeleted', () => {
    const at = new Date().toISOString();
    const docs = run([
      recorded('PhoneProvisioned', { identityId: 'i1', phone: '+15550100', provider: 'local', at }),
      recorded('PhoneProvisioned', { identityId: 'i1', phone: '+15550100', provider: 'local', at }),
    ]);
    expect(docs.get(`${SMS_PHONES}/i1`)).toMatchObject({ numbers: [{ number: '+15550100', provider: 'local', createdAt: at }] });
    run([recorded('PhoneReleased', { identityId: 'i1', phone: '+15550100', provider: 'local', at })], docs);
    expect(docs.has(`${SMS_PHONES}/i1`)).toBe(false);
    run([recorded('PhoneProvisioned', { identityId: 'i2', phone: '+15550101', provider: 'local', at }), recorded('IdentityDeleted', { identityId: 'i2', ownerPk: 1, at })], docs);
    expect(docs.has(`${SMS_PHONES}/i2`)).toBe(false);
  });
});

describe('sms helpers', () => {
  it.each([
    ['+15550100', '+15550100'],
    [' 15550100', '+15550100'], // a "+" decoded as a space
    ['+1 (555) 010-0', '+15550100'],
    ['0015550100', '+15550100'],
    ['TWILIO', 'TWILIO'], // alphanumeric sender ids stay as they are
  ])('normalizeNumber(%p) = %p', (raw, expected) => expect(normalizeNumber(raw)).toBe(expected));

  it('previewOf flattens whitespace and cuts at 100 characters', () => {
    expect(previewOf('a\n\n b\tc')).toBe('a b c');
    expect(previewOf('x'.repeat(150))).toHaveLength(100);
    for (const lead of ['', 'x']) expect(/[\uD800-\uDFFF]/u.test(previewOf(`${lead}${'😀'.repeat(80)}`))).toBe(false); // no half emoji
  });
});
