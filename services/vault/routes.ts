/** HTTP surface of the vault (SPEC "Passwords", "Vault secrets", "Encryption"; DECISIONS last bullet). */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { HttpModule } from '../gateway/app.js';
import type { Authenticator } from '../gateway/auth.js';
import { body, created, noContent, pageParams, queryParam, sendPage } from '../gateway/http.js';
import { FALSE_TEXTS, TRUE_TEXTS, validator } from '../gateway/validate.js';
import { badRequest, notFound, type FieldErrors } from '../gateway/errors.js';
import { isUuid } from '../kernel/ids.js';
import type { Accounts } from '../accounts/service.js';
import type { EncryptionKeysDoc, PasswordEntryDoc, VaultSecretDoc } from '../../projections/vault/index.js';
import { CHARACTER_CLASSES, PASSWORD_LENGTH, generatePassword, type CharacterClass } from './generate.js';
import type { EncryptionRewrapInput, EncryptionUploadInput, PasswordFields, Vault } from './service.js';

const v = {
  upload: validator<EncryptionUploadInput>('vault.json#EncryptionUpload'),
  rewrap: validator<EncryptionRewrapInput>('vault.json#EncryptionRewrap'),
  create: validator<PasswordFields & { uuid?: string; domain: string; password: string }>('vault.json#PasswordCreate'),
  put: validator<PasswordFields & { domain: string; password: string }>('vault.json#PasswordPut'),
  patch: validator<PasswordFields>('vault.json#PasswordPatch'),
  upsert: validator<{ key: string; value: string }>('vault.json#SecretUpsert'),
};

/** A secret as lists show it (value redacted); one function, so sendPage can reuse a cached page's JSON. */
const toListedSecret = (d: Parameters<typeof toSecret>[0]) => toSecret(d, true);

export function toEncryptionMetadata(salt: string, doc: EncryptionKeysDoc | null) {
  return {
    salt,
    public_key: doc?.publicKey ?? null,
    verifier: doc?.verifier ?? null,
    wrapped_key: doc?.wrappedKey ?? null,
    recovery_wrapped_key: doc?.recoveryWrappedKey ?? null,
    kdf: doc?.kdf ?? null,
    created_dt: doc?.createdAt ?? null,
    updated_dt: doc?.updatedAt ?? null,
  };
}

export const toPasswordEntry = (d: PasswordEntryDoc) => ({
  uuid: d.entryId,
  domain: d.domain,
  username: d.username,
  password: d.password,
  notes: d.notes,
  created_dt: d.createdAt,
  updated_dt: d.updatedAt,
});

export const toSecret = (d: VaultSecretDoc, redact = false) => ({
  uuid: d.secretId,
  key: d.key,
  value: redact ? null : d.value,
  created_dt: d.createdAt,
  updated_dt: d.updatedAt,
});

/** Path uuid, lower-cased; anything else cannot name a resource: 404 with the resource's own words. */
function pathUuid(ctx: Context, missing: string): string {
  const id = String(ctx.params.uuid ?? '');
  if (!isUuid(id)) throw notFound(missing);
  return id.toLowerCase();
}
const NO_ENTRY = 'Password entry not found.';
const NO_SECRET = 'Secret not found.';

/** Query of generate_password: `length` (8-128, default 20) and one flag per character class (default true). */
function generateOptions(ctx: Context): { length: number; classes: CharacterClass[] } {
  const errors: FieldErrors = {};
  const one = (name: string) => queryParam(ctx, name);
  let length: number = PASSWORD_LENGTH.default;
  const rawLength = one('length');
  if (rawLength !== undefined && rawLength !== '') {
    if (!/^\d{1,4}$/.test(rawLength) || Number(rawLength) < PASSWORD_LENGTH.min || Number(rawLength) > PASSWORD_LENGTH.max) {
      errors.length = [`Must be an integer from ${PASSWORD_LENGTH.min} to ${PASSWORD_LENGTH.max}.`];
    } else {
      length = Number(rawLength);
    }
  }
  const classes: CharacterClass[] = [];
  for (const name of Object.keys(CHARACTER_CLASSES) as CharacterClass[]) {
    const raw = one(name)?.toLowerCase();
    // The texts of every boolean flag (queryFlag's); absent means on here.
    if (raw === undefined || raw === '' || TRUE_TEXTS.has(raw)) classes.push(name);
    else if (!FALSE_TEXTS.has(raw)) errors[name] = ['Must be a valid boolean.'];
  }
  if (Object.keys(errors).length) throw badRequest(errors);
  if (classes.length === 0) throw badRequest({ non_field_errors: ['Enable at least one character class.'] });
  return { length, classes };
}

