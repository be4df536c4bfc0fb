/**
 * The vault context: end-to-end-encrypted password entries and secrets per identity, and
 * the account's encryption metadata (salt, public key, verifier, wrapped keys). The server
 * stores ciphertext only; the client side of the scheme is services/sdk/crypto.ts.
 */
import type { ContextFactory } from '../../infra/runtime.js';
import { vaultProjection } from '../../projections/vault/index.js';
import { createVault } from './service.js';
import { vaultRoutes } from './routes.js';

export { createVault, type Vault } from './service.js';
export { toEncryptionMetadata, toPasswordEntry, toSecret } from './routes.js';
export { generatePassword, CHARACTER_CLASSES, PASSWORD_LENGTH } from './generate.js';
export * from './events.js';

export const vaultContext: ContextFactory = (shared) => {
  const vault = createVault(shared.platform);
  return {
    name: 'vault',
    projections: [vaultProjection],
    module: vaultRoutes({ vault, accounts: shared.accounts, auth: () => shared.auth, publicUrl: shared.platform.config.publicUrl }),
  };
};
