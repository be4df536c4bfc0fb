/**
 * The service's one way to sign with its HMAC key (DATA_DIR/keys/hmac.key) and to compare
 * secrets. Every signed value (verification and reset links, CSRF tokens, sealed cookies,
 * upload URLs, device user codes) names its purpose first, so a signature made for one use
 * never verifies as another.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

/** HMAC-SHA256 over the purpose and the parts, one per line; base64url. */
export function macOf(key: Buffer, purpose: string, ...parts: string[]): string {
  return createHmac('sha256', key).update([purpose, ...parts].join('\n')).digest('base64url');
}

/**
 * Constant-time equality of a presented secret and the expected one: both are hashed first,
 * so neither their content nor their length shows in the time it takes.
 */
export function sameSecret(presented: string, expected: string): boolean {
  const a = createHash('sha256').update(presented, 'utf8').digest();
  const b = createHash('sha256').update(expected, 'utf8').digest();
  return timingSafeEqual(a, b);
}
