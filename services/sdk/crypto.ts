/**
 * Client-side end-to-end encryption for passwords and vault secrets (SPEC "Authentication" 7,
 * the client conditions `pin_locked` and `encryption_missing`; docs/SECURITY.md explains the
 * scheme and its threat model). The server never sees a PIN, a key or a plaintext: it stores
 * the `upload` objects built here and the `e2e::` strings this module produces.
 *
 * Two-secret key derivation (as 1Password's 2SKD): the key-encryption key needs the 6-digit
 * PIN AND a high-entropy device secret that only clients hold, so the server's database alone
 * (salt, verifier, wrapped keys) does not allow an offline search of the 10^6 PINs.
 *
 *   A    = Argon2id(PIN, salt)                                   (memory-hard, params in `kdf`)
 *   B    = HKDF-SHA256(deviceSecret, salt, "ais/v1/device-secret")
 *   M    = A XOR B
 *   KEK  = HKDF-SHA256(M, salt, "ais/v1/kek")          wraps the vault key  -> wrapped_key
 *   VER  = HMAC-SHA256(HKDF(M, salt, "ais/v1/verifier"), "ais/v1/pin-verifier")  -> verifier
 *   RKEK = HKDF-SHA256(recoveryKey, salt, "ais/v1/recovery")  wraps the vault key -> recovery_wrapped_key
 *   vault key: 32 random bytes; fields are sealed under HKDF(vaultKey, "ais/v1/fields"), and
 *   the account's X25519 key pair comes from HKDF(vaultKey, "ais/v1/x25519") -> public_key.
 *
 * Ciphertext format: `e2e::` + base64( version(1) || nonce(12) || AES-256-GCM ciphertext || tag(16) ),
 * with associated data binding the version, the kind of value, the identity, the entry and the
 * field, so a ciphertext moved to another field or entry fails to decrypt.
 *
 * Only node:crypto and the `argon2` package; no I/O except the optional file lock store.
 */
