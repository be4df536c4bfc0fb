/**
 * GENERATED FILE: DO NOT EDIT. Regenerate with `npm run gen:sdk-types`
 * (services/sdk/gen-types.ts) from schemas/*.json.
 *
 * One type per schema `$defs` entry, named like its OpenAPI component
 * (`accounts.json#/$defs/User` → `AccountsUser`), and `Operations`: every endpoint of the
 * schemas' `x-operations`, keyed by `"METHOD /path/"`, with its request body (`undefined`:
 * none), response body (`null`: none, `unknown`: not described; non-JSON bodies are
 * typed by their def too, e.g. an HTML page as `string`) and status.
 */
/* eslint-disable */

/**
 * Letters (any script), digits and @ . + - _ (as Django's username validator).
 */
export type AccountsUsername = string;
/**
 * A first or last name: at most 150 characters, no control characters (a name may end up in a mail header or a page). NUL is refused with Django REST framework's message, as in any text field.
 */
export type AccountsPersonName = string;
export type AccountsPassword = string;
/**
 * Phones included: free 0, email 0, developer 3, team 25.
 */
export type BillingPlan = 'free' | 'email' | 'developer' | 'team';
/**
 * Only `active` and `trialing` allow paid add-ons (phone numbers); every other status keeps what the account has and adds none.
 */
export type BillingStatus =
  | 'active'
  | 'trialing'
  | 'past_due'
  | 'unpaid'
  | 'incomplete'
  | 'incomplete_expired'
  | 'paused'
  | 'canceled'
  | 'cancelled'
  | 'inactive'
  | 'suspended'
  | 'expired';
/**
 * A server-rendered HTML page.
 */
export type DeviceHtmlPage = string;
export type EventsLastEventId = string;
export type IdentitiesName = string;
/**
 * Requests a phone number (true or false; also 1/0 and the texts true/false, 1/0, yes/no, on/off, as Django REST framework's BooleanField); subject to the plan: 402 when a paid add-on is needed.
 */
export type IdentitiesProvisionPhone =
  | true
  | false
  | 1
  | 0
  | 't'
  | 'T'
  | 'y'
  | 'Y'
  | 'yes'
  | 'Yes'
  | 'YES'
  | 'true'
  | 'True'
  | 'TRUE'
  | 'on'
  | 'On'
  | 'ON'
  | '1'
  | 'f'
  | 'F'
  | 'n'
  | 'N'
  | 'no'
  | 'No'
  | 'NO'
  | 'false'
  | 'False'
  | 'FALSE'
  | 'off'
  | 'Off'
  | 'OFF'
  | '0'
  | null;
export type KeysLabel = string;
export type MailEmailThreadDetail = MailEmailThread & {
  messages: MailEmailMessage[];
};
export type SmsConversationDetail = SmsConversation & {
  /**
   * Oldest first; the latest 500 (page the rest with GET /api/messages/?conversation_id=).
   */
  messages: SmsMessage[];
};
/**
 * Client-side ciphertext (docs/SECURITY.md). The server checks the format only.
 */
export type VaultCiphertext = string;
export type VaultNullableCiphertext = string | null;
/**
 * Plain text: the site or service the entry is for (e.g. github.com).
 */
export type VaultDomain = string;
/**
 * Name of the secret, unique per identity, case-sensitive (e.g. OPENAI_API_KEY, prod/db:password).
 */
export type VaultSecretKey = string;
/**
 * Argon2id parameters the client used (not secret).
 */
export type VaultKdfParams = string | null;
export type VaultPublicValue = string;

export interface AccountsUser {
  pk: number;
  username: AccountsUsername;
  email: string;
  first_name: string;
  last_name: string;
}
export interface AccountsMasterProfile {
  first_name: string;
  last_name: string;
  email: string;
}
export interface AccountsTokenPair {
  access: string;
  refresh: string;
  user: AccountsUser;
}
export interface AccountsRegister {
  username: AccountsUsername;
  email: string;
  password1: AccountsPassword;
  password2: AccountsPassword;
  first_name?: AccountsPersonName;
  last_name?: AccountsPersonName;
}
export interface AccountsLogin {
  username?: string;
  /**
   * The account's email, instead of or beside username. Blank (only spaces, or empty) is taken as absent, as dj-rest-auth's login does.
   */
  email?: string;
  password: string;
}
export interface AccountsRefresh {
  refresh: string;
}
export interface AccountsRefreshResult {
  access: string;
  refresh: string;
}
/**
 * A token pair whose access token names the identity (claim `identity`), and that identity.
 */
