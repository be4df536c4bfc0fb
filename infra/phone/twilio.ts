/**
 * Twilio phone provider: buys a number through Twilio's REST API (2010-04-01) and points
 * its inbound-SMS webhook at PUBLIC_URL/api/webhooks/sms/.
 *
 * - Search: GET  /2010-04-01/Accounts/{AccountSid}/AvailablePhoneNumbers/{Country}/Local.json?SmsEnabled=true
 * - Buy:    POST /2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers.json
 *           form: PhoneNumber, SmsUrl, SmsMethod=POST, FriendlyName
 * - Release: DELETE /2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers/{Sid}.json
 * Authentication is HTTP basic with AccountSid:AuthToken. Errors come back as
 * `{code, message, more_info, status}`.
 */
import type { EventStore } from '../ports/event-store.js';
import { PhoneProviderError, type AllocatedNumber, type PhoneProvider } from '../ports/phone-provider.js';
import { release, reserve } from '../../services/kernel/reservations.js';
import { PHONE_RESERVATION } from './local.js';
import { identityStream } from '../../services/identities/events.js';

export interface TwilioOptions {
  accountSid: string;
  authToken: string;
  /** https://api.twilio.com, or a test double. */
  apiBaseUrl: string;
  /** PUBLIC_URL: the SMS webhook is `${publicUrl}/api/webhooks/sms/`. */
  publicUrl: string;
  /** ISO 3166 country of the numbers bought. */
  country?: string;
  timeoutMs?: number;
  fetch?: typeof fetch;
}

export function createTwilioPhoneProvider(store: EventStore, o: TwilioOptions): PhoneProvider {
  const doFetch = o.fetch ?? fetch;
  const accountUrl = `${o.apiBaseUrl.replace(/\/+$/, '')}/2010-04-01/Accounts/${encodeURIComponent(o.accountSid)}`;
  const authorization = `Basic ${Buffer.from(`${o.accountSid}:${o.authToken}`).toString('base64')}`;
  const smsUrl = `${o.publicUrl.replace(/\/+$/, '')}/api/webhooks/sms/`;

  async function call(method: string, url: string, form?: Record<string, string>): Promise<any> {
    let res: Response;
    try {
      res = await doFetch(url, {
        method,
        headers: {
          authorization,
          accept: 'application/json',
          ...(form ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
        },
        body: form ? new URLSearchParams(form).toString() : undefined,
        signal: AbortSignal.timeout(o.timeoutMs ?? 15_000),
      });
    } catch (cause) {
      throw new PhoneProviderError(`Twilio ${method} failed: ${(cause as Error).message}`, { cause });
    }
    const text = await res.text();
    let json: any = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      /* non-JSON error page */
    }
    if (!res.ok) {
      if (method === 'DELETE' && res.status === 404) return null; // already released
      throw new PhoneProviderError(`Twilio ${method} answered ${res.status}${json?.code ? ` (code ${json.code}: ${json.message})` : ''}`);
    }
    return json;
  }

  async function releaseNumber(identityId: string, number: AllocatedNumber): Promise<void> {
    if (number.providerRef) await call('DELETE', `${accountUrl}/IncomingPhoneNumbers/${encodeURIComponent(number.providerRef)}.json`);
    await release(store, PHONE_RESERVATION, number.phone, identityStream(identityId));
  }

  return {
    name: 'twilio',
    async allocate(identityId) {
      const search = new URLSearchParams({ SmsEnabled: 'true', PageSize: '5' });
      const found = await call('GET', `${accountUrl}/AvailablePhoneNumbers/${o.country ?? 'US'}/Local.json?${search}`);
      const candidates: string[] = (found?.available_phone_numbers ?? []).map((n: { phone_number?: string }) => n.phone_number).filter(Boolean);
      if (candidates.length === 0) throw new PhoneProviderError('Twilio has no available number.');
      let lastError: unknown = null;
      for (const candidate of candidates) {
        try {
          const bought = await call('POST', `${accountUrl}/IncomingPhoneNumbers.json`, {
            PhoneNumber: candidate,
            SmsUrl: smsUrl,
            SmsMethod: 'POST',
            FriendlyName: `identity ${identityId}`,
          });
          const number: AllocatedNumber = { phone: String(bought?.phone_number ?? candidate), providerRef: bought?.sid ? String(bought.sid) : null };
          if (!(await reserve(store, PHONE_RESERVATION, number.phone, identityStream(identityId)))) {
            // Twilio handed us a number we still hold for someone else: give it back.
            await releaseNumber(identityId, number).catch(() => undefined);
            throw new PhoneProviderError(`Number ${number.phone} is already assigned.`);
          }
          return number;
        } catch (err) {
          lastError = err; // taken meanwhile by another buyer: try the next candidate
        }
      }
      throw lastError instanceof PhoneProviderError ? lastError : new PhoneProviderError('Twilio purchase failed.', { cause: lastError });
    },
    release: releaseNumber,
  };
}
