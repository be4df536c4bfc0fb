/**
 * The phone-provider port: where identities' phone numbers come from.
 * Adapters: `local` (fictional numbers, zero setup; infra/phone/local.ts) and `twilio`
 * (buys real numbers; infra/phone/twilio.ts). Selected by SMS_PROVIDER.
 *
 * Contract: a number is never held by two identities at once (adapters reserve it in the
 * event store, `phonenumber` reservations, before handing it out).
 */
export interface AllocatedNumber {
  /** E.164, e.g. `+12025550123`. */
  phone: string;
  /** The provider's handle of the number (Twilio's `PN...` sid); null when none. */
  providerRef: string | null;
}

export interface PhoneProvider {
  readonly name: 'local' | 'twilio';
  /** Allocates a number for `identityId`; throws PhoneProviderError when none can be had. */
  allocate(identityId: string): Promise<AllocatedNumber>;
  /** Gives the number back (identity deleted, or a failed create). Never throws for "already gone". */
  release(identityId: string, number: AllocatedNumber): Promise<void>;
}

/** The provider could not allocate or release (no stock, API failure). */
export class PhoneProviderError extends Error {
  readonly code = 'phone_provider_error' as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PhoneProviderError';
  }
}
