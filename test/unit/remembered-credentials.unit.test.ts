/** services/accounts/remembered-credentials.ts: what HTTP basic may take without argon2id. */
import { jest } from '@jest/globals';
import { rememberedCredentials } from '../../services/accounts/remembered-credentials.js';

const account = { pk: 7, passwordHash: '$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA' };

describe('remembered credentials', () => {
  it('holds a tag for the account and password hash it was verified against, nothing else', () => {
    const r = rememberedCredentials();
    const tag = r.tag('alice', 'secret');
    expect(r.holds(tag, account)).toBe(false);
    r.remember(tag, account);
    expect(r.holds(tag, account)).toBe(true);
    expect(r.holds(r.tag('alice', 'secreT'), account)).toBe(false);
    expect(r.holds(tag, { ...account, pk: 8 })).toBe(false); // another account under that login
    r.remember(tag, account);
    expect(r.holds(tag, { ...account, passwordHash: `${account.passwordHash}x` })).toBe(false); // the password changed
    expect(r.holds(tag, account)).toBe(false); // and the entry is gone
    r.remember(tag, { ...account, passwordHash: null }); // no password (an external sign-in): nothing to remember
    expect(r.holds(tag, account)).toBe(false);
  });

  it('tags split login and password unambiguously, and differ between processes', () => {
    const r = rememberedCredentials();
    expect(r.tag('ab', 'c')).not.toBe(r.tag('a', 'bc'));
    expect(r.tag('a', 'b')).toBe(r.tag('a', 'b'));
    expect(rememberedCredentials().tag('a', 'b')).not.toBe(r.tag('a', 'b'));
    expect(r.tag('alice', 'secret')).toMatch(/^[\w-]{43}$/); // an HMAC-SHA256, not the text
  });

  it('an entry lapses after ttlMs counted from its verification, used or not', () => {
    const r = rememberedCredentials({ ttlMs: 1000 });
    const tag = r.tag('alice', 'secret');
    r.remember(tag, account, 0);
    expect(r.holds(tag, account, 999)).toBe(true);
    expect(r.holds(tag, account, 1000)).toBe(false);
  });

  it('keeps at most `max`, the least recently used out first', () => {
    const r = rememberedCredentials({ max: 2 });
    const [a, b, c] = ['a', 'b', 'c'].map((l) => r.tag(l, 'pw'));
    r.remember(a, account);
    r.remember(b, account);
    expect(r.holds(a, account)).toBe(true); // a is now the most recent
    r.remember(c, account); // b goes
    expect([r.holds(a, account), r.holds(b, account), r.holds(c, account)]).toEqual([true, false, true]);
  });
});

it('sweeps lapsed entries even when nobody asks for them again (nothing of a password lingers in the heap)', async () => {
  jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
  try {
    const r = rememberedCredentials({ ttlMs: 1000 });
    r.remember(r.tag('alice', 'secret'), account);
    r.remember(r.tag('bob', 'secret'), account, Date.now() + 5000); // verified later: lives on
    expect(r.size).toBe(2);
    await jest.advanceTimersByTimeAsync(1000);
    expect(r.size).toBe(1);
    await jest.advanceTimersByTimeAsync(5000);
    expect(r.size).toBe(0);
    expect(jest.getTimerCount()).toBe(0); // nothing held: no timer either
  } finally {
    jest.useRealTimers();
  }
});
