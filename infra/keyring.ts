/**
 * Long-lived server secrets kept under DATA_DIR/keys (0600): the EdDSA key that signs
 * JWTs (published at /.well-known/jwks.json) and an HMAC key for signed links (email
 * verification, password reset, upload URLs). Created on first start, reused after.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, writeFileSync, existsSync, renameSync } from 'node:fs';
import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, createHash, type KeyObject } from 'node:crypto';
import path from 'node:path';

export interface KeyRing {
  signingKey: KeyObject;
  verifyKey: KeyObject;
  kid: string;
  /** Public JWK set for /.well-known/jwks.json. */
  jwks: { keys: Record<string, unknown>[] };
  hmacKey: Buffer;
}

/**
 * Written durably before first use (file, then the directory entry): tokens signed with a
 * key that a power loss then took, or a key file left empty, would end every session or
 * keep the service from starting.
 */
function writeSecret(file: string, content: string | Buffer, tmp = `${file}.tmp`): void {
  const fd = openSync(tmp, 'w', 0o600);
  try {
    writeFileSync(fd, content); // loops until all is written (one writeSync may write part)
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  const dir = openSync(path.dirname(file), 'r');
  try {
    fsyncSync(dir);
  } finally {
    closeSync(dir);
  }
}

export function loadKeyRing(dataDir: string): KeyRing {
  const dir = path.join(dataDir, 'keys');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const signingFile = path.join(dir, 'jwt-ed25519.pem');
  if (!existsSync(signingFile)) {
    const { privateKey } = generateKeyPairSync('ed25519');
    writeSecret(signingFile, privateKey.export({ type: 'pkcs8', format: 'pem' }) as string);
  }
  const signingKey = createPrivateKey(readFileSync(signingFile));
  const verifyKey = createPublicKey(signingKey);
  const jwk = verifyKey.export({ format: 'jwk' }) as Record<string, unknown>;
  const kid = createHash('sha256').update(JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x })).digest('base64url').slice(0, 16);

  const hmacFile = path.join(dir, 'hmac.key');
  if (!existsSync(hmacFile)) writeSecret(hmacFile, randomBytes(32));
  const hmacKey = readFileSync(hmacFile);

  return { signingKey, verifyKey, kid, jwks: { keys: [{ ...jwk, kid, alg: 'EdDSA', use: 'sig' }] }, hmacKey };
}

/**
 * Records the address tokens are issued for (PUBLIC_URL) next to the keys that sign them, and
 * returns the one recorded before when it differs: tokens name their issuer, so after a
 * change every token signed before is refused, which an operator should hear about.
 */
export function recordIssuer(dataDir: string, issuer: string): string | null {
  const file = path.join(dataDir, 'keys', 'issuer');
  const before = existsSync(file) ? readFileSync(file, 'utf8').trim() : null;
  if (before === issuer) return null;
  try {
    // A temporary file of this process's own: cluster processes share keys/ and may start together.
    writeSecret(file, `${issuer}\n`, `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  } catch {
    // A keys/ this process may not write (a mounted secret): only the warning is lost, and only for later starts.
  }
  return before;
}
