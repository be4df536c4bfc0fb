/**
 * JWTs (jose, EdDSA). Access tokens live ACCESS_TOKEN_TTL (1 h); refresh tokens
 * REFRESH_TOKEN_TTL and rotate (RFC 9700 §4.14.2): each refresh spends the token and
 * mints the next of its family; presenting a spent one revokes the family.
 * `token_type` keeps the two kinds from standing in for each other.
 *
 * A token's session must be in the event log, started for the token's user: a DATA_DIR
 * restored from a backup shares the key ring of the service it was copied from, and
 * numbers again the accounts that service made after the copy; the tokens it signed for
 * them name sessions this log never had.
 */
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import type { KeyRing } from '../../infra/keyring.js';
import { newId } from '../kernel/ids.js';
import { tokenExpired, tokenNotValid } from '../gateway/errors.js';
import { loadStream } from '../kernel/command.js';
import type { EventStore } from '../../infra/ports/event-store.js';
import { sessionEvolver, sessionStream } from './events.js';

export type TokenType = 'access' | 'refresh';

export interface TokenClaims {
  userPk: number;
  tokenType: TokenType;
  jti: string;
  sessionId: string;
  identity?: string;
  exp: number;
  iat: number;
}

export interface TokenServiceOptions {
  keys: KeyRing;
  issuer: string;
  accessTtl: number;
  refreshTtl: number;
  events: EventStore;
}

export function createTokenService(opts: TokenServiceOptions) {
  const { keys, issuer } = opts;

  async function sign(type: TokenType, claims: { userPk: number; sessionId: string; identity?: string | null; jti?: string }, ttl: number) {
    const jti = claims.jti ?? newId();
    const now = Math.floor(Date.now() / 1000);
    const token = await new SignJWT({
      token_type: type,
      // `sub` is the pk as text (RFC 7519: a string); `user_id` is the pk itself, as
      // djangorestframework-simplejwt names it, for clients that read the number.
      user_id: claims.userPk,
      sid: claims.sessionId,
      ...(claims.identity ? { identity: claims.identity } : {}),
    })
      .setProtectedHeader({ alg: 'EdDSA', kid: keys.kid, typ: 'JWT' })
      .setSubject(String(claims.userPk))
      .setIssuer(issuer)
      .setIssuedAt(now)
      .setExpirationTime(now + ttl)
      .setJti(jti)
      .sign(keys.signingKey);
    return { token, jti, expiresAt: new Date((now + ttl) * 1000).toISOString() };
  }

  /**
   * Tokens already verified, by their exact text. A token's signature check gives the same
   * answer every time, so only the expiry and type are checked again on a hit; this takes
   * the Ed25519 verification (the largest cost of an authenticated request) off the hot path.
   */
  const verified = new Map<string, TokenClaims>();
  const VERIFIED_CACHE_SIZE = 10_000;

  /** Verifies signature, issuer, expiry, type and session. Expired → 401 token_expired; anything else → token_not_valid. */
  async function verify(token: string, expected: TokenType | 'any'): Promise<TokenClaims> {
    const cached = verified.get(token);
    if (cached) {
      if (cached.exp * 1000 <= Date.now()) {
        verified.delete(token);
        throw tokenExpired('Token is expired');
      }
      if (expected !== 'any' && cached.tokenType !== expected) throw tokenNotValid('Token has wrong type');
      return cached;
    }
    const claims = await verifySignature(token, expected);
    const { state: session } = await loadStream(opts.events, sessionStream(claims.sessionId), sessionEvolver);
    if (!session.exists || session.userPk !== claims.userPk) throw tokenNotValid('Token is invalid');
    if (verified.size >= VERIFIED_CACHE_SIZE) verified.delete(verified.keys().next().value!); // oldest first
    verified.set(token, claims);
    return claims;
  }

  async function verifySignature(token: string, expected: TokenType | 'any'): Promise<TokenClaims> {
    let payload;
    try {
      ({ payload } = await jwtVerify(token, keys.verifyKey, { issuer, algorithms: ['EdDSA'], requiredClaims: ['exp', 'iat', 'sub', 'jti'] })); // we always set them: a token without is none of ours
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw tokenExpired('Token is expired');
      throw tokenNotValid('Token is invalid');
    }
    const type = payload.token_type;
    if ((type !== 'access' && type !== 'refresh') || (expected !== 'any' && type !== expected)) {
      throw tokenNotValid('Token has wrong type');
    }
    const userPk = Number(payload.sub);
    if (!Number.isSafeInteger(userPk) || typeof payload.jti !== 'string' || typeof payload.sid !== 'string') {
      throw tokenNotValid('Token is invalid');
    }
    return {
      userPk,
      tokenType: type,
      jti: payload.jti,
      sessionId: payload.sid,
      identity: typeof payload.identity === 'string' ? payload.identity : undefined,
      exp: payload.exp ?? 0,
      iat: payload.iat ?? 0,
    };
  }

  return {
    issueAccess: (c: { userPk: number; sessionId: string; identity?: string | null }) => sign('access', c, opts.accessTtl),
    issueRefresh: (c: { userPk: number; sessionId: string; identity?: string | null; jti: string }) => sign('refresh', c, opts.refreshTtl),
    verify,
    refreshTtl: opts.refreshTtl,
  };
}

export type TokenService = ReturnType<typeof createTokenService>;
