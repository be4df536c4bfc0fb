/** The public SDK: `import { createClient } from 'agent-identity-service/sdk'` (package.json "exports"; TypeScript source: run it with tsx), or this path. */
export * from './client.js';
/** Every wire type and the `Operations` map, generated from schemas/*.json. */
export type * from './types.gen.js';
export * from './events.js';
export * from './unlocked.js';
export {
  CryptoError,
  type CryptoErrorCode,
  DEFAULT_KDF,
  type KdfParams,
  parseKdf,
  type EncryptionMetadata,
  type LockStore,
  MAX_PIN_ATTEMPTS,
  changePin,
  fileLockStore,
  memoryLockStore,
  recover,
  setupEncryption,
  unlock,
  VaultKey,
} from './crypto.js';