export interface AccountsBindResult {
  access: string;
  refresh: string;
  identity: string;
}
export interface AccountsVerify {
  token: string;
}
export interface AccountsLogout {
  refresh?: string;
}
export interface AccountsBindIdentity {
  identity: string;
}
export interface AccountsEmailOnly {
  email: string;
}
export interface AccountsVerifyEmail {
  key: string;
}
export interface AccountsPasswordChange {
  new_password1: AccountsPassword;
  new_password2: AccountsPassword;
  old_password?: string;
}
export interface AccountsPasswordResetConfirm {
  new_password1: AccountsPassword;
  new_password2: AccountsPassword;
  uid: string;
  token: string;
}
export interface AccountsUserPut {
  username: AccountsUsername;
  first_name?: AccountsPersonName;
  last_name?: AccountsPersonName;
}
export interface AccountsUserPatch {
  username?: AccountsUsername;
  first_name?: AccountsPersonName;
  last_name?: AccountsPersonName;
}
/**
 * A live session of the account: a browser's (the dashboard's cookie) or a token family (a sign-in through the API, the device flow, a bind-identity).
 */
export interface AccountsSession {
  uuid: string;
  kind: 'browser' | 'token';
  /**
   * How it began: register, password, device, bind-identity, dashboard, dashboard-oidc, device-page, device-oidc.
   */
  via: string;
  /**
   * The session of the credential of this request (for a device sign-up's management key: the session handed out with it).
   */
  current: boolean;
  /**
   * The management key handed out with it (a device sign-up): revoking the key ends the session.
   */
  key_uuid: string | null;
  started_dt: string;
  /**
   * Its refresh token's last rotation; null until then (a browser session is never refreshed).
   */
  refreshed_dt: string | null;
  expires_dt: string;
}
export interface BillingSubscription {
  plan: BillingPlan;
  status: BillingStatus;
  /**
   * Phones the plan includes.
   */
  phone_limit: number;
  phones_used: number;
  /**
   * Phones that may be provisioned now (0 unless active).
   */
  phones_available: number;
  email_limit_hour: number;
  email_limit_day: number;
}
export interface BillingSubscriptionChange {
  plan: BillingPlan;
  status?: BillingStatus;
}
export interface BillingSubscriptionPatch {
  plan?: BillingPlan;
  status?: BillingStatus;
}
/**
 * A standard error (DECISIONS "Wire conventions").
 */
export interface CommonError {
  detail: string;
  code?: string;
}
/**
 * Field name (or non_field_errors) to messages.
 */
export interface CommonValidationError {
  [k: string]: string[];
}
export interface CommonDetail {
  detail: string;
}
export interface CommonHealth {
  status: 'ok';
}
/**
 * No field is needed. RFC 8628 clients may send client_id (and scope, ignored).
 */
export interface DeviceDeviceAuthorizationRequest {
  client_id?: string;
  scope?: string;
}
export interface DeviceDeviceAuthorization {
  /**
   * Secret the device polls with (keep it private).
   */
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string;
  /**
   * Seconds until device_code and user_code expire.
   */
  expires_in: number;
  /**
   * Minimum seconds between two polls.
   */
  interval: number;
}
export interface DeviceDeviceTokenRequest {
  device_code: string;
  /**
   * Hold the poll (up to DEVICE_WAIT_MAX seconds) until the code is approved, denied or expired.
   */
  wait?:
    | true
    | false
    | 1
    | 0
    | 't'
    | 'T'
    | 'y'
    | 'Y'
    | 'yes'
    | 'Yes'
    | 'YES'
    | 'true'
    | 'True'
    | 'TRUE'
    | 'on'
    | 'On'
    | 'ON'
    | '1'
    | 'f'
    | 'F'
    | 'n'
    | 'N'
    | 'no'
    | 'No'
    | 'NO'
    | 'false'
    | 'False'
    | 'FALSE'
    | 'off'
    | 'Off'
    | 'OFF'
    | '0';
  grant_type?: 'urn:ietf:params:oauth:grant-type:device_code';
  client_id?: string;
}
export interface DeviceDeviceToken {
  access: string;
  refresh: string;
  management_key: string;
  user: AccountsUser;
  /**
   * Only for RFC 8628 requests (grant_type sent): same as access.
   */
  access_token?: string;
  /**
   * Only for RFC 8628 requests: same as refresh.
   */
  refresh_token?: string;
  token_type?: 'Bearer';
  expires_in?: number;
}
/**
 * RFC 8628 §3.5 (HTTP 400).
 */
