// What every command runs with: the run's context, the API client built from the stored
// credentials, and the translation of SDK errors into the CLI's conditions.
import type { ParseArgsConfig } from 'node:util';
import { ApiRequestError, createClient, isHeaderValue, NetworkError, UnexpectedResponseError, type AisClient, type Identity } from '../sdk/client.js';
import { CryptoError } from '../sdk/crypto.js';
import { loadConfig, saveConfig, withConfigLock, type CliConfig } from './config.js';
import { CliError, EXIT, usage } from './errors.js';

export interface Ctx {
  json: boolean;
  env: NodeJS.ProcessEnv;
  config: CliConfig;
  baseUrl: string;
  identityFlag?: string;
  /** Where the identity of this run comes from (shown by `whoami`); absent: none chosen. */
  identityFrom?: 'flag' | 'env' | 'default' | 'key';
  /** Set when the config's default identity is not this run's: its credential is of another account (or service) than the stored login's. */
  othersDefault?: boolean;
  outTTY: boolean;
  /** Never prompt (--no-input or AIS_NO_INPUT=1): a missing secret is a usage error. */
  noInput: boolean;
  out: (s: string) => void;
  err: (s: string) => void;
  /** Whether stderr is a terminal (live progress, QR code). */
  errTTY: boolean;
  /** Raw stderr write, no newline (progress line redraws). */
  errWrite: (s: string) => void;
}

export interface Command {
  usage: string;
  summary: string;
  options?: NonNullable<ParseArgsConfig['options']>;
  /** Environment variables the command reads instead of prompting (shown by --help). */
  env?: Record<string, string>;
  run: (ctx: Ctx, positionals: string[], values: Record<string, any>) => Promise<void>;
}

/** Whether two service addresses name the same service (`HTTP://Host:80/` is `http://host`). */
export function sameService(a: string, b: string): boolean {
  const normal = (address: string) => {
    try {
      const u = new URL(address);
      return u.origin + u.pathname.replace(/\/+$/, '');
    } catch {
      return address;
    }
  };
  return normal(a) === normal(b);
}

/** The service a run addresses when nothing names one. */
export const DEFAULT_BASE_URL = 'http://localhost:8000';

/**
 * The service the login stored here was made at. A config written without base_url (by hand:
 * `ais login` always writes one) is taken for the default service, the one such a config
 * addresses: taken for any, its credentials went wherever a run was pointed.
 */
export const storedService = (config: CliConfig): string => config.base_url ?? DEFAULT_BASE_URL;

/** Whether the login stored here was made at the service this run addresses. */
export const storedLoginHere = (ctx: Pick<Ctx, 'config' | 'baseUrl'>): boolean => sameService(storedService(ctx.config), ctx.baseUrl);

