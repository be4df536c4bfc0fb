/**
 * Configuration: environment variables only (12-factor), validated once at start.
 * Every problem is collected, so one start names every bad variable (DECISIONS "Running it").
 * Only the entry points (services/main.ts, worker.ts, rebuild.ts, backup.ts) pass `process.env`
 * here; everything else receives the typed object.
 */
import path from 'node:path';
import { readFileSync, statSync } from 'node:fs';
import { createPrivateKey } from 'node:crypto';
import { createSecureContext } from 'node:tls';

export interface Config {
  port: number;
  host: string;
  publicUrl: string;
  dataDir: string;
  mailDomain: string;
  smtpPort: number; // 0 = listener off
  smtpHost: string;
  smtpRelayUrl: string | null;
  adminToken: string | null;
  /** Bearer token of `GET /metrics` (Prometheus); unset: that path answers 404. */
  metricsToken: string | null;
  /** Proxies in front of the gateway whose X-Forwarded-For / -Proto are trusted (0: none). */
  trustProxy: number;
  accessTokenTtl: number; // seconds
  refreshTokenTtl: number;
  deviceCodeTtl: number;
  devicePollInterval: number;
  deviceWaitMax: number;
  sseKeepaliveMs: number;
  /** Event streams one account may hold open in a process (429 beyond). */
  sseStreamsPerAccount: number;
  /** Identities one account may hold (403 `identity_limit_reached` beyond; SPEC: bulk limits are arranged through support). */
  identityLimit: number;
  /** Live API keys one account may hold; a POST of a key beyond is 403 `key_limit_reached` (device sign-ups are not refused). */
  keyLimit: number;
  /** Sign-ups that reach password hashing, per client address per rolling hour (429 beyond). */
  signupLimitPerHour: number;
  emailLimitHour: number;
  emailLimitDay: number;
  smsProvider: 'local' | 'twilio';
  smsWebhookSecret: string | null;
  twilio: { accountSid: string; authToken: string; apiBaseUrl: string } | null;
  oidc: { issuer: string; clientId: string; clientSecret: string } | null;
  store: 'embedded' | 'cluster';
  cluster: { eventStoreUrl: string; mongoUrl: string; kafkaBrokers: string[] } | null;
  logLevel: string;
  /** Argon2id cost for account passwords (m in KiB); lowered only by tests. */
  passwordHashMemoryKiB: number;
  tls: { certFile: string; keyFile: string } | null;
  /** DKIM signing of outgoing mail (DKIM_SELECTOR + DKIM_PRIVATE_KEY_FILE; DKIM_DOMAIN defaults to MAIL_DOMAIN). */
  dkim: { domainName: string; keySelector: string; privateKey: string } | null;
  /** Settings that are valid but probably not what was meant (logged at start, one warning each). */
  warnings: string[];
}

const ENCODE_USERINFO = 'a user name or password with # / ? @ or : in it must be percent-encoded (%23 %2F %3F %40 %3A)';

/** Shorter operator tokens are warned of: guessable, though their guesses are throttled. */
const OPERATOR_TOKEN_MIN = 16;

/** A host name: labels of letters, digits and inner hyphens, dot-separated, 253 characters at most (lower-case). */
const DOMAIN_NAME = /^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration: ${problems.join('; ')}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

/**
 * A connection URL as an error message may show it: everything that may be a password (the
 * user-info before the last `@`, after its first `:`; all of it when it has none) replaced by
 * `***`. Works on text that is not a valid URL too: an unencoded `#` or `/` in a password, or a
 * missing `scheme://`, is the usual reason a URL is refused.
 */
export function withoutPassword(value: string): string {
  const at = value.lastIndexOf('@');
  if (at < 0) return value;
  const head = value.slice(0, at);
  const start = head.includes('//') ? head.indexOf('//') + 2 : 0;
  const userinfo = head.slice(start);
  const colon = userinfo.indexOf(':');
  return `${head.slice(0, start)}${colon >= 0 ? `${userinfo.slice(0, colon)}:***` : '***'}${value.slice(at)}`;
}

