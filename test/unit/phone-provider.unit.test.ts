/**
 * Phone providers. `twilio` is checked against a local node:http server that enforces
 * Twilio's documented REST API (2010-04-01): basic auth AccountSid:AuthToken, form-encoded
 * IncomingPhoneNumbers purchase with SmsUrl/SmsMethod, JSON answers.
 */
import http from 'node:http';
import { fakeHttp, json } from '../support/fake-http.js';
import { createMemoryEventStore } from '../support/memory-event-store.js';
import { createLocalPhoneProvider, localNumber, LOCAL_RANGE_SIZE } from '../../infra/phone/local.js';
import { createTwilioPhoneProvider } from '../../infra/phone/twilio.js';
import { PhoneProviderError } from '../../infra/ports/phone-provider.js';
import { holderOf } from '../../services/kernel/reservations.js';

describe('local provider', () => {
  it('numbers are E.164 in the fictional +1 NPA 555-01XX block', () => {
    expect(localNumber(0)).toBe('+12005550100');
    expect(localNumber(99)).toBe('+12005550199');
    expect(localNumber(100)).toBe('+12015550100');
    const all = new Set(Array.from({ length: LOCAL_RANGE_SIZE }, (_, i) => localNumber(i)));
    expect(all.size).toBe(LOCAL_RANGE_SIZE);
    expect([...all].filter((n) => !/^\+1[2-9](?!11)\d{2}55501\d{2}$/.test(n))).toEqual([]);
  });

  it('never gives one number to two identities; a released number is free again', async () => {
    const store = createMemoryEventStore();
    const p = createLocalPhoneProvider(store);
    const got = await Promise.all(Array.from({ length: 50 }, (_, i) => p.allocate(`id${i}`)));
    expect(new Set(got.map((g) => g.phone)).size).toBe(50);
    expect(await holderOf(store, 'phonenumber', got[0].phone)).toBe('identity-id0');
    await p.release('id0', got[0]);
    expect(await holderOf(store, 'phonenumber', got[0].phone)).toBeNull();
    await p.release('id1', got[0]); // not the holder: no effect, no throw
  });
});

interface Seen {
  method: string;
  path: string;
  auth: string | undefined;
  contentType: string | undefined;
  form: URLSearchParams;
  query: URLSearchParams;
}

async function fakeTwilio(handler?: (req: Seen, res: http.ServerResponse) => boolean) {
  const seen: Seen[] = [];
  let sidCounter = 0;
  const service = await fakeHttp((req, raw, res) => {
    const url = new URL(req.url!, 'http://x');
    const s: Seen = { method: req.method!, path: url.pathname, auth: req.headers.authorization, contentType: req.headers['content-type'], form: new URLSearchParams(raw), query: url.searchParams };
    seen.push(s);
    const answer = (status: number, body: unknown) => json(res, status, body);
    if (s.auth !== `Basic ${Buffer.from('AC123:secret-token').toString('base64')}`) {
      return answer(401, { code: 20003, message: 'Authenticate', more_info: 'https://www.twilio.com/docs/errors/20003', status: 401 });
    }
    if (handler?.(s, res)) return;
    if (s.method === 'GET' && s.path === '/2010-04-01/Accounts/AC123/AvailablePhoneNumbers/US/Local.json') {
      return answer(200, { available_phone_numbers: [{ phone_number: '+14155550123', capabilities: { SMS: true } }] });
    }
    if (s.method === 'POST' && s.path === '/2010-04-01/Accounts/AC123/IncomingPhoneNumbers.json') {
      if (!s.contentType?.startsWith('application/x-www-form-urlencoded')) return answer(400, { code: 21601, message: 'form expected', status: 400 });
      if (!s.form.get('PhoneNumber') || !s.form.get('SmsUrl')) return answer(400, { code: 21452, message: 'PhoneNumber required', status: 400 });
      return answer(201, { sid: `PN${String(++sidCounter).padStart(32, '0')}`, phone_number: s.form.get('PhoneNumber'), sms_url: s.form.get('SmsUrl'), sms_method: s.form.get('SmsMethod') });
    }
    if (s.method === 'DELETE' && /^\/2010-04-01\/Accounts\/AC123\/IncomingPhoneNumbers\/PN\w+\.json$/.test(s.path)) {
      res.writeHead(204);
      return res.end();
    }
    answer(404, { code: 20404, message: 'not found', status: 404 });
  });
  return { ...service, seen };
}

describe('twilio provider', () => {
  it('buys a number with basic auth and points its SmsUrl at PUBLIC_URL/api/webhooks/sms/', async () => {
    const twilio = await fakeTwilio();
    try {
      const store = createMemoryEventStore();
      const p = createTwilioPhoneProvider(store, { accountSid: 'AC123', authToken: 'secret-token', apiBaseUrl: twilio.url, publicUrl: 'https://agents.example.com/' });
      const got = await p.allocate('abc');
      expect(got).toEqual({ phone: '+14155550123', providerRef: 'PN00000000000000000000000000000001' });
      const [search, buy] = twilio.seen;
      expect(search.method).toBe('GET');
      expect(search.query.get('SmsEnabled')).toBe('true');
      expect(buy.method).toBe('POST');
      expect(buy.form.get('PhoneNumber')).toBe('+14155550123');
      expect(buy.form.get('SmsUrl')).toBe('https://agents.example.com/api/webhooks/sms/');
      expect(buy.form.get('SmsMethod')).toBe('POST');
      expect(await holderOf(store, 'phonenumber', '+14155550123')).toBe('identity-abc');

      await p.release('abc', got);
      const del = twilio.seen[2];
      expect(del.method).toBe('DELETE');
      expect(del.path).toBe('/2010-04-01/Accounts/AC123/IncomingPhoneNumbers/PN00000000000000000000000000000001.json');
      expect(await holderOf(store, 'phonenumber', '+14155550123')).toBeNull();
    } finally {
      await twilio.close();
    }
  });

  it('a Twilio error (bad credentials, no stock) is a PhoneProviderError that names the code, never the token', async () => {
    const twilio = await fakeTwilio((s, res) => {
      if (s.path.includes('AvailablePhoneNumbers')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ available_phone_numbers: [] }));
        return true;
      }
      return false;
    });
    try {
      const store = createMemoryEventStore();
      const wrong = createTwilioPhoneProvider(store, { accountSid: 'AC123', authToken: 'bad', apiBaseUrl: twilio.url, publicUrl: 'http://localhost:8000' });
      const err = await wrong.allocate('x').catch((e) => e);
      expect(err).toBeInstanceOf(PhoneProviderError);
      expect(err.message).toContain('20003');
      expect(err.message).not.toContain('bad');
      const empty = createTwilioPhoneProvider(store, { accountSid: 'AC123', authToken: 'secret-token', apiBaseUrl: twilio.url, publicUrl: 'http://localhost:8000' });
      await expect(empty.allocate('x')).rejects.toThrow(PhoneProviderError);
    } finally {
      await twilio.close();
    }
  });
});