export function client(ctx: Ctx, opts: { identity?: boolean } = {}): AisClient {
  const envKey = ctx.env.AIS_API_KEY;
  const envToken = ctx.env.AIS_TOKEN;
  // The stored login's tokens and key go only to the service they were stored for: another
  // one (--base-url, AIS_BASE_URL) would be handed them. A credential given for this run
  // (AIS_API_KEY, AIS_TOKEN) goes where this run goes.
  const stored = envKey || envToken ? undefined : ctx.config;
  if (stored && (stored.access || stored.management_key) && !storedLoginHere(ctx)) {
    const where = stored.base_url ? `is for ${stored.base_url}` : `names no service (no base_url in the config), so it is taken for the default one, ${DEFAULT_BASE_URL}`;
    throw new CliError(
      'not_authenticated',
      `Not logged in at ${ctx.baseUrl}: the login stored here ${where}, and its credentials go only there. Run \`ais login --base-url ${ctx.baseUrl}\` (it replaces that login), or set AIS_API_KEY.`,
    );
  }
  const token = envToken ?? stored?.access;
  const managementKey = envKey?.startsWith('svc_mgmt_') ? envKey : stored?.management_key;
  const identityKey = envKey?.startsWith('svc_id_') ? envKey : undefined;
  if (envKey && !managementKey && !identityKey) {
    throw new CliError('usage', 'AIS_API_KEY is not a key of this service: keys start with svc_mgmt_ or svc_id_.', EXIT.usage);
  }
  // Keys and tokens are printable ASCII; a line break (a pasted key) would be refused by fetch
  // in an error quoting the whole credential. Said without it.
  for (const [name, value] of [['AIS_API_KEY', envKey], ['AIS_TOKEN', envToken]] as const) {
    if (value && !/^[\x21-\x7e]+$/.test(value)) throw new CliError('usage', `${name} holds a space, line break or other character no key or token has (pasted with its line end?).`, EXIT.usage);
  }
  if (!token && !managementKey && !identityKey) {
    throw new CliError('not_authenticated', 'Not logged in: run `ais login` (or set AIS_API_KEY).');
  }
  const identity = opts.identity ? requireIdentity(ctx, !!identityKey) : undefined;
  // The login this client was made with: the config is read again at each refresh, and may hold another by then.
  const sameLogin = (c: CliConfig) => !!stored && sameService(storedService(c), storedService(stored)) && c.user?.pk === stored.user?.pk;
  return createClient({
    baseUrl: ctx.baseUrl,
    token,
    refreshToken: stored?.refresh,
    managementKey,
    identityKey,
    identity,
    userAgent: 'ais-cli/1.0',
    timeoutMs: requestTimeoutMs(ctx.env),
    onTokens: (t) => {
      if (!stored) return;
      const now = loadConfig(ctx.env);
      // Replaced meanwhile by another login (`ais login` in another terminal): not ours to write.
      if (!sameLogin(now)) return;
      ctx.config = { ...now, access: t.access, refresh: t.refresh };
      saveConfig(ctx.config, ctx.env);
    },
    // Other ais processes share this config: refresh one at a time, adopting what they stored
    // for this same login (a login made meanwhile at another service, or of another account,
    // is not this process's: its tokens are never sent here).
    sharedTokens: !stored
      ? undefined
      : {
          lock: (work) => withConfigLock(ctx.env, work),
          stored: () => {
            const c = loadConfig(ctx.env);
            return sameLogin(c) && c.access && c.refresh ? { access: c.access, refresh: c.refresh } : null;
          },
        },
  });
}

/** How long a request waits for an answer by default (AIS_TIMEOUT, in seconds). */
export const DEFAULT_TIMEOUT_S = 30;
/** The longest timer Node keeps (2^31 - 1 ms): a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * AIS_TIMEOUT: the seconds one attempt of a request waits for an answer (0: no limit). Without
 * one, a service that accepts the connection but never answers held every attempt for
 * minutes. Long-polls and event streams are not cut by it (the device login bounds its own
 * polls; a stream has its own idle timeout).
 */
export function requestTimeoutMs(env: NodeJS.ProcessEnv): number | undefined {
  const raw = env.AIS_TIMEOUT?.trim();
  if (!raw) return DEFAULT_TIMEOUT_S * 1000;
  if (!/^\d+(\.\d+)?$/.test(raw)) throw new CliError('usage', `AIS_TIMEOUT takes a number of seconds (0: no limit), not ${raw}.`, EXIT.usage);
  // Past it, every request timed out at once.
  if (Number(raw) * 1000 > MAX_TIMER_MS) throw new CliError('usage', `AIS_TIMEOUT takes at most ${Math.floor(MAX_TIMER_MS / 1000)} seconds (0: no limit), not ${raw}.`, EXIT.usage);
  return Number(raw) > 0 ? Number(raw) * 1000 : undefined;
}

/**
 * Whether this run acts for the account of the login stored here, at its service: the stored
 * login itself, or an AIS_API_KEY / AIS_TOKEN of that same account (asked of the service).
 * Only then may what it learns about the account (a device secret) be saved beside that
 * login: another account's would replace the login's own.
 */
export async function actsAsStoredLogin(ctx: Ctx, c: AisClient): Promise<boolean> {
  const stored = ctx.config;
  if (!stored.access && !stored.management_key) return false;
  return actsForStoredAccount(ctx, c);
}

