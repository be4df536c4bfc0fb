/**
 * `ais`: the agent's command-line client (issue 8). Every command prints a human table by
 * default and the raw object with `--json`. The client-reported conditions of SPEC "Errors"
 * each have a message, an exit code ({@link EXIT}) and their exact name in `--json` output:
 * `{"error": {"code": "token_expired", "message": ...}}` on stderr.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync } from 'node:fs';
import QRCode from 'qrcode';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ApiRequestError, createClient, NetworkError, type AisClient, type Attachment, type DeviceAuthorization } from '../sdk/client.js';
import { changePin, CryptoError, fileLockStore, parseKdf, recover, setupEncryption, unlock, type EncryptionMetadata, type KdfParams } from '../sdk/crypto.js';
import { UnlockedVault, type PlainPassword } from '../sdk/unlocked.js';
import { configDir, configFile, loadConfig, saveConfig, updateConfig, withConfigLock, type CliConfig } from './config.js';

/** Distinct exit codes per condition (documented in docs/CLI.md). */
export const EXIT = {
  ok: 0,
  error: 1,
  usage: 2,
  not_authenticated: 10,
  token_expired: 11,
  identity_not_found: 12,
  device_code_expired: 13,
  pin_locked: 14,
  encryption_missing: 15,
  wrong_pin: 16,
  api_error: 20,
  network_error: 21,
} as const;
type Condition = keyof typeof EXIT;

