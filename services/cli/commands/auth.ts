// `ais login`, `logout`, `whoami`: the stored credential.
import { hostname } from 'node:os';
import QRCode from 'qrcode';
import { ApiRequestError, createClient, NetworkError, type DeviceAuthorization } from '../../sdk/client.js';
import { configFile, loadConfig, updateConfig, type CliConfig } from '../config.js';
import { client, defaultIdentity, identityLabel, otherThanStoredLogin, requestTimeoutMs, sameService, storedService, type Command, type Ctx } from '../context.js';
import { readSecret } from '../input.js';
import { formatDuration, kv, show, table, warn } from '../output.js';
import { CliError, EXIT, usage } from '../errors.js';

/**
 * Saves a new login over the stored one. A login of the same account at the same service
 * keeps what this machine holds for it (default identity, device secret, the management key
 * of an earlier device login), but not the earlier session: that one is ended. Another
 * service's or another account's login carries nothing over: its key and tokens would be
 * sent to the new service (and refused there, so taken for revoked while still valid at
 * their own), and its default identity and device secret are not the new account's. They
 * are ended at their own service first (the session, the key), as the replaced key of a
 * re-login is. A `pin setup` cut off after its upload is kept, with the device secret it made
 * (shown by the next `pin setup` of its account, matched by its public key).
 */
async function saveLogin(ctx: Ctx, t: { access: string; refresh: string; user: NonNullable<CliConfig['user']>; management_key?: string }): Promise<Record<string, boolean>> {
  const stored = loadConfig(ctx.env);
  const previousUrl = storedService(stored);
  const same = stored.user?.pk === t.user.pk && sameService(previousUrl, ctx.baseUrl);
  ctx.config = await updateConfig(ctx.env, (now) => {
    const { pending_setup, device_secret } = now;
    const kept: CliConfig = same ? now : pending_setup ? { pending_setup: { device_secret, ...pending_setup } } : {};
    return { ...kept, base_url: ctx.baseUrl, access: t.access, refresh: t.refresh, user: t.user, ...(t.management_key ? { management_key: t.management_key } : {}) };
  });
  const previous = stored.user ? `${stored.user.username} at ${previousUrl}` : previousUrl;
  const outcome: Record<string, boolean> = {};
  // Of the same account too: the replaced refresh token, no longer kept here, would stay
  // valid with nobody holding it.
  if (stored.access && stored.access !== t.access) {
    outcome.previous_session_ended = await endOwnSession(previousUrl, stored.access, stored.refresh, requestTimeoutMs(ctx.env)).then(
      () => true,
      (err: unknown) => !unreached(err),
    );
    if (!outcome.previous_session_ended) warn(ctx, `the session of the previous login here (${previous}) could not be ended (the service could not be reached, or failed): its refresh token stays valid until it expires.`);
  }
  // The key an earlier login saved here is replaced: revoked, not left valid with nobody
  // holding it (a password login saves none: it keeps the key of its own account's login).
  const key = stored.management_key && stored.management_key !== t.management_key && (!same || t.management_key) ? stored.management_key : undefined;
  if (key) {
    outcome.previous_key_revoked = await revokeOwnKey(previousUrl, key, requestTimeoutMs(ctx.env)).then(
      () => true,
      (err: unknown) => err instanceof ApiRequestError && err.status === 401,
    );
    if (!outcome.previous_key_revoked) warn(ctx, `the management key of the previous login here (${previousUrl}) could not be revoked: see \`ais keys list --kind management\` there.`);
  }
  // Said, but not with its value: an agent's output often ends up in logs, and `pin setup`
  // gave it (and the recovery key) to keep.
  if (!same && stored.device_secret && !stored.pending_setup) {
    warn(ctx, `this machine no longer keeps the vault's device secret of the previous login (${previous}): to open that account's vault here again, give the one \`pin setup\` printed as AIS_DEVICE_SECRET, or use \`ais pin recover\` with its recovery key.`);
  }
  return outcome;
}