export interface DeviceDeviceTokenError {
  error: 'authorization_pending' | 'slow_down' | 'access_denied' | 'expired_token' | 'invalid_grant' | 'unsupported_grant_type';
  code?: 'device_code_expired';
  detail?: string;
}
export interface DeviceDeviceDecision {
  /**
   * As shown by the device; case and dashes do not matter.
   */
  user_code: string;
}
/**
 * RFC 8414.
 */
export interface DeviceAuthorizationServerMetadata {
  issuer: string;
  token_endpoint: string;
  device_authorization_endpoint: string;
  jwks_uri?: string;
  grant_types_supported: string[];
  response_types_supported?: string[];
  token_endpoint_auth_methods_supported?: string[];
  service_documentation?: string;
}
/**
 * Frame `event: email`: an email arrived in the identity's inbox.
 */
export interface EventsEmailEvent {
  thread_id: string;
  /**
   * The API id of the message (GET /api/email-messages/{id}/); not its Message-ID header.
   */
  message_id: string;
  from_email: string;
  subject: string;
  preview: string;
}
/**
 * Frame `event: sms`: an SMS arrived on one of the identity's numbers.
 */
export interface EventsSmsEvent {
  conversation_id: string;
  /**
   * The API id of the SMS (GET /api/messages/{id}/).
   */
  message_id: string;
  from_number: string;
  preview: string;
}
export interface IdentitiesIdentity {
  uuid: string;
  name: string;
  /**
   * The identity's email address (local part @ MAIL_DOMAIN).
   */
  inbox: string;
  /**
   * E.164 number when one is provisioned, else null.
   */
  phone: string | null;
  created_dt: string;
}
export interface IdentitiesIdentityCreate {
  name: IdentitiesName;
  /**
   * Local part of the address (RFC 5321 dot-atom, lower-cased, at most 64 characters); generated from the name when omitted.
   */
  email_identifier?: string | null;
  provision_phone?: IdentitiesProvisionPhone;
}
export interface IdentitiesIdentityPut {
  name: IdentitiesName;
  provision_phone?: IdentitiesProvisionPhone;
}
export interface IdentitiesIdentityPatch {
  name?: IdentitiesName;
  provision_phone?: IdentitiesProvisionPhone;
}
export interface IdentitiesPaymentRequired {
  detail: string;
  code: 'payment_required';
  /**
   * The cheapest plan with room; absent when no plan has (beyond the largest).
   */
  plan_required?: 'free' | 'email' | 'developer' | 'team';
}
/**
 * The target identity is named `identity_uuid` (formal schema) or `identity` (worked example); one is required.
 */
