/**
 * The TypeScript SDK: one typed method per endpoint of SPEC "Endpoints" (wire types generated
 * from schemas/*.json into ./types.gen.ts), with the client behaviour SPEC "Errors" asks for:
 *
 * - retries with exponential backoff and full jitter on network errors and 5xx, for
 *   idempotent methods (GET, HEAD, PUT, DELETE) and mail sends, which carry an
 *   Idempotency-Key (the service answers a repeat with the first send's message); no other
 *   POST is ever sent twice;
 * - 429 (any method: the server did not act) waits for `Retry-After`, then retries, unless
 *   the server asks for longer than `maxDelayMs` (a send limit for the hour): then the
 *   error is thrown at once, with its `Retry-After`, instead of retrying too early;
 * - 401 `token_expired` with a refresh token held: one refresh (rotating, DECISIONS "Auth"),
 *   then ONE retry of the request; `onTokens` is told about the new pair so it can be saved;
 * - identity selection per client (`X-Service-Identity`), `withIdentity(uuid)` for another;
 * - every non-2xx answer becomes an {@link ApiRequestError} carrying the spec's `code`.
 *
 * No dependency beyond the platform's `fetch`.
 */
import { EventStream, type EventStreamOptions } from './events.js';
import { ANSWER_SHAPES } from './types.gen.js';

import type {
  AccountsBindResult,
  AccountsLogin,
  AccountsRefreshResult,
  AccountsRegister,
  AccountsSession,
  AccountsTokenPair,
  AccountsUser,
  AccountsUserPatch,
  BillingSubscription,
  CommonDetail,
  DeviceDeviceAuthorization,
  DeviceDeviceToken,
  DeviceDeviceTokenError,
  IdentitiesIdentity,
  IdentitiesIdentityCreate,
  IdentitiesIdentityPatch,
  KeysIdentityKey,
  KeysIdentityKeyCreated,
  KeysManagementKey,
  KeysManagementKeyCreated,
  KeysWhoami,
  MailComposeRequest,
  MailEmailMessage,
  MailEmailThread,
  MailEmailThreadDetail,
  MailPresignRequest,
  MailPresignResponse,
  MailReplyRequest,
  SmsConversation,
  SmsConversationDetail,
  SmsMessage,
  SmsPhone,
  VaultEncryptionMetadata,
  VaultEncryptionRewrap,
  VaultEncryptionUpload,
  VaultGeneratedPassword,
  VaultPasswordCreate,
  VaultPasswordEntry,
  VaultPasswordPut,
  VaultSecret,
} from './types.gen.js';

// ---------------------------------------------------------------------------------------------
// Types: the wire shapes come from ./types.gen.ts, generated from the server's schemas/*.json
// (`npm run gen:sdk-types`). The short names below are the SDK's historical names for them.

export type User = AccountsUser;
export type TokenPair = AccountsTokenPair;
export type DeviceAuthorization = DeviceDeviceAuthorization;
export type DeviceTokens = DeviceDeviceToken;
/** Non-success answers of the device token endpoint that mean "poll again" (RFC 8628 §3.5). */
export type DevicePending = { error: Extract<DeviceDeviceTokenError['error'], 'authorization_pending' | 'slow_down'> };
export type Identity = IdentitiesIdentity;
export type IdentityCreate = IdentitiesIdentityCreate;
export type IdentityUpdate = IdentitiesIdentityPatch;
export type ManagementKey = KeysManagementKey;
export type IdentityKey = KeysIdentityKey;
/** Create answers carry the full key once, in `key` (DECISIONS "Auth"). */
export type CreatedManagementKey = KeysManagementKeyCreated;
export type CreatedIdentityKey = KeysIdentityKeyCreated;
export type WhoAmI = KeysWhoami;
export type Subscription = BillingSubscription;
export type EmailThread = MailEmailThread;
export type EmailThreadDetail = MailEmailThreadDetail;
export type EmailMessage = MailEmailMessage;
export type Compose = MailComposeRequest;
export type Reply = MailReplyRequest;
export type PresignRequest = MailPresignRequest;
export type Presigned = MailPresignResponse;
export type { SmsConversation, SmsConversationDetail, SmsMessage, VaultSecret };
export type Phone = SmsPhone;
export type PasswordEntry = VaultPasswordEntry;
export type PasswordWrite = VaultPasswordCreate;
export type PasswordReplace = VaultPasswordPut;
export type EncryptionMetadataWire = VaultEncryptionMetadata;
export type Tokens = AccountsRefreshResult;
export type Session = AccountsSession;

/** A file to attach (SDK input, not a wire shape). */
export interface Attachment {
  filename: string;
  content_type?: string;
  data: Uint8Array;
}
export interface ListOptions {
  limit?: number;
  cursor?: string;
  [query: string]: string | number | boolean | undefined;
}

// ---------------------------------------------------------------------------------------------
// Errors

/** A non-2xx answer. `code` is the body's `code` (or RFC 8628 `error`), e.g. `token_expired`. */
export class ApiRequestError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | undefined,
    readonly detail: string,
    /** Validation errors (400): field name → messages. */
    readonly fields: Record<string, string[]> | undefined,
    readonly body: unknown,
    /** Seconds the service asked to wait (`Retry-After` of a 429 or 503), if it said. */
    readonly retryAfter?: number,
  ) {
    super(`${status}${code ? ` ${code}` : ''}: ${detail}`);
    this.name = 'ApiRequestError';
  }
}

/** The request never got an answer (after the retries). */
export class NetworkError extends Error {
  constructor(message: string, override readonly cause?: unknown) {
    super(message);
    this.name = 'NetworkError';
  }
}

/**
 * A successful answer that is not this API's: an HTML page, an empty body, or JSON of another
 * shape, from whatever answers at the address the client was given (a web server, a proxy's
 * sign-in page, another service). Never retried: asking again gets the same.
 */