/** Whether this run is of the account the config names (its login, or the one signed out), at its service. */
async function actsForStoredAccount(ctx: Ctx, c: AisClient): Promise<boolean> {
  return (await ofStoredAccount(ctx, c)) === true;
}

/** {@link actsForStoredAccount}, or undefined when the service did not say (whoami failed). */
async function ofStoredAccount(ctx: Ctx, c: AisClient): Promise<boolean | undefined> {
  const stored = ctx.config;
  if (!storedLoginHere(ctx)) return false;
  if (!ctx.env.AIS_API_KEY && !ctx.env.AIS_TOKEN) return true;
  if (stored.user?.pk === undefined) return false;
  const me = await c.whoami().catch(() => null);
  return me ? me.user.pk === stored.user.pk : undefined;
}

/**
 * Whether this run may set the default identity kept in the config. It is the stored login's:
 * only a run of that same account at its service may set it (another account's identity
 * there failed every identity command of the login, as identity_not_found). With no account
 * stored (no login, none signed out), an AIS_API_KEY / AIS_TOKEN run keeps its own there.
 */
export async function maySetDefaultIdentity(ctx: Ctx, c: AisClient): Promise<boolean> {
  const stored = ctx.config;
  if (!stored.access && !stored.management_key && !stored.user) return true;
  return actsForStoredAccount(ctx, c);
}

/** The default identity this run uses: the config's, unless it is another account's ({@link Ctx.othersDefault}). */
export const defaultIdentity = (ctx: Pick<Ctx, 'config' | 'othersDefault'>): string | undefined => (ctx.othersDefault ? undefined : ctx.config.identity);

export function requireIdentity(ctx: Ctx, fenced: boolean): string | undefined {
  // An empty AIS_IDENTITY selects none: not even the default (docs/CLI.md).
  const id = ctx.identityFlag ?? ctx.env.AIS_IDENTITY ?? defaultIdentity(ctx);
  // The exit code of the API's own identity_required (docs/CLI.md): the same condition.
  if (!id && !fenced) {
    // `identities use` would be refused for such a run (other_account): --identity it is.
    const message = ctx.othersDefault
      ? `No identity selected: ${otherThanStoredLogin(ctx)}, and the default identity here belongs to that login. Pass --identity <uuid|name> (or set AIS_IDENTITY).`
      : 'No identity selected: run `ais identities use <uuid|name>` or pass --identity.';
    throw new CliError('identity_required', message, EXIT.api_error);
  }
  return id;
}

/** `AIS_API_KEY is of another account than the login stored here (scout at http://…)`: why the stored login's default is not this run's. */
export function otherThanStoredLogin(ctx: Pick<Ctx, 'config' | 'baseUrl' | 'env'>): string {
  const credential = ctx.env.AIS_API_KEY ? 'AIS_API_KEY' : 'AIS_TOKEN';
  const other = storedLoginHere(ctx) ? 'another account' : 'another service';
  const login = [ctx.config.user?.username, ctx.config.base_url].filter(Boolean).join(' at ');
  return `${credential} is of ${other} than the login stored here${login ? ` (${login})` : ''}`;
}

/**
 * The one wording of identity_not_found, wherever it is found out: a name that names no
 * identity (`--identity typo`), the default identity deleted since `ais identities use`, or
 * a uuid that is no identity of this account.
 */
export function identityNotFound(ref: string, defaultIdentity?: string): CliError {
  const list = 'see `ais identities list`';
  const message = !isUuid(ref)
    ? `No identity is named ${/[\x00-\x1f\x7f]/.test(ref) ? JSON.stringify(ref) : ref}: ${list}.`
    : ref.toLowerCase() === defaultIdentity?.toLowerCase()
      ? `The default identity ${ref} no longer exists: pick another with \`ais identities use <uuid|name>\` (${list}).`
      : `No identity ${ref} in this account: ${list}.`;
  return new CliError('identity_not_found', message, EXIT.identity_not_found, { identity: ref });
}

/** `scout (0190…)`: an identity's name beside its uuid. */
export const identityLabel = (i: Pick<Identity, 'name' | 'uuid'>): string => `${i.name} (${i.uuid})`;