export interface KeysIdentityKeyCreate {
  label: KeysLabel;
  identity_uuid?: string;
  identity?: string;
}
export interface KeysIdentityKeyCreated {
  uuid: string;
  label: string;
  identity_uuid: string;
  /**
   * The full key (svc_id_...), returned once only.
   */
  key: string;
  masked_key: string;
  created_dt: string;
}
export interface KeysIdentityKey {
  uuid: string;
  masked_key: string;
  label: string;
  identity: string;
  last_used_at: string | null;
  created_dt: string;
}
export interface KeysManagementKeyCreate {
  label: KeysLabel;
}
export interface KeysManagementKeyCreated {
  uuid: string;
  label: string;
  /**
   * The full key (svc_mgmt_...), returned once only.
   */
  key: string;
  masked_key: string;
  created_dt: string;
}
export interface KeysManagementKey {
  uuid: string;
  masked_key: string;
  label: string;
  last_used_at: string | null;
  created_dt: string;
}
export interface KeysWhoami {
  /**
   * jwt for every user credential (JWT, session cookie, HTTP basic).
   */
  kind: 'jwt' | 'management_key' | 'identity_key';
  user: {
    pk: number;
    username: string;
    email: string;
  };
  /**
   * The selected identity (header, query, key fence or bound token), else null.
   */
  identity: string | null;
  key: {
    uuid: string;
    label: string;
    masked_key: string;
  } | null;
}
export interface MailComposeRequest {
  /**
   * One address or a comma-separated list; display names allowed (`Ann <ann@example.com>`). JSON arrays of addresses are accepted too.
   *
   * @maxItems 100
   */
  to: string | string[];
  subject?: string;
  /**
   * HTML content
   */
  body?: string;
  /**
   * One address or a comma-separated list (display names allowed), or a JSON array of addresses; empty or null: none.
   *
   * @maxItems 100
   */
  cc?: string | string[] | null;
  /**
   * One address or a comma-separated list (display names allowed), or a JSON array of addresses; empty or null: none.
   *
   * @maxItems 100
   */
  bcc?: string | string[] | null;
  /**
   * uuids returned by the presign operation (uploaded, unexpired, of the same identity): a JSON array, or a comma-separated string (forms); null: none.
   *
   * @maxItems 50
   */
  attachment_uuids?: string[] | string | null;
}
export interface MailReplyRequest {
  /**
   * HTML content
   */
  body: string;
  /**
   * One address or a comma-separated list (display names allowed), or a JSON array of addresses; empty or null: none.
   *
   * @maxItems 100
   */
  cc?: string | string[] | null;
  /**
   * One address or a comma-separated list (display names allowed), or a JSON array of addresses; empty or null: none.
   *
   * @maxItems 100
   */
  bcc?: string | string[] | null;
  /**
   * uuids returned by the presign operation (uploaded, unexpired, of the same identity): a JSON array, or a comma-separated string (forms); null: none.
   *
   * @maxItems 50
   */
  attachment_uuids?: string[] | string | null;
}
export interface MailMessagePatch {
  read: boolean;
}
export interface MailPresignRequest {
  filename: string;
  content_type: string;
  /**
   * bytes; at most 25 MiB
   */
  size: number;
}
export interface MailPresignResponse {
  uuid: string;
  /**
   * PUT the raw bytes here; HMAC-signed, no Authorization needed
   */
  upload_url: string;
  method: 'PUT';
  headers: {
    [k: string]: string;
  };
  expires_at: string;
  filename: string;
  content_type: string;
  size: number;
}
export interface MailUploadResult {
  uuid: string;
  filename: string;
  content_type: string;
  size: number;
  status: 'uploaded';
}
export interface MailAttachment {
  uuid: string;
  filename: string;
  content_type: string;
  size: number;
  inline: boolean;
  content_id: string | null;
  download_url: string;
}
export interface MailEmailMessage {
  uuid: string;
  id: string;
  thread_id: string;
  direction: 'inbound' | 'outbound';
  status: 'received' | 'queued' | 'sent' | 'failed';
  from: string;
  from_email: string;
  from_name: string;
  to: string[];
  cc: string[];
  bcc: string[];
  reply_to: string[];
  subject: string;
  preview: string;
  text: string | null;
  html: string | null;
  /**
   * True in the message list when the bodies are over 256 KiB and left out (text and html null): read the message or its thread for them.
   */
  truncated: boolean;
  attachments: MailAttachment[];
  read: boolean;
  /**
   * The RFC 5322 Message-ID header (`<...@domain>`), null when the mail had none. Not the API id: that is `uuid`.
   */
  message_id: string | null;
  in_reply_to: string | null;
  references: string[];
  error: string | null;
  rejected: string[];
  sent_at: string | null;
  created_dt: string;
}
export interface MailEmailThread {
  thread_id: string;
  uuid: string;
  subject: string;
  preview: string;
  participants: string[];
  from_email: string;
  from_name: string;
  message_count: number;
  unread_count: number;
  unread: boolean;
  last_message_at: string;
  created_dt: string;
}
/**
 * Twilio's inbound-message webhook fields (form-urlencoded). Other Twilio fields are accepted and ignored.
 */
export interface SmsInboundSms {
  MessageSid: string;
  From: string;
  To: string;
  Body?: string;
  NumMedia?: number;
  AccountSid?: string;
}
export interface SmsConversation {
  conversation_id: string;
  /**
   * Same as conversation_id.
   */
  uuid: string;
  /**
   * The other party's number.
   */
  peer: string;
  /**
   * Same as peer (the sender of inbound messages).
   */
  from_number: string;
  /**
   * The identity's number.
   */
  to_number: string;
  preview: string;
  message_count: number;
  unread_count: number;
  /**
   * Whether any message is unread (unread_count > 0), as email threads say it.
   */
  unread: boolean;
  last_message_at: string;
  created_dt: string;
}
export interface SmsMessage {
  id: string;
  /**
   * Same as id.
   */
  uuid: string;
  conversation_id: string;
  direction: 'inbound';
  from_number: string;
  to_number: string;
  body: string;
  preview: string;
  media_urls: string[];
  message_sid: string;
  read: boolean;
  created_dt: string;
}
export interface SmsPhone {
  /**
   * E.164
   */
  number: string;
  provider: 'local' | 'twilio';
  capabilities: 'sms'[];
  created_dt: string;
}
export interface VaultPasswordEntry {
  uuid: string;
  domain: VaultDomain;
  username: VaultNullableCiphertext;
  password: VaultCiphertext;
  notes: VaultNullableCiphertext;
  created_dt: string;
  updated_dt: string;
}
export interface VaultPasswordCreate {
  /**
   * Optional, chosen by the client so it can bind the ciphertext to the entry before the server sees it; generated (uuid v7) when absent. 409 when this identity already used it.
   */
  uuid?: string;
  domain: VaultDomain;
  username?: VaultNullableCiphertext;
  password: VaultCiphertext;
  notes?: VaultNullableCiphertext;
}
/**
 * Replaces domain and password (required); username and notes change only when given (null clears them), as Django REST framework's PUT.
 */