/** A service out of reach (or failing): nothing was ended there. */
const unreached = (err: unknown) => err instanceof NetworkError || (err instanceof ApiRequestError && err.status >= 500);

/**
 * Revokes the management key saved in the config with itself (the key names its own uuid
 * through whoami), at the service it was saved for: never sent to another one.
 */
async function revokeOwnKey(baseUrl: string, managementKey: string, timeoutMs: number | undefined): Promise<void> {
  const c = createClient({ baseUrl, managementKey, userAgent: 'ais-cli/1.0', timeoutMs });
  const me = await c.whoami();
  if (me.key?.uuid) await c.keys.management.revoke(me.key.uuid);
}

/**
 * Ends the session of a login being replaced, at its own service, with its own tokens (a
 * session already over is as good as ended). Its rotated tokens are not kept: the config
 * holds the new login now.
 */
async function endOwnSession(baseUrl: string, access: string, refresh: string | undefined, timeoutMs: number | undefined): Promise<void> {
  const c = createClient({ baseUrl, token: access, refreshToken: refresh, userAgent: 'ais-cli/1.0', timeoutMs });
  const own = await c.auth.sessions().then(
    (list) => list.find((x) => x.current),
    (err: unknown) => {
      if (err instanceof ApiRequestError && err.status === 401) return undefined;
      throw err;
    },
  );
  if (own) await c.auth.endSession(own.uuid);
}

/**
 * `logout --all` with no login saved here: every session of the account the credential of
 * this run names (AIS_TOKEN, a management key) is ended. The credential is checked first: the
 * service skips an expired or unknown one (logout is anonymous-friendly) and would answer
 * 200 having ended nothing. An identity key ends none (it is one agent's, not a sign-in).
 */
async function endAllWithCredentialOfThisRun(ctx: Ctx): Promise<void> {
  if (ctx.env.AIS_API_KEY?.startsWith('svc_id_')) {
    throw new CliError('usage', "An identity key cannot sign out the account's sessions: set AIS_API_KEY to a management key, or AIS_TOKEN to a user token.", EXIT.usage);
  }
  if (!ctx.env.AIS_TOKEN && !ctx.env.AIS_API_KEY && !ctx.config.management_key) {
    throw new CliError('not_authenticated', 'Not logged in here, so no session was ended: sign in (`ais login`), or set AIS_TOKEN or AIS_API_KEY (a management key) to sign out every session of that account.');
  }
  const c = client(ctx);
  await c.auth.user(); // a refused credential fails here (token_expired, not_authenticated), not silently below
  await c.request('POST', '/api/auth/logout/', { identity: false });
}

/**
 * Ends this login's session (DELETE /api/auth/sessions/{uuid}/ of the one the stored tokens
 * belong to), or with `all` every session of the account (POST /api/auth/logout/, which
 * DECISIONS "Auth" makes invalidate all of the user's refresh tokens, dashboard included).
 * Always with the stored login, never an AIS_API_KEY / AIS_TOKEN of this run: those are not
 * what `logout` forgets.
 */
async function endSessions(ctx: Ctx, all: boolean): Promise<void> {
  // At the service the login was made at (a --base-url of this run is not where its tokens go).
  const c = client({ ...ctx, baseUrl: storedService(ctx.config), env: { ...ctx.env, AIS_API_KEY: undefined, AIS_TOKEN: undefined } });
  if (all) {
    // The refresh token goes in the body: the server skips an expired access token (logout is
    // anonymous-friendly) and would end nothing, while answering 200.
    // Read again: another ais process may have rotated the pair since this one started.
    const refresh = loadConfig(ctx.env).refresh;
    await c.request('POST', '/api/auth/logout/', { body: refresh ? { refresh } : {}, identity: false });
    return;
  }
  // None marked current: this login's session is over already (ended elsewhere, or expired).
  const own = (await c.auth.sessions()).find((x) => x.current);
  if (own) await c.auth.endSession(own.uuid);
}

