/** Pure parts of identities, keys and plans. */
import { normalizeLocalPart, slugOf, generateLocalPart } from '../../services/identities/email-identifier.js';
import { maskKey, hashKey } from '../../services/keys/service.js';
import { PLANS, phoneAllowance, planRequiredFor } from '../../services/billing/plans.js';
import { identitiesProjection } from '../../projections/identities/index.js';
import type { RecordedEvent } from '../../infra/ports/event-store.js';

describe('email identifier (RFC 5321 dot-atom, ≤ 64)', () => {
  it.each(['alice', 'a.b', "o'brien", 'x+tag', 'a_b-c', 'x'.repeat(64)])('accepts %s', (v) => {
    expect(normalizeLocalPart(v)).toEqual({ value: v.toLowerCase() });
  });
  it('lower-cases', () => expect(normalizeLocalPart('Alice.B')).toEqual({ value: 'alice.b' }));
  it.each(['', 'a..b', '.a', 'a.', 'a b', 'a@b', 'a"b', 'x'.repeat(65), 'é'])('refuses %j', (v) => {
    expect(normalizeLocalPart(v)).toHaveProperty('error');
  });
  it('generates slug-xxxx from the name', () => {
    expect(slugOf('Sales Bot #1')).toBe('sales-bot-1');
    expect(slugOf('Ünïcödé')).toBe('unicode');
    expect(slugOf('***')).toBe('agent');
    const g = generateLocalPart('Sales Bot');
    expect(g).toMatch(/^sales-bot-[a-z2-9]{4}$/);
    expect(normalizeLocalPart(g)).toEqual({ value: g });
    expect(generateLocalPart('x'.repeat(200)).length).toBeLessThanOrEqual(64);
  });
});

describe('keys', () => {
  it('masked_key keeps the prefix and at most the last 4 characters', () => {
    expect(maskKey('svc_mgmt_abcdefghijklmnopqrstuvwxyz0123456789ABCD')).toBe('svc_mgmt_…ABCD');
    expect(maskKey('svc_id_abcdefghijklmnopqrstuvwxyz0123456789WXYZ')).toBe('svc_id_…WXYZ');
    expect(maskKey('svc_id_ab')).toBe('svc_id_…');
  });
  it('hash is hex SHA-256', () => expect(hashKey('x')).toMatch(/^[0-9a-f]{64}$/));
});

describe('plans (DECISIONS)', () => {
  it('free 0, email 0, developer 3, team 25; only active subscriptions allow phones', () => {
    expect(Object.fromEntries(Object.entries(PLANS).map(([k, v]) => [k, v.phoneLimit]))).toEqual({ free: 0, email: 0, developer: 3, team: 25 });
    expect(phoneAllowance({ plan: 'team', status: 'past_due' })).toBe(0);
    expect(phoneAllowance({ plan: 'developer', status: 'active' })).toBe(3);
    expect(planRequiredFor(1)).toBe('developer');
    expect(planRequiredFor(4)).toBe('team');
    expect(planRequiredFor(26)).toBeNull(); // beyond the largest plan: no plan to name
  });
});

describe('identities projection', () => {
  const ev = (type: string, data: unknown, position: string): RecordedEvent => ({ id: position, type, stream: 'identity-abc', revision: 0, position, data, metadata: {}, recordedAt: '' });
  const run = (doc: any, e: RecordedEvent) => identitiesProjection.apply(e).reduce((d, u) => u.evolve(d), doc);
  const created = ev('IdentityCreated', { identityId: 'abc', ownerPk: 1, name: 'Bot', inbox: 'bot@x', phone: null, at: 't' }, '1');

  it('builds the shared document', () => {
    expect(run(null, created)).toEqual({ id: 'abc', ownerPk: 1, name: 'Bot', nameKey: 'bot', inbox: 'bot@x', phone: null, createdAt: 't', seq: 1 });
  });
  it('the same event twice changes nothing', () => {
    const once = run(null, created);
    expect(run(once, created)).toBe(once);
  });
  it('phone, rename, delete', () => {
    let d = run(null, created);
    d = run(d, ev('PhoneProvisioned', { identityId: 'abc', phone: '+12005550100' }, '2'));
    expect(d.phone).toBe('+12005550100');
    d = run(d, ev('IdentityUpdated', { identityId: 'abc', name: 'New' }, '3'));
    expect([d.name, d.nameKey]).toEqual(['New', 'new']);
    expect(run(d, ev('IdentityDeleted', { identityId: 'abc', ownerPk: 1 }, '4'))).toBeNull();
  });
});