export interface VaultPasswordPut {
  domain: VaultDomain;
  username?: VaultNullableCiphertext;
  password: VaultCiphertext;
  notes?: VaultNullableCiphertext;
}
/**
 * Partial update: only the fields given change.
 */
export interface VaultPasswordPatch {
  domain?: VaultDomain;
  username?: VaultNullableCiphertext;
  password?: VaultCiphertext;
  notes?: VaultNullableCiphertext;
}
/**
 * Made from a CSPRNG, uniform over the passwords of the requested length that contain at least one character of each enabled class. Never stored or logged.
 */
export interface VaultGeneratedPassword {
  password: string;
}
export interface VaultSecret {
  uuid: string;
  key: VaultSecretKey;
  /**
   * The ciphertext; null (redacted) in lists, given by GET /api/vault/{uuid}/.
   */
  value: string | null;
  created_dt: string;
  updated_dt: string;
}
export interface VaultSecretUpsert {
  key: VaultSecretKey;
  value: VaultCiphertext;
}
/**
 * Per account. `salt` is made by the server when the account is created; the rest is null until the one-time POST.
 */
export interface VaultEncryptionMetadata {
  /**
   * base64, 16 bytes
   */
  salt: string;
  public_key: string | null;
  verifier: string | null;
  /**
   * The vault key wrapped under the PIN-derived key (e2e::).
   */
  wrapped_key: string | null;
  /**
   * The vault key wrapped under the recovery key (e2e::).
   */
  recovery_wrapped_key: string | null;
  kdf: string | null;
  created_dt: string | null;
  updated_dt: string | null;
}
export interface VaultEncryptionUpload {
  public_key: VaultPublicValue;
  verifier: VaultPublicValue;
  wrapped_key?: VaultNullableCiphertext;
  recovery_wrapped_key?: VaultNullableCiphertext;
  kdf?: VaultKdfParams;
}
/**
 * PIN change or recovery: replaces the verifier and the key wraps given; the public key cannot change (giving a different one: 400).
 */
export interface VaultEncryptionRewrap {
  public_key?: VaultPublicValue;
  verifier: VaultPublicValue;
  wrapped_key?: VaultNullableCiphertext;
  recovery_wrapped_key?: VaultNullableCiphertext;
  kdf?: VaultKdfParams;
}

