/**
 * Transparent end-to-end encryption over the vault endpoints: once unlocked with the PIN
 * (services/sdk/crypto.ts), password fields and secret values are sealed before they leave
 * and opened after they arrive. The server only ever sees `e2e::` strings.
 */
import { randomUUID } from 'node:crypto';
import type { AisClient, PasswordEntry } from './client.js';
import { CryptoError, decryptField, encryptField, type VaultKey } from './crypto.js';

export interface PlainPassword {
  uuid: string;
  domain: string;
  username: string;
  password: string;
  notes: string;
}

export interface PlainSecret {
  uuid: string;
  key: string;
  value: string | null;
}

/** `client` must carry the identity the entries belong to (it is bound into the ciphertext). */
export class UnlockedVault {
  readonly identity: string;
  constructor(
    readonly client: AisClient,
    private readonly key: VaultKey,
  ) {
    // An identity key's client is scoped by its key alone: the uuid still has to be named here.
    if (!client.identity) throw new Error('UnlockedVault needs a client scoped to an identity: client.withIdentity(uuid) (with an identity key, the uuid whoami() names).');
    this.identity = client.identity;
  }

  /** `asked`: the uuid the caller asked for, so a server cannot answer with another entry. */
  #open(e: PasswordEntry, asked?: string): PlainPassword {
    if (asked !== undefined && e.uuid.toLowerCase() !== asked.toLowerCase()) throw answeredOther(`password entry ${asked}`);
    const b = { kind: 'password' as const, identity: this.identity, entry: e.uuid, domain: e.domain };
    const f = (field: 'username' | 'password' | 'notes') => (e[field] ? decryptField(this.key, e[field], { ...b, field }) : '');
    return { uuid: e.uuid, domain: e.domain, username: f('username'), password: f('password'), notes: f('notes') };
  }

  #seal(uuid: string, p: Omit<PlainPassword, 'uuid'>) {
    const b = { kind: 'password' as const, identity: this.identity, entry: uuid, domain: p.domain };
    return {
      uuid,
      domain: p.domain,
      username: encryptField(this.key, p.username, { ...b, field: 'username' }),
      password: encryptField(this.key, p.password, { ...b, field: 'password' }),
      notes: encryptField(this.key, p.notes, { ...b, field: 'notes' }),
    };
  }

  async addPassword(p: { domain: string; username: string; password: string; notes?: string }): Promise<PlainPassword> {
    // The entry uuid is chosen here because it is bound into each field's ciphertext.
    const uuid = randomUUID();
    return this.#open(await this.client.passwords.create(this.#seal(uuid, { notes: '', ...p })), uuid);
  }
  /** Without `notes`, the entry keeps its notes (re-sealed: the domain is bound into each field). */
  async updatePassword(uuid: string, p: { domain: string; username: string; password: string; notes?: string }): Promise<PlainPassword> {
    const notes = p.notes ?? (await this.getPassword(uuid)).notes;
    const { uuid: _u, ...body } = this.#seal(uuid, { ...p, notes });
    return this.#open(await this.client.passwords.update(uuid, body), uuid);
  }
  async getPassword(uuid: string): Promise<PlainPassword> {
    return this.#open(await this.client.passwords.get(uuid), uuid);
  }
  /**
   * Every entry, decrypted. An entry that does not decrypt (written by another client, or
   * its domain changed without re-sealing) is left out of `entries` and named in `failed`,
   * so one bad entry does not hide the others.
   */
  async listPasswords(): Promise<PlainPassword[]> {
    return (await this.listPasswordsReport()).entries;
  }
  async listPasswordsReport(): Promise<{ entries: PlainPassword[]; failed: { uuid: string; domain: string; error: string }[] }> {
    const entries: PlainPassword[] = [];
    const failed: { uuid: string; domain: string; error: string }[] = [];
    for (const e of await this.client.passwords.list()) {
      try {
        entries.push(this.#open(e));
      } catch (err) {
        if (!(err instanceof CryptoError)) throw err;
        failed.push({ uuid: e.uuid, domain: e.domain, error: err.code });
      }
    }
    return { entries, failed };
  }

  async setSecret(key: string, value: string): Promise<PlainSecret> {
    const s = await this.client.vault.put(key, encryptField(this.key, value, { kind: 'secret', identity: this.identity, key }));
    return { uuid: s.uuid, key: s.key, value };
  }
  /** By name, else by uuid (see {@link AisClient.vault}.find); the answer must be the secret asked for. */
  async getSecret(keyOrUuid: string): Promise<PlainSecret> {
    const s = await this.client.vault.find(keyOrUuid);
    if (!s) throw Object.assign(new Error(`No secret named ${keyOrUuid}.`), { code: 'not_found' });
    const full = s.value ? s : await this.client.vault.get(s.uuid);
    // The value is decrypted under the name found, and the answer must be the secret asked
    // for: a server handing out another secret in its place is caught, not decrypted.
    const asked = s.key === keyOrUuid || s.uuid.toLowerCase() === keyOrUuid.toLowerCase();
    if (!asked || full.uuid.toLowerCase() !== s.uuid.toLowerCase() || full.key !== s.key) throw answeredOther(`secret ${keyOrUuid}`);
    return { uuid: full.uuid, key: full.key, value: full.value ? decryptField(this.key, full.value, { kind: 'secret', identity: this.identity, key: full.key }) : null };
  }
}

function answeredOther(what: string): CryptoError {
  return new CryptoError('decrypt_failed', `The server answered with another entry than the ${what}.`);
}