export class UnexpectedResponseError extends Error {
  readonly code = 'unexpected_response';
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'UnexpectedResponseError';
  }

  /**
   * `<base> answered GET /api/x/ with <what>, ...`: the call, what came (by default the
   * answer's content type, in words), and the likely cause.
   */
  static of(baseUrl: string, res: Response, method: string, path: string, what = contentTypeInWords(res)): UnexpectedResponseError {
    const where = `${method.toUpperCase()} ${new URL(path, 'http://x').pathname}`;
    return new UnexpectedResponseError(res.status, `${baseUrl} answered ${where} with ${what}, not with this service's API: is ${baseUrl} the service's address?`);
  }
}

/** What an operation of the schemas answers: a list or not and the field naming its object, or no body. */
type AnswerShape = { list: boolean; field: string | null } | { none: true };

/** `ANSWER_SHAPES` with each path template in segments (`{uuid}` is any one segment). */
const SHAPES = Object.entries(ANSWER_SHAPES).map(([key, shape]) => {
  const [method, template] = key.split(' ');
  const segments = template.split('/').slice(1);
  return { method, segments, params: segments.filter((s) => s.startsWith('{')).length, shape };
});

/** An answer's content type, lower case, without parameters ('' when it has none). */
export const contentTypeOf = (res: Response): string => res.headers.get('content-type')?.split(';')[0].trim().toLowerCase() ?? '';

/** Statuses a proxy in front of the service answers by itself, meaning what they say. */
const PROXY_STATUSES = new Set([408, 413, 429]);

const isJson = (res: Response): boolean => /^application\/([\w.-]+\+)?json$/.test(contentTypeOf(res));

/** An answer's content type in words, for an answer of the wrong one. */
function contentTypeInWords(res: Response): string {
  const type = contentTypeOf(res);
  const what = type === 'text/html' ? 'an HTML page' : type ? `a ${type} document` : 'a body of no content type';
  return res.ok ? what : `${what} (HTTP ${res.status})`;
}

const anotherShape = (shape: { list: boolean; field: string | null }): string => `JSON of another shape (${shape.list ? 'a list of objects' : 'an object'}${shape.field ? ` with "${shape.field}"` : ''} expected)`;

/**
 * The shape of what `method` on `path` (its query aside) answers, or undefined for a path
 * outside the schemas. The path may sit under a prefix (a service behind a proxy path); a
 * literal segment wins over a template's (`compose/` is not an `{id}/`).
 */
function answerShape(method: string, path: string): AnswerShape | undefined {
  const parts = new URL(path, 'http://x').pathname.split('/');
  let best: (typeof SHAPES)[number] | undefined;
  for (const s of SHAPES) {
    if (s.method !== method || s.segments.length > parts.length) continue;
    const tail = parts.slice(parts.length - s.segments.length);
    if (!s.segments.every((t, i) => (t.startsWith('{') ? tail[i] !== '' : t === tail[i]))) continue;
    if (!best || s.params < best.params) best = s;
  }
  return best?.shape;
}

/** Why fetch failed, in words: undici says only "fetch failed" and keeps the reason in `cause`. */
function networkReason(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  const known: Record<string, string> = {
    ECONNREFUSED: 'connection refused (is the service running?)',
    ENOTFOUND: 'host not found',
    EAI_AGAIN: 'host name lookup failed',
    ECONNRESET: 'connection reset',
    ETIMEDOUT: 'timed out',
    UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
    UND_ERR_SOCKET: 'connection closed',
  };
  if (cause?.code && known[cause.code]) return known[cause.code];
  return cause?.message ?? (err as Error)?.message ?? String(err);
}

async function toError(res: Response): Promise<ApiRequestError> {
  const text = await res.text().catch(() => '');
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    /* not JSON */
  }
  let code: string | undefined;
  let detail = res.statusText || `HTTP ${res.status}`;
  let fields: Record<string, string[]> | undefined;
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const b = body as Record<string, unknown>;
    if (typeof b.code === 'string') code = b.code;
    else if (typeof b.error === 'string') code = b.error;
    if (typeof b.detail === 'string') detail = b.detail;
    else if (typeof b.error_description === 'string') detail = b.error_description;
    const f = Object.entries(b).filter(([, v]) => Array.isArray(v) && v.every((m) => typeof m === 'string'));
    if (f.length > 0) {
      fields = Object.fromEntries(f) as Record<string, string[]>;
      if (typeof b.detail !== 'string') detail = f.map(([k, v]) => `${k}: ${(v as string[]).join(' ')}`).join('; ');
    }
  } else if (typeof body === 'string' && body) {
    // A page (a proxy's 502) is said as such, not pasted into a message.
    detail = contentTypeOf(res) === 'text/html' ? `${detail} (an HTML page)` : body.slice(0, 300);
  }
  const wait = retryAfterMs(res.headers.get('retry-after'));
  return new ApiRequestError(res.status, code, detail, fields, body, wait === null ? undefined : Math.ceil(wait / 1000));
}

// ---------------------------------------------------------------------------------------------
// Client

export interface ClientOptions {
  /** The service's {base_url}, e.g. `http://localhost:8000`. */
  baseUrl: string;
  /** A JWT access token. */
  token?: string;
  managementKey?: string;
  identityKey?: string;
  /** With `token`: refreshed automatically on 401 `token_expired`. */
  refreshToken?: string;
  /** Default identity (sent as X-Service-Identity). */
  identity?: string;
  fetch?: typeof fetch;
  /** Called after every refresh with the new pair (persist it). */
  onTokens?: (tokens: Tokens) => void | Promise<void>;
  /**
   * For clients whose tokens are shared by several processes (the CLI's config file): runs
   * each refresh under a lock those processes share, and tells the pair stored now. A pair
   * another process rotated meanwhile is adopted instead of sending the spent refresh token,
   * which would revoke the whole family (RFC 9700 reuse detection).
   */
  sharedTokens?: { lock<T>(work: () => Promise<T>): Promise<T>; stored(): Tokens | null };
  /** Retries after the first attempt (default 3). */
  retries?: number;
  /** First backoff step in ms (default 250); doubles each attempt, full jitter. */
  backoffMs?: number;
  /** Cap on one wait, in ms, including Retry-After (default 30 s). */
  maxDelayMs?: number;
  /**
   * Gives up on an attempt whose answer has not begun after this long, ms (default: none; a
   * body being read is not cut). Applies to calls made without their own `signal` (the event
   * stream always has one) and to the token refresh; a timed-out GET is retried like a cut
   * connection, a POST (the refresh included) is not.
   * Keep it above DEVICE_WAIT_MAX when long-polling the device flow.
   */
  timeoutMs?: number;
  userAgent?: string;
}