/** Maps SDK errors onto the named conditions. */
export async function translate(err: unknown, c?: AisClient, ctx: Pick<Ctx, 'env' | 'config'> = { env: {}, config: {} }): Promise<unknown> {
  const env = ctx.env;
  if (err instanceof CryptoError) {
    if (err.code === 'pin_locked') return new CliError('pin_locked', 'PIN entered wrongly 3 times: the vault is locked. Run `ais pin recover` with your recovery key.');
    if (err.code === 'encryption_missing') return new CliError('encryption_missing', 'No PIN is set up for this account: run `ais pin setup` first.');
    if (err.code === 'wrong_pin') {
      // The PIN and the device secret are checked together: a device secret replaced by a
      // `pin recover` on another machine fails the same way as a mistyped PIN.
      const stale = 'If the PIN is right, this machine\'s device secret is stale (a `pin recover` elsewhere made a new one): set AIS_DEVICE_SECRET to it before trying again.';
      return new CliError('wrong_pin', `Wrong PIN (${err.attemptsLeft} attempt(s) left before the vault locks). ${stale}`, EXIT.wrong_pin, { attempts_left: err.attemptsLeft });
    }
    return new CliError(err.code, err.message);
  }
  if (err instanceof ApiRequestError) {
    if (err.code === 'device_code_expired') return new CliError('device_code_expired', 'The login code expired before it was approved: run `ais login` again.');
    if (err.code === 'access_denied') return new CliError('access_denied', 'The sign-in was denied on the approval page: run `ais login` again, and approve it there.', EXIT.api_error);
    // A credential given for this run wins over the stored login: `ais login` would not help.
    if (err.status === 401 && env.AIS_TOKEN && !env.AIS_API_KEY) {
      const why = err.code === 'token_expired' ? 'it expired or its session ended' : err.detail;
      return new CliError(err.code === 'token_expired' ? 'token_expired' : 'not_authenticated', `AIS_TOKEN was refused (${why}): set a fresh access token, or unset AIS_TOKEN to use the stored login.`);
    }
    if (err.status === 401 && err.code === 'token_expired') return new CliError('token_expired', 'Your session has ended (signed out or password changed elsewhere): run `ais login` again.');
    if (err.status === 401 && env.AIS_API_KEY) return new CliError('not_authenticated', `AIS_API_KEY was refused (${err.detail}): set a valid key, or unset AIS_API_KEY to use the stored login.`);
    if (err.status === 401) return new CliError('not_authenticated', `Not authenticated (${err.detail}): run \`ais login\`.`);
    if (err.status === 404 && c?.identity) {
      // Is it the configured identity that is gone, or the thing asked for?
      const gone = await c.identities.get(c.identity).then(
        () => false,
        (e) => e instanceof ApiRequestError && e.status === 404,
      );
      // A name that named nothing (`--identity typo`) reaches the server as is.
      if (gone) return identityNotFound(c.identity, ctx.config.identity);
    }
    // Plans are the operator's (the admin API, DECISIONS "Plans and admin"): no command here changes one.
    if (err.status === 402) {
      const user = ctx.env.AIS_API_KEY || ctx.env.AIS_TOKEN ? undefined : ctx.config.user;
      const account = user ? ` (${user.username}, pk ${user.pk})` : ' (its pk: `ais whoami`)';
      // What to ask for: the plan that would help (plan_required), else an inactive
      // subscription made active; else (no plan has room) nothing the operator can do.
      const planRequired = (err.body as { plan_required?: unknown } | null)?.plan_required;
      const hint =
        typeof planRequired === 'string'
          ? ` Plans are changed by the service's operator, not by \`ais\`: ask them to move your account${account} to the ${planRequired} plan.`
          : /subscription/i.test(err.detail)
            ? ` Subscriptions are set by the service's operator, not by \`ais\`: ask them about your account${account}.`
            : '';
      return new CliError(err.code ?? 'http_402', `${err.detail}${hint}`, EXIT.api_error, {
        status: err.status,
        ...(err.fields ? { fields: err.fields } : {}),
      });
    }
    return new CliError(err.code ?? `http_${err.status}`, err.detail, EXIT.api_error, { status: err.status, ...(err.fields ? { fields: err.fields } : {}) });
  }
  // Something else answers at the address (a web page, another service): the service is not reached.
  if (err instanceof UnexpectedResponseError) return new CliError('unexpected_response', err.message, EXIT.network_error);
  if (err instanceof NetworkError) {
    // Timed out: say how long was waited, and where that is set.
    const timedOut = (err.cause as Error | undefined)?.name === 'TimeoutError';
    const waited = timedOut ? ` (waited ${(requestTimeoutMs(env) ?? 0) / 1000} s for each attempt; AIS_TIMEOUT sets how long)` : '';
    return new CliError('network_error', `${err.message}${waited}`, EXIT.network_error);
  }
  return err;
}