/** Every endpoint of the schemas' `x-operations`. */
export interface Operations {
  'POST /api/auth/social/': { request: AccountsRegister; response: AccountsTokenPair; status: 201 };
  'POST /api/auth/login/': { request: AccountsLogin; response: AccountsTokenPair; status: 200 };
  'POST /api/auth/logout/': { request: AccountsLogout; response: CommonDetail; status: 200 };
  'POST /api/auth/token/refresh/': { request: AccountsRefresh; response: AccountsRefreshResult; status: 200 };
  'POST /api/auth/token/verify/': { request: AccountsVerify; response: unknown; status: 200 };
  'POST /api/auth/bind-identity/': { request: AccountsBindIdentity; response: AccountsBindResult; status: 200 };
  'POST /api/auth/social/resend-email/': { request: AccountsEmailOnly; response: CommonDetail; status: 201 };
  'POST /api/auth/social/verify-email/': { request: AccountsVerifyEmail; response: CommonDetail; status: 200 };
  'POST /api/auth/password/change/': { request: AccountsPasswordChange; response: CommonDetail; status: 200 };
  'POST /api/auth/password/reset/': { request: AccountsEmailOnly; response: CommonDetail; status: 200 };
  'POST /api/auth/password/reset/confirm/': { request: AccountsPasswordResetConfirm; response: CommonDetail; status: 200 };
  'GET /api/auth/user/': { request: undefined; response: AccountsUser; status: 200 };
  'PUT /api/auth/user/': { request: AccountsUserPut; response: AccountsUser; status: 200 };
  'PATCH /api/auth/user/': { request: AccountsUserPatch; response: AccountsUser; status: 200 };
  'GET /api/master/': { request: undefined; response: AccountsMasterProfile; status: 200 };
  'GET /.well-known/jwks.json': { request: undefined; response: unknown; status: 200 };
  'GET /api/auth/sessions/': { request: undefined; response: AccountsSession[]; status: 200 };
  'DELETE /api/auth/sessions/{uuid}/': { request: undefined; response: null; status: 204 };
  'GET /api/subscription/': { request: undefined; response: BillingSubscription; status: 200 };
  'GET /api/admin/users/{pk}/subscription/': { request: undefined; response: BillingSubscription; status: 200 };
  'PUT /api/admin/users/{pk}/subscription/': { request: BillingSubscriptionChange; response: BillingSubscription; status: 200 };
  'PATCH /api/admin/users/{pk}/subscription/': { request: BillingSubscriptionPatch; response: BillingSubscription; status: 200 };
  'GET /api/health/': { request: undefined; response: CommonHealth; status: 200 };
  'GET /api/schema/': { request: undefined; response: unknown; status: 200 };
  'POST /api/auth/device/': { request: DeviceDeviceAuthorizationRequest; response: DeviceDeviceAuthorization; status: 200 };
  'POST /api/auth/device/token/': { request: DeviceDeviceTokenRequest; response: DeviceDeviceToken; status: 200 };
  'POST /api/auth/device/approve/': { request: DeviceDeviceDecision; response: CommonDetail; status: 200 };
  'POST /api/auth/device/deny/': { request: DeviceDeviceDecision; response: CommonDetail; status: 200 };
  'GET /.well-known/oauth-authorization-server': { request: undefined; response: DeviceAuthorizationServerMetadata; status: 200 };
  'GET /device': { request: undefined; response: DeviceHtmlPage; status: 200 };
  'GET /device/device.css': { request: undefined; response: unknown; status: 200 };
  'POST /device/login': { request: undefined; response: null; status: 303 };
  'POST /device/logout': { request: undefined; response: null; status: 303 };
  'POST /device/approve': { request: undefined; response: DeviceHtmlPage; status: 200 };
  'POST /device/deny': { request: undefined; response: DeviceHtmlPage; status: 200 };
  'POST /device/oidc/start': { request: undefined; response: null; status: 303 };
  'GET /device/oidc/callback': { request: undefined; response: null; status: 303 };
  'GET /api/events/stream/': { request: undefined; response: unknown; status: 200 };
  'GET /api/identities/': { request: undefined; response: IdentitiesIdentity[]; status: 200 };
  'POST /api/identities/': { request: IdentitiesIdentityCreate; response: IdentitiesIdentity; status: 201 };
  'GET /api/identities/current/': { request: undefined; response: IdentitiesIdentity; status: 200 };
  'GET /api/identities/{uuid}/': { request: undefined; response: IdentitiesIdentity; status: 200 };
  'PUT /api/identities/{uuid}/': { request: IdentitiesIdentityPut; response: IdentitiesIdentity; status: 200 };
  'PATCH /api/identities/{uuid}/': { request: IdentitiesIdentityPatch; response: IdentitiesIdentity; status: 200 };
  'DELETE /api/identities/{uuid}/phone/': { request: undefined; response: null; status: 204 };
  'DELETE /api/identities/{uuid}/': { request: undefined; response: null; status: 204 };
  'GET /api/auth/keys/identity/': { request: undefined; response: KeysIdentityKey[]; status: 200 };
  'POST /api/auth/keys/identity/': { request: KeysIdentityKeyCreate; response: KeysIdentityKeyCreated; status: 201 };
  'DELETE /api/auth/keys/identity/{uuid}/': { request: undefined; response: null; status: 204 };
  'GET /api/auth/keys/management/': { request: undefined; response: KeysManagementKey[]; status: 200 };
  'POST /api/auth/keys/management/': { request: KeysManagementKeyCreate; response: KeysManagementKeyCreated; status: 201 };
  'DELETE /api/auth/keys/management/{uuid}/': { request: undefined; response: null; status: 204 };
  'GET /api/health/whoami/': { request: undefined; response: KeysWhoami; status: 200 };
  'GET /api/email-inbox/': { request: undefined; response: MailEmailThread[]; status: 200 };
  'GET /api/email-inbox/{thread_id}/': { request: undefined; response: MailEmailThreadDetail; status: 200 };
  'GET /api/email-messages/': { request: undefined; response: MailEmailMessage[]; status: 200 };
  'GET /api/email-messages/{id}/': { request: undefined; response: MailEmailMessage; status: 200 };
  'PATCH /api/email-messages/{id}/': { request: MailMessagePatch; response: MailEmailMessage; status: 200 };
  'POST /api/email-messages/compose/': { request: MailComposeRequest; response: MailEmailMessage; status: 201 };
  'POST /api/email-messages/{id}/reply/': { request: MailReplyRequest; response: MailEmailMessage; status: 201 };
  'POST /api/email-messages/{id}/reply-all/': { request: MailReplyRequest; response: MailEmailMessage; status: 201 };
  'POST /api/email-attachments/presign/': { request: MailPresignRequest; response: MailPresignResponse; status: 201 };
  'PUT /api/email-attachments/{uuid}/upload/': { request: undefined; response: MailUploadResult; status: 200 };
  'GET /api/email-attachments/{uuid}/': { request: undefined; response: unknown; status: 200 };
  'POST /api/webhooks/sms/': { request: SmsInboundSms; response: unknown; status: 200 };
  'GET /api/sms-inbox/': { request: undefined; response: SmsConversation[]; status: 200 };
  'GET /api/sms-inbox/{conversation_id}/': { request: undefined; response: SmsConversationDetail; status: 200 };
  'GET /api/messages/': { request: undefined; response: SmsMessage[]; status: 200 };
  'GET /api/messages/{id}/': { request: undefined; response: SmsMessage; status: 200 };
  'GET /api/phone/': { request: undefined; response: SmsPhone[]; status: 200 };
  'GET /api/encryption/': { request: undefined; response: VaultEncryptionMetadata; status: 200 };
  'POST /api/encryption/': { request: VaultEncryptionUpload; response: VaultEncryptionMetadata; status: 201 };
  'PUT /api/encryption/': { request: VaultEncryptionRewrap; response: VaultEncryptionMetadata; status: 200 };
  'GET /api/passwords/': { request: undefined; response: VaultPasswordEntry[]; status: 200 };
  'POST /api/passwords/': { request: VaultPasswordCreate; response: VaultPasswordEntry; status: 201 };
  'GET /api/passwords/generate_password/': { request: undefined; response: VaultGeneratedPassword; status: 200 };
  'GET /api/passwords/{uuid}/': { request: undefined; response: VaultPasswordEntry; status: 200 };
  'PUT /api/passwords/{uuid}/': { request: VaultPasswordPut; response: VaultPasswordEntry; status: 200 };
  'PATCH /api/passwords/{uuid}/': { request: VaultPasswordPatch; response: VaultPasswordEntry; status: 200 };
  'DELETE /api/passwords/{uuid}/': { request: undefined; response: null; status: 204 };
  'GET /api/vault/': { request: undefined; response: VaultSecret[]; status: 200 };
  'POST /api/vault/': { request: VaultSecretUpsert; response: VaultSecret; status: 201 };
  'GET /api/vault/{uuid}/': { request: undefined; response: VaultSecret; status: 200 };
  'DELETE /api/vault/{uuid}/': { request: undefined; response: null; status: 204 };
}

