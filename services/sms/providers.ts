/**
 * Who may post to the inbound SMS webhook (DECISIONS "Mail, SMS, events"):
 * - `local`: simulated numbers; when SMS_WEBHOOK_SECRET is set, the caller proves itself with
 *   `X-Webhook-Secret`, which must equal it. Unset, the simulator's webhook is open (all
 *   configuration is optional, and with the defaults SMS must still work end to end); the
 *   service warns about it at start.
 * - `twilio`: Twilio signs each request (https://www.twilio.com/docs/usage/security#validating-requests):
 *   base64(HMAC-SHA1(auth token, full URL + each POST parameter name and value, sorted by name)).
 * Both comparisons are timing-safe.
 */
import { createHmac } from 'node:crypto';
import { sameSecret } from '../kernel/secrets.js';
import type { Config } from '../../infra/config.js';
import { ApiError } from '../gateway/errors.js';


/** Twilio's request signature of a form POST. */
export function twilioSignature(authToken: string, url: string, params: Record<string, string>): string {
  const data = Object.keys(params)
    .sort()
    .reduce((acc, key) => acc + key + params[key], url);
  return createHmac('sha1', authToken).update(data, 'utf8').digest('base64');
}

export interface WebhookRequest {
  /** Lower-cased header lookup. */
  header(name: string): string;
  /** Path and query as received (what the provider signed, after PUBLIC_URL). */
  originalUrl: string;
  params: Record<string, string>;
  form: boolean;
}

/** Throws 403 unless the request comes from the configured provider. */
/** PUBLIC_URL as written, and with its scheme's default port added or removed. */
export function publicUrlForms(publicUrl: string): string[] {
  const m = /^(https?):\/\/([^/:]+)(?::(\d+))?(.*)$/i.exec(publicUrl);
  if (!m) return [publicUrl];
  const [, scheme, host, port, rest] = m;
  const defaultPort = scheme!.toLowerCase() === 'https' ? '443' : '80';
  if (port === undefined) return [publicUrl, `${scheme}://${host}:${defaultPort}${rest}`];
  return port === defaultPort ? [publicUrl, `${scheme}://${host}${rest}`] : [publicUrl];
}

export function verifyWebhook(config: Config, req: WebhookRequest): void {
  if (config.smsProvider === 'twilio') {
    const given = req.header('x-twilio-signature');
    if (!given) throw new ApiError(403, 'invalid_signature', 'Missing X-Twilio-Signature header.');
    if (!req.form) throw new ApiError(403, 'invalid_signature', 'Twilio webhooks must be posted as application/x-www-form-urlencoded.');
    // Twilio signs the URL it was given for the number, with or without the scheme's
    // default port ("signature generation on the back end is inconsistent", twilio-node's
    // validateRequest): either form is accepted, as there.
    const matches = publicUrlForms(config.publicUrl).map((base) => sameSecret(given, twilioSignature(config.twilio!.authToken, base + req.originalUrl, req.params)));
    if (!matches.includes(true)) throw new ApiError(403, 'invalid_signature', 'X-Twilio-Signature does not match this request (check PUBLIC_URL and TWILIO_AUTH_TOKEN).');
    return;
  }
  const secret = config.smsWebhookSecret;
  if (!secret) return; // the open simulator (see the header)
  const given = req.header('x-webhook-secret');
  if (!given || !sameSecret(given, secret)) throw new ApiError(403, 'invalid_webhook_secret', 'Missing or wrong X-Webhook-Secret header.');
}
