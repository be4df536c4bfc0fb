/** What the gateway answers for errors of the ports (services/gateway/app.ts `toApiError`). */
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { createApp, toApiError } from '../../services/gateway/app.js';
import { ApiError } from '../../services/gateway/errors.js';
import { ProjectionLagError } from '../../projections/runner.js';
import { AppendTooLargeError } from '../../infra/eventstoredb/event-store.js';
import { EventStoreUnavailableError, WrongExpectedRevisionError } from '../../infra/ports/event-store.js';

it('maps the event store\'s errors to their answers: a conflict 409, an outage 503, a write over its size limit 413 (not retried: it fails again)', () => {
  const answer = (err: unknown) => {
    const e = toApiError(err);
    return [e.status, e.code];
  };
  expect(answer(new WrongExpectedRevisionError('s-1', 0, 1))).toEqual([409, 'conflict']);
  expect(answer(new EventStoreUnavailableError('down'))).toEqual([503, 'service_unavailable']);
  expect(answer(new AppendTooLargeError('mailbox-1', 1_048_576))).toEqual([413, 'payload_too_large']);
  expect(answer(new Error('anything else'))).toEqual([500, 'server_error']);
});

it('logs a 5xx the service chose (a refusal: overloaded, read models behind) as a warning, and a failure (a 500, a store away) as an error', async () => {
  const lines: { level: number; msg: string; status?: number; code?: string }[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const throwing: Record<string, () => never> = {
    refused: () => {
      throw new ApiError(503, 'service_unavailable', 'Too many uploads are in progress; try again shortly.');
    },
    lag: () => {
      throw new ProjectionLagError('9', '5', 5000);
    },
    store: () => {
      throw new EventStoreUnavailableError('down');
    },
    bug: () => {
      throw new TypeError('x is undefined');
    },
  };
  const app = createApp({
    logger: pino({ level: 'info' }, sink),
    modules: [{ routes: (r) => Object.entries(throwing).forEach(([name, fail]) => r.get(`/api/${name}/`, fail)) }],
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  try {
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    for (const name of Object.keys(throwing)) await (await fetch(`${base}/api/${name}/`)).text();
    expect(lines.map((l) => [l.status, l.level, l.msg, l.code])).toEqual([
      [503, 40, 'request refused', 'service_unavailable'],
      [503, 40, 'request refused', 'projection_lag'],
      [503, 50, 'request failed', undefined],
      [500, 50, 'request failed', undefined],
    ]);
  } finally {
    server.close();
  }
});
