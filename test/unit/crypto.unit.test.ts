/**
 * services/sdk/crypto.ts: the client-side E2E scheme of docs/SECURITY.md (SPEC "Authentication" 7).
 */
import { createDecipheriv, hkdfSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { inspect } from 'node:util';
import {
  CryptoError,
  E2E_PATTERN,
  VaultKey,
  associatedData,
  changePin,
  decryptField,
  deriveKeys,
  encryptField,
  fileLockStore,
  generateDeviceSecret,
  memoryLockStore,
  parseKdf,
  recover,
  sealBytes,
  setupEncryption,
  unlock,
  type EncryptionMetadata,
  type FieldBinding,
  type KdfParams,
} from '../../services/sdk/crypto.js';

const vectors = JSON.parse(readFileSync(new URL('../fixtures/crypto-vectors.json', import.meta.url), 'utf8'));

// The floor the module accepts (OWASP minimum): keeps the suite fast; production uses DEFAULT_KDF.
const FAST: KdfParams = { memoryKiB: 19456, iterations: 2, parallelism: 1 };
const SALT = Buffer.from('fedcba9876543210fedcba9876543210', 'hex').toString('base64');
const IDENTITY = '0190f5a2-7c3e-7b1a-9a4f-2d6e8c1b3a50';
const ENTRY = '0190f5a2-9d41-7c02-8e55-6f1a2b3c4d5e';
const pw = (field: 'username' | 'password' | 'notes', over: Partial<FieldBinding> = {}): FieldBinding =>
  ({ kind: 'password', identity: IDENTITY, entry: ENTRY, domain: 'github.com', field, ...over }) as FieldBinding;

async function codeOf(p: Promise<unknown> | (() => unknown)): Promise<string> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (err) {
    if (err instanceof CryptoError) return err.code;
    throw err;
  }
  return 'no error';
}

async function setUp(pin = '123456') {
  const s = await setupEncryption({ pin, salt: SALT, kdf: FAST });
  const metadata: EncryptionMetadata = { salt: SALT, ...s.upload };
  return { ...s, metadata };
}

describe('committed test vectors (test/fixtures/crypto-vectors.json)', () => {
  const vk = new VaultKey(Buffer.from(vectors.envelope.vault_key_hex, 'hex'));

  test('field key and public key derive from the vault key as recorded', () => {
    const fieldKey = Buffer.from(hkdfSync('sha256', vk.exportBytes(), Buffer.alloc(0), Buffer.from('ais/v1/fields'), 32));
    expect(fieldKey.toString('hex')).toBe(vectors.envelope.field_key_hex);
    expect(vk.fieldKey().toString('hex')).toBe(vectors.envelope.field_key_hex);
    expect(vk.publicKey()).toBe(vectors.envelope.public_key);
  });

  test.each(vectors.envelope.cases.map((c: { name: string }) => [c.name, c]) as [string, any][])('%s: fixed key and nonce give the recorded ciphertext', (_name, c) => {
    expect(associatedData(c.binding).toString('hex')).toBe(c.aad_hex);
    expect(sealBytes(vk.fieldKey(), Buffer.from(c.plaintext, 'utf8'), c.binding, Buffer.from(c.nonce_hex, 'hex'))).toBe(c.ciphertext);
    expect(c.ciphertext).toMatch(E2E_PATTERN);
    expect(decryptField(vk, c.ciphertext, c.binding)).toBe(c.plaintext);
  });

  test('the recorded envelopes open with plain AES-256-GCM (layout: version ‖ nonce ‖ ciphertext ‖ tag)', () => {
    for (const c of vectors.envelope.cases) {
      const raw = Buffer.from(c.ciphertext.slice('e2e::'.length), 'base64');
      expect(raw[0]).toBe(1);
      expect(raw.subarray(1, 13).toString('hex')).toBe(c.nonce_hex);
      const d = createDecipheriv('aes-256-gcm', Buffer.from(vectors.envelope.field_key_hex, 'hex'), raw.subarray(1, 13));
      d.setAAD(Buffer.from(c.aad_hex, 'hex'));
      d.setAuthTag(raw.subarray(raw.length - 16));
      expect(Buffer.concat([d.update(raw.subarray(13, raw.length - 16)), d.final()]).toString('utf8')).toBe(c.plaintext);
    }
  });

  test('PIN + salt + device secret give the recorded KEK and verifier', async () => {
    const k = vectors.kdf;
    const d = await deriveKeys({ pin: k.pin, salt: k.salt, deviceSecret: k.device_secret, kdf: parseKdf(k.kdf) });
    expect(d.kek.toString('hex')).toBe(k.kek_hex);
    expect(d.verifier).toBe(k.verifier);
  });

  test('the recorded wrapped key unlocks to the recorded vault key', async () => {
    const w = vectors.keywrap;
    expect(sealBytes(Buffer.from(w.kek_hex, 'hex'), Buffer.from(w.vault_key_hex, 'hex'), { kind: 'keywrap', purpose: 'pin', salt: w.salt }, Buffer.from(w.nonce_hex, 'hex'))).toBe(w.wrapped_key);
    const metadata: EncryptionMetadata = { salt: w.salt, public_key: vectors.envelope.public_key, verifier: vectors.kdf.verifier, wrapped_key: w.wrapped_key, kdf: vectors.kdf.kdf };
    const key = await unlock({ pin: vectors.kdf.pin, deviceSecret: vectors.kdf.device_secret, metadata, lockStore: memoryLockStore() });
    expect(key.exportBytes().toString('hex')).toBe(w.vault_key_hex);
  });
});