export const isUuid = (s: string) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s);

/** The identity a uuid or a name refers to; `defaultIdentity` (the config's) words the error when it is gone. */
export async function resolveIdentity(c: AisClient, ref: string | undefined, defaultIdentity: string | undefined): Promise<Identity> {
  if (!ref) throw usage('<uuid|name> required');
  if (isUuid(ref)) {
    try {
      return await c.identities.get(ref);
    } catch (e) {
      if (e instanceof ApiRequestError && e.status === 404) throw identityNotFound(ref, defaultIdentity);
      throw e;
    }
  }
  const hit = (await c.identities.list()).find((i) => i.name.toLowerCase() === ref.toLowerCase());
  if (!hit) throw identityNotFound(ref, defaultIdentity);
  return hit;
}

/**
 * `--identity` / AIS_IDENTITY may name the identity (`--identity pager`), as `identities use`
 * does: resolved once to its uuid. Without credentials it is left as is (the command says so).
 */
export async function resolveIdentityName(ctx: Ctx): Promise<void> {
  const ref = ctx.identityFlag ?? ctx.env.AIS_IDENTITY;
  // An identity key is fenced to one identity: with none named, that one (the vault and the
  // watch commands need its uuid, not just a request the server scopes by the key), over a
  // default identity in the config (the key, given explicitly, decides).
  if (!ref && ctx.env.AIS_API_KEY?.startsWith('svc_id_')) {
    const me = await client(ctx).whoami().catch(() => null);
    if (me?.identity) {
      ctx.identityFlag = me.identity;
      ctx.identityFrom = 'key';
    }
    return;
  }
  if (!ref) return othersDefault(ctx);
  if (isUuid(ref)) return;
  let c: AisClient;
  try {
    c = client(ctx);
  } catch {
    return;
  }
  try {
    ctx.identityFlag = (await resolveIdentity(c, ref, ctx.config.identity)).uuid;
  } catch (err) {
    // No such name: commands that need no identity go on; the others get the 404 as usual,
    // unless the name cannot go in a header at all (a line break, beyond Latin-1): said now.
    if (!(err instanceof CliError && err.code === 'identity_not_found') || !isHeaderValue(ref)) throw err;
  }
}

/**
 * The default identity is the stored login's: a run with an AIS_API_KEY / AIS_TOKEN of another
 * account (or at another service) does not use it, as it may not set it. Sent with such a
 * credential, it failed as the API's 403 or 404, which named the wrong cause. Asked of the
 * service (whoami) only when a default is there to be used; a whoami that fails decides
 * nothing (the command's own request then says what is wrong with the credential).
 */
async function othersDefault(ctx: Ctx): Promise<void> {
  const stored = ctx.config;
  if (!stored.identity || (!ctx.env.AIS_API_KEY && !ctx.env.AIS_TOKEN)) return;
  // With no login stored here (nor one signed out), the default is one a key run kept for such runs.
  if (!stored.access && !stored.management_key && !stored.user) return;
  let c: AisClient;
  try {
    c = client(ctx);
  } catch {
    return;
  }
  if ((await ofStoredAccount(ctx, c)) !== false) return;
  ctx.othersDefault = true;
  if (ctx.identityFrom === 'default') ctx.identityFrom = undefined;
}