export interface RequestOptions {
  body?: unknown;
  query?: Record<string, string | number | boolean | undefined>;
  /** Override the identity header: a uuid, or `false` to send none. */
  identity?: string | false;
  /** Send without credentials. */
  anonymous?: boolean;
  /** Raw body (upload); sent as is with the given headers. */
  raw?: { data: Uint8Array | string; headers?: Record<string, string> };
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Treat these statuses as answers rather than errors. */
  accept?: number[];
  /**
   * Sent as `Idempotency-Key`, and the request is then retried on network errors and 5xx like
   * an idempotent method. Only for the mail sends, which the service answers again for a
   * repeated key (MAIL.md "Sending"): on another POST a retry would apply it twice.
   */
  idempotencyKey?: string;
  /** Attempts after the first on a network error, 5xx or 429 (default: the client's `retries`). */
  retries?: number;
}

/** A send's options: its Idempotency-Key (default: a new UUID for this call and its retries). */
export interface SendOptions {
  idempotencyKey?: string;
}

interface Credentials {
  token?: string;
  refresh?: string;
  managementKey?: string;
  identityKey?: string;
  /** The refresh in progress: one for all `withIdentity` copies (refresh tokens rotate). */
  refreshing?: Promise<void> | null;
}

const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS']);

/** Whether a token is a JWT whose `exp` has passed (an opaque token, or one without `exp`: no). No signature check: only timing. */
export function hasExpired(jwt: string | undefined): boolean {
  const exp = expOf(jwt);
  return exp !== undefined && exp <= Date.now() / 1000;
}

function expOf(jwt: string | undefined): number | undefined {
  try {
    const payload = JSON.parse(Buffer.from((jwt ?? '').split('.')[1] ?? '', 'base64url').toString('utf8')) as { exp?: unknown };
    return typeof payload.exp === 'number' ? payload.exp : undefined;
  } catch {
    return undefined;
  }
}

/** Whether a JWT's `exp` is less than `seconds` away (or it has none, or is no JWT). */
function expiresWithin(jwt: string | undefined, seconds: number): boolean {
  const exp = expOf(jwt);
  return exp === undefined || exp - Date.now() / 1000 < seconds;
}

export function createClient(options: ClientOptions): AisClient {
  return new AisClient(options);
}

/** Whether fetch can send `value` in a header: no line break or other control, nothing beyond Latin-1. */
export const isHeaderValue = (value: string): boolean => /^[\t\x20-\x7e\x80-\xff]*$/.test(value);

export class AisClient {
  readonly baseUrl: string;
  readonly identity: string | undefined;
  readonly #options: ClientOptions;
  /** Shared by every `withIdentity` copy, so one refresh serves them all. */
  readonly #creds: Credentials;

