// Unlocking the vault: device secret, wrong-PIN counter, encryption metadata, PIN.
import { createHash } from 'node:crypto';
import { existsSync, renameSync } from 'node:fs';
import path from 'node:path';
import type { AisClient } from '../sdk/client.js';
import { fileLockStore, parseKdf, unlock, type EncryptionMetadata, type KdfParams } from '../sdk/crypto.js';
import { UnlockedVault } from '../sdk/unlocked.js';
import { configDir, updateConfig } from './config.js';
import { actsAsStoredLogin, client, type Ctx } from './context.js';
import { CliError, EXIT } from './errors.js';
import { readSecret } from './input.js';

/** AIS_PIN_KDF: lower Argon2id cost for tests (floored by parseKdf at 19 MiB, t=2). */
export function kdfOverride(ctx: Ctx): KdfParams | undefined {
  const raw = ctx.env.AIS_PIN_KDF;
  if (!raw) return undefined;
  try {
    return parseKdf(raw.trim());
  } catch (err) {
    throw new CliError('usage', `AIS_PIN_KDF: ${(err as Error).message} (format argon2id:m=KiB,t=N,p=N)`, EXIT.usage);
  }
}

/**
 * The wrong-PIN counter of the account, filed by its salt (one per account, server-made):
 * two accounts used from one machine (a login and an AIS_API_KEY, or two keys) never share
 * a counter.
 */
export function lockStore(ctx: Ctx, salt: string) {
  const file = path.join(configDir(ctx.env), `pin-lock-${createHash('sha256').update(salt).digest('hex').slice(0, 16)}.json`);
  // Before, the counter of a logged-in user was filed by user pk: carried over (a locked
  // vault stays locked across the upgrade).
  const older = ctx.config.user?.pk === undefined ? null : path.join(configDir(ctx.env), `pin-lock-${ctx.config.user.pk}.json`);
  if (older && !existsSync(file) && existsSync(older)) renameSync(older, file);
  return fileLockStore(file);
}

/** How `--help` describes AIS_DEVICE_SECRET for the commands that open the vault. */
export const DEVICE_SECRET_HELP = "the vault's device secret, on a machine that did not run `ais pin setup` (once it opens the vault, saved beside the login stored here if that is of the same account)";

export function deviceSecret(ctx: Ctx): string {
  const s = ctx.env.AIS_DEVICE_SECRET || ctx.config.device_secret; // an empty one is unset
  if (!s) {
    throw new CliError(
      'encryption_missing',
      'This machine has no device secret for the vault: set AIS_DEVICE_SECRET to the one `ais pin setup` printed (`device_secret` in its machine\'s config); once it opens the vault it is saved beside this machine\'s login of that account. New account: `ais pin setup`. Only with the recovery key and no device secret anywhere: `ais pin recover` (it makes a new device secret, which every other machine then needs).',
    );
  }
  return s;
}

/** Encryption set up by a client that keeps no wrapped vault key on the server (SPEC's minimal upload). */
export function foreignSetup(): CliError {
  return new CliError('encryption_foreign', "This account's encryption was set up by another client that keeps its vault key elsewhere (no wrapped key on the server): this CLI cannot unlock it. Use that client.");
}

export async function metadataFor(c: AisClient): Promise<EncryptionMetadata> {
  const m = await c.encryption.get();
  if (!m.public_key || !m.verifier) throw new CliError('encryption_missing', 'No PIN is set up for this account: run `ais pin setup` first.');
  if (!m.wrapped_key) throw foreignSetup();
  return m as EncryptionMetadata;
}

export async function unlocked(ctx: Ctx): Promise<UnlockedVault> {
  const c = client(ctx, { identity: true });
  const metadata = await metadataFor(c);
  const secret = deviceSecret(ctx);
  const pin = await readSecret(ctx, 'AIS_PIN', 'PIN');
  const key = await unlock({ pin, deviceSecret: secret, metadata, lockStore: lockStore(ctx, metadata.salt) });
  // A device secret given by AIS_DEVICE_SECRET that opened the vault is kept beside this
  // machine's stored login (a new machine, or one whose saved secret a recovery elsewhere
  // replaced): the next run needs no variable. Only beside a login of this same account at
  // this service: an AIS_API_KEY of another account would replace the login's own secret (its
  // right PIN would then fail, and count towards pin_locked). Without a stored login
  // (AIS_API_KEY only) no config file is made.
  if (secret !== ctx.config.device_secret && (await actsAsStoredLogin(ctx, c))) {
    ctx.config = await updateConfig(ctx.env, (stored) => ({ ...stored, device_secret: secret }));
  }
  return new UnlockedVault(c, key);
}
