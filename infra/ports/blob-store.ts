/**
 * The blob-store port: immutable, content-addressed binary objects (raw MIME of received
 * mail, attachment bytes). The key of a blob is the lowercase hex SHA-256 of its bytes, so
 * a put is naturally idempotent and the same attachment stored twice takes the space once.
 *
 * Adapters: files under DATA_DIR/blobs (embedded, infra/blobs/fs-blob-store.ts: small
 * blobs appended to permanent, indexed pack files with one fdatasync per group commit,
 * large ones in their own fsynced file); an S3-style object store fits the same contract
 * (key = object name, put = PutObject with a checksum, get = GetObject, no listing or
 * mutation needed).
 */
import type { Readable } from 'node:stream';

export interface BlobRef {
  /** Lowercase hex SHA-256 of the content. */
  key: string;
  size: number;
}

export interface BlobStore {
  /** Stores `content`; durable when the promise resolves (events may then refer to it). */
  put(content: Uint8Array): Promise<BlobRef>;
  /** The whole blob, or null when the key is unknown. */
  get(key: string): Promise<Buffer | null>;
  /** A stream of the blob with its size, or null when the key is unknown. */
  open(key: string): Promise<{ size: number; stream: Readable } | null>;
  has(key: string): Promise<boolean>;
}

export const BLOB_KEY = /^[0-9a-f]{64}$/;
