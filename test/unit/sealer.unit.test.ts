/**
 * The browser-kept sealed values (services/gateway/web-session.ts createSealer): the OIDC
 * sign-in's PKCE verifier and the keys page's minted key travel in them, so the browser must
 * neither read nor alter them, and one purpose's value must not open for another.
 */
import { randomBytes } from 'node:crypto';
import { createSealer } from '../../services/gateway/web-session.js';

const serverKey = randomBytes(32);
const minted = createSealer(serverKey, 'web-minted-key');

describe('createSealer', () => {
  it('opens what it sealed, before the expiry', () => {
    const sealed = minted.seal({ key: 'svc_mgmt_secret', sid: 's1' }, 60);
    expect(minted.open<{ key: string; sid: string }>(sealed)).toMatchObject({ key: 'svc_mgmt_secret', sid: 's1' });
  });

  it('hides the value from the browser (not in the cookie, not even base64-decoded)', () => {
    const sealed = minted.seal({ key: 'svc_mgmt_secret' }, 60);
    expect(sealed).not.toContain('svc_mgmt');
    expect(Buffer.from(sealed, 'base64url').toString('latin1')).not.toContain('svc_mgmt');
    expect(sealed).toMatch(/^[A-Za-z0-9_-]+$/); // a cookie value as is
  });

  it('refuses an altered value, one sealed for another purpose or under another key, and an expired one', () => {
    const sealed = minted.seal({ key: 'k' }, 60);
    const raw = Buffer.from(sealed, 'base64url');
    raw[14] ^= 1;
    expect(minted.open(raw.toString('base64url'))).toBeNull();
    expect(createSealer(serverKey, 'web-oidc-pending').open(sealed)).toBeNull();
    expect(createSealer(randomBytes(32), 'web-minted-key').open(sealed)).toBeNull();
    expect(minted.open(minted.seal({ key: 'k' }, -1))).toBeNull();
    for (const junk of [undefined, '', 'a.b', 'x'.repeat(10), '%%%']) expect(minted.open(junk)).toBeNull();
  });
});
