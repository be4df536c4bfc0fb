/**
 * The mail context: inbound SMTP, threads, compose/reply/reply-all, attachments, the
 * outbound delivery reactor and the send limits. See docs/MAIL.md.
 */
import path from 'node:path';
import type { ContextFactory, ContextParts } from '../../infra/runtime.js';
import type { BlobStore } from '../../infra/ports/blob-store.js';
import { createFsBlobStore } from '../../infra/blobs/fs-blob-store.js';
import { mailProjection } from '../../projections/mail/index.js';
import { createMailService, type MailService } from './service.js';
import { createSmtpListener, type SmtpListener } from './smtp.js';
import { createDeliveryReactor, type DeliveryOptions } from './delivery.js';
import { mailRoutes } from './routes.js';
import { bodyBudget } from './body-budget.js';

export type { MailService } from './service.js';
export { derivedId, MAX_MESSAGE_BYTES } from './service.js';
export * from './events.js';

export interface MailParts extends ContextParts {
  mail: MailService;
  blobs: BlobStore;
  /** The bound SMTP port (null when SMTP_PORT=0 or not started). */
  smtpPort(): number | null;
}

/** Builds the mail context; `blobs` defaults to files under DATA_DIR/blobs. */
export function createMailContext(options: { blobs?: BlobStore; delivery?: DeliveryOptions } = {}): ContextFactory {
  return (shared): MailParts => {
    const { platform } = shared;
    const { config } = platform;
    const blobs = options.blobs ?? createFsBlobStore({ dir: path.join(config.dataDir, 'blobs') });
    const mail = createMailService(platform, { blobs, hmacKey: shared.keys.hmacKey });
    const reactor = createDeliveryReactor(platform, { mail, blobs, options: options.delivery, feed: platform.feed });
    const budget = bodyBudget(); // SMTP DATA and uploads share it: both are bodies in memory
    const smtp: SmtpListener | null = config.smtpPort === 0 ? null : createSmtpListener({ config, logger: platform.logger, mail, blobs, metrics: platform.metrics, budget });
    return {
      name: 'mail',
      projections: [mailProjection],
      module: mailRoutes({ mail, blobs, config, budget, auth: () => shared.auth }),
      mail,
      blobs,
      smtpPort: () => smtp?.port() ?? null,
      // Delivery hands messages to the relay: it must run in ONE process (the embedded one,
      // or the cluster worker holding the lease). SMTP serves clients: every gateway listens.
      async start(role) {
        if (role !== 'gateway') await reactor.start();
        if (role !== 'worker') {
          await mail.start(); // sends are served here
          await smtp?.start();
        }
      },
      async stop() {
        await smtp?.stop();
        mail.stop();
        await reactor.stop();
      },
    };
  };
}

export const mailContext: ContextFactory = createMailContext();