import argon2 from 'argon2';
import { createCipheriv, createDecipheriv, createHmac, createPrivateKey, createPublicKey, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { inspect } from 'node:util';

// ---------------------------------------------------------------------------------------------
// Errors

/** Stable codes callers switch on. `pin_locked` and `encryption_missing` are the SPEC's own. */
export type CryptoErrorCode =
  | 'pin_locked' // PIN wrong 3 times (SPEC "Limits": wrong PIN attempts, client side)
  | 'encryption_missing' // the account has no uploaded encryption metadata yet
  | 'wrong_pin'
  | 'invalid_pin' // not 6 digits
  | 'wrong_recovery_key'
  | 'invalid_secret' // malformed recovery key / device secret
  | 'decrypt_failed' // tampered, swapped or foreign ciphertext, or metadata that does not fit
  | 'invalid_ciphertext' // not an `e2e::` string of a known version
  | 'invalid_input';

export class CryptoError extends Error {
  constructor(
    readonly code: CryptoErrorCode,
    message: string,
    /** For `wrong_pin`: attempts left before `pin_locked`. */
    readonly attemptsLeft?: number,
  ) {
    super(message);
    this.name = 'CryptoError';
  }
}

// ---------------------------------------------------------------------------------------------
// Constants

/** Format version, the first byte of every envelope. */
export const FORMAT_VERSION = 1;
export const E2E_PREFIX = 'e2e::';
/** The server's check of every ciphertext field (DECISIONS, last bullet). */
export const E2E_PATTERN = /^e2e::[A-Za-z0-9+/]+={0,2}$/;
/** SPEC "Limits": wrong PIN attempts (client side). */
export const MAX_PIN_ATTEMPTS = 3;
const PIN_PATTERN = /^\d{6}$/;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;
/** 160-bit secrets: 32 Crockford base32 characters. */
const SECRET_BYTES = 20;

/**
 * Argon2id parameters. The default follows RFC 9106 §4's second recommended option
 * (64 MiB, t=3, p=4 there; p=1 here because clients derive once, single-threaded). The
 * floor keeps a hostile or broken metadata document from downgrading the work factor below
 * OWASP's minimum (19 MiB, t=2).
 */
export interface KdfParams {
  memoryKiB: number;
  iterations: number;
  parallelism: number;
}
export const DEFAULT_KDF: KdfParams = { memoryKiB: 65536, iterations: 3, parallelism: 1 };
const KDF_FLOOR: KdfParams = { memoryKiB: 19456, iterations: 2, parallelism: 1 };
const KDF_CEILING: KdfParams = { memoryKiB: 4 * 1024 * 1024, iterations: 64, parallelism: 16 };

/** `argon2id:m=65536,t=3,p=1`, stored in the metadata's `kdf` field (not secret). */
export function formatKdf(p: KdfParams): string {
  return `argon2id:m=${p.memoryKiB},t=${p.iterations},p=${p.parallelism}`;
}

export function parseKdf(s: string | null | undefined): KdfParams {
  if (s == null) return DEFAULT_KDF;
  const m = /^argon2id:m=(\d{1,8}),t=(\d{1,3}),p=(\d{1,2})$/.exec(s);
  if (!m) throw new CryptoError('decrypt_failed', `Unknown key-derivation parameters: ${s}`);
  const p = { memoryKiB: Number(m[1]), iterations: Number(m[2]), parallelism: Number(m[3]) };
  checkKdf(p);
  return p;
}

function checkKdf(p: KdfParams): void {
  for (const k of ['memoryKiB', 'iterations', 'parallelism'] as const) {
    if (!Number.isInteger(p[k]) || p[k] < KDF_FLOOR[k] || p[k] > KDF_CEILING[k]) {
      throw new CryptoError('invalid_input', `Argon2id ${k} must be between ${KDF_FLOOR[k]} and ${KDF_CEILING[k]}.`);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Keys

const SECRET = Symbol('vault-key-bytes');

/**
 * The 32-byte data-encryption key of an account's vault. Opaque on purpose: it never shows up
 * in JSON, logs or `console.log` by accident. `exportBytes()` is there for a keychain.
 */
export class VaultKey {
  private readonly [SECRET]: Buffer;
  constructor(bytes: Uint8Array) {
    if (bytes.length !== KEY_BYTES) throw new CryptoError('invalid_input', 'A vault key is 32 bytes.');
    this[SECRET] = Buffer.from(bytes);
  }
  static generate(): VaultKey {
    return new VaultKey(randomBytes(KEY_BYTES));
  }
  exportBytes(): Buffer {
    return Buffer.from(this[SECRET]);
  }
  /** The account's X25519 public key (raw 32 bytes, base64): the `public_key` of the metadata. */
  publicKey(): string {
    return x25519PublicKey(hkdf(this[SECRET], Buffer.alloc(0), 'ais/v1/x25519'));
  }
  /** @internal the AES-256-GCM key fields are sealed under. */
  fieldKey(): Buffer {
    return hkdf(this[SECRET], Buffer.alloc(0), 'ais/v1/fields');
  }
  toJSON(): string {
    return '[VaultKey]';
  }
  [inspect.custom](): string {
    return 'VaultKey [redacted]';
  }
}

function hkdf(ikm: Uint8Array, salt: Uint8Array, info: string): Buffer {
  return Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from(info, 'utf8'), KEY_BYTES));
}

/** X25519 public key of a 32-byte seed (RFC 7748 §6.1; Node clamps the scalar). */
function x25519PublicKey(seed: Buffer): string {
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b656e04220420', 'hex'), seed]);
  const jwk = createPublicKey(createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' })).export({ format: 'jwk' });
  return Buffer.from(jwk.x as string, 'base64url').toString('base64');
}

function decodeSalt(salt: string): Buffer {
  const bytes = Buffer.from(salt, 'base64');
  if (bytes.length < 16 || bytes.toString('base64') !== salt) throw new CryptoError('invalid_input', 'The account salt must be base64 of at least 16 bytes.');
  return bytes;
}

// Secrets shown to people: 160 bits as 32 Crockford base32 characters in groups of four,
// after a prefix naming what they are (`RK1-` recovery key, `SK1-` device secret).
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

function encodeSecret(prefix: string, bytes: Buffer): string {
  let bits = 0;
  let value = 0;
  let out = '';
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += CROCKFORD[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
    value &= (1 << bits) - 1;
  }
  return `${prefix}-${out.match(/.{1,4}/g)!.join('-')}`;
}

function decodeSecret(prefix: string, text: string, what: string): Buffer {
  const clean = String(text).toUpperCase().replace(/[\s-]/g, '').replace(/[IL]/g, '1').replace(/O/g, '0');
  if (!clean.startsWith(prefix) || clean.length !== prefix.length + 32) throw new CryptoError('invalid_secret', `This is not a valid ${what}.`);
  let bits = 0;
  let value = 0;
  const out: number[] = [];
  for (const ch of clean.slice(prefix.length)) {
    const v = CROCKFORD.indexOf(ch);
    if (v < 0) throw new CryptoError('invalid_secret', `This is not a valid ${what}.`);
    value = (value << 5) | v;
    bits += 5;
    if (bits >= 8) {
      out.push((value >>> (bits - 8)) & 255);
      bits -= 8;
      value &= (1 << bits) - 1;
    }
  }
  return Buffer.from(out);
}

const RECOVERY_PREFIX = 'RK1';
const DEVICE_PREFIX = 'SK1';

/** A fresh device secret (`SK1-XXXX-...`): kept by the client, needed with the PIN. */
export function generateDeviceSecret(): string {
  return encodeSecret(DEVICE_PREFIX, randomBytes(SECRET_BYTES));
}

// ---------------------------------------------------------------------------------------------
// Envelope

export type PasswordField = 'username' | 'password' | 'notes';

/**
 * What a ciphertext is bound to (its associated data). A password entry's fields bind the
 * identity, the entry uuid (chosen by the client at create: POST /api/passwords/ takes an
 * optional `uuid`), the domain (so a server cannot relabel github.com's password as
 * evil.example) and the field name; a vault secret binds the identity and the key name.
 */
export type FieldBinding =
  | { kind: 'password'; identity: string; entry: string; domain: string; field: PasswordField }
  | { kind: 'secret'; identity: string; key: string };

type InternalBinding = FieldBinding | { kind: 'keywrap'; purpose: 'pin' | 'recovery'; salt: string };

function component(s: string): Buffer {
  const bytes = Buffer.from(s, 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32BE(bytes.length);
  return Buffer.concat([len, bytes]);
}

/** Associated data: `ais/e2e` ‖ version ‖ length-prefixed components (unambiguous, no separator tricks). */
export function associatedData(binding: InternalBinding, version = FORMAT_VERSION): Buffer {
  let parts: string[];
  switch (binding.kind) {
    case 'password':
      if (!['username', 'password', 'notes'].includes(binding.field)) throw new CryptoError('invalid_input', `Unknown field ${binding.field}.`);
      parts = ['password', binding.identity.toLowerCase(), binding.entry.toLowerCase(), binding.domain, binding.field];
      break;
    case 'secret':
      parts = ['secret', binding.identity.toLowerCase(), binding.key, 'value'];
      break;
    case 'keywrap':
      parts = ['keywrap', binding.purpose, binding.salt];
      break;
    default:
      throw new CryptoError('invalid_input', 'Unknown binding.');
  }
  return Buffer.concat([Buffer.from('ais/e2e', 'utf8'), Buffer.from([version]), ...parts.map(component)]);
}

/** @internal seals bytes; `nonce` is for the committed test vectors only (never reuse one). */
export function sealBytes(key: Buffer, plaintext: Uint8Array, binding: InternalBinding, nonce: Buffer = randomBytes(NONCE_BYTES)): string {
  if (nonce.length !== NONCE_BYTES) throw new CryptoError('invalid_input', 'A nonce is 12 bytes.');
  const cipher = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(associatedData(binding));
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return E2E_PREFIX + Buffer.concat([Buffer.from([FORMAT_VERSION]), nonce, body, cipher.getAuthTag()]).toString('base64');
}

/** @internal */
export function openBytes(key: Buffer, ciphertext: string, binding: InternalBinding): Buffer {
  if (typeof ciphertext !== 'string' || !E2E_PATTERN.test(ciphertext)) throw new CryptoError('invalid_ciphertext', 'Not an e2e:: ciphertext.');
  const raw = Buffer.from(ciphertext.slice(E2E_PREFIX.length), 'base64');
  if (raw.length < 1 + NONCE_BYTES + TAG_BYTES) throw new CryptoError('invalid_ciphertext', 'The ciphertext is truncated.');
  if (raw[0] !== FORMAT_VERSION) throw new CryptoError('invalid_ciphertext', `Unsupported ciphertext version ${raw[0]}.`);
  const nonce = raw.subarray(1, 1 + NONCE_BYTES);
  const tag = raw.subarray(raw.length - TAG_BYTES);
  const body = raw.subarray(1 + NONCE_BYTES, raw.length - TAG_BYTES);
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
    decipher.setAAD(associatedData(binding, raw[0]));
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(body), decipher.final()]);
  } catch {
    throw new CryptoError('decrypt_failed', 'The ciphertext does not decrypt: wrong key, tampered, or bound to another entry or field.');
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Encrypts one field value (any Unicode string, including the empty one) to `e2e::<base64>`. */
export function encryptField(key: VaultKey, plaintext: string, binding: FieldBinding): string {
  if (typeof plaintext !== 'string' || LONE_SURROGATE.test(plaintext)) {
    throw new CryptoError('invalid_input', 'The plaintext must be a well-formed Unicode string.');
  }
  return sealBytes(key.fieldKey(), Buffer.from(plaintext, 'utf8'), binding);
}

/** Decrypts a field; `decrypt_failed` when tampered, swapped or under another key. */
export function decryptField(key: VaultKey, ciphertext: string, binding: FieldBinding): string {
  const bytes = openBytes(key.fieldKey(), ciphertext, binding);
  try {
    // ignoreBOM: a value starting with U+FEFF is text like any other, kept as encrypted.
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new CryptoError('decrypt_failed', 'The plaintext is not UTF-8.');
  }
}

// ---------------------------------------------------------------------------------------------
// Key derivation

export interface DerivedKeys {
  /** Wraps the vault key. */
  kek: Buffer;
  /** Uploaded; lets a client tell a wrong PIN from a right one before unwrapping. */
  verifier: string;
}

/**
 * PIN + salt + device secret → KEK and verifier (the two-secret derivation at the top of
 * this file). Exported for the test vectors and for clients that cache nothing but need
 * to check a PIN.
 */
export async function deriveKeys(input: { pin: string; salt: string; deviceSecret: string; kdf?: KdfParams }): Promise<DerivedKeys> {
  if (typeof input.pin !== 'string' || !PIN_PATTERN.test(input.pin)) throw new CryptoError('invalid_pin', 'The PIN is 6 digits.');
  const salt = decodeSalt(input.salt);
  const secret = decodeSecret(DEVICE_PREFIX, input.deviceSecret, 'device secret');
  const kdf = input.kdf ?? DEFAULT_KDF;
  checkKdf(kdf);
  const a = await argon2.hash(input.pin, {
    type: argon2.argon2id,
    version: 0x13,
    raw: true,
    salt,
    memoryCost: kdf.memoryKiB,
    timeCost: kdf.iterations,
    parallelism: kdf.parallelism,
    hashLength: KEY_BYTES,
  });
  const b = hkdf(secret, salt, 'ais/v1/device-secret');
  const m = Buffer.alloc(KEY_BYTES);
  for (let i = 0; i < KEY_BYTES; i++) m[i] = a[i] ^ b[i];
  const kek = hkdf(m, salt, 'ais/v1/kek');
  const verifier = createHmac('sha256', hkdf(m, salt, 'ais/v1/verifier')).update('ais/v1/pin-verifier').digest('base64');
  m.fill(0);
  a.fill(0);
  return { kek, verifier };
}

function recoveryKek(recoveryKey: string, salt: string): Buffer {
  return hkdf(decodeSecret(RECOVERY_PREFIX, recoveryKey, 'recovery key'), decodeSalt(salt), 'ais/v1/recovery');
}

// ---------------------------------------------------------------------------------------------
// PIN attempt counter, persisted by the client

export interface LockState {
  failures: number;
}

/** Where the client keeps its wrong-PIN counter (one store per account). */
export interface LockStore {
  read(): Promise<LockState>;
  write(state: LockState): Promise<void>;
}

export function memoryLockStore(initial: LockState = { failures: 0 }): LockStore {
  let state = { ...initial };
  return {
    read: async () => ({ ...state }),
    write: async (s) => {
      state = { ...s };
    },
  };
}

/** A JSON file (mode 0600), replaced atomically; a missing or unreadable file counts as zero failures. */
export function fileLockStore(file: string): LockStore {
  return {
    async read() {
      try {
        const parsed = JSON.parse(readFileSync(file, 'utf8')) as Partial<LockState>;
        const n = Number(parsed.failures);
        return { failures: Number.isInteger(n) && n >= 0 ? n : MAX_PIN_ATTEMPTS };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { failures: 0 };
        // A corrupt counter must not reset the lock: treat it as locked.
        return { failures: MAX_PIN_ATTEMPTS };
      }
    },
    async write(state) {
      mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
      const tmp = `${file}.${process.pid}.tmp`;
      writeFileSync(tmp, JSON.stringify({ failures: state.failures, updated_at: new Date().toISOString() }), { mode: 0o600 });
      renameSync(tmp, file);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Flows

/** GET /api/encryption/ as the server answers it. */
export interface EncryptionMetadata {
  salt: string;
  public_key: string | null;
  verifier: string | null;
  wrapped_key?: string | null;
  recovery_wrapped_key?: string | null;
  kdf?: string | null;
}

/** Body of POST /api/encryption/ (first setup). */
export interface EncryptionUpload {
  public_key: string;
  verifier: string;
  wrapped_key: string;
  recovery_wrapped_key: string;
  kdf: string;
}

/** Body of PUT /api/encryption/ (PIN change or recovery: a re-wrap; public_key stays). */
export interface EncryptionRewrap {
  verifier: string;
  wrapped_key: string;
  recovery_wrapped_key?: string;
  kdf: string;
}

/**
 * First-time setup: a random vault key, wrapped under the PIN-and-device-secret KEK and
 * under a fresh recovery key. Show `recoveryKey` once; keep `deviceSecret` in the client's
 * credential store; POST `upload` to /api/encryption/.
 */
export async function setupEncryption(input: { pin: string; salt: string; deviceSecret?: string; kdf?: KdfParams }): Promise<{
  upload: EncryptionUpload;
  recoveryKey: string;
  deviceSecret: string;
  vaultKey: VaultKey;
}> {
  const deviceSecret = input.deviceSecret ?? generateDeviceSecret();
  const kdf = input.kdf ?? DEFAULT_KDF;
  const { kek, verifier } = await deriveKeys({ pin: input.pin, salt: input.salt, deviceSecret, kdf });
  const vaultKey = VaultKey.generate();
  const recoveryKey = encodeSecret(RECOVERY_PREFIX, randomBytes(SECRET_BYTES));
  const raw = vaultKey.exportBytes();
  const upload: EncryptionUpload = {
    public_key: vaultKey.publicKey(),
    verifier,
    wrapped_key: sealBytes(kek, raw, { kind: 'keywrap', purpose: 'pin', salt: input.salt }),
    recovery_wrapped_key: sealBytes(recoveryKek(recoveryKey, input.salt), raw, { kind: 'keywrap', purpose: 'recovery', salt: input.salt }),
    kdf: formatKdf(kdf),
  };
  raw.fill(0);
  kek.fill(0);
  return { upload, recoveryKey, deviceSecret, vaultKey };
}

function requireMetadata(metadata: EncryptionMetadata | null | undefined): asserts metadata is EncryptionMetadata & { public_key: string; verifier: string; wrapped_key: string } {
  if (!metadata || !metadata.public_key || !metadata.verifier || !metadata.wrapped_key) {
    throw new CryptoError('encryption_missing', 'No PIN has been set up for this account yet.');
  }
}

/** Unwraps and checks the vault key against the published public key. */
function unwrap(kek: Buffer, wrapped: string, binding: InternalBinding, publicKey: string): VaultKey {
  const key = new VaultKey(openBytes(kek, wrapped, binding));
  const expected = Buffer.from(publicKey, 'utf8');
  const actual = Buffer.from(key.publicKey(), 'utf8');
  if (expected.length !== actual.length || !timingSafeEqual(expected, actual)) {
    throw new CryptoError('decrypt_failed', 'The vault key does not match the account public key.');
  }
  return key;
}

/**
 * PIN + device secret → the vault key. A wrong PIN is told by the verifier; the third wrong
 * PIN in a row (counted in `lockStore`) answers `pin_locked`, and so does every later call
 * until a recovery (or a successful unlock after the caller reset the store) clears it.
 */
export function unlock(input: { pin: string; deviceSecret: string; metadata: EncryptionMetadata | null | undefined; lockStore: LockStore }): Promise<VaultKey> {
  // Attempts on one store take turns: concurrent wrong PINs each read the same count and
  // were all let through (six guesses, one failure counted).
  const turn = (unlockTurns.get(input.lockStore) ?? Promise.resolve()).catch(() => undefined).then(() => unlockOnce(input));
  unlockTurns.set(input.lockStore, turn);
  return turn;
}
const unlockTurns = new WeakMap<LockStore, Promise<unknown>>();

async function unlockOnce(input: { pin: string; deviceSecret: string; metadata: EncryptionMetadata | null | undefined; lockStore: LockStore }): Promise<VaultKey> {
  const { metadata, lockStore } = input;
  requireMetadata(metadata);
  const state = await lockStore.read();
  if (state.failures >= MAX_PIN_ATTEMPTS) throw new CryptoError('pin_locked', 'Too many wrong PINs; unlock with the recovery key.');
  // Counted before the (slow) check and cleared after a right PIN: another process guessing
  // meanwhile, or one killed during the check, cannot skip the count.
  const failures = state.failures + 1;
  await lockStore.write({ failures });
  let derived: DerivedKeys;
  try {
    derived = await deriveKeys({ pin: input.pin, salt: metadata.salt, deviceSecret: input.deviceSecret, kdf: parseKdf(metadata.kdf) });
  } catch (err) {
    await lockStore.write({ failures: state.failures }); // not a guess: a malformed PIN or secret
    throw err;
  }
  const { kek, verifier } = derived;
  const expected = Buffer.from(metadata.verifier, 'utf8');
  const actual = Buffer.from(verifier, 'utf8');
  if (expected.length !== actual.length || !timingSafeEqual(expected, actual)) {
    if (failures >= MAX_PIN_ATTEMPTS) throw new CryptoError('pin_locked', 'Wrong PIN, 3 times: locked; unlock with the recovery key.');
    throw new CryptoError('wrong_pin', 'Wrong PIN.', MAX_PIN_ATTEMPTS - failures);
  }
  await lockStore.write({ failures: 0 });
  try {
    return unwrap(kek, metadata.wrapped_key, { kind: 'keywrap', purpose: 'pin', salt: metadata.salt }, metadata.public_key);
  } finally {
    kek.fill(0);
  }
}

async function rewrap(vaultKey: VaultKey, pin: string, salt: string, deviceSecret: string, kdf: KdfParams): Promise<EncryptionRewrap> {
  const { kek, verifier } = await deriveKeys({ pin, salt, deviceSecret, kdf });
  const raw = vaultKey.exportBytes();
  const wrapped_key = sealBytes(kek, raw, { kind: 'keywrap', purpose: 'pin', salt });
  raw.fill(0);
  kek.fill(0);
  return { verifier, wrapped_key, kdf: formatKdf(kdf) };
}

/**
 * Forgotten PIN: the recovery key unwraps the vault key, which is re-wrapped under the new
 * PIN. Pass the device secret you still have to keep other devices working; without one a
 * new device secret is made (other devices then need it). PUT `upload` to /api/encryption/.
 * Entries are not re-encrypted: the vault key does not change.
 */
export async function recover(input: {
  recoveryKey: string;
  newPin: string;
  metadata: EncryptionMetadata | null | undefined;
  deviceSecret?: string;
  lockStore?: LockStore;
  kdf?: KdfParams;
}): Promise<{ upload: EncryptionRewrap; vaultKey: VaultKey; deviceSecret: string }> {
  const { metadata } = input;
  requireMetadata(metadata);
  if (!metadata.recovery_wrapped_key) throw new CryptoError('encryption_missing', 'This account has no recovery key on file.');
  if (!PIN_PATTERN.test(input.newPin)) throw new CryptoError('invalid_pin', 'The PIN is 6 digits.');
  const rkek = recoveryKek(input.recoveryKey, metadata.salt);
  let vaultKey: VaultKey;
  try {
    vaultKey = unwrap(rkek, metadata.recovery_wrapped_key, { kind: 'keywrap', purpose: 'recovery', salt: metadata.salt }, metadata.public_key);
  } catch (err) {
    if (err instanceof CryptoError && err.code === 'decrypt_failed') throw new CryptoError('wrong_recovery_key', 'The recovery key does not open this vault.');
    throw err;
  }
  const deviceSecret = input.deviceSecret ?? generateDeviceSecret();
  const upload = await rewrap(vaultKey, input.newPin, metadata.salt, deviceSecret, input.kdf ?? parseKdf(metadata.kdf));
  await input.lockStore?.write({ failures: 0 });
  return { upload, vaultKey, deviceSecret };
}

/**
 * New PIN for a known PIN (a wrong old PIN counts toward the lock). Only the key wrap and
 * the verifier change; PUT `upload` to /api/encryption/.
 */
export async function changePin(input: {
  pin: string;
  newPin: string;
  deviceSecret: string;
  metadata: EncryptionMetadata | null | undefined;
  lockStore: LockStore;
  kdf?: KdfParams;
}): Promise<{ upload: EncryptionRewrap; vaultKey: VaultKey }> {
  if (!PIN_PATTERN.test(input.newPin)) throw new CryptoError('invalid_pin', 'The PIN is 6 digits.');
  const vaultKey = await unlock({ pin: input.pin, deviceSecret: input.deviceSecret, metadata: input.metadata, lockStore: input.lockStore });
  const metadata = input.metadata as EncryptionMetadata;
  const upload = await rewrap(vaultKey, input.newPin, metadata.salt, input.deviceSecret, input.kdf ?? parseKdf(metadata.kdf));
  return { upload, vaultKey };
}