export class CliError extends Error {
  constructor(
    readonly code: Condition | string,
    message: string,
    readonly exit: number = EXIT[code as Condition] ?? EXIT.error,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

const GLOBAL: NonNullable<ParseArgsConfig['options']> = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  'base-url': { type: 'string' },
  identity: { type: 'string' },
  'no-input': { type: 'boolean' },
};

interface Ctx {
  json: boolean;
  env: NodeJS.ProcessEnv;
  config: CliConfig;
  baseUrl: string;
  identityFlag?: string;
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

export interface Io {
  out: (s: string) => void;
  err: (s: string) => void;
  errTTY?: boolean;
  outTTY?: boolean;
  errWrite?: (s: string) => void;
}

const processIo: Io = {
  out: (s) => process.stdout.write(s + '\n'),
  err: (s) => process.stderr.write(s + '\n'),
  errTTY: !!process.stderr.isTTY,
  outTTY: !!process.stdout.isTTY,
  errWrite: (s) => process.stderr.write(s),
};

// ---------------------------------------------------------------------------------------------
// Output

function table(rows: Record<string, unknown>[], cols: string[]): string {
  if (rows.length === 0) return '(none)';
  const cell = (v: unknown) => (v === null || v === undefined ? '-' : typeof v === 'object' ? JSON.stringify(v) : String(v)).replace(/\s+/g, ' ');
  const cells = rows.map((r) => cols.map((c) => cell(r[c])));
  const widths = cols.map((c, i) => Math.min(60, Math.max(c.length, ...cells.map((r) => r[i].length))));
  const fmt = (vals: string[]) => vals.map((v, i) => (v.length > widths[i] ? v.slice(0, widths[i] - 1) + '…' : v.padEnd(widths[i]))).join('  ').trimEnd();
  return [fmt(cols.map((c) => c.toUpperCase())), ...cells.map(fmt)].join('\n');
}

function show(ctx: Ctx, value: unknown, human: () => string): void {
  ctx.out(ctx.json ? JSON.stringify(value, null, 2) : forTerminal(human()));
}

/**
 * Human output shows text from others (mail subjects and bodies, SMS): control characters
 * and bidirectional overrides in it would drive the terminal (clear the screen, set the
 * title, reorder what is read), so they are shown as escapes. Line breaks and tabs stay;
 * `--json` output is exact.
 */
export function forTerminal(text: string): string {
  return text.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]|\r(?!\n)/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function kv(obj: Record<string, unknown>, keys?: string[]): string {
  return (keys ?? Object.keys(obj))
    .filter((k) => obj[k] !== undefined)
    .map((k) => `${k}: ${typeof obj[k] === 'object' && obj[k] !== null ? JSON.stringify(obj[k]) : String(obj[k])}`)
    .join('\n');
}

// ---------------------------------------------------------------------------------------------
// Client and credentials

function client(ctx: Ctx, opts: { identity?: boolean } = {}): AisClient {
  const c = ctx.config;
  const envKey = ctx.env.AIS_API_KEY;
  const token = ctx.env.AIS_TOKEN ?? (envKey ? undefined : c.access);
  const managementKey = envKey?.startsWith('svc_mgmt_') ? envKey : envKey ? undefined : c.management_key;
  const identityKey = envKey?.startsWith('svc_id_') ? envKey : undefined;
  if (envKey && !managementKey && !identityKey) {
    throw new CliError('usage', 'AIS_API_KEY is not a key of this service: keys start with svc_mgmt_ or svc_id_.', EXIT.usage);
  }
  if (!token && !managementKey && !identityKey) {
    throw new CliError('not_authenticated', 'Not logged in: run `ais login` (or set AIS_API_KEY).');
  }
  const identity = opts.identity ? requireIdentity(ctx, !!identityKey) : undefined;
  return createClient({
    baseUrl: ctx.baseUrl,
    token,
    refreshToken: ctx.env.AIS_TOKEN ? undefined : c.refresh,
    managementKey,
    identityKey,
    identity,
    userAgent: 'ais-cli/1.0',
    onTokens: (t) => {
      if (ctx.env.AIS_TOKEN) return;
      ctx.config = { ...loadConfig(ctx.env), access: t.access, refresh: t.refresh };
      saveConfig(ctx.config, ctx.env);
    },
    // Other ais processes share this config: refresh one at a time, adopting what they stored.
    sharedTokens: ctx.env.AIS_TOKEN
      ? undefined
      : {
          lock: (work) => withConfigLock(ctx.env, work),
          stored: () => {
            const c = loadConfig(ctx.env);
            return c.access && c.refresh ? { access: c.access, refresh: c.refresh } : null;
          },
        },
  });
}

function requireIdentity(ctx: Ctx, fenced: boolean): string | undefined {
  const id = ctx.identityFlag ?? ctx.env.AIS_IDENTITY ?? ctx.config.identity;
  if (!id && !fenced) throw new CliError('identity_required', 'No identity selected: run `ais identities use <uuid|name>` or pass --identity.', EXIT.usage);
  return id;
}

/** Maps SDK errors onto the named conditions. */
async function translate(err: unknown, c?: AisClient): Promise<unknown> {
  if (err instanceof CryptoError) {
    if (err.code === 'pin_locked') return new CliError('pin_locked', 'PIN entered wrongly 3 times: the vault is locked. Run `ais pin recover` with your recovery key.');
    if (err.code === 'encryption_missing') return new CliError('encryption_missing', 'No PIN is set up for this account: run `ais pin setup` first.');
    if (err.code === 'wrong_pin') return new CliError('wrong_pin', `Wrong PIN (${err.attemptsLeft} attempt(s) left before the vault locks).`, EXIT.wrong_pin, { attempts_left: err.attemptsLeft });
    return new CliError(err.code, err.message);
  }
  if (err instanceof ApiRequestError) {
    if (err.code === 'device_code_expired') return new CliError('device_code_expired', 'The login code expired before it was approved: run `ais login` again.');
    if (err.status === 401 && err.code === 'token_expired') return new CliError('token_expired', 'Your session has ended (signed out or password changed elsewhere): run `ais login` again.');
    if (err.status === 401) return new CliError('not_authenticated', `Not authenticated (${err.detail}): run \`ais login\`.`);
    if (err.status === 404 && c?.identity) {
      // Is it the configured identity that is gone, or the thing asked for?
      const gone = await c.identities.get(c.identity).then(
        () => false,
        (e) => e instanceof ApiRequestError && e.status === 404,
      );
      if (gone) return new CliError('identity_not_found', `The identity ${c.identity} no longer exists: pick another with \`ais identities use\`.`, EXIT.identity_not_found, { identity: c.identity });
    }
    return new CliError(err.code ?? `http_${err.status}`, err.detail, EXIT.api_error, { status: err.status, ...(err.fields ? { fields: err.fields } : {}) });
  }
  if (err instanceof NetworkError) return new CliError('network_error', err.message, EXIT.network_error);
  return err;
}

// ---------------------------------------------------------------------------------------------
// Secrets input (never an argument: env var, stdin for agents, or a prompt)

/** Stdin read once (it is not a terminal): the text, and how far lines were taken from it. */
let stdin: { text: string; at: number } | null = null;
/**
 * A secret, in this order: the env var; the next line of stdin when stdin is not a terminal
 * (agents pipe values in, one per line; a value to store takes the rest of stdin); else a
 * prompt on the terminal with echo off.
 * With --no-input (AIS_NO_INPUT=1) it never prompts.
 */
async function readSecret(ctx: Ctx, envName: string, prompt: string, opts: { value?: boolean } = {}): Promise<string> {
  const fromEnv = ctx.env[envName];
  // A stored value is kept exactly (spaces, tabs); PINs, keys and passwords to sign in are trimmed.
  if (fromEnv) return opts.value ? fromEnv : fromEnv.trim();
  const missing = () => new CliError('usage', `${prompt} needed: set ${envName} or give it on stdin (one value per line).`, EXIT.usage);
  if (!process.stdin.isTTY) {
    if (stdin === null) {
      const chunks: Buffer[] = [];
      for await (const c of process.stdin) chunks.push(c as Buffer);
      try {
        stdin = { text: new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(Buffer.concat(chunks)), at: 0 };
      } catch {
        // Bytes that are no UTF-8 would be stored as U+FFFD, silently: refused instead.
        throw new CliError('usage', 'stdin is not UTF-8 text (the vault stores text: encode binary values, e.g. base64).', EXIT.usage);
      }
    }
    if (opts.value) {
      // The value to store is the last thing read: the rest of stdin, exactly as given (a
      // multi-line PEM, CRLF line ends), less the one line break that ends it.
      const rest = stdin.text.slice(stdin.at).replace(/\r?\n$/, '');
      stdin.at = stdin.text.length;
      if (rest === '') throw missing();
      return rest;
    }
    if (stdin.at >= stdin.text.length) throw missing();
    const end = stdin.text.indexOf('\n', stdin.at);
    const line = stdin.text.slice(stdin.at, end < 0 ? undefined : end).replace(/\r$/, '');
    stdin.at = end < 0 ? stdin.text.length : end + 1;
    if (line === '') throw missing();
    return line.trim();
  }
  if (ctx.noInput) throw missing();
  const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
  // Echo off: readline writes typed characters through _writeToOutput; keep only the prompt.
  const muted = rl as unknown as { _writeToOutput: (s: string) => void; output: NodeJS.WritableStream };
  let prompted = false;
  muted._writeToOutput = (s: string) => {
    if (!prompted) {
      prompted = true;
      muted.output.write(s);
    }
  };
  try {
    const answer = await new Promise<string>((r) => rl.question(`${prompt}: `, r));
    return opts.value ? answer : answer.trim();
  } finally {
    rl.close();
    process.stderr.write('\n');
  }
}

// ---------------------------------------------------------------------------------------------
// Commands

interface Command {
  usage: string;
  summary: string;
  options?: NonNullable<ParseArgsConfig['options']>;
  /** Environment variables the command reads instead of prompting (shown by --help). */
  env?: Record<string, string>;
  run: (ctx: Ctx, positionals: string[], values: Record<string, any>) => Promise<void>;
}

function parse(cmd: Command, args: string[]) {
  return parseArgs({ args, options: { ...GLOBAL, ...(cmd.options ?? {}) }, allowPositionals: true, strict: true });
}

async function saveLogin(ctx: Ctx, t: { access: string; refresh: string; user: CliConfig['user']; management_key?: string }) {
  ctx.config = await updateConfig(ctx.env, (stored) => ({
    ...stored,
    base_url: ctx.baseUrl,
    access: t.access,
    refresh: t.refresh,
    user: t.user,
    ...(t.management_key ? { management_key: t.management_key } : {}),
  }));
}

const commands: Record<string, Command> = {
  login: {
    usage: 'ais login [--username U | --email E] [--no-wait] [--qr | --no-qr]',
    summary: 'Sign in with the device flow (default), or with a local password (AIS_PASSWORD or stdin).',
    options: {
      username: { type: 'string' },
      email: { type: 'string' },
      'no-wait': { type: 'boolean' },
      qr: { type: 'boolean' },
      'no-qr': { type: 'boolean' },
    },
    env: { AIS_PASSWORD: 'the password, with --username/--email (else the next stdin line, else a prompt)' },
    async run(ctx, _p, v) {
      const c = createClient({ baseUrl: ctx.baseUrl });
      if (v.username || v.email) {
        const password = await readSecret(ctx, 'AIS_PASSWORD', 'Password');
        const pair = await c.auth.login({ password, ...(v.username ? { username: v.username } : { email: v.email }) });
        await saveLogin(ctx, pair);
        return show(ctx, { user: pair.user, config: configFile(ctx.env) }, () => `Logged in as ${pair.user.username} (${pair.user.email}).`);
      }
      const auth: DeviceAuthorization = await c.auth.deviceStart();
      // The code goes to stderr so --json stdout stays one document; agents read both.
      const lines = [
        `To sign in, open ${auth.verification_uri} and enter the code: ${auth.user_code}`,
        ...(auth.verification_uri_complete ? [`Or open directly: ${auth.verification_uri_complete}`] : []),
      ];
      if (ctx.json) ctx.err(JSON.stringify({ verification_uri: auth.verification_uri, user_code: auth.user_code, verification_uri_complete: auth.verification_uri_complete, expires_in: auth.expires_in }));
      else ctx.err(lines.join('\n'));
      // A QR code of the complete URI for a phone: on a terminal, or when asked for.
      const qr = v.qr || (!v['no-qr'] && !ctx.json && (ctx.errTTY || ctx.outTTY));
      if (qr && auth.verification_uri_complete) {
        ctx.err(`${ctx.json ? '' : 'Or scan:\n'}${await QRCode.toString(auth.verification_uri_complete, { type: 'terminal', small: true })}`);
      }
      if (!ctx.json) ctx.err(`Waiting for approval (the code expires in ${formatDuration(auth.expires_in)})...`);
      const t = await c.auth.deviceWait(auth, { wait: !v['no-wait'] });
      await saveLogin(ctx, t);
      show(ctx, { user: t.user, management_key_saved: true, config: configFile(ctx.env) }, () => `Logged in as ${t.user.username} (${t.user.email}). Tokens and management key saved to ${configFile(ctx.env)}.`);
    },
  },
  logout: {
    usage: 'ais logout [--keep-key]',
    summary: 'End the session on the server and forget the tokens (and the management key unless --keep-key).',
    options: { 'keep-key': { type: 'boolean' } },
    async run(ctx, _p, v) {
      // An expired session needs no ending; a service out of reach does: said, not hidden.
      const unreached = (err: unknown) => err instanceof NetworkError || (err instanceof ApiRequestError && err.status >= 500);
      const ended = ctx.config.access ? await client(ctx).auth.logout().then(() => true, (err: unknown) => !unreached(err)) : true;
      ctx.config = await updateConfig(ctx.env, ({ access: _a, refresh: _r, management_key, ...rest }) => (v['keep-key'] && management_key ? { ...rest, management_key } : rest));
      if (!ended) ctx.err('warning: the service could not be reached (or failed), so the session was not ended there (its refresh token stays valid until it expires).');
      show(ctx, { logged_out: true, session_ended: ended }, () => (ended ? 'Logged out.' : 'Logged out on this machine only.'));
    },
  },
  whoami: {
    usage: 'ais whoami',
    summary: 'Who the stored credential is (kind, user, identity, key).',
    async run(ctx) {
      const w = await client(ctx).whoami();
      const out = { ...w, default_identity: ctx.config.identity ?? null };
      show(ctx, out, () => kv(out as Record<string, unknown>));
    },
  },
  'identities list': {
    usage: 'ais identities list',
    summary: 'List the identities of the account.',
    async run(ctx) {
      const list = await client(ctx).identities.list();
      show(ctx, list, () => table(list.map((i) => ({ ...i, default: i.uuid === ctx.config.identity ? '*' : '' })) as any, ['default', 'uuid', 'name', 'inbox', 'phone', 'created_dt']));
    },
  },
  'identities create': {
    usage: 'ais identities create <name> [--email-identifier LOCAL] [--phone] [--use]',
    summary: 'Create an identity (with an inbox); --use makes it the default.',
    options: { 'email-identifier': { type: 'string' }, phone: { type: 'boolean' }, use: { type: 'boolean' } },
    async run(ctx, p, v) {
      if (!p[0]) throw usage('ais identities create <name>');
      const i = await client(ctx).identities.create({ name: p[0], ...(v['email-identifier'] ? { email_identifier: v['email-identifier'] } : {}), ...(v.phone ? { provision_phone: true } : {}) });
      if (v.use || !ctx.config.identity) ctx.config = await updateConfig(ctx.env, (stored) => ({ ...stored, identity: i.uuid }));
      show(ctx, i, () => kv(i as any, ['uuid', 'name', 'inbox', 'phone', 'created_dt']) + (ctx.config.identity === i.uuid ? '\n(default identity)' : ''));
    },
  },
  'identities delete': {
    usage: 'ais identities delete <uuid|name>',
    summary: 'Delete an identity.',
    async run(ctx, p) {
      const c = client(ctx);
      const id = await resolveIdentity(c, p[0]);
      await c.identities.delete(id);
      show(ctx, { deleted: id }, () => `Deleted identity ${id}.`);
    },
  },
  'identities use': {
    usage: 'ais identities use <uuid|name>',
    summary: 'Make an identity the default for identity-scoped commands.',
    async run(ctx, p) {
      const c = client(ctx);
      const id = await resolveIdentity(c, p[0]);
      ctx.config = await updateConfig(ctx.env, (stored) => ({ ...stored, identity: id }));
      show(ctx, { identity: id }, () => `Default identity: ${id}.`);
    },
  },
  'keys list': {
    usage: 'ais keys list [--kind management|identity]',
    summary: 'List management and identity keys (masked).',
    options: { kind: { type: 'string' } },
    async run(ctx, _p, v) {
      const c = client(ctx);
      const management = v.kind === 'identity' ? [] : await c.keys.management.list();
      const identity = v.kind === 'management' ? [] : await c.keys.identity.list();
      const rows = [...management.map((k) => ({ kind: 'management', ...k })), ...identity.map((k) => ({ kind: 'identity', ...k }))];
      show(ctx, { management, identity }, () => table(rows as any, ['kind', 'uuid', 'label', 'masked_key', 'identity', 'last_used_at', 'created_dt']));
    },
  },
  'keys create': {
    usage: 'ais keys create <label> [--management | --identity UUID]',
    summary: 'Mint a key; the full key is printed once. Default: an identity key for the default identity.',
    options: { management: { type: 'boolean' } },
    async run(ctx, p, v) {
      if (!p[0]) throw usage('ais keys create <label>');
      const c = client(ctx);
      const k = v.management ? await c.keys.management.create(p[0]) : await c.keys.identity.create(p[0], await resolveIdentity(c, requireIdentity(ctx, false)));
      show(ctx, k, () => `${kv(k as any, ['uuid', 'label', 'identity_uuid', 'created_dt'])}\nkey: ${k.key}\n(This is the only time the full key is shown.)`);
    },
  },
  'keys revoke': {
    usage: 'ais keys revoke <uuid>',
    summary: 'Revoke a key (management or identity).',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais keys revoke <uuid>');
      const c = client(ctx);
      await c.keys.identity.revoke(p[0]).catch(async (e) => {
        if (e instanceof ApiRequestError && e.status === 404) return c.keys.management.revoke(p[0]);
        throw e;
      });
      show(ctx, { revoked: p[0] }, () => `Revoked key ${p[0]}.`);
    },
  },
  'inbox list': {
    usage: 'ais inbox list [--unread]',
    summary: 'Email threads of the identity, newest first.',
    options: { unread: { type: 'boolean' } },
    async run(ctx, _p, v) {
      const list = await client(ctx, { identity: true }).email.inbox({ unread: !!v.unread });
      show(ctx, list, () => table(list as any, ['thread_id', 'from_email', 'subject', 'unread_count', 'last_message_at']));
    },
  },
  'inbox show': {
    usage: 'ais inbox show <thread_id>',
    summary: 'One thread with its messages (marks them read).',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais inbox show <thread_id>');
      const t = await client(ctx, { identity: true }).email.thread(p[0]);
      const message = (m: any) =>
        [
          `\n--- ${m.id}  ${m.created_dt ?? ''}`,
          `From: ${m.from_email ?? m.from ?? ''}`,
          `To: ${[].concat(m.to ?? []).join(', ')}`,
          ...(m.cc?.length ? [`Cc: ${m.cc.join(', ')}`] : []),
          ...(m.attachments ?? []).map((a: any) => `Attachment: ${a.filename} (${a.content_type}, ${formatBytes(a.size)})`),
          '',
          m.text ?? m.preview ?? '',
        ].join('\n');
      show(ctx, t, () => [kv(t as any, ['thread_id', 'subject']), ...(t.messages ?? []).map(message)].join('\n'));
    },
  },
  'inbox watch': {
    usage: 'ais inbox watch [--count N] [--since ID]',
    summary: 'Print new mail as it arrives (event stream; resumes after disconnects).',
    options: { count: { type: 'string' }, since: { type: 'string' } },
    run: (ctx, _p, v) => watch(ctx, 'email', v, (d) => `${d.from_email}  ${d.subject}  ${d.preview} [${d.thread_id}]`),
  },
  send: {
    usage: 'ais send --to ADDR --subject S (--body TEXT | --body-file F) [--cc A] [--bcc A] [--attach FILE...]',
    summary: 'Compose and send an email, with attachments.',
    options: { to: { type: 'string' }, subject: { type: 'string' }, body: { type: 'string' }, 'body-file': { type: 'string' }, cc: { type: 'string' }, bcc: { type: 'string' }, attach: { type: 'string', multiple: true } },
    async run(ctx, _p, v) {
      if (!v.to) throw usage('ais send --to ADDR --subject S --body TEXT');
      const c = client(ctx, { identity: true });
      const m = await c.email.sendWithAttachments({ to: v.to, subject: v.subject ?? '', body: bodyOf(v), cc: v.cc ?? '', bcc: v.bcc ?? '' }, files(v.attach), progressReporter(ctx));
      show(ctx, m, () => `Sent (${m.status ?? 'queued'}): ${m.id}`);
    },
  },
  reply: replyCommand(false),
  'reply-all': replyCommand(true),
  'sms list': {
    usage: 'ais sms list [--unread]',
    summary: 'SMS conversations of the identity.',
    options: { unread: { type: 'boolean' } },
    async run(ctx, _p, v) {
      const list = await client(ctx, { identity: true }).sms.inbox({ unread: !!v.unread });
      show(ctx, list, () => table(list as any, ['conversation_id', 'peer', 'unread_count', 'preview', 'last_message_at']));
    },
  },
  'sms show': {
    usage: 'ais sms show <conversation_id>',
    summary: 'One SMS conversation with its messages.',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais sms show <conversation_id>');
      const conv = await client(ctx, { identity: true }).sms.conversation(p[0]);
      show(ctx, conv, () => `${conv.peer}\n${table(conv.messages as any, ['created_dt', 'from_number', 'body'])}`);
    },
  },
  'sms watch': {
    usage: 'ais sms watch [--count N] [--since ID]',
    summary: 'Print inbound SMS as they arrive.',
    options: { count: { type: 'string' }, since: { type: 'string' } },
    run: (ctx, _p, v) => watch(ctx, 'sms', v, (d) => `${d.from_number}  ${d.preview} [${d.conversation_id}]`),
  },
  phone: {
    usage: 'ais phone',
    summary: 'Phone numbers of the identity.',
    async run(ctx) {
      const list = await client(ctx, { identity: true }).sms.phone();
      show(ctx, list, () => table(list as any, ['number', 'provider', 'capabilities', 'created_dt']));
    },
  },
  'pin setup': {
    usage: 'ais pin setup   (PIN: AIS_PIN or stdin)',
    summary: 'First-time vault encryption: derive keys from a 6-digit PIN; prints the recovery key ONCE.',
    env: { AIS_PIN: 'the new 6-digit PIN (else stdin, else a prompt)', AIS_PIN_KDF: 'Argon2id parameters for tests or small devices, e.g. argon2id:m=19456,t=2,p=1 (never below that floor; default m=65536,t=3,p=1)' },
    async run(ctx) {
      const c = client(ctx);
      const meta = await c.encryption.get();
      const shown = (recoveryKey: string, deviceSecret: string) =>
        show(ctx, { recovery_key: recoveryKey, device_secret: deviceSecret }, () =>
          `PIN set. Recovery key (shown once; store it safely):\n\n  ${recoveryKey}\n\nDevice secret (needed with the PIN on other machines; saved in ${configFile(ctx.env)}):\n\n  ${deviceSecret}`,
        );
      const pending = loadConfig(ctx.env).pending_setup;
      if (meta.public_key) {
        // A setup of this machine cut off after its upload landed: its keys are here, shown now.
        if (pending && pending.public_key === meta.public_key && ctx.config.device_secret) {
          ctx.config = await updateConfig(ctx.env, ({ pending_setup: _done, ...stored }) => stored);
          await lockStore(ctx, meta.salt).write({ failures: 0 });
          // The PIN is the one that run was given (no new one is read or set here).
          return show(ctx, { recovery_key: pending.recovery_key, device_secret: ctx.config.device_secret, resumed: true }, () =>
            `An earlier \`ais pin setup\` was cut off after it set the PIN: the PIN is the one given to it then (not changed now).\nIts recovery key (shown once; store it safely):\n\n  ${pending.recovery_key}\n\nDevice secret (saved in ${configFile(ctx.env)}):\n\n  ${ctx.config.device_secret}`,
          );
        }
        if (!meta.wrapped_key) throw foreignSetup();
        throw new CliError('already_set_up', 'A PIN is already set up for this account: use `ais pin change` or `ais pin recover`.', EXIT.api_error);
      }
      const pin = await readSecret(ctx, 'AIS_PIN', 'New 6-digit PIN');
      const s = await setupEncryption({ pin, salt: meta.salt, deviceSecret: ctx.config.device_secret, kdf: kdfOverride(ctx) });
      // Kept before the upload: a setup cut off after it (a crash, a lost answer) would leave a
      // PIN whose device secret and recovery key are nowhere, a vault nobody can open.
      ctx.config = await updateConfig(ctx.env, (stored) => ({ ...stored, device_secret: s.deviceSecret, pending_setup: { recovery_key: s.recoveryKey, public_key: s.upload.public_key } }));
      await c.encryption.setup(s.upload);
      ctx.config = await updateConfig(ctx.env, ({ pending_setup: _done, ...stored }) => stored);
      await lockStore(ctx, meta.salt).write({ failures: 0 });
      shown(s.recoveryKey, s.deviceSecret);
    },
  },
  'pin change': {
    usage: 'ais pin change   (AIS_PIN = current, AIS_NEW_PIN = new; or two stdin lines)',
    summary: 'Change the PIN (the vault key is re-wrapped; entries stay as they are).',
    env: { AIS_PIN: 'the current PIN', AIS_NEW_PIN: 'the new PIN (else two stdin lines: current, new)' },
    async run(ctx) {
      const c = client(ctx);
      const metadata = await metadataFor(c);
      const pin = await readSecret(ctx, 'AIS_PIN', 'Current PIN');
      const newPin = await readSecret(ctx, 'AIS_NEW_PIN', 'New PIN');
      const { upload } = await changePin({ pin, newPin, deviceSecret: deviceSecret(ctx), metadata, lockStore: lockStore(ctx, metadata.salt) });
      await c.encryption.rewrap(upload);
      show(ctx, { changed: true }, () => 'PIN changed.');
    },
  },
  'pin recover': {
    usage: 'ais pin recover   (AIS_RECOVERY_KEY, AIS_NEW_PIN; or two stdin lines)',
    summary: 'Set a new PIN with the recovery key (also clears a pin_locked vault).',
    env: { AIS_RECOVERY_KEY: 'the recovery key (RK1-...)', AIS_NEW_PIN: 'the new PIN (else two stdin lines: key, PIN)' },
    async run(ctx) {
      const c = client(ctx);
      const metadata = await metadataFor(c);
      const recoveryKey = await readSecret(ctx, 'AIS_RECOVERY_KEY', 'Recovery key');
      const newPin = await readSecret(ctx, 'AIS_NEW_PIN', 'New PIN');
      const known = ctx.env.AIS_DEVICE_SECRET ?? ctx.config.device_secret;
      const r = await recover({ recoveryKey, newPin, metadata, deviceSecret: known, lockStore: lockStore(ctx, metadata.salt) });
      await c.encryption.rewrap(r.upload);
      ctx.config = await updateConfig(ctx.env, (stored) => ({ ...stored, device_secret: r.deviceSecret }));
      // Without the old device secret the vault key is now wrapped under a new one: every other
      // machine needs it (else its PIN no longer opens the vault), so say so, loudly.
      show(ctx, { recovered: true, device_secret: r.deviceSecret, new_device_secret: !known }, () =>
        known
          ? 'PIN reset; the vault is unlocked again.'
          : [
              'PIN reset; the vault is unlocked again, under a NEW device secret (this machine had none):',
              `  ${r.deviceSecret}`,
              'Your other machines need it to unlock: set AIS_DEVICE_SECRET there (or run `ais pin recover` there with AIS_DEVICE_SECRET set).',
            ].join('\n'),
      );
    },
  },
  'passwords list': {
    usage: 'ais passwords list',
    summary: 'Password entries, decrypted locally (needs the PIN).',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)' },
    async run(ctx) {
      const v = await unlocked(ctx);
      const { entries: list, failed } = await v.listPasswordsReport();
      for (const f of failed) ctx.err(`warning: entry ${f.uuid} (${f.domain}) does not decrypt (${f.error}): written by another client, or changed without this PIN's key; left out.`);
      show(ctx, list, () => table(list.map((e) => ({ ...e, password: '********' })) as any, ['uuid', 'domain', 'username', 'password', 'notes']));
    },
  },
  'passwords add': {
    usage: 'ais passwords add <domain> --username U [--password P | --generate] [--notes N]',
    summary: 'Store a password entry, encrypted on this machine.',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)', AIS_ENTRY_PASSWORD: 'the password to store, when neither --password nor --generate' },
    options: { username: { type: 'string' }, password: { type: 'string' }, generate: { type: 'boolean' }, notes: { type: 'string' } },
    async run(ctx, p, o) {
      if (!p[0] || !o.username) throw usage('ais passwords add <domain> --username U --password P');
      const v = await unlocked(ctx);
      const password = o.generate ? (await v.client.passwords.generate()).password : (o.password ?? (await readSecret(ctx, 'AIS_ENTRY_PASSWORD', 'Password to store', { value: true })));
      const e = await v.addPassword({ domain: p[0], username: o.username, password, notes: o.notes ?? '' });
      show(ctx, e, () => `Stored ${e.domain} (${e.uuid}).`);
    },
  },
  'passwords get': {
    usage: 'ais passwords get <uuid|domain>',
    summary: 'Show one entry, decrypted.',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)' },
    async run(ctx, p) {
      if (!p[0]) throw usage('ais passwords get <uuid|domain>');
      const v = await unlocked(ctx);
      let e: PlainPassword | undefined;
      if (isUuid(p[0])) e = await v.getPassword(p[0]);
      else {
        const { entries, failed } = await v.listPasswordsReport();
        e = entries.find((x) => x.domain === p[0]);
        const bad = failed.find((x) => x.domain === p[0]);
        if (!e && bad) throw new CliError(bad.error, `The entry for ${p[0]} (${bad.uuid}) does not decrypt: written by another client, or changed without this PIN's key.`, EXIT.api_error);
      }
      if (!e) throw new CliError('not_found', `No password entry for ${p[0]}.`, EXIT.api_error);
      show(ctx, e, () => kv(e as any));
    },
  },
  'passwords rm': {
    usage: 'ais passwords rm <uuid>',
    summary: 'Delete an entry.',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais passwords rm <uuid>');
      await client(ctx, { identity: true }).passwords.delete(p[0]);
      show(ctx, { deleted: p[0] }, () => `Deleted ${p[0]}.`);
    },
  },
  'passwords generate': {
    usage: 'ais passwords generate',
    summary: 'A random password from the server generator.',
    async run(ctx) {
      const g = await client(ctx, { identity: true }).passwords.generate();
      show(ctx, g, () => g.password);
    },
  },
  'secrets list': {
    usage: 'ais secrets list',
    summary: 'Secret names (values are never listed).',
    async run(ctx) {
      const list = await client(ctx, { identity: true }).vault.list();
      show(ctx, list, () => table(list as any, ['uuid', 'key', 'created_dt', 'updated_dt']));
    },
  },
  'secrets set': {
    usage: 'ais secrets set <key> [value]   (value from AIS_SECRET_VALUE or stdin when omitted)',
    summary: 'Create or update a secret, encrypted on this machine.',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)', AIS_SECRET_VALUE: 'the value, when not given as an argument' },
    async run(ctx, p) {
      if (!p[0]) throw usage('ais secrets set <key> [value]');
      const v = await unlocked(ctx);
      const value = p[1] ?? (await readSecret(ctx, 'AIS_SECRET_VALUE', 'Secret value', { value: true }));
      const s = await v.setSecret(p[0], value);
      show(ctx, { uuid: s.uuid, key: s.key }, () => `Stored secret ${s.key} (${s.uuid}).`);
    },
  },
  'secrets get': {
    usage: 'ais secrets get <key|uuid>',
    summary: 'Print a secret, decrypted.',
    env: { AIS_PIN: 'the vault PIN (else the next stdin line, else a prompt)' },
    async run(ctx, p) {
      if (!p[0]) throw usage('ais secrets get <key|uuid>');
      const v = await unlocked(ctx);
      const s = await v.getSecret(p[0]).catch((e) => {
        // A missing secret name; an API 404 goes through translate (it may be the identity that is gone).
        if (e?.code === 'not_found' && !(e instanceof ApiRequestError)) throw new CliError('not_found', e.message, EXIT.api_error);
        throw e;
      });
      show(ctx, s, () => s.value ?? '');
    },
  },
  'secrets rm': {
    usage: 'ais secrets rm <key|uuid>',
    summary: 'Delete a secret.',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais secrets rm <key|uuid>');
      const c = client(ctx, { identity: true });
      const id = (await c.vault.find(p[0]))?.uuid;
      if (!id) throw new CliError('not_found', `No secret named ${p[0]}.`, EXIT.api_error);
      await c.vault.delete(id);
      show(ctx, { deleted: id }, () => `Deleted ${p[0]}.`);
    },
  },
};