export const authCommands: Record<string, Command> = {
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
      const timeoutMs = requestTimeoutMs(ctx.env);
      const c = createClient({ baseUrl: ctx.baseUrl, userAgent: 'ais-cli/1.0', timeoutMs });
      // An empty one (`--username=`) started the device login silently; both, the username won.
      if (v.username === '' || v.email === '') throw new CliError('usage', `--${v.username === '' ? 'username' : 'email'} takes a value.`, EXIT.usage);
      if (v.username && v.email) throw new CliError('usage', 'Give --username or --email, not both.', EXIT.usage);
      if (v.username || v.email) {
        const password = await readSecret(ctx, 'AIS_PASSWORD', 'Password');
        const pair = await c.auth.login({ password, ...(v.username ? { username: v.username } : { email: v.email }) });
        const replaced = await saveLogin(ctx, pair);
        return show(ctx, { user: pair.user, ...replaced, config: configFile(ctx.env) }, () => `Logged in as ${pair.user.username} (${pair.user.email}).`);
      }
      // The host name goes into the minted key's label, to tell this machine's key apart in `keys list`.
      const auth: DeviceAuthorization = await c.auth.deviceStart(`ais-cli (${hostname().slice(0, 60)})`);
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
      // A waiting poll is held by the service until the code is approved or expires (at most
      // expires_in): only then is it without an answer.
      const poller = v['no-wait'] || !timeoutMs ? c : createClient({ baseUrl: ctx.baseUrl, userAgent: 'ais-cli/1.0', timeoutMs: timeoutMs + auth.expires_in * 1000 });
      const t = await poller.auth.deviceWait(auth, { wait: !v['no-wait'] });
      const replaced = await saveLogin(ctx, t);
      show(ctx, { user: t.user, management_key_saved: true, ...replaced, config: configFile(ctx.env) }, () => `Logged in as ${t.user.username} (${t.user.email}). Tokens and management key saved to ${configFile(ctx.env)}.`);
    },
  },
  logout: {
    usage: 'ais logout [--all] [--keep-key]',
    summary: "End this login's session on the server and forget its tokens; revoke and forget the management key the sign-in saved (--keep-key: keep it, valid). --all: sign out every session of the account, the dashboard's included.",
    options: { all: { type: 'boolean' }, 'keep-key': { type: 'boolean' } },
    async run(ctx, _p, v) {
      // An expired session needs no ending; a service out of reach does: said, not hidden.
      // No login saved here: nothing of this machine's to end, unless --all names an account
      // with another credential (then it is ended, or the command fails).
      const loggedIn = !!ctx.config.access;
      let ended = true;
      if (loggedIn) ended = await endSessions(ctx, !!v.all).then(() => true, (err: unknown) => !unreached(err));
      else if (v.all) await endAllWithCredentialOfThisRun(ctx);
      // The device flow's key is a full account credential: forgotten here but left valid, it
      // would be a live key nobody holds. A key already refused (401) is as good as revoked.
      const key = v['keep-key'] ? undefined : ctx.config.management_key;
      let refused = '';
      const revoked = key
        ? await revokeOwnKey(storedService(ctx.config), key, requestTimeoutMs(ctx.env)).then(
            () => true,
            (err: unknown) => {
              if (err instanceof ApiRequestError && err.status === 401) return true;
              refused = unreached(err) ? 'the service could not be reached (or failed)' : `the service refused (${(err as Error).message})`;
              return false;
            },
          )
        : null;
      ctx.config = await updateConfig(ctx.env, ({ access: _a, refresh: _r, management_key, ...rest }) => ((v['keep-key'] || revoked === false) && management_key ? { ...rest, management_key } : rest));
      if (!ended) warn(ctx, `the service could not be reached (or failed), so ${v.all ? 'the sessions were' : 'the session was'} not ended there (its refresh token stays valid until it expires).`);
      if (revoked === false) warn(ctx, `${refused}, so the management key was not revoked; it stays saved here: run \`ais logout\` again.`);
      const done = v.all ? 'Logged out: every session of the account ended (the dashboard\'s too).' : 'Logged out (this login\'s session ended; the account\'s other sessions, the dashboard\'s included, go on).';
      const sessionEnded = loggedIn || v.all ? ended : false;
      const said = !loggedIn && !v.all ? 'Not logged in here: no session to end.' : ended ? done : 'Logged out on this machine only.';
      show(ctx, { logged_out: true, session_ended: sessionEnded, ...(revoked === null ? {} : { key_revoked: revoked }) }, () => said);
    },
  },
  'sessions list': {
    usage: 'ais sessions list',
    summary: "The account's live sessions: browsers, agents and API sign-ins (the current one marked).",
    async run(ctx) {
      const sessions = await client(ctx).auth.sessions();
      const rows = sessions.map((x) => ({ ...x, current: x.current ? '*' : '' }));
      show(ctx, sessions, () => table(rows as any, ['current', 'uuid', 'kind', 'via', 'started_dt', 'refreshed_dt', 'expires_dt']));
    },
  },
  'sessions end': {
    usage: 'ais sessions end <uuid>',
    summary: 'End one session (its refresh token stops working; a device login keeps its management key until `ais keys revoke`); `ais logout --all` ends them all.',
    async run(ctx, p) {
      if (!p[0]) throw usage('ais sessions end <uuid>');
      const c = client(ctx);
      const target = (await c.auth.sessions()).find((x) => x.uuid.toLowerCase() === p[0]!.toLowerCase());
      await c.auth.endSession(p[0]);
      const key = target?.key_uuid ? ` Its management key ${target.key_uuid} still works: \`ais keys revoke ${target.key_uuid}\` ends that too.` : '';
      const own = target?.current ? ' That was this login: run `ais login` again.' : '';
      show(ctx, { ended: p[0], key_uuid: target?.key_uuid ?? null }, () => `Ended session ${p[0]}.${key}${own}`);
    },
  },
  whoami: {
    usage: 'ais whoami',
    summary: 'Who the stored credential is (kind, user, key), and which identity identity-scoped commands use.',
    async run(ctx) {
      const c = client(ctx);
      const w = await c.whoami();
      const out = { ...w, default_identity: ctx.config.identity ?? null };
      if (ctx.json) return show(ctx, out, () => '');
      // The identity commands use, as requireIdentity picks it: --identity, AIS_IDENTITY, the
      // key's own, the default; else the one a token is bound to (the server's choice).
      const chosen = ctx.identityFlag ?? ctx.env.AIS_IDENTITY ?? defaultIdentity(ctx);
      const used = chosen || w.identity || null;
      const label = async (ref: string) =>
        c.identities.get(ref).then(
          (i) => identityLabel(i),
          (e) => (e instanceof ApiRequestError && e.status === 404 ? `${ref} (no such identity in this account)` : ref),
        );
      const why = !chosen
        ? 'the one the credential is bound to'
        : { flag: 'from --identity, this run only', env: 'from AIS_IDENTITY', key: "the identity key's own", default: 'the default, set by `ais identities use`' }[ctx.identityFrom ?? 'default'];
      const lines: Record<string, string> = {
        kind: w.kind,
        user: `${w.user.username} <${w.user.email}> (pk ${w.user.pk})`,
        ...(w.key ? { key: `${w.key.label} ${w.key.masked_key} (${w.key.uuid})` } : {}),
        identity: used ? `${await label(used)}  [used by identity commands: ${why}]` : 'none selected: identity commands need --identity <uuid|name>, AIS_IDENTITY, or a default (`ais identities use <uuid|name>`)',
      };
      // Another account's default is no identity of this credential's account: not looked up.
      if (ctx.othersDefault) lines.default_identity = `${ctx.config.identity}  [not used in this run: ${otherThanStoredLogin(ctx)}]`;
      else if (ctx.config.identity && ctx.config.identity !== used) lines.default_identity = `${await label(ctx.config.identity)}  [not used in this run]`;
      if (w.identity && w.identity !== used) lines.credential_identity = `${await label(w.identity)}  [the credential's own]`;
      show(ctx, out, () => kv(lines));
    },
  },
};