export function loadConfig(env: Env, cwd = process.cwd()): Config {
  const problems: string[] = [];
  const str = (name: string, fallback: string): string => {
    const v = env[name];
    return v === undefined || v === '' ? fallback : v;
  };
  const opt = (name: string): string | null => {
    const v = env[name];
    return v === undefined || v === '' ? null : v;
  };
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const n = Number(raw);
    if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      problems.push(`${name} must be an integer from ${min} to ${max} (got "${raw}")`);
      return fallback;
    }
    return n;
  };
  const url = (name: string, value: string, protocols: string[]): string => {
    try {
      const u = new URL(value);
      if (!protocols.includes(u.protocol)) problems.push(`${name} must use ${protocols.join(' or ')} (got "${withoutPassword(value)}")`);
      else if (!u.hostname) problems.push(`${name} must name a host (got "${withoutPassword(value)}")`);
      // `smtp://user:1#2@host` parses as host "user", port 1: the host was in a password.
      else if (`${u.pathname}${u.search}${u.hash}`.includes('@')) problems.push(`${name} has an @ after the host: ${ENCODE_USERINFO} (got "${withoutPassword(value)}")`);
    } catch {
      problems.push(`${name} must be a URL${value.includes('@') ? `; ${ENCODE_USERINFO}` : ''} (got "${withoutPassword(value)}")`);
    }
    return value;
  };
  const oneOf = <T extends string>(name: string, fallback: T, allowed: readonly T[]): T => {
    const v = str(name, fallback);
    if (!allowed.includes(v as T)) {
      problems.push(`${name} must be one of ${allowed.join(', ')} (got "${v}")`);
      return fallback;
    }
    return v as T;
  };

  const port = int('PORT', 8000, 0, 65535);
  const host = str('HOST', '127.0.0.1');
  const publicUrl = url('PUBLIC_URL', str('PUBLIC_URL', `http://localhost:${port}`), ['http:', 'https:']).replace(/\/+$/, '');
  // An origin: links are PUBLIC_URL + an absolute path (a path prefix, a query or a fragment
  // would be kept by some links and dropped by others); serving under a path is a proxy's job.
  const publicParts = URL.canParse(publicUrl) ? new URL(publicUrl) : null;
  if (publicParts && (publicParts.pathname !== '/' || publicParts.search || publicParts.hash || publicParts.username || publicParts.password)) {
    problems.push(`PUBLIC_URL must be an origin, scheme://host[:port] with no path, query, fragment or user (got "${withoutPassword(publicUrl)}")`);
  }
  const dataDir = path.resolve(cwd, str('DATA_DIR', './data'));
  const dataDirKind = (() => {
    try {
      return statSync(dataDir).isDirectory() ? 'directory' : 'other';
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing' : 'other'; // created at start when missing
    }
  })();
  if (dataDirKind === 'other') problems.push(`DATA_DIR must be a directory (or not exist yet): ${dataDir}`);
  const mailDomain = str('MAIL_DOMAIN', 'agents.localhost').toLowerCase();
  if (!DOMAIN_NAME.test(mailDomain)) problems.push(`MAIL_DOMAIN must be a domain name (got "${mailDomain}")`);
  const smtpPort = int('SMTP_PORT', 2525, 0, 65535);
  const smtpHost = str('SMTP_HOST', '127.0.0.1');
  if (smtpPort !== 0 && smtpPort === port) problems.push(`SMTP_PORT must differ from PORT (both ${port})`);
  const relay = opt('SMTP_RELAY_URL');
  if (relay) url('SMTP_RELAY_URL', relay, ['smtp:', 'smtps:']);

  const smsProvider = oneOf('SMS_PROVIDER', 'local', ['local', 'twilio'] as const);
  let twilio: Config['twilio'] = null;
  if (smsProvider === 'twilio') {
    const sid = opt('TWILIO_ACCOUNT_SID');
    const token = opt('TWILIO_AUTH_TOKEN');
    if (!sid) problems.push('TWILIO_ACCOUNT_SID is required when SMS_PROVIDER=twilio');
    if (!token) problems.push('TWILIO_AUTH_TOKEN is required when SMS_PROVIDER=twilio');
    const apiBaseUrl = url('TWILIO_API_URL', str('TWILIO_API_URL', 'https://api.twilio.com'), ['http:', 'https:']);
    twilio = { accountSid: sid ?? '', authToken: token ?? '', apiBaseUrl: apiBaseUrl.replace(/\/+$/, '') };
  }

  const oidcIssuer = opt('OIDC_ISSUER');
  const oidcClientId = opt('OIDC_CLIENT_ID');
  const oidcClientSecret = opt('OIDC_CLIENT_SECRET');
  let oidc: Config['oidc'] = null;
  if (oidcIssuer || oidcClientId || oidcClientSecret) {
    if (!oidcIssuer) problems.push('OIDC_ISSUER is required when OIDC_CLIENT_ID or OIDC_CLIENT_SECRET is set');
    else url('OIDC_ISSUER', oidcIssuer, ['http:', 'https:']);
    if (!oidcClientId) problems.push('OIDC_CLIENT_ID is required when OIDC_ISSUER is set');
    if (!oidcClientSecret) problems.push('OIDC_CLIENT_SECRET is required when OIDC_ISSUER is set');
    oidc = { issuer: oidcIssuer ?? '', clientId: oidcClientId ?? '', clientSecret: oidcClientSecret ?? '' };
  }

  const store = oneOf('STORE', 'embedded', ['embedded', 'cluster'] as const);
  let cluster: Config['cluster'] = null;
  if (store === 'cluster') {
    const es = opt('EVENTSTORE_URL');
    const mongo = opt('MONGO_URL');
    const kafka = opt('KAFKA_BROKERS');
    if (!es) problems.push('EVENTSTORE_URL is required when STORE=cluster');
    // Connection strings may list several hosts (`esdb://a:2113,b:2113`), which URL cannot parse.
    else if (!/^esdb(\+discover)?:\/\/[^/?#\s]+/.test(es)) problems.push(`EVENTSTORE_URL must be an esdb:// or esdb+discover:// connection string (got "${withoutPassword(es)}")`);
    if (!mongo) problems.push('MONGO_URL is required when STORE=cluster');
    else if (!/^mongodb(\+srv)?:\/\/[^/?#\s]+/.test(mongo)) problems.push(`MONGO_URL must be a mongodb:// or mongodb+srv:// connection string (got "${withoutPassword(mongo)}")`);
    if (!kafka) problems.push('KAFKA_BROKERS is required when STORE=cluster');
    else {
      if (kafka.split(',').some((b) => !/^\S+:\d{1,5}$/.test(b.trim()))) problems.push(`KAFKA_BROKERS must be host:port[,host:port...] (got "${kafka}")`);
    }
    cluster = { eventStoreUrl: es ?? '', mongoUrl: mongo ?? '', kafkaBrokers: (kafka ?? '').split(',').map((b) => b.trim()).filter(Boolean) };
  }

  const certFile = opt('SMTP_TLS_CERT');
  const keyFile = opt('SMTP_TLS_KEY');
  if (Boolean(certFile) !== Boolean(keyFile)) problems.push('SMTP_TLS_CERT and SMTP_TLS_KEY must be set together');
  else if (certFile && keyFile) {
    // Read and paired now, so a wrong path or a file that is no PEM fails the start naming the variable.
    const read = (name: string, file: string) => {
      try {
        return readFileSync(path.resolve(cwd, file));
      } catch (err) {
        problems.push(`${name} must be a readable file (${(err as Error).message})`);
        return null;
      }
    };
    const cert = read('SMTP_TLS_CERT', certFile);
    const key = read('SMTP_TLS_KEY', keyFile);
    if (cert && key) {
      try {
        createSecureContext({ cert, key });
      } catch (err) {
        problems.push(`SMTP_TLS_CERT and SMTP_TLS_KEY must be a PEM certificate and its private key (${(err as Error).message})`);
      }
    }
  }

  const emailLimitHour = int('EMAIL_LIMIT_HOUR', 60, 0, 1_000_000);
  const emailLimitDay = int('EMAIL_LIMIT_DAY', 500, 0, 10_000_000);

  let dkim: Config['dkim'] = null;
  const dkimSelector = opt('DKIM_SELECTOR');
  const dkimKeyFile = opt('DKIM_PRIVATE_KEY_FILE');
  if (Boolean(dkimSelector) !== Boolean(dkimKeyFile)) problems.push('DKIM_SELECTOR and DKIM_PRIVATE_KEY_FILE must be set together');
  else if (dkimSelector && dkimKeyFile) {
    // The s= and d= tags of every signature (RFC 6376 §3.1: a selector is dot-separated labels).
    const domainName = str('DKIM_DOMAIN', mailDomain).toLowerCase();
    if (!DOMAIN_NAME.test(domainName)) problems.push(`DKIM_DOMAIN must be a domain name (got "${domainName}")`);
    if (!DOMAIN_NAME.test(dkimSelector.toLowerCase())) problems.push(`DKIM_SELECTOR must be letters, digits and hyphens, labels separated by dots (got "${dkimSelector}")`);
    try {
      const privateKey = readFileSync(path.resolve(cwd, dkimKeyFile), 'utf8');
      createPrivateKey(privateKey); // fails early on a file that is not a PEM private key
      dkim = { domainName, keySelector: dkimSelector, privateKey };
    } catch (err) {
      problems.push(`DKIM_PRIVATE_KEY_FILE must be a readable PEM private key (${(err as Error).message})`);
    }
  }

  const config: Config = {
    port,
    host,
    publicUrl,
    dataDir,
    mailDomain,
    smtpPort,
    smtpHost,
    smtpRelayUrl: relay,
    adminToken: opt('ADMIN_TOKEN'),
    metricsToken: opt('METRICS_TOKEN'),
    trustProxy: int('TRUST_PROXY', 0, 0, 10),
    accessTokenTtl: int('ACCESS_TOKEN_TTL', 3600, 1, 31_536_000),
    refreshTokenTtl: int('REFRESH_TOKEN_TTL', 2_592_000, 1, 315_360_000),
    deviceCodeTtl: int('DEVICE_CODE_TTL', 600, 1, 86_400),
    devicePollInterval: int('DEVICE_POLL_INTERVAL', 5, 0, 3600),
    deviceWaitMax: int('DEVICE_WAIT_MAX', 120, 0, 3600),
    sseKeepaliveMs: int('SSE_KEEPALIVE_MS', 30_000, 10, 3_600_000),
    sseStreamsPerAccount: int('SSE_STREAMS_PER_ACCOUNT', 200, 1, 1_000_000),
    identityLimit: int('IDENTITY_LIMIT', 1000, 1, 10_000_000),
    keyLimit: int('KEY_LIMIT', 1000, 1, 10_000_000),
    signupLimitPerHour: int('SIGNUP_LIMIT_PER_HOUR', 5000, 1, 10_000_000),
    emailLimitHour,
    emailLimitDay,
    smsProvider,
    smsWebhookSecret: opt('SMS_WEBHOOK_SECRET'),
    twilio,
    oidc,
    store,
    cluster,
    logLevel: oneOf('LOG_LEVEL', 'info', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const),
    passwordHashMemoryKiB: int('PASSWORD_HASH_MEMORY_KIB', 19_456, 1024, 4_194_304),
    tls: certFile && keyFile ? { certFile: path.resolve(cwd, certFile), keyFile: path.resolve(cwd, keyFile) } : null,
    dkim,
    warnings: warningsOf(),
  };
  if (problems.length) throw new ConfigError(problems);
  return config;

  /** Valid settings that do nothing, or less than they seem to. */
  function warningsOf(): string[] {
    const out: string[] = [];
    const unused = (names: string[], why: string) => {
      const set = names.filter((name) => opt(name) !== null);
      if (set.length) out.push(`${set.join(', ')} ${set.length === 1 ? 'is' : 'are'} set but not used: ${why}`);
    };
    if (emailLimitHour > emailLimitDay) out.push('EMAIL_LIMIT_HOUR is above EMAIL_LIMIT_DAY: the day limit is the one that holds');
    if (smsProvider !== 'twilio') unused(['TWILIO_ACCOUNT_SID', 'TWILIO_AUTH_TOKEN', 'TWILIO_API_URL'], 'SMS_PROVIDER is not twilio');
    if (!dkimSelector) unused(['DKIM_DOMAIN'], 'mail is DKIM-signed only with DKIM_SELECTOR and DKIM_PRIVATE_KEY_FILE');
    if (smtpPort === 0) unused(['SMTP_TLS_CERT', 'SMTP_TLS_KEY', 'SMTP_HOST'], 'SMTP_PORT=0 (no SMTP listener)');
    if (store !== 'cluster') unused(['EVENTSTORE_URL', 'MONGO_URL', 'KAFKA_BROKERS'], 'STORE is not cluster (the embedded store under DATA_DIR is used)');
    for (const name of ['ADMIN_TOKEN', 'METRICS_TOKEN']) {
      const token = opt(name);
      if (token !== null && token.length < OPERATOR_TOKEN_MIN) out.push(`${name} is shorter than ${OPERATOR_TOKEN_MIN} characters: easy to guess (e.g. \`openssl rand -hex 32\`)`);
    }
    return out;
  }
}