function replyCommand(all: boolean): Command {
  return {
    usage: `ais ${all ? 'reply-all' : 'reply'} <message_id> (--body TEXT | --body-file F) [--cc A] [--bcc A] [--attach FILE...]`,
    summary: all ? 'Reply to every recipient of a message.' : 'Reply to the sender of a message.',
    options: { body: { type: 'string' }, 'body-file': { type: 'string' }, cc: { type: 'string' }, bcc: { type: 'string' }, attach: { type: 'string', multiple: true } },
    async run(ctx, p, v) {
      if (!p[0]) throw usage(this.usage);
      const c = client(ctx, { identity: true });
      const m = await c.email.sendWithAttachments({ replyTo: p[0], all, body: bodyOf(v), ...(v.cc ? { cc: v.cc } : {}), ...(v.bcc ? { bcc: v.bcc } : {}) }, files(v.attach), progressReporter(ctx));
      show(ctx, m, () => `Sent (${m.status ?? 'queued'}): ${m.id}`);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Helpers

function usage(u: string): CliError {
  return new CliError('usage', `Usage: ${u}`, EXIT.usage);
}

const isUuid = (s: string) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s);

async function resolveIdentity(c: AisClient, ref: string | undefined): Promise<string> {
  if (!ref) throw usage('<uuid|name> required');
  if (isUuid(ref)) {
    try {
      return (await c.identities.get(ref)).uuid;
    } catch (e) {
      if (e instanceof ApiRequestError && e.status === 404) throw new CliError('identity_not_found', `No identity ${ref}.`, EXIT.identity_not_found, { identity: ref });
      throw e;
    }
  }
  const hit = (await c.identities.list()).find((i) => i.name.toLowerCase() === ref.toLowerCase());
  if (!hit) throw new CliError('identity_not_found', `No identity named ${ref}.`, EXIT.identity_not_found, { identity: ref });
  return hit.uuid;
}

/**
 * `--identity` / AIS_IDENTITY may name the identity (`--identity pager`), as `identities use`
 * does: resolved once to its uuid. Without credentials it is left as is (the command says so).
 */
async function resolveIdentityName(ctx: Ctx): Promise<void> {
  const ref = ctx.identityFlag ?? ctx.env.AIS_IDENTITY;
  // An identity key is fenced to one identity: with none named, that one (the vault and the
  // watch commands need its uuid, not just a request the server scopes by the key), over a
  // default identity in the config (the key, given explicitly, decides).
  if (!ref && ctx.env.AIS_API_KEY?.startsWith('svc_id_')) {
    const me = await client(ctx).whoami().catch(() => null);
    if (me?.identity) ctx.identityFlag = me.identity;
    return;
  }
  if (!ref || isUuid(ref)) return;
  let c: AisClient;
  try {
    c = client(ctx);
  } catch {
    return;
  }
  try {
    ctx.identityFlag = await resolveIdentity(c, ref);
  } catch (err) {
    // No such name: commands that need no identity go on; the others get the 404 as usual.
    if (!(err instanceof CliError && err.code === 'identity_not_found')) throw err;
  }
}

function bodyOf(v: Record<string, any>): string {
  if (v['body-file']) {
    try {
      return readFileSync(v['body-file'], 'utf8');
    } catch (err) {
      throw new CliError('usage', `Cannot read the body file ${v['body-file']}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, EXIT.usage);
    }
  }
  if (v.body === undefined) throw usage('--body TEXT or --body-file FILE is required');
  return v.body;
}

const TYPES: Record<string, string> = { '.txt': 'text/plain', '.pdf': 'application/pdf', '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.json': 'application/json', '.csv': 'text/csv', '.html': 'text/html', '.zip': 'application/zip' };
function files(paths: string[] | undefined): Attachment[] {
  return (paths ?? []).map((p) => {
    let data: Buffer;
    try {
      data = readFileSync(p);
    } catch (err) {
      throw new CliError('usage', `Cannot read attachment ${p}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, EXIT.usage);
    }
    return { filename: path.basename(p), content_type: TYPES[path.extname(p).toLowerCase()] ?? 'application/octet-stream', data };
  });
}

function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MiB`;
}

function formatDuration(seconds: number): string {
  return seconds >= 120 ? `${Math.round(seconds / 60)} min` : `${seconds} s`;
}

/**
 * Upload progress on stderr. On a terminal: one line redrawn with bytes sent / total (at most
 * every 100 ms), then the final line. Otherwise only the final line per file (JSON with
 * --json), so logs of agents stay short.
 */
export function progressReporter(ctx: Pick<Ctx, 'json' | 'err' | 'errTTY' | 'errWrite'>): (file: string, sent: number, total: number) => void {
  let last = 0;
  return (file, sent, total) => {
    const done = sent >= total;
    if (ctx.json) {
      if (done) ctx.err(JSON.stringify({ uploaded: file, bytes: total }));
      return;
    }
    if (ctx.errTTY) {
      const now = Date.now();
      if (!done && now - last < 100) return;
      last = now;
      const pct = total ? Math.floor((100 * sent) / total) : 100;
      ctx.errWrite(`\r\x1b[Kuploading ${file}: ${formatBytes(sent)} / ${formatBytes(total)} (${pct}%)`);
      if (done) ctx.errWrite(`\r\x1b[Kuploaded ${file} (${formatBytes(total)})\n`);
      return;
    }
    if (done) ctx.err(`uploaded ${file} (${total} bytes)`);
  };
}

/** AIS_PIN_KDF: lower Argon2id cost for tests (floored by parseKdf at 19 MiB, t=2). */
function kdfOverride(ctx: Ctx): KdfParams | undefined {
  const raw = ctx.env.AIS_PIN_KDF;
  if (!raw) return undefined;
  try {
    return parseKdf(raw.trim());
  } catch (err) {
    throw new CliError('usage', `AIS_PIN_KDF: ${(err as Error).message} (format argon2id:m=KiB,t=N,p=N)`, EXIT.usage);
  }
}

/**
 * The wrong-PIN counter of the account, filed by its salt (one per account, server-made):
 * two accounts used from one machine (a login and an AIS_API_KEY, or two keys) never share
 * a counter.
 */
function lockStore(ctx: Ctx, salt: string) {
  const file = path.join(configDir(ctx.env), `pin-lock-${createHash('sha256').update(salt).digest('hex').slice(0, 16)}.json`);
  // Before, the counter of a logged-in user was filed by user pk: carried over (a locked
  // vault stays locked across the upgrade).
  const older = ctx.config.user?.pk === undefined ? null : path.join(configDir(ctx.env), `pin-lock-${ctx.config.user.pk}.json`);
  if (older && !existsSync(file) && existsSync(older)) renameSync(older, file);
  return fileLockStore(file);
}

function deviceSecret(ctx: Ctx): string {
  const s = ctx.env.AIS_DEVICE_SECRET ?? ctx.config.device_secret;
  if (!s) throw new CliError('encryption_missing', 'This machine has no device secret for the vault: run `ais pin setup` (new account) or `ais pin recover`, or set AIS_DEVICE_SECRET.');
  return s;
}

/** Encryption set up by a client that keeps no wrapped vault key on the server (SPEC's minimal upload). */
function foreignSetup(): CliError {
  return new CliError('encryption_foreign', "This account's encryption was set up by another client that keeps its vault key elsewhere (no wrapped key on the server): this CLI cannot unlock it. Use that client.");
}

async function metadataFor(c: AisClient): Promise<EncryptionMetadata> {
  const m = await c.encryption.get();
  if (!m.public_key || !m.verifier) throw new CliError('encryption_missing', 'No PIN is set up for this account: run `ais pin setup` first.');
  if (!m.wrapped_key) throw foreignSetup();
  return m as EncryptionMetadata;
}

async function unlocked(ctx: Ctx): Promise<UnlockedVault> {
  const c = client(ctx, { identity: true });
  const metadata = await metadataFor(c);
  const secret = deviceSecret(ctx);
  const pin = await readSecret(ctx, 'AIS_PIN', 'PIN');
  const key = await unlock({ pin, deviceSecret: secret, metadata, lockStore: lockStore(ctx, metadata.salt) });
  return new UnlockedVault(c, key);
}

async function watch(ctx: Ctx, kind: 'email' | 'sms', v: Record<string, any>, line: (d: any) => string): Promise<void> {
  if (v.count !== undefined && !/^[1-9]\d*$/.test(v.count)) throw usage('--count takes a positive whole number');
  const c = client(ctx, { identity: true });
  // Fail fast on a deleted identity or bad credentials before streaming.
  await c.identities.get(c.identity!).catch((e) => {
    throw e instanceof ApiRequestError && e.status === 404 ? new CliError('identity_not_found', `The identity ${c.identity} no longer exists.`, EXIT.identity_not_found) : e;
  });
  const max = v.count ? Number(v.count) : Infinity;
  const ac = new AbortController();
  process.once('SIGINT', () => ac.abort());
  process.once('SIGTERM', () => ac.abort());
  let seen = 0;
  const stream = c.events({
    lastEventId: v.since,
    signal: ac.signal,
    onStatus: (s) => {
      if (s.state === 'open' && !ctx.json) ctx.err(s.attempt ? 'reconnected.' : `watching ${kind} for ${c.identity} (Ctrl-C to stop)`);
      if (s.state === 'reconnecting' && !ctx.json) ctx.err(`disconnected; reconnecting in ${Math.round((s.delayMs ?? 0) / 1000)}s`);
      if (s.state === 'open' && ctx.json && !s.attempt) ctx.err(JSON.stringify({ watching: kind, identity: c.identity }));
    },
  });
  for await (const e of stream) {
    if (e.event !== kind) continue;
    ctx.out(ctx.json ? JSON.stringify({ id: e.id, event: e.event, ...(e.data as object) }) : forTerminal(line(e.data)));
    if (++seen >= max) {
      ac.abort();
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Entry

const GROUPS = ['identities', 'keys', 'inbox', 'sms', 'pin', 'passwords', 'secrets'];

function help(prefix?: string): string {
  const names = Object.keys(commands).filter((n) => !prefix || n === prefix || n.startsWith(prefix + ' '));
  if (names.length === 1) {
    const c = commands[names[0]];
    const opts = Object.entries(c.options ?? {}).map(([k, o]) => `  --${k}${o.type === 'string' ? ' VALUE' : ''}${o.multiple ? ' (repeatable)' : ''}`);
    const env = Object.entries(c.env ?? {}).map(([k, d]) => `  ${k.padEnd(18)} ${d}`);
    return [
      `Usage: ${c.usage}`,
      '',
      c.summary,
      '',
      'Options:',
      ...opts,
      '  --json            machine-readable output (errors as {"error": {...}} on stderr)',
      '  --identity ID     identity for this command, uuid or name (AIS_IDENTITY)',
      '  --base-url URL    service address (AIS_BASE_URL)',
      '  --no-input        never prompt; missing values are an error (AIS_NO_INPUT=1)',
      '  -h, --help',
      ...(env.length ? ['', 'Environment (instead of prompts):', ...env] : []),
    ].join('\n');
  }
  return [
    'ais: the Agent Identity Service command-line client',
    '',
    'Usage: ais <command> [options]   (ais <command> --help for details)',
    '',
    ...names.map((n) => `  ${n.padEnd(20)} ${commands[n].summary}`),
    '',
    'Global (before or after the command): --json, --base-url URL (AIS_BASE_URL), --identity UUID|NAME (AIS_IDENTITY), --no-input (AIS_NO_INPUT=1), -h/--help',
    `Config: $XDG_CONFIG_HOME/agent-identity/config.json (mode 0600). Env: AIS_API_KEY, AIS_TOKEN, AIS_PIN, AIS_NEW_PIN, AIS_RECOVERY_KEY, AIS_PASSWORD.`,
    `Exit codes: ${Object.entries(EXIT).map(([k, v]) => `${v} ${k}`).join(', ')}`,
  ].join('\n');
}

/** Global options that take a value (`--identity X`); the others are flags. */
const GLOBAL_WITH_VALUE = new Set(['--identity', '--base-url']);

/** Options written before the command (`ais --identity pager sms watch`) move behind it. */
function commandFirst(argv: string[]): string[] {
  let i = 0;
  while (i < argv.length && argv[i].startsWith('-')) i += GLOBAL_WITH_VALUE.has(argv[i]) ? 2 : 1;
  return [...argv.slice(i), ...argv.slice(0, i)];
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env, io: Io = processIo): Promise<number> {
  argv = commandFirst(argv);
  const json = argv.includes('--json');
  if (argv[0] === 'help') argv = [...argv.slice(1), '--help'];
  let name = argv[0] && !argv[0].startsWith('-') ? argv[0] : undefined;
  let rest = argv.slice(name ? 1 : 0);
  if (name && GROUPS.includes(name)) {
    const sub = rest[0] && !rest[0].startsWith('-') ? rest[0] : undefined;
    if (sub && commands[`${name} ${sub}`]) {
      name = `${name} ${sub}`;
      rest = rest.slice(1);
    } else if (!sub || rest.includes('--help') || rest.includes('-h')) {
      io.out(help(name));
      return sub ? EXIT.usage : EXIT.ok;
    }
  }
  if (!name || (!commands[name] && (argv.includes('--help') || argv.includes('-h')))) {
    io.out(help());
    return name || !(argv.includes('--help') || argv.includes('-h')) ? EXIT.usage : EXIT.ok;
  }
  const cmd = commands[name];
  let ctx: Ctx | undefined;
  try {
    if (!cmd) {
      const group = GROUPS.find((g) => name!.startsWith(`${g} `)) ?? (GROUPS.includes(name!) ? name : undefined);
      const what = group && rest[0] ? `${group} ${rest[0]}` : name;
      throw new CliError('usage', `Unknown command: ${what}. Run \`ais ${group ?? ''}${group ? ' ' : ''}--help\`.`, EXIT.usage);
    }
    let parsed;
    try {
      parsed = parse(cmd, rest);
    } catch (e) {
      throw new CliError('usage', `${(e as Error).message}\nUsage: ${cmd.usage}`, EXIT.usage);
    }
    const v = parsed.values as Record<string, any>;
    if (v.help) {
      io.out(help(name));
      return EXIT.ok;
    }
    const config = loadConfig(env);
    ctx = {
      json,
      env,
      config,
      baseUrl: (v['base-url'] ?? env.AIS_BASE_URL ?? config.base_url ?? 'http://localhost:8000').replace(/\/+$/, ''),
      identityFlag: v.identity,
      noInput: !!v['no-input'] || /^(1|true|yes)$/i.test(env.AIS_NO_INPUT ?? ''),
      out: io.out,
      err: io.err,
      errTTY: !!io.errTTY,
      outTTY: !!io.outTTY,
      errWrite: io.errWrite ?? ((s) => io.err(s.replace(/\n$/, ''))),
    };
    let c: AisClient | undefined;
    try {
      await resolveIdentityName(ctx);
      await cmd.run(ctx, parsed.positionals, v);
    } catch (err) {
      try {
        c = err instanceof ApiRequestError && err.status === 404 ? client(ctx, { identity: true }) : undefined;
      } catch {
        c = undefined;
      }
      throw await translate(err, c);
    }
    return EXIT.ok;
  } catch (err) {
    const e = err instanceof CliError ? err : new CliError('error', (err as Error)?.message ?? String(err), EXIT.error);
    if (json) io.err(JSON.stringify({ error: { code: e.code, message: e.message, exit_code: e.exit, ...e.extra } }));
    else io.err(`error: ${e.message}`);
    return e.exit;
  }
}

/**
 * Exits once stdout and stderr are written out: a pipe takes 64 KiB at a time, and
 * process.exit drops what is still queued (a large `--json` document was cut short when
 * the reader was slower than the CLI).
 */
export async function exitWhenWritten(code: number): Promise<never> {
  const written = (stream: NodeJS.WriteStream) => new Promise<void>((resolve) => stream.write('', () => resolve()));
  process.exitCode = code;
  await Promise.all([written(process.stdout), written(process.stderr)]);
  // Keep-alive sockets of fetch must not hold the process open.
  process.exit(code);
}

// Run when executed (bin.js imports this module; tests may import `main`).
const invoked = process.argv[1] && /(?:^|[\\/])(bin\.js|main\.ts|ais)$/.test(process.argv[1]);
if (invoked) {
  // A reader that went away (`ais ... | head -c 10`) ends the output, quietly, as with any
  // CLI, instead of an unhandled EPIPE and its stack trace.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => process.exit(err.code === 'EPIPE' ? Number(process.exitCode ?? 0) : 1));
  }
  main(process.argv.slice(2)).then(
    (code) => exitWhenWritten(code),
    (err) => {
      process.stderr.write(`fatal: ${err?.stack ?? err}\n`);
      process.exit(1);
    },
  );
}
