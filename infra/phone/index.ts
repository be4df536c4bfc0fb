/** Picks the phone-provider adapter from the configuration (SMS_PROVIDER). */
import type { Config } from '../config.js';
import type { EventStore } from '../ports/event-store.js';
import type { PhoneProvider } from '../ports/phone-provider.js';
import { createLocalPhoneProvider } from './local.js';
import { createTwilioPhoneProvider } from './twilio.js';

export function createPhoneProvider(config: Config, store: EventStore): PhoneProvider {
  if (config.smsProvider === 'twilio' && config.twilio) {
    return createTwilioPhoneProvider(store, { ...config.twilio, publicUrl: config.publicUrl });
  }
  return createLocalPhoneProvider(store);
}
