/**
 * Process roles (infra/runtime.ts ProcessRole): what a context starts in the embedded
 * process ('all'), in a cluster gateway and in the cluster worker. No cluster engine needed:
 * the mail context is started on the embedded ports with each role in turn.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig } from '../../infra/config.js';
import { processRole, startRuntime, type ProcessRole, type Runtime } from '../../infra/runtime.js';
import { useWorkerRole } from '../../infra/cluster.js';
import type { SubscribeOptions } from '../../infra/ports/event-store.js';
import type { MailParts } from '../../services/mail/index.js';
import { freePort } from '../support/spawn.js';


describe('processRole', () => {
  it('is all in embedded mode, gateway in cluster mode, worker once the lease is held', () => {
    expect(processRole({ store: 'embedded' })).toBe('all');
    expect(processRole({ store: 'cluster' })).toBe('gateway');
    useWorkerRole({ name: 'projections', owner: 'test' });
    expect(processRole({ store: 'cluster' })).toBe('worker');
    expect(processRole({ store: 'embedded' })).toBe('all'); // the cluster role never leaks into embedded mode
  });
});

describe('the mail context by role', () => {
  let runtime: Runtime;
  let dataDir: string;
  let mail: MailParts;
  const subscriptions: SubscribeOptions[] = [];

  beforeAll(async () => {
    dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-roles-'));
    const config = loadConfig({
      PORT: '0',
      SMTP_PORT: String(await freePort()),
      SMTP_HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
      PASSWORD_HASH_MEMORY_KIB: '19456',
    });
    // serve: false starts nothing in the background: the test starts the mail context itself.
    runtime = await startRuntime(config, { logger: pino({ level: 'silent' }), serve: false });
    expect(runtime.role).toBe('all');
    mail = runtime.parts.find((p) => p.name === 'mail') as MailParts;
    const events = runtime.events;
    const original = events.subscribeAll.bind(events);
    events.subscribeAll = (options, handler) => {
      subscriptions.push(options);
      return original(options, handler);
    };
  });

  afterAll(async () => {
    await runtime?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** Starts the context with `role`, reports what ran, stops it. */
  async function startAs(role: ProcessRole): Promise<{ delivery: boolean; smtp: boolean }> {
    subscriptions.length = 0;
    await mail.start!(role);
    try {
      const delivery = subscriptions.some((s) => s.filter?.eventTypes?.includes('EmailQueued'));
      return { delivery, smtp: mail.smtpPort() !== null };
    } finally {
      await mail.stop!();
    }
  }

  it('runs delivery and the SMTP listener in the embedded process', async () => {
    expect(await startAs('all')).toEqual({ delivery: true, smtp: true });
  });

  it('runs only the SMTP listener in a cluster gateway (delivery must run once)', async () => {
    expect(await startAs('gateway')).toEqual({ delivery: false, smtp: true });
  });

  it('runs only delivery in the cluster worker', async () => {
    expect(await startAs('worker')).toEqual({ delivery: true, smtp: false });
  });
});
