/**
 * The external identity provider of the /device page (DECISIONS "Device authorization":
 * OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET), through openid-client: authorization
 * code flow with PKCE (S256), state and nonce, a confidential client. Discovery is lazy
 * and retried after a failure, so a provider that is down at start does not stop the service.
 */
import * as oidc from 'openid-client';
import { startOf, withoutControls } from '../kernel/text.js';

export interface OidcSettings {
  issuer: string;
  clientId: string;
  clientSecret: string;
}

/** What the page keeps (signed, in a short-lived cookie) between the redirect and the callback. */
export interface OidcPending {
  state: string;
  nonce: string;
  verifier: string;
}

export interface ExternalIdentity {
  issuer: string;
  subject: string;
  email: string | null;
  emailVerified: boolean | null;
  firstName?: string;
  lastName?: string;
  username?: string;
}

export class OidcLoginError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'OidcLoginError';
  }
}

export function createOidcClient(settings: OidcSettings, redirectUri: string) {
  let discovered: Promise<oidc.Configuration> | null = null;
  /** When discovery last failed: page renders do not wait on a provider that is down. */
  let failedAt = -Infinity; // performance.now() of the last failed discovery (monotonic)
  const RETRY_AFTER_FAILURE_MS = 30_000;
  const insecure = new URL(settings.issuer).protocol === 'http:';

  async function discover(): Promise<oidc.Configuration> {
    const probe = await oidc.discovery(new URL(settings.issuer), settings.clientId, undefined, oidc.None(), insecure ? { execute: [oidc.allowInsecureRequests], timeout: 10 } : { timeout: 10 });
    const server = probe.serverMetadata();
    // client_secret_basic is the registration default (OIDC Core §9); post when that is all the provider takes.
    const methods = server.token_endpoint_auth_methods_supported;
    const auth = methods && !methods.includes('client_secret_basic') && methods.includes('client_secret_post') ? oidc.ClientSecretPost(settings.clientSecret) : oidc.ClientSecretBasic(settings.clientSecret);
    const config = new oidc.Configuration(server, settings.clientId, { client_secret: settings.clientSecret }, auth);
    if (insecure) oidc.allowInsecureRequests(config);
    config.timeout = 10;
    return config;
  }

  async function configuration(): Promise<oidc.Configuration> {
    discovered ??= discover().catch((err) => {
      discovered = null;
      failedAt = performance.now();
      throw new OidcLoginError('The identity provider could not be reached.', { cause: err });
    });
    return discovered;
  }

  /** Origin of the authorization endpoint (the page's CSP form-action must allow the redirect). */
  async function authorizationOrigin(): Promise<string | null> {
    if (!discovered && performance.now() - failedAt < RETRY_AFTER_FAILURE_MS) return null;
    try {
      const endpoint = (await configuration()).serverMetadata().authorization_endpoint;
      return endpoint ? new URL(endpoint).origin : null;
    } catch {
      return null;
    }
  }

  /** Starts a login: the URL to send the browser to, and the checks to keep until the callback. */
  async function begin(): Promise<{ url: string; pending: OidcPending }> {
    const config = await configuration();
    const verifier = oidc.randomPKCECodeVerifier();
    const pending: OidcPending = { state: oidc.randomState(), nonce: oidc.randomNonce(), verifier };
    const url = oidc.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: 'openid email profile',
      response_type: 'code',
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      state: pending.state,
      nonce: pending.nonce,
    });
    return { url: url.href, pending };
  }

  /** Completes a login from the callback URL: checks state, nonce and PKCE, then reads who signed in. */
  async function finish(callbackUrl: URL, pending: OidcPending): Promise<ExternalIdentity> {
    const config = await configuration();
    let tokens: Awaited<ReturnType<typeof oidc.authorizationCodeGrant>>;
    try {
      tokens = await oidc.authorizationCodeGrant(config, callbackUrl, {
        pkceCodeVerifier: pending.verifier,
        expectedState: pending.state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
    } catch (err) {
      const e = err as { error?: string; error_description?: string; message?: string };
      const reason = e.error_description ?? e.error ?? 'the response could not be verified';
      throw new OidcLoginError(`Sign-in with the identity provider failed: ${reason}.`, { cause: err });
    }
    const claims = tokens.claims();
    if (!claims?.sub) throw new OidcLoginError('The identity provider returned no subject.');
    let info: Record<string, unknown> = { ...claims };
    if (typeof info.email !== 'string' && tokens.access_token) {
      // Providers that keep profile claims out of the ID token (OIDC Core §5.4) serve them at userinfo.
      try {
        info = { ...info, ...(await oidc.fetchUserInfo(config, tokens.access_token, claims.sub)) };
      } catch (err) {
        throw new OidcLoginError('The identity provider did not share the account details.', { cause: err });
      }
    }
    const str = (v: unknown) => (typeof v === 'string' && v.trim() ? v.trim() : undefined);
    // Names as the API takes them (accounts.json PersonName): no control characters, at most 150.
    const personName = (v: unknown) => str(startOf(withoutControls(str(v) ?? ''), 150));
    return {
      issuer: config.serverMetadata().issuer,
      subject: claims.sub,
      email: str(info.email) ?? null,
      emailVerified: typeof info.email_verified === 'boolean' ? info.email_verified : info.email_verified === 'true' ? true : null,
      firstName: personName(info.given_name),
      lastName: personName(info.family_name),
      username: str(info.preferred_username) ?? str(info.nickname),
    };
  }

  return { begin, finish, authorizationOrigin, label: new URL(settings.issuer).host };
}

export type OidcClient = ReturnType<typeof createOidcClient>;
