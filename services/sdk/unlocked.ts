/**
 * Transparent end-to-end encryption over the vault endpoints: once unlocked with the PIN
 * (services/sdk/crypto.ts), password fields and secret values are sealed before they leave
 * and opened after they arrive. The server only ever sees `e2e::` strings.
 */
import { randomUUID } from 'node:crypto';
import type { AisClient, PasswordEntry, VaultSecret } from './client.js';
import { decryptField, encryptField, type VaultKey } from './crypto.js';

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
    if (!client.identity) throw new Error('UnlockedVault needs a client scoped to an identity (withIdentity).');
    this.identity = client.identity;
  }

  #open(e: PasswordEntry): PlainPassword {
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
    return this.#open(await this.client.passwords.create(this.#seal(uuid, { notes: '', ...p })));
  }
  /** Without `notes`, the entry keeps its notes (re-sealed: the domain is bound into each field). */
  async updatePassword(uuid: string, p: { domain: string; username: string; password: string; notes?: string }): Promise<PlainPassword> {
    const notes = p.notes ?? (await this.getPassword(uuid)).notes;
    const { uuid: _u, ...body } = this.#seal(uuid, { ...p, notes });
    return this.#open(await this.client.passwords.update(uuid, body));
  }
  async getPassword(uuid: string): Promise<PlainPassword> {
    return this.#open(await this.client.passwords.get(uuid));
  }
  async listPasswords(): Promise<PlainPassword[]> {
    return (await this.client.passwords.list()).map((e) => this.#open(e));
  }

  async setSecret(key: string, value: string): Promise<PlainSecret> {
    const s = await this.client.vault.put(key, encryptField(this.key, value, { kind: 'secret', identity: this.identity, key }));
    return { uuid: s.uuid, key: s.key, value };
  }
  async getSecret(uuidOrKey: string): Promise<PlainSecret> {
    const s = await this.#find(uuidOrKey);
    const full = s.value ? s : await this.client.vault.get(s.uuid);
    return { uuid: full.uuid, key: full.key, value: full.value ? decryptField(this.key, full.value, { kind: 'secret', identity: this.identity, key: full.key }) : null };
  }
  async #find(uuidOrKey: string): Promise<VaultSecret> {
    if (/^[0-9a-f-]{36}$/i.test(uuidOrKey)) return this.client.vault.get(uuidOrKey);
    const hit = (await this.client.vault.list()).find((s) => s.key === uuidOrKey);
    if (!hit) throw Object.assign(new Error(`No secret named ${uuidOrKey}.`), { code: 'not_found' });
    return hit;
  }
}