describe('field encryption', () => {
  const key = VaultKey.generate();

  test.each([
    ['ascii', 'hunter2'],
    ['empty string', ''],
    ['unicode (emoji, CJK, combining marks, RTL)', 'zoë 🔑 パスワード e\u0301 שלום \u0000 tab\tnl\n'],
    ['long', 'x'.repeat(100_000)],
    ['a leading byte order mark (U+FEFF) is text too', '\ufeffX'],
  ])('round trip byte for byte: %s', (_n, text) => {
    const ct = encryptField(key, text, pw('password'));
    expect(ct).toMatch(E2E_PATTERN);
    const back = decryptField(key, ct, pw('password'));
    expect(back).toBe(text);
    expect(Buffer.from(back, 'utf8').equals(Buffer.from(text, 'utf8'))).toBe(true);
  });

  test('the same plaintext encrypts differently each time (random nonce)', () => {
    expect(encryptField(key, 'same', pw('password'))).not.toBe(encryptField(key, 'same', pw('password')));
  });

  test('every tampered byte (version, nonce, body, tag) is rejected', async () => {
    const ct = encryptField(key, 'secret value', pw('password'));
    const raw = Buffer.from(ct.slice(5), 'base64');
    for (let i = 0; i < raw.length; i++) {
      const bad = Buffer.from(raw);
      bad[i] ^= 0x01;
      const code = await codeOf(() => decryptField(key, 'e2e::' + bad.toString('base64'), pw('password')));
      expect([i, code]).toEqual([i, i === 0 ? 'invalid_ciphertext' : 'decrypt_failed']);
    }
    expect(await codeOf(() => decryptField(key, 'e2e::' + raw.subarray(0, raw.length - 1).toString('base64'), pw('password')))).toBe('decrypt_failed');
    expect(await codeOf(() => decryptField(key, 'e2e::' + raw.subarray(0, 20).toString('base64'), pw('password')))).toBe('invalid_ciphertext');
    expect(await codeOf(() => decryptField(key, 'plaintext', pw('password')))).toBe('invalid_ciphertext');
  });

  test('a ciphertext moved to another field, entry, domain, identity or key name is rejected', async () => {
    const ct = encryptField(key, 'alice', pw('username'));
    expect(decryptField(key, ct, pw('username'))).toBe('alice');
    expect(await codeOf(() => decryptField(key, ct, pw('password')))).toBe('decrypt_failed');
    expect(await codeOf(() => decryptField(key, ct, pw('username', { entry: '0190f5a2-0000-7000-8000-000000000000' } as never)))).toBe('decrypt_failed');
    expect(await codeOf(() => decryptField(key, ct, pw('username', { domain: 'evil.example' } as never)))).toBe('decrypt_failed');
    expect(await codeOf(() => decryptField(key, ct, pw('username', { identity: '0190f5a2-0000-7000-8000-000000000001' } as never)))).toBe('decrypt_failed');
    const secret = encryptField(key, 'v', { kind: 'secret', identity: IDENTITY, key: 'a' });
    expect(await codeOf(() => decryptField(key, secret, { kind: 'secret', identity: IDENTITY, key: 'b' }))).toBe('decrypt_failed');
    expect(decryptField(key, secret, { kind: 'secret', identity: IDENTITY.toUpperCase(), key: 'a' })).toBe('v'); // uuids compare case-insensitively
  });

  test('another vault key cannot decrypt', async () => {
    const ct = encryptField(key, 'x', pw('notes'));
    expect(await codeOf(() => decryptField(VaultKey.generate(), ct, pw('notes')))).toBe('decrypt_failed');
  });

  test('a string that is not well-formed Unicode is refused rather than silently altered', async () => {
    expect(await codeOf(() => encryptField(key, 'a\uD800b', pw('notes')))).toBe('invalid_input');
  });

  test('the vault key does not leak through JSON or inspection', () => {
    const hex = key.exportBytes().toString('hex');
    expect(JSON.stringify({ key })).not.toContain(hex);
    expect(inspect(key)).not.toContain(hex);
  });
});