export type OperationKey = keyof Operations;
export type RequestOf<K extends OperationKey> = Operations[K]['request'];
export type ResponseOf<K extends OperationKey> = Operations[K]['response'];

/** What the operations of `Operations` answer: a list or one object, and the field naming its object (each item of a list), the first its schema requires; or no body (`none`). */
export const ANSWER_SHAPES: Readonly<Record<string, { list: boolean; field: string } | { none: true }>> = {
  'POST /api/auth/social/': { list: false, field: 'access' },
  'POST /api/auth/login/': { list: false, field: 'access' },
  'POST /api/auth/logout/': { list: false, field: 'detail' },
  'POST /api/auth/token/refresh/': { list: false, field: 'access' },
  'POST /api/auth/token/verify/': { none: true },
  'POST /api/auth/bind-identity/': { list: false, field: 'access' },
  'POST /api/auth/social/resend-email/': { list: false, field: 'detail' },
  'POST /api/auth/social/verify-email/': { list: false, field: 'detail' },
  'POST /api/auth/password/change/': { list: false, field: 'detail' },
  'POST /api/auth/password/reset/': { list: false, field: 'detail' },
  'POST /api/auth/password/reset/confirm/': { list: false, field: 'detail' },
  'GET /api/auth/user/': { list: false, field: 'pk' },
  'PUT /api/auth/user/': { list: false, field: 'pk' },
  'PATCH /api/auth/user/': { list: false, field: 'pk' },
  'GET /api/master/': { list: false, field: 'first_name' },
  'GET /api/auth/sessions/': { list: true, field: 'uuid' },
  'DELETE /api/auth/sessions/{uuid}/': { none: true },
  'GET /api/subscription/': { list: false, field: 'plan' },
  'GET /api/admin/users/{pk}/subscription/': { list: false, field: 'plan' },
  'PUT /api/admin/users/{pk}/subscription/': { list: false, field: 'plan' },
  'PATCH /api/admin/users/{pk}/subscription/': { list: false, field: 'plan' },
  'GET /api/health/': { list: false, field: 'status' },
  'POST /api/auth/device/': { list: false, field: 'device_code' },
  'POST /api/auth/device/token/': { list: false, field: 'access' },
  'POST /api/auth/device/approve/': { list: false, field: 'detail' },
  'POST /api/auth/device/deny/': { list: false, field: 'detail' },
  'GET /.well-known/oauth-authorization-server': { list: false, field: 'issuer' },
  'GET /api/identities/': { list: true, field: 'uuid' },
  'POST /api/identities/': { list: false, field: 'uuid' },
  'GET /api/identities/current/': { list: false, field: 'uuid' },
  'GET /api/identities/{uuid}/': { list: false, field: 'uuid' },
  'PUT /api/identities/{uuid}/': { list: false, field: 'uuid' },
  'PATCH /api/identities/{uuid}/': { list: false, field: 'uuid' },
  'DELETE /api/identities/{uuid}/phone/': { none: true },
  'DELETE /api/identities/{uuid}/': { none: true },
  'GET /api/auth/keys/identity/': { list: true, field: 'uuid' },
  'POST /api/auth/keys/identity/': { list: false, field: 'uuid' },
  'DELETE /api/auth/keys/identity/{uuid}/': { none: true },
  'GET /api/auth/keys/management/': { list: true, field: 'uuid' },
  'POST /api/auth/keys/management/': { list: false, field: 'uuid' },
  'DELETE /api/auth/keys/management/{uuid}/': { none: true },
  'GET /api/health/whoami/': { list: false, field: 'kind' },
  'GET /api/email-inbox/': { list: true, field: 'thread_id' },
  'GET /api/email-inbox/{thread_id}/': { list: false, field: 'thread_id' },
  'GET /api/email-messages/': { list: true, field: 'uuid' },
  'GET /api/email-messages/{id}/': { list: false, field: 'uuid' },
  'PATCH /api/email-messages/{id}/': { list: false, field: 'uuid' },
  'POST /api/email-messages/compose/': { list: false, field: 'uuid' },
  'POST /api/email-messages/{id}/reply/': { list: false, field: 'uuid' },
  'POST /api/email-messages/{id}/reply-all/': { list: false, field: 'uuid' },
  'POST /api/email-attachments/presign/': { list: false, field: 'uuid' },
  'PUT /api/email-attachments/{uuid}/upload/': { list: false, field: 'uuid' },
  'GET /api/sms-inbox/': { list: true, field: 'conversation_id' },
  'GET /api/sms-inbox/{conversation_id}/': { list: false, field: 'conversation_id' },
  'GET /api/messages/': { list: true, field: 'id' },
  'GET /api/messages/{id}/': { list: false, field: 'id' },
  'GET /api/phone/': { list: true, field: 'number' },
  'GET /api/encryption/': { list: false, field: 'salt' },
  'POST /api/encryption/': { list: false, field: 'salt' },
  'PUT /api/encryption/': { list: false, field: 'salt' },
  'GET /api/passwords/': { list: true, field: 'uuid' },
  'POST /api/passwords/': { list: false, field: 'uuid' },
  'GET /api/passwords/generate_password/': { list: false, field: 'password' },
  'GET /api/passwords/{uuid}/': { list: false, field: 'uuid' },
  'PUT /api/passwords/{uuid}/': { list: false, field: 'uuid' },
  'PATCH /api/passwords/{uuid}/': { list: false, field: 'uuid' },
  'DELETE /api/passwords/{uuid}/': { none: true },
  'GET /api/vault/': { list: true, field: 'uuid' },
  'POST /api/vault/': { list: false, field: 'uuid' },
  'GET /api/vault/{uuid}/': { list: false, field: 'uuid' },
  'DELETE /api/vault/{uuid}/': { none: true },
};