export function vaultRoutes(deps: { vault: Vault; accounts: Accounts; auth: () => Authenticator; publicUrl: string }): HttpModule {
  const { vault, accounts } = deps;

  async function metadata(userPk: number, doc?: EncryptionKeysDoc | null) {
    const user = await accounts.getUser(userPk);
    return toEncryptionMetadata(user.encryptionSalt, doc === undefined ? await vault.encryptionOf(userPk) : doc);
  }

  return {
    routes(r: Router) {
      // --- encryption metadata: per account, any credential (identity keys included) ---
      r.get('/api/encryption/', async (ctx) => {
        const p = await deps.auth().principal(ctx);
        ctx.body = await metadata(p.userPk);
      });

      r.post('/api/encryption/', async (ctx) => {
        // The one-time setup is the account's (as the re-wrap is): readable by identity keys, not writable.
        const p = await deps.auth().accountPrincipal(ctx);
        const b = v.upload(await body(ctx));
        created(ctx, await metadata(p.userPk, await vault.uploadEncryption(p.userPk, b)));
      });

      // Additive (SPEC is silent): a PIN change or a recovery re-wraps the vault key.
      // Not with an identity key: replacing the wraps can lock the account out of its vault.
      r.put('/api/encryption/', async (ctx) => {
        const p = await deps.auth().accountPrincipal(ctx);
        const b = v.rewrap(await body(ctx));
        ctx.body = await metadata(p.userPk, await vault.rewrapEncryption(p.userPk, b));
      });

      // --- passwords (identity-scoped) ---
      // Registered before /{uuid}/. Needs a credential but no identity: nothing is stored.
      // SPEC lists it under "Passwords (identity header required)": identity-scoped like its section.
      r.get('/api/passwords/generate_password/', async (ctx) => {
        await deps.auth().identity(ctx);
        const { length, classes } = generateOptions(ctx);
        ctx.body = { password: generatePassword(length, classes) };
      });

      r.get('/api/passwords/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        sendPage(ctx, await vault.listEntries(identityId, pageParams(ctx)), toPasswordEntry, deps.publicUrl);
      });

      r.post('/api/passwords/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        const b = v.create(await body(ctx));
        const { uuid, domain, username, password, notes } = b;
        const entry = toPasswordEntry(await vault.createEntry(identityId, { uuid, domain, username, password, notes }));
        created(ctx, entry, `/api/passwords/${entry.uuid}/`);
      });

      r.get('/api/passwords/:uuid/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        const doc = await vault.getEntry(identityId, pathUuid(ctx, NO_ENTRY));
        if (!doc) throw notFound(NO_ENTRY);
        ctx.body = toPasswordEntry(doc);
      });

      r.put('/api/passwords/:uuid/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        const id = pathUuid(ctx, NO_ENTRY);
        const b = v.put(await body(ctx));
        // As Django REST framework's PUT: required fields replace, optional ones left out keep
        // their ciphertext (explicit null clears it), so a PUT without them loses nothing.
        const changes: PasswordFields = { domain: b.domain, password: b.password };
        if (b.username !== undefined) changes.username = b.username;
        if (b.notes !== undefined) changes.notes = b.notes;
        ctx.body = toPasswordEntry(await vault.updateEntry(identityId, id, changes));
      });

      r.patch('/api/passwords/:uuid/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        const id = pathUuid(ctx, NO_ENTRY);
        const b = v.patch(await body(ctx));
        const changes: PasswordFields = {};
        for (const f of ['domain', 'username', 'password', 'notes'] as const) if (b[f] !== undefined) (changes as Record<string, unknown>)[f] = b[f];
        ctx.body = toPasswordEntry(await vault.updateEntry(identityId, id, changes));
      });

      r.delete('/api/passwords/:uuid/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        await vault.deleteEntry(identityId, pathUuid(ctx, NO_ENTRY));
        noContent(ctx);
      });

      // --- secrets (identity-scoped) ---
      r.get('/api/vault/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        const key = queryParam(ctx, 'key');
        sendPage(ctx, await vault.listSecrets(identityId, pageParams(ctx), key), toListedSecret, deps.publicUrl);
      });

      r.post('/api/vault/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        const b = v.upsert(await body(ctx));
        const { doc, created: isNew } = await vault.upsertSecret(identityId, b.key, b.value);
        const secret = toSecret(doc);
        if (isNew) created(ctx, secret, `/api/vault/${secret.uuid}/`);
        else ctx.body = secret;
      });

      r.get('/api/vault/:uuid/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        const doc = await vault.getSecret(identityId, pathUuid(ctx, NO_SECRET));
        if (!doc) throw notFound(NO_SECRET);
        ctx.body = toSecret(doc);
      });

      r.delete('/api/vault/:uuid/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        await vault.deleteSecret(identityId, pathUuid(ctx, NO_SECRET));
        noContent(ctx);
      });
    },
  };
}
