/**
 * The outbound mailer port: ONE way out for every mail the service sends (account mails,
 * identities' outgoing mail). Adapters: an SMTP relay (SMTP_RELAY_URL), or .eml files under
 * DATA_DIR/outbox when no relay is configured.
 */
export interface OutboundAttachment {
  filename: string;
  contentType: string;
  content: Buffer;
}

/** An address, or an address with its display name (quoted or encoded on the wire as needed). */
export type OutboundAddress = string | { name: string; address: string };

export interface OutboundMail {
  from: OutboundAddress;
  to: OutboundAddress[];
  cc?: OutboundAddress[];
  bcc?: OutboundAddress[];
  subject: string;
  text?: string;
  html?: string;
  messageId?: string;
  /**
   * When the message was composed (ISO 8601): its Date header (RFC 5322 §3.6.1), the same on
   * every attempt. With `messageId`, it also names the message's outbox file, so a message
   * handed over again (a crash before its outcome was recorded) replaces its own file.
   */
  date?: string;
  inReplyTo?: string;
  references?: string[];
  headers?: Record<string, string>;
  attachments?: OutboundAttachment[];
  /** SMTP envelope (RFC 5321 MAIL FROM / RCPT TO) when it differs from the headers. */
  envelope?: { from: string; to: string[] };
}

export interface SendResult {
  messageId: string;
  /** Where it went: `relay` or `outbox` (a file path). */
  via: 'relay' | 'outbox';
  location?: string;
  /**
   * Envelope recipients the relay refused at RCPT while it took the message for the others
   * (a refusal of all of them is an error instead); `temporary` for a 4xx reply.
   */
  refused: { address: string; reason: string; temporary: boolean }[];
}

/** A temporary failure (4xx SMTP reply, connection error): retry later. Others are permanent. */
export class TemporaryMailError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TemporaryMailError';
  }
}

export interface Mailer {
  send(mail: OutboundMail): Promise<SendResult>;
  /** Builds the raw RFC 5322 message without sending it (for blobs, internal delivery). */
  compile(mail: OutboundMail): Promise<Buffer>;
  /** Rejects when the way out cannot be used now (the relay unreachable or refusing the login). */
  verify(): Promise<void>;
  close(): Promise<void>;
}
