// `inbox watch` / `sms watch`: the identity's event stream, one line per event.
import { ApiRequestError } from '../sdk/client.js';
import { client, identityLabel, identityNotFound, type Ctx } from './context.js';
import { usage } from './errors.js';
import { forTerminal } from './output.js';

export async function watch(ctx: Ctx, kind: 'email' | 'sms', v: Record<string, any>, line: (d: any) => string): Promise<void> {
  if (v.count !== undefined && !/^[1-9]\d*$/.test(v.count)) throw usage('--count takes a positive whole number');
  // The service refuses an id that is no event id (400): said here, as the bad argument it is.
  if (v.since !== undefined && !/^\d{1,30}$/.test(v.since)) throw usage('--since takes an event id printed by an earlier watch (a decimal number)');
  const c = client(ctx, { identity: true });
  // Fail fast on an unknown identity or bad credentials before streaming (the same words as
  // every other command: a name that names nothing is not an identity that "no longer exists").
  const identity = await c.identities.get(c.identity!).catch((e) => {
    throw e instanceof ApiRequestError && e.status === 404 ? identityNotFound(c.identity!, ctx.config.identity) : e;
  });
  const whom = identityLabel(identity);
  const max = v.count ? Number(v.count) : Infinity;
  const ac = new AbortController();
  process.once('SIGINT', () => ac.abort());
  process.once('SIGTERM', () => ac.abort());
  let seen = 0;
  const stream = c.events({
    lastEventId: v.since,
    signal: ac.signal,
    onStatus: (s) => {
      if (s.state === 'open' && !ctx.json) ctx.err(s.attempt ? 'reconnected.' : `watching ${kind} for ${whom} (Ctrl-C to stop)`);
      if (s.state === 'reconnecting' && !ctx.json) ctx.err(`disconnected; reconnecting in ${Math.round((s.delayMs ?? 0) / 1000)}s`);
      if (s.state === 'open' && ctx.json && !s.attempt) ctx.err(JSON.stringify({ watching: kind, identity: c.identity }));
    },
  });
  for await (const e of stream) {
    if (e.event !== kind) continue;
    // The event id leads the human line too: `--since <id>` resumes after it.
    ctx.out(ctx.json ? JSON.stringify({ id: e.id, event: e.event, ...(e.data as object) }) : forTerminal(`${e.id ?? '-'}  ${line(e.data)}`));
    if (++seen >= max) {
      ac.abort();
      break;
    }
  }
}