describe('PIN setup, unlock, lock, recovery, PIN change', () => {
  test('setup uploads only public values and ciphertext; the right PIN unlocks the same vault key', async () => {
    const s = await setUp();
    expect(Object.keys(s.upload).sort()).toEqual(['kdf', 'public_key', 'recovery_wrapped_key', 'verifier', 'wrapped_key']);
    expect(s.upload.wrapped_key).toMatch(E2E_PATTERN);
    expect(s.upload.recovery_wrapped_key).toMatch(E2E_PATTERN);
    const uploaded = JSON.stringify(s.upload);
    expect(uploaded).not.toContain('123456');
    expect(uploaded).not.toContain(s.vaultKey.exportBytes().toString('base64'));
    expect(s.recoveryKey).toMatch(/^RK1(-[0-9A-HJKMNP-TV-Z]{4}){8}$/);
    expect(s.deviceSecret).toMatch(/^SK1(-[0-9A-HJKMNP-TV-Z]{4}){8}$/);
    const k = await unlock({ pin: '123456', deviceSecret: s.deviceSecret, metadata: s.metadata, lockStore: memoryLockStore() });
    expect(k.exportBytes().equals(s.vaultKey.exportBytes())).toBe(true);
  });

  test('no metadata uploaded yet: encryption_missing', async () => {
    const store = memoryLockStore();
    expect(await codeOf(unlock({ pin: '123456', deviceSecret: generateDeviceSecret(), metadata: null, lockStore: store }))).toBe('encryption_missing');
    expect(await codeOf(unlock({ pin: '123456', deviceSecret: generateDeviceSecret(), metadata: { salt: SALT, public_key: null, verifier: null }, lockStore: store }))).toBe('encryption_missing');
  });

  test('a wrong PIN is detected by the verifier; the third wrong PIN locks, and the right PIN stays locked', async () => {
    const s = await setUp();
    const store = memoryLockStore();
    const attempt = (pin: string) => unlock({ pin, deviceSecret: s.deviceSecret, metadata: s.metadata, lockStore: store });
    const first = await attempt('000000').catch((e) => e);
    expect(first).toBeInstanceOf(CryptoError);
    expect([first.code, first.attemptsLeft]).toEqual(['wrong_pin', 2]);
    expect(await codeOf(attempt('000001'))).toBe('wrong_pin');
    expect(await codeOf(attempt('000002'))).toBe('pin_locked');
    expect(await codeOf(attempt('123456'))).toBe('pin_locked');
    expect(await store.read()).toEqual({ failures: 3 });
  });

  test('a right PIN resets the counter; a malformed PIN does not count', async () => {
    const s = await setUp();
    const store = memoryLockStore();
    const attempt = (pin: string) => unlock({ pin, deviceSecret: s.deviceSecret, metadata: s.metadata, lockStore: store });
    expect(await codeOf(attempt('000000'))).toBe('wrong_pin');
    expect(await codeOf(attempt('000000'))).toBe('wrong_pin');
    expect(await codeOf(attempt('12345'))).toBe('invalid_pin');
    await attempt('123456');
    expect(await store.read()).toEqual({ failures: 0 });
  });

  test('wrong PINs tried at once are all counted: the third locks, the rest are refused', async () => {
    const s = await setUp();
    const store = memoryLockStore();
    const codes = await Promise.all(Array.from({ length: 6 }, () => codeOf(unlock({ pin: '000000', deviceSecret: s.deviceSecret, metadata: s.metadata, lockStore: store }))));
    expect(codes).toEqual(['wrong_pin', 'wrong_pin', 'pin_locked', 'pin_locked', 'pin_locked', 'pin_locked']);
    expect(await codeOf(unlock({ pin: '123456', deviceSecret: s.deviceSecret, metadata: s.metadata, lockStore: store }))).toBe('pin_locked');
  });

  test('the lock persists in a file across client restarts', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ais-lock-'));
    try {
      const file = path.join(dir, 'nested', 'pin-lock.json');
      const s = await setUp();
      for (let i = 0; i < 3; i++) await codeOf(unlock({ pin: '999999', deviceSecret: s.deviceSecret, metadata: s.metadata, lockStore: fileLockStore(file) }));
      expect(await codeOf(unlock({ pin: '123456', deviceSecret: s.deviceSecret, metadata: s.metadata, lockStore: fileLockStore(file) }))).toBe('pin_locked');
      writeFileSync(file, '{not json');
      expect(await fileLockStore(file).read()).toEqual({ failures: 3 }); // corruption does not unlock
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('the server database alone is not enough: the right PIN with another device secret fails', async () => {
    const s = await setUp();
    expect(await codeOf(unlock({ pin: '123456', deviceSecret: generateDeviceSecret(), metadata: s.metadata, lockStore: memoryLockStore() }))).toBe('wrong_pin');
    const withoutSecret = await deriveKeys({ pin: '123456', salt: SALT, deviceSecret: generateDeviceSecret(), kdf: FAST });
    expect(withoutSecret.verifier).not.toBe(s.upload.verifier);
  });

  test('recovery after a forgotten PIN: the recovery key re-wraps under a new PIN and clears the lock; old entries still decrypt', async () => {
    const s = await setUp();
    const ct = encryptField(s.vaultKey, 'kept', pw('password'));
    const store = memoryLockStore({ failures: 3 });
    expect(await codeOf(recover({ recoveryKey: (await setUp()).recoveryKey, newPin: '654321', metadata: s.metadata, lockStore: store }))).toBe('wrong_recovery_key');
    expect(await codeOf(recover({ recoveryKey: 'RK1-nope', newPin: '654321', metadata: s.metadata }))).toBe('invalid_secret');
    // Typed by a person: lower case, no dashes, O for 0 and l for 1 are all accepted.
    const typed = s.recoveryKey.toLowerCase().replace(/-/g, ' ').replace(/0/g, 'o').replace(/1/g, 'l');
    const r = await recover({ recoveryKey: typed, newPin: '654321', metadata: s.metadata, deviceSecret: s.deviceSecret, lockStore: store });
    expect(await store.read()).toEqual({ failures: 0 });
    expect(r.deviceSecret).toBe(s.deviceSecret);
    const next: EncryptionMetadata = { ...s.metadata, ...r.upload };
    expect(next.public_key).toBe(s.metadata.public_key);
    expect(next.recovery_wrapped_key).toBe(s.metadata.recovery_wrapped_key);
    expect(await codeOf(unlock({ pin: '123456', deviceSecret: s.deviceSecret, metadata: next, lockStore: memoryLockStore() }))).toBe('wrong_pin');
    const k = await unlock({ pin: '654321', deviceSecret: s.deviceSecret, metadata: next, lockStore: memoryLockStore() });
    expect(decryptField(k, ct, pw('password'))).toBe('kept');
  });

  test('recovery without the device secret makes a new one', async () => {
    const s = await setUp();
    const r = await recover({ recoveryKey: s.recoveryKey, newPin: '111111', metadata: s.metadata });
    expect(r.deviceSecret).not.toBe(s.deviceSecret);
    const k = await unlock({ pin: '111111', deviceSecret: r.deviceSecret, metadata: { ...s.metadata, ...r.upload }, lockStore: memoryLockStore() });
    expect(k.exportBytes().equals(s.vaultKey.exportBytes())).toBe(true);
  });

  test('PIN change re-wraps only: old entries decrypt under the new PIN, the old PIN no longer works', async () => {
    const s = await setUp();
    const ct = encryptField(s.vaultKey, 'entry from before', pw('notes'));
    const store = memoryLockStore();
    expect(await codeOf(changePin({ pin: '000000', newPin: '222222', deviceSecret: s.deviceSecret, metadata: s.metadata, lockStore: store }))).toBe('wrong_pin');
    const c = await changePin({ pin: '123456', newPin: '222222', deviceSecret: s.deviceSecret, metadata: s.metadata, lockStore: store });
    expect(c.upload.verifier).not.toBe(s.upload.verifier);
    const next: EncryptionMetadata = { ...s.metadata, ...c.upload };
    const k = await unlock({ pin: '222222', deviceSecret: s.deviceSecret, metadata: next, lockStore: store });
    expect(decryptField(k, ct, pw('notes'))).toBe('entry from before');
    expect(await codeOf(unlock({ pin: '123456', deviceSecret: s.deviceSecret, metadata: next, lockStore: store }))).toBe('wrong_pin');
  });

  test('metadata whose wrapped key does not fit its public key is refused', async () => {
    const a = await setUp();
    const b = await setupEncryption({ pin: '123456', salt: SALT, deviceSecret: a.deviceSecret, kdf: FAST });
    const mixed: EncryptionMetadata = { ...a.metadata, verifier: b.upload.verifier, wrapped_key: b.upload.wrapped_key };
    expect(await codeOf(unlock({ pin: '123456', deviceSecret: a.deviceSecret, metadata: mixed, lockStore: memoryLockStore() }))).toBe('decrypt_failed');
  });

  test('key-derivation parameters below the floor are refused (no downgrade by a hostile server)', async () => {
    const s = await setUp();
    expect(await codeOf(unlock({ pin: '123456', deviceSecret: s.deviceSecret, metadata: { ...s.metadata, kdf: 'argon2id:m=8,t=1,p=1' }, lockStore: memoryLockStore() }))).toBe('invalid_input');
    expect(await codeOf(() => parseKdf('scrypt:n=2'))).toBe('decrypt_failed');
  });
});
