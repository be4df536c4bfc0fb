/**
 * One error type for every answer that is not a success. The error middleware (first in
 * the chain) turns it into the wire shapes of DECISIONS "Wire conventions":
 * `{detail, code?}`, or for validation `{field: [messages]}`.
 */

/** Stable codes callers may switch on. */
export type ErrorCode =
  | 'invalid'
  | 'parse_error'
  | 'not_authenticated'
  | 'token_expired'
  | 'token_not_valid'
  | 'permission_denied'
  | 'identity_required'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'payment_required'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'throttled'
  | 'projection_lag'
  | 'service_unavailable'
  | 'server_error'
  | (string & {}); // contexts add their own (e.g. device_code_expired)

export type FieldErrors = Record<string, string[]>;

export class ApiError extends Error {
  /** True: safe to show `detail` to the client. 5xx details are replaced by a generic one. */
  readonly expose: boolean;
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    readonly detail: string,
    readonly fields?: FieldErrors,
    readonly headers?: Record<string, string>,
    /** Extra members of the body (e.g. `plan_required` on a 402). */
    readonly extra?: Record<string, unknown>,
  ) {
    super(detail);
    this.name = 'ApiError';
    // Deliberate 5xx answers (503 with Retry-After) say why; an unexpected 500 says nothing.
    this.expose = status !== 500;
  }

  /** The JSON body for this error. */
  body(): Record<string, unknown> {
    if (this.fields) return { ...this.fields };
    return { detail: this.expose ? this.detail : 'A server error occurred.', code: this.code, ...(this.extra ?? {}) };
  }
}

export const badRequest = (fields: FieldErrors) => new ApiError(400, 'invalid', 'Invalid input.', fields);
export const fieldError = (field: string, message: string) => badRequest({ [field]: [message] });
/** RFC 6750 §3 / RFC 9110 §11.6.1: a 401 names the scheme to use (Bearer, not Basic: no browser login prompt). */
const challenge = (error?: string) => ({ 'WWW-Authenticate': error ? `Bearer realm="api", error="${error}"` : 'Bearer realm="api"' });
export const notAuthenticated = (detail = 'Authentication credentials were not provided.') =>
  new ApiError(401, 'not_authenticated', detail, undefined, challenge());
export const tokenNotValid = (detail = 'Given token not valid for any token type') =>
  new ApiError(401, 'token_not_valid', detail, undefined, challenge('invalid_token'));
export const tokenExpired = (detail = 'Token is expired') => new ApiError(401, 'token_expired', detail, undefined, challenge('invalid_token'));
export const forbidden = (detail = 'You do not have permission to perform this action.', code: ErrorCode = 'permission_denied') =>
  new ApiError(403, code, detail);
export const notFound = (detail = 'Not found.') => new ApiError(404, 'not_found', detail);
/** What the 403 for an identity of another account says (SPEC "Authentication" 8), wherever it is found out. */
export const OTHER_ACCOUNTS_IDENTITY = 'This identity belongs to another account.';
export const otherAccountsIdentity = () => forbidden(OTHER_ACCOUNTS_IDENTITY);
export const conflict = (detail: string, code: ErrorCode = 'conflict') => new ApiError(409, code, detail);
export const throttled = (retryAfterSeconds: number, detail?: string) => {
  const wait = Math.max(1, Math.ceil(retryAfterSeconds));
  return new ApiError(429, 'throttled', detail ?? `Request was throttled. Expected available in ${wait} seconds.`, undefined, {
    'Retry-After': String(wait),
  });
};

/** A request that held reservations too long to rely on them (kernel/platform.ts `outlivedReservations`): nothing was applied. */
export const tookTooLong = (what: string) =>
  new ApiError(503, 'service_unavailable', `${what} took too long to complete and was not applied; retry it.`, undefined, { 'Retry-After': '1' });