  constructor(options: ClientOptions, shared?: Credentials) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.identity = options.identity;
    this.#options = options;
    this.#creds = shared ?? {
      token: options.token,
      refresh: options.refreshToken,
      managementKey: options.managementKey,
      identityKey: options.identityKey,
    };
  }

  /** The same credentials, scoped to another identity. */
  withIdentity(identity: string | undefined): AisClient {
    return new AisClient({ ...this.#options, identity }, this.#creds);
  }

  /** The credential sent as Bearer: the JWT first, else a key. */
  get credential(): string | undefined {
    return this.#creds.token ?? this.#creds.managementKey ?? this.#creds.identityKey;
  }

  get tokens(): Partial<Tokens> {
    return { access: this.#creds.token, refresh: this.#creds.refresh };
  }

  /** Replace the credentials (after a login). */
  setTokens(tokens: Tokens): void {
    this.#creds.token = tokens.access;
    this.#creds.refresh = tokens.refresh;
  }

  get #fetch(): typeof fetch {
    return this.#options.fetch ?? globalThis.fetch;
  }

  url(path: string, query?: RequestOptions['query']): string {
    const u = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) u.searchParams.set(k, String(v));
    return u.toString();
  }

  headers(o: Pick<RequestOptions, 'identity' | 'anonymous' | 'headers'> = {}): Record<string, string> {
    const h: Record<string, string> = { accept: 'application/json', ...(o.headers ?? {}) };
    if (this.#options.userAgent) h['user-agent'] = this.#options.userAgent;
    const cred = o.anonymous ? undefined : this.credential;
    if (cred) h.authorization = `Bearer ${cred}`;
    const identity = o.identity === false ? undefined : (o.identity ?? this.identity);
    if (identity && !o.anonymous) h['x-service-identity'] = identity;
    // fetch refuses a line break or a character beyond Latin-1 in a header, in an error that
    // quotes the value (a key, a token): refused here without it, and not retried as a network failure.
    for (const [name, value] of Object.entries(h)) {
      if (!isHeaderValue(value)) throw new TypeError(`The ${name} header cannot carry the value given (a line break or a character beyond Latin-1).`);
    }
    return h;
  }

  /** One call with the retry, backoff and refresh rules above; parsed JSON (null for 204), checked by `#answer`. */
  async request<T>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    return (await this.#answer(await this.send(method, path, o), method, path)) as T;
  }

  /**
   * The body of a successful answer to `method` on `path`, checked to come from this API: for
   * an operation of the schemas it must be JSON (by its content type), a list or an object as
   * the schema says, each object with the field naming it (`ANSWER_SHAPES`); anything else is
   * an {@link UnexpectedResponseError}, so a wrong base URL is said as such instead of handing
   * the caller `undefined` fields. Outside the schemas: JSON when it parses, else the text.
   */
  async #answer(res: Response, method: string, path: string, shape = answerShape(method.toUpperCase(), path)): Promise<unknown> {
    const text = res.status === 204 ? '' : await res.text();
    const unexpected = (what?: string) => this.#unexpected(res, method, path, what);
    if (!shape) {
      if (!text) return null;
      try {
        return JSON.parse(text);
      } catch {
        return text;
      }
    }
    if ('none' in shape) {
      if (!text) return null;
      throw unexpected(`${contentTypeInWords(res)} where no body was due`);
    }
    if (!text) throw unexpected('nothing');
    if (!isJson(res)) throw unexpected();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw unexpected('JSON that does not parse');
    }
    const items = shape.list ? (Array.isArray(body) ? body : null) : [body];
    const named = (i: unknown) => !!i && typeof i === 'object' && !Array.isArray(i) && (shape.field === null || shape.field in i);
    if (!items || !items.every(named)) throw unexpected(anotherShape(shape));
    return body;
  }

  #unexpected(res: Response, method: string, path: string, what?: string): UnexpectedResponseError {
    return UnexpectedResponseError.of(this.baseUrl, res, method, path, what);
  }

  /** Like {@link request} but returns the Response (for Link headers and streams). */
  async send(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
    method = method.toUpperCase();
    const retries = o.retries ?? this.#options.retries ?? 3;
    const idempotent = IDEMPOTENT.has(method) || o.idempotencyKey !== undefined;
    let refreshed = false;
    for (let attempt = 0; ; attempt++) {
      const headers = this.headers(o);
      if (o.idempotencyKey !== undefined) headers['idempotency-key'] = o.idempotencyKey;
      let body: RequestInit["body"];
      if (o.raw) {
        Object.assign(headers, o.raw.headers ?? {});
        body = o.raw.data as RequestInit["body"];
      } else if (o.body !== undefined) {
        headers['content-type'] = 'application/json';
        body = JSON.stringify(o.body);
      }
      const sentWith = this.#creds.token;
      let res: Response;
      try {
        res = await this.#fetchBounded(path.startsWith('http') ? path : this.url(path, o.query), { method, headers, body, signal: o.signal });
      } catch (err) {
        if (o.signal?.aborted) throw err;
        if (idempotent && attempt < retries) {
          await sleep(this.#backoff(attempt), o.signal);
          continue;
        }
        throw new NetworkError(`Cannot reach ${this.baseUrl}: ${networkReason(err)}`, err);
      }
      if (res.ok || o.accept?.includes(res.status)) return res;
      // This API's errors are JSON: a 4xx page or text (a web server's 404 at a wrong address) is
      // no answer of it, and must not be taken for "not found". A proxy's own 408, 413 and 429
      // mean what they say.
      if (res.status < 500 && !PROXY_STATUSES.has(res.status) && contentTypeOf(res) && !isJson(res) && answerShape(method, path)) {
        await res.body?.cancel().catch(() => undefined);
        throw this.#unexpected(res, method, path);
      }
      if (res.status === 401 && !refreshed && !o.anonymous && this.#creds.token && this.#creds.refresh) {
        const err = await toError(res);
        if (err.code !== 'token_expired') throw err;
        // Refreshed meanwhile (another call's 401 came first, its refresh already done): the
        // new token is tried as is; refreshing again would rotate the pair for nothing.
        if (this.#creds.token === sentWith) await this.refresh();
        refreshed = true;
        attempt--; // the retry after a refresh is not a backoff attempt
        continue;
      }
      // A 429 was refused before any effect: safe to send again. A 5xx only for idempotent
      // methods: a 503 may well follow a saved write (`projection_lag`), and a POST sent
      // again would send the mail twice or mint a second key.
      if (attempt < retries && (res.status === 429 || (res.status >= 500 && idempotent))) {
        const asked = retryAfterMs(res.headers.get('retry-after'));
        const cap = this.#options.maxDelayMs ?? 30_000;
        // A wait longer than we would wait: retrying sooner is sure to be refused again.
        if (asked === null || asked <= cap) {
          await res.body?.cancel().catch(() => undefined);
          await sleep(Math.min(asked ?? this.#backoff(attempt), cap), o.signal);
          continue;
        }
      }
      throw await toError(res);
    }
  }

  /**
   * fetch, giving up after `timeoutMs` without an answer when the call has no `signal` of its
   * own. The timeout covers the wait for an answer (its headers), not the reading of its body.
   */
  async #fetchBounded(url: string, init: RequestInit): Promise<Response> {
    const timeout = !init.signal && this.#options.timeoutMs ? new AbortController() : null;
    const timer = timeout ? setTimeout(() => timeout.abort(new DOMException('no answer in time', 'TimeoutError')), this.#options.timeoutMs) : undefined;
    try {
      return await this.#fetch(url, { ...init, signal: init.signal ?? timeout?.signal });
    } finally {
      clearTimeout(timer);
    }
  }

  async #upload(p: Presigned, data: Uint8Array, contentType: string, onProgress?: (sent: number, total: number) => void, signal?: AbortSignal): Promise<void> {
    const sameOrigin = new URL(p.upload_url).origin === new URL(this.baseUrl).origin;
    // A presigned URL carries its own authority; the Bearer goes only to our own gateway.
    // Names in lower case: the presign's `Content-Type` beside ours made one doubled value.
    const headers: Record<string, string> = { 'content-type': contentType };
    for (const [name, value] of Object.entries(p.headers ?? {})) headers[name.toLowerCase()] = value;
    if (sameOrigin && this.credential) headers.authorization = `Bearer ${this.credential}`;
    const method = p.method || 'PUT';
    const retries = this.#options.retries ?? 3;
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        // timeoutMs as for every call: with our own streaming, a socket silent that long (a
        // large upload on a slow link still makes progress); through a given fetch, no answer.
        res = this.#options.fetch
          ? await this.#fetchBounded(p.upload_url, { method, headers, body: data as RequestInit['body'], signal })
          : await streamUpload(p.upload_url, method, headers, data, onProgress, signal, signal ? undefined : this.#options.timeoutMs);
      } catch (err) {
        if (signal?.aborted) throw err;
        if (attempt < retries) {
          await sleep(this.#backoff(attempt), signal);
          continue;
        }
        throw new NetworkError(`Upload to ${new URL(p.upload_url).origin} failed: ${(err as Error).message}`, err);
      }
      if (res.ok) break;
      const err = await toError(res);
      // A retry of an upload whose answer was lost finds it done: that is success.
      if (attempt > 0 && err.status === 409 && err.code === 'already_uploaded') break;
      if (attempt < retries && (res.status >= 500 || res.status === 429)) {
        await sleep(Math.min(retryAfterMs(res.headers.get('retry-after')) ?? this.#backoff(attempt), this.#options.maxDelayMs ?? 30_000), signal);
        continue;
      }
      throw err;
    }
    onProgress?.(data.byteLength, data.byteLength);
  }

  /** A mail send, with an Idempotency-Key (the caller's, or a new one for this call and its retries): a retry after a lost answer never sends twice. */
  #sendMail(path: string, body: unknown, o: SendOptions): Promise<EmailMessage> {
    return this.request('POST', path, { body, idempotencyKey: o.idempotencyKey ?? crypto.randomUUID() });
  }

  #backoff(attempt: number): number {
    const base = this.#options.backoffMs ?? 250;
    const cap = this.#options.maxDelayMs ?? 30_000;
    return Math.random() * Math.min(cap, base * 2 ** attempt);
  }

  /**
   * Exchanges the refresh token (single-flight: concurrent 401s share one exchange, which
   * matters because refresh tokens rotate and a reused one revokes the family). A refused
   * refresh surfaces as 401 `token_expired`: the user must log in again.
   */
  async refresh(): Promise<Tokens> {
    if (!this.#creds.refresh) throw new ApiRequestError(401, 'token_expired', 'No refresh token held; log in again.', undefined, null);
    const shared = this.#options.sharedTokens;
    const creds = this.#creds;
    creds.refreshing ??= (async () => {
      try {
        await (shared ? shared.lock(() => this.#exchange(shared.stored())) : this.#exchange(null));
      } finally {
        creds.refreshing = null;
      }
    })();
    await creds.refreshing;
    return { access: this.#creds.token!, refresh: this.#creds.refresh! };
  }

  /** The refresh exchange itself; `stored` is the pair other processes may have rotated to. */
  async #exchange(stored: Tokens | null): Promise<void> {
    if (stored && stored.refresh && stored.refresh !== this.#creds.refresh) {
      this.#creds.token = stored.access;
      this.#creds.refresh = stored.refresh;
      if (!expiresWithin(stored.access, 30)) return; // fresh enough: nothing to exchange
    }
    // Bounded by `timeoutMs` like every other request (a service that never answered held the
    // caller for good). Not sent again: the token rotates, and one the service may have spent
    // already would end the session if sent twice.
    let res: Response;
    try {
      res = await this.#fetchBounded(this.url('/api/auth/token/refresh/'), {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify({ refresh: this.#creds.refresh }),
      });
    } catch (err) {
      throw new NetworkError(`Cannot reach ${this.baseUrl}: ${networkReason(err)}`, err);
    }
    if (!res.ok) {
      const err = await toError(res);
      if (res.status === 401 || res.status === 400) {
        throw new ApiRequestError(401, 'token_expired', `The session has ended (${err.detail}); log in again.`, err.fields, err.body);
      }
      throw err;
    }
    // `access_token` is the spelling of one of the spec's examples: taken too.
    const path = '/api/auth/token/refresh/';
    const body = (await this.#answer(res, 'POST', path, { list: false, field: null })) as { access?: string; access_token?: string; refresh?: string };
    if (typeof (body.access ?? body.access_token) !== 'string') throw this.#unexpected(res, 'POST', path, anotherShape({ list: false, field: 'access' }));
    this.#creds.token = body.access ?? body.access_token;
    if (body.refresh) this.#creds.refresh = body.refresh;
    await this.#options.onTokens?.({ access: this.#creds.token!, refresh: this.#creds.refresh! });
  }

  /** Every page of a list (follows `Link: rel="next"`). */
  async listAll<T>(path: string, o: RequestOptions = {}): Promise<T[]> {
    const out: T[] = [];
    let next: string | null = path;
    let first = true;
    while (next) {
      const res = await this.send('GET', next, first ? o : { ...o, query: undefined });
      first = false;
      out.push(...((await this.#answer(res, 'GET', next)) as T[]));
      // The link is built from the service's PUBLIC_URL, which may not be how this client
      // reaches it: only its path and query are followed, on this client's base URL (the
      // credential is never sent to a host a header names).
      const link = nextLink(res.headers.get('link'));
      next = link === null ? null : ((u) => u.pathname + u.search)(new URL(link, this.baseUrl));
    }
    return out;
  }

  /**
   * One page of a list and the cursor of the next (null on the last page): the list methods
   * with a `limit` answer one page without it. `identity: false` for account-level lists
   * (identities, keys).
   */
  async listPage<T>(path: string, q: ListOptions = {}, identity?: string | false): Promise<{ items: T[]; cursor: string | null }> {
    const query = Object.fromEntries(Object.entries(q).filter(([, v]) => v !== undefined)) as RequestOptions['query'];
    const res = await this.send('GET', path, { query, identity });
    const items = (await this.#answer(res, 'GET', path)) as T[];
    const link = nextLink(res.headers.get('link'));
    return { items, cursor: link === null ? null : new URL(link, this.baseUrl).searchParams.get('cursor') };
  }

  #list<T>(path: string, q: ListOptions = {}, identity?: string | false): Promise<T[]> {
    const query = Object.fromEntries(Object.entries(q).filter(([, v]) => v !== undefined)) as RequestOptions['query'];
    return q.limit || q.cursor ? this.request<T[]>('GET', path, { query, identity }) : this.listAll<T>(path, { query, identity });
  }

  // -- auth -------------------------------------------------------------------------------

  readonly auth = {
    login: async (body: AccountsLogin): Promise<TokenPair> => {
      const pair = await this.request<TokenPair>('POST', '/api/auth/login/', { body, anonymous: true });
      this.setTokens(pair);
      return pair;
    },
    /** Registers, and switches the client to the new account's tokens (as `login`). */
    register: async (body: AccountsRegister): Promise<TokenPair> => {
      const pair = await this.request<TokenPair>('POST', '/api/auth/social/', { body, anonymous: true });
      this.setTokens(pair);
      return pair;
    },
    refresh: (): Promise<Tokens> => this.refresh(),
    verify: (token: string): Promise<null> => this.request('POST', '/api/auth/token/verify/', { body: { token }, anonymous: true }),
    /**
     * Signs the account out everywhere (DECISIONS "Auth": every refresh token of the user). The
     * refresh token held goes along: the server skips an expired access token (logout is
     * anonymous-friendly) and, without it, would end nothing while answering 200.
     */
    logout: (): Promise<CommonDetail> =>
      this.request('POST', '/api/auth/logout/', { body: this.#creds.refresh ? { refresh: this.#creds.refresh } : {}, identity: false }),
    /** The account's live sessions (browsers and token families), the latest signed in or refreshed first. */
    sessions: (q?: ListOptions): Promise<Session[]> => this.#list('/api/auth/sessions/', q, false),
    /** Ends one session: its refresh token stops working (an access token already issued lives out its hour). */
    endSession: (uuid: string): Promise<null> => this.request('DELETE', `/api/auth/sessions/${enc(uuid)}/`, { identity: false }),
    user: (): Promise<User> => this.request('GET', '/api/auth/user/', { identity: false }),
    updateUser: (body: AccountsUserPatch): Promise<User> =>
      this.request('PATCH', '/api/auth/user/', { body, identity: false }),
    /** Tokens bound to `identity`; this client (and its `withIdentity` copies) use them from now on, as after `login`. */
    bindIdentity: async (identity: string): Promise<AccountsBindResult> => {
      const bound = await this.request<AccountsBindResult>('POST', '/api/auth/bind-identity/', { body: { identity }, identity: false });
      this.setTokens(bound);
      return bound;
    },
    /** POST /api/auth/device/ (RFC 8628 §3.1). */
    /** `clientId`: RFC 8628 `client_id`, informational; it ends up in the label of the key minted for the device. */
    deviceStart: (clientId?: string): Promise<DeviceAuthorization> =>
      this.request('POST', '/api/auth/device/', { anonymous: true, ...(clientId ? { body: { client_id: clientId } } : {}) }),
    /**
     * One poll of the token endpoint. Pending answers come back as `{error}`; `expired_token`
     * and `access_denied` throw (code `device_code_expired` for the former, DECISIONS).
     */
    devicePoll: async (deviceCode: string, opts: { wait?: boolean; signal?: AbortSignal } = {}): Promise<DeviceTokens | DevicePending> => {
      const res = await this.send('POST', '/api/auth/device/token/', {
        body: { device_code: deviceCode, ...(opts.wait ? { wait: true } : {}) },
        anonymous: true,
        accept: [400],
        signal: opts.signal,
      });
      if (res.ok) return (await this.#answer(res, 'POST', '/api/auth/device/token/')) as DeviceTokens;
      const body = (await res.json().catch(() => ({}))) as Record<string, unknown>;
      if (body.error === 'authorization_pending' || body.error === 'slow_down') return body as DevicePending;
      const code = body.error === 'expired_token' ? 'device_code_expired' : String(body.code ?? body.error ?? 'invalid_request');
      throw new ApiRequestError(res.status, code, String(body.detail ?? body.error_description ?? body.error ?? 'Device authorization failed.'), undefined, body);
    },
    /** Polls until approved, honouring `interval` and `slow_down`; long-polls with `wait`. */
    deviceWait: async (auth: DeviceAuthorization, opts: { wait?: boolean; signal?: AbortSignal } = {}): Promise<DeviceTokens> => {
      let interval = Math.max(1, auth.interval) * 1000;
      const deadline = Date.now() + auth.expires_in * 1000 + 5000;
      for (;;) {
        // A poll is safe to repeat (it changes nothing until approval, and a collected
        // approval is not collected twice): a service restarting, a connection cut, or a
        // 5xx is waited out until the code expires.
        const r = await this.auth.devicePoll(auth.device_code, opts).catch((err: unknown) => {
          const transient = err instanceof NetworkError || (err instanceof ApiRequestError && err.status >= 500);
          if (!transient || opts.signal?.aborted || Date.now() > deadline) throw err;
          return { error: 'authorization_pending' } as DevicePending;
        });
        if ('access' in r) {
          this.setTokens(r);
          return r;
        }
        if (r.error === 'slow_down') interval += 5000;
        if (Date.now() > deadline) throw new ApiRequestError(400, 'device_code_expired', 'The device code expired before it was approved.', undefined, r);
        if (!opts.wait || r.error === 'slow_down') await sleep(interval, opts.signal);
        else await sleep(Math.min(interval, 1000), opts.signal);
      }
    },
  };

  whoami(): Promise<WhoAmI> {
    return this.request('GET', '/api/health/whoami/', { identity: false });
  }

  subscription(): Promise<Subscription> {
    return this.request('GET', '/api/subscription/', { identity: false });
  }

  // -- identities and keys -----------------------------------------------------------------

  readonly identities = {
    list: (q?: ListOptions): Promise<Identity[]> => this.#list('/api/identities/', q, false),
    create: (body: IdentityCreate): Promise<Identity> => this.request('POST', '/api/identities/', { body, identity: false }),
    get: (uuid: string): Promise<Identity> => this.request('GET', `/api/identities/${enc(uuid)}/`, { identity: false }),
    update: (uuid: string, body: IdentityUpdate): Promise<Identity> =>
      this.request('PATCH', `/api/identities/${enc(uuid)}/`, { body, identity: false }),
    /** Gives up the identity's phone number (its SMS history stays); 404 when it has none. */
    releasePhone: (uuid: string): Promise<null> => this.request('DELETE', `/api/identities/${enc(uuid)}/phone/`, { identity: false }),
    delete: (uuid: string): Promise<null> => this.request('DELETE', `/api/identities/${enc(uuid)}/`, { identity: false }),
  };

  readonly keys = {
    management: {
      list: (q?: ListOptions): Promise<ManagementKey[]> => this.#list('/api/auth/keys/management/', q, false),
      create: (label: string): Promise<CreatedManagementKey> => this.request('POST', '/api/auth/keys/management/', { body: { label }, identity: false }),
      revoke: (uuid: string): Promise<null> => this.request('DELETE', `/api/auth/keys/management/${enc(uuid)}/`, { identity: false }),
    },
    identity: {
      list: (q?: ListOptions): Promise<IdentityKey[]> => this.#list('/api/auth/keys/identity/', q, false),
      create: (label: string, identityUuid: string): Promise<CreatedIdentityKey> =>
        this.request('POST', '/api/auth/keys/identity/', { body: { label, identity_uuid: identityUuid }, identity: false }),
      revoke: (uuid: string): Promise<null> => this.request('DELETE', `/api/auth/keys/identity/${enc(uuid)}/`, { identity: false }),
    },
  };

  // -- email ---------------------------------------------------------------------------------

  readonly email = {
    inbox: (q: ListOptions & { unread?: boolean } = {}): Promise<EmailThread[]> => this.#list('/api/email-inbox/', { ...q, unread: q.unread ? 'true' : undefined }),
    thread: (threadId: string): Promise<EmailThreadDetail> => this.request('GET', `/api/email-inbox/${enc(threadId)}/`),
    messages: (q?: ListOptions): Promise<EmailMessage[]> => this.#list('/api/email-messages/', q),
    message: (id: string): Promise<EmailMessage> => this.request('GET', `/api/email-messages/${enc(id)}/`),
    markRead: (id: string, read = true): Promise<EmailMessage> => this.request('PATCH', `/api/email-messages/${enc(id)}/`, { body: { read } }),
    compose: (body: Compose, o: SendOptions = {}): Promise<EmailMessage> =>
      this.#sendMail('/api/email-messages/compose/', { cc: '', bcc: '', attachment_uuids: [], ...body }, o),
    reply: (id: string, body: Reply, o: SendOptions = {}): Promise<EmailMessage> => this.#sendMail(`/api/email-messages/${enc(id)}/reply/`, body, o),
    replyAll: (id: string, body: Reply, o: SendOptions = {}): Promise<EmailMessage> => this.#sendMail(`/api/email-messages/${enc(id)}/reply-all/`, body, o),
    presign: (body: PresignRequest): Promise<Presigned> => this.request('POST', '/api/email-attachments/presign/', { body }),
    /** An attachment's bytes (of a received or sent message), by its uuid. */
    download: async (uuid: string): Promise<{ bytes: Uint8Array; contentType: string }> => {
      const path = `/api/email-attachments/${enc(uuid)}/`;
      const res = await this.send('GET', path);
      // The file's own type may be anything (an HTML page too): the service marks the download.
      if (!/^attachment\b/i.test(res.headers.get('content-disposition') ?? '')) {
        await res.body?.cancel().catch(() => undefined);
        throw this.#unexpected(res, 'GET', path, `${contentTypeInWords(res)} that is no attachment download (no Content-Disposition: attachment)`);
      }
      return { bytes: new Uint8Array(await res.arrayBuffer()), contentType: res.headers.get('content-type') ?? 'application/octet-stream' };
    },
    /**
     * Presign + PUT to the upload URL; returns the attachment uuid. The body is streamed in
     * 64 KiB chunks with a Content-Length (presigned cloud URLs refuse chunked uploads), and
     * `onProgress(sent, total)` is called as each chunk is handed to the socket, ending with
     * `sent === total`. Network errors and 5xx are retried like any idempotent request.
     */
    upload: async (file: Attachment, onProgress?: (sent: number, total: number) => void, signal?: AbortSignal): Promise<string> => {
      const content_type = file.content_type ?? 'application/octet-stream';
      const p = await this.email.presign({ filename: file.filename, content_type, size: file.data.byteLength });
      await this.#upload(p, file.data, content_type, onProgress, signal);
      return p.uuid;
    },
    /** Uploads every attachment, then composes (or replies when `replyTo` is given). */
    sendWithAttachments: async (
      msg: (Compose & { replyTo?: undefined }) | (Reply & { replyTo: string; all?: boolean }),
      files: Attachment[],
      onProgress?: (file: string, sent: number, total: number) => void,
    ): Promise<EmailMessage> => {
      const ids: string[] = [...(msg.attachment_uuids ?? [])];
      for (const f of files) ids.push(await this.email.upload(f, (s, t) => onProgress?.(f.filename, s, t)));
      if (msg.replyTo) {
        const { replyTo, all, ...rest } = msg;
        return all ? this.email.replyAll(replyTo, { ...rest, attachment_uuids: ids }) : this.email.reply(replyTo, { ...rest, attachment_uuids: ids });
      }
      const { replyTo: _r, ...compose } = msg as Compose & { replyTo?: undefined };
      return this.email.compose({ ...compose, attachment_uuids: ids });
    },
  };

  // -- sms -------------------------------------------------------------------------------------

  readonly sms = {
    inbox: (q: ListOptions & { unread?: boolean } = {}): Promise<SmsConversation[]> => this.#list('/api/sms-inbox/', { ...q, unread: q.unread ? 'true' : undefined }),
    conversation: (id: string): Promise<SmsConversationDetail> => this.request('GET', `/api/sms-inbox/${enc(id)}/`),
    messages: (q?: ListOptions & { conversation_id?: string }): Promise<SmsMessage[]> => this.#list('/api/messages/', q),
    message: (id: string): Promise<SmsMessage> => this.request('GET', `/api/messages/${enc(id)}/`),
    phone: (): Promise<Phone[]> => this.request('GET', '/api/phone/'),
  };

  // -- vault (ciphertext only; see ./vault-session for transparent encryption) -----------------

  readonly passwords = {
    list: (q?: ListOptions): Promise<PasswordEntry[]> => this.#list('/api/passwords/', q),
    create: (body: PasswordWrite): Promise<PasswordEntry> => this.request('POST', '/api/passwords/', { body }),
    get: (uuid: string): Promise<PasswordEntry> => this.request('GET', `/api/passwords/${enc(uuid)}/`),
    update: (uuid: string, body: PasswordReplace): Promise<PasswordEntry> => this.request('PUT', `/api/passwords/${enc(uuid)}/`, { body }),
    delete: (uuid: string): Promise<null> => this.request('DELETE', `/api/passwords/${enc(uuid)}/`),
    generate: (q: { length?: number } = {}): Promise<VaultGeneratedPassword> => this.request('GET', '/api/passwords/generate_password/', { query: q }),
  };

  readonly vault = {
    list: (q?: ListOptions): Promise<VaultSecret[]> => this.#list('/api/vault/', q),
    /** Upsert by key (201 created, 200 updated). */
    put: (key: string, value: string): Promise<VaultSecret> => this.request('POST', '/api/vault/', { body: { key, value } }),
    get: (uuid: string): Promise<VaultSecret> => this.request('GET', `/api/vault/${enc(uuid)}/`),
    delete: (uuid: string): Promise<null> => this.request('DELETE', `/api/vault/${enc(uuid)}/`),
    /**
     * The secret named `keyOrUuid`, else (when it is a uuid) the secret with that uuid; null
     * when neither. The name wins, since a name may itself look like a uuid.
     */
    find: async (keyOrUuid: string): Promise<VaultSecret | null> => {
      const named = (await this.vault.list()).find((s) => s.key === keyOrUuid);
      if (named || !UUID.test(keyOrUuid)) return named ?? null;
      return this.vault.get(keyOrUuid).catch((err) => {
        if (err instanceof ApiRequestError && err.status === 404) return null;
        throw err;
      });
    },
  };

  readonly encryption = {
    get: (): Promise<EncryptionMetadataWire> => this.request('GET', '/api/encryption/', { identity: false }),
    setup: (upload: VaultEncryptionUpload): Promise<EncryptionMetadataWire> => this.request('POST', '/api/encryption/', { body: upload, identity: false }),
    rewrap: (upload: VaultEncryptionRewrap): Promise<EncryptionMetadataWire> => this.request('PUT', '/api/encryption/', { body: upload, identity: false }),
  };

  // -- events ----------------------------------------------------------------------------------

  /** The SSE stream of the client's identity, resuming with Last-Event-ID (see ./events.ts). */
  events(options: EventStreamOptions = {}): EventStream {
    return new EventStream(this, options);
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers

const enc = encodeURIComponent;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function nextLink(link: string | null): string | null {
  if (!link) return null;
  for (const part of link.split(',')) {
    const m = /<([^>]+)>\s*;(.*)$/.exec(part.trim());
    if (m && /rel="?([^";]*\s)?next(\s[^";]*)?"?/.test(m[2])) return m[1];
  }
  return null;
}

/** RFC 9110 §10.2.3: delay-seconds or an HTTP-date. */
export function retryAfterMs(value: string | null): number | null {
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}


const UPLOAD_CHUNK = 64 * 1024;

/**
 * PUT `data` with node:http(s), chunk by chunk, reporting bytes handed to the socket. Answers
 * a WHATWG Response so errors go through the same parsing as every other call. Stops
 * writing when the server answers early (e.g. 413) and returns that answer.
 */
async function streamUpload(
  url: string,
  method: string,
  headers: Record<string, string>,
  data: Uint8Array,
  onProgress?: (sent: number, total: number) => void,
  signal?: AbortSignal,
  idleTimeoutMs?: number,
): Promise<Response> {
  const mod = url.startsWith('https:') ? await import('node:https') : await import('node:http');
  const total = data.byteLength;
  return new Promise<Response>((resolve, reject) => {
    let answered = false;
    const req = mod.request(url, { method, headers: { ...headers, 'content-length': String(total) }, signal });
    if (idleTimeoutMs) req.setTimeout(idleTimeoutMs, () => req.destroy(new DOMException('no answer in time', 'TimeoutError')));
    req.on('error', (err) => {
      if (!answered) reject(err);
    });
    req.on('response', (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(', ') : v);
        const nullBody = status === 204 || status === 304 || chunks.length === 0;
        resolve(new Response(nullBody ? null : Buffer.concat(chunks), { status, statusText: res.statusMessage, headers: h }));
        // Answered before the whole body went out: this socket cannot be reused.
        if (offset < total) req.destroy();
      });
    });
    let offset = 0;
    const pump = (): void => {
      while (offset < total && !answered) {
        const end = Math.min(offset + UPLOAD_CHUNK, total);
        const chunk = data.subarray(offset, end);
        offset = end;
        const sent = end;
        const more = req.write(chunk, () => {
          if (sent < total) onProgress?.(sent, total);
        });
        if (!more) {
          req.once('drain', pump);
          return;
        }
      }
      if (!answered) req.end();
    };
    pump();
  });
}
