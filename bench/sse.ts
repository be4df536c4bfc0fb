/**
 * Sections `sse` (1.) and `fanout` (2.), issue 5.
 *
 * 1. Idle streams: this process opens N idle `GET /api/events/stream/` streams (2,000, then
 *    5,000, then 10,000, bounded by the open-file limit) to a spawned service, with an
 *    identity key, and reads the service's VmRSS (/proc/<pid>/status) before and after:
 *    RSS per stream = ΔRSS / N. Baseline: a raw node:http server in its own process that
 *    holds the same number of `text/event-stream` responses (headers + `retry:`, nothing
 *    else), measured the same way. Every stream counts only once its `retry:` line arrived.
 * 2. Latency: 1,000 streams on one identity; N SMS webhooks (SMS_PROVIDER=local) are
 *    posted one after the other; for each (webhook, stream) pair the sample is the time from
 *    the start of the POST to the arrival of the `sms` frame at that stream. Baseline: the
 *    raw server, whose POST writes the same frame to its 1,000 held responses.
 * The SSE client is raw node:http with a minimal frame parser, so the client side stays small.
 */
import http from 'node:http';
import { account, api, fmt, ms, nodeChild, freePort, openFileLimit, quantile, row, rssOf, sleep, startService } from './lib.js';

const STAGES = (process.env.BENCH_SSE_STREAMS ?? '2000,5000,10000').split(',').map(Number);
const SUBSCRIBERS = Number(process.env.BENCH_SSE_SUBSCRIBERS ?? 1000);
const WEBHOOKS = Number(process.env.BENCH_SSE_WEBHOOKS ?? 30);
const OPEN_CONCURRENCY = 100;
/** The first webhooks warm connections and code paths up; their samples are not counted. */
const WARMUP = 2;
const SECRET = 'bench-webhook-secret';
const ADMIN = 'bench-admin-token';

/** A raw SSE client: `ready` resolves when the `retry:` line arrived; `onFrame` sees each later frame. */
class SseClient {
  readonly ready: Promise<void>;
  onFrame: ((frame: string, at: number) => void) | null = null;
  #req: http.ClientRequest;
  #buf = '';

  constructor(url: string, headers: Record<string, string>) {
    let opened: () => void;
    let failed: (err: Error) => void;
    this.ready = new Promise<void>((resolve, reject) => {
      opened = resolve;
      failed = reject;
    });
    this.#req = http.get(url, { headers: { accept: 'text/event-stream', ...headers }, agent: false }, (res) => {
      if (res.statusCode !== 200) {
        failed(new Error(`stream answered ${res.statusCode}`));
        res.resume();
        return;
      }
      res.setEncoding('utf8');
      let gotRetry = false;
      res.on('data', (chunk: string) => {
        const at = performance.now();
        this.#buf += chunk;
        let i: number;
        while ((i = this.#buf.indexOf('\n\n')) >= 0) {
          const frame = this.#buf.slice(0, i);
          this.#buf = this.#buf.slice(i + 2);
          if (!gotRetry && frame.startsWith('retry:')) {
            gotRetry = true;
            opened();
          } else if (this.onFrame && frame.includes('\nevent: ')) this.onFrame(frame, at);
        }
      });
    });
    this.#req.on('error', (err) => failed(err));
  }

  close(): void {
    this.#req.destroy();
  }
}

/** Opens `n` streams, OPEN_CONCURRENCY at a time. */
async function openStreams(n: number, url: string, headers: Record<string, string>): Promise<SseClient[]> {
  const out: SseClient[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(OPEN_CONCURRENCY, n) }, async () => {
      while (next < n) {
        next++;
        const c = new SseClient(url, headers);
        out.push(c);
        await c.ready;
      }
    }),
  );
  return out;
}

/** Raw node:http baseline: holds event-stream responses; POST /emit writes a frame to all of them. */
async function rawSseServer(): Promise<{ url: string; pid: number; stop: () => Promise<void> }> {
  const port = await freePort();
  const code = `
    const held = new Set();
    let seq = 0;
    const server = require('http').createServer((req, res) => {
      if (req.method === 'POST') {
        let body = '';
        req.on('data', (c) => (body += c));
        req.on('end', () => {
          const frame = 'id: ' + (++seq) + '\\nevent: sms\\ndata: ' + JSON.stringify({ conversation_id: 'c', message_id: 'm', from_number: '+15555550123', preview: new URLSearchParams(body).get('Body') }) + '\\n\\n';
          for (const r of held) r.write(frame);
          res.setHeader('content-type', 'text/xml');
          res.end('<?xml version="1.0" encoding="UTF-8"?><Response></Response>');
        });
        return;
      }
      req.socket.setTimeout(0);
      req.socket.setNoDelay(true);
      res.writeHead(200, { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
      res.write('retry: 3000\\n\\n');
      held.add(res);
      res.on('close', () => held.delete(res));
    });
    server.requestTimeout = 0;
    server.listen(${port}, '127.0.0.1', () => console.log('up'));`;
  const { child, stop } = await nodeChild(code);
  return { url: `http://127.0.0.1:${port}`, pid: child.pid!, stop };
}

interface Target {
  label: string;
  pid: number;
  streamUrl: string;
  headers: Record<string, string>;
  webhook: (i: number) => Promise<void>;
}

/** RSS per idle stream at each stage; returns bytes per stream by stage. */
async function idleStreams(t: Target, stages: number[]): Promise<Map<number, { perStream: number; rss: number }>> {
  // Warm the code paths (and the allocator) first, so the "before" is a steady state.
  for (const c of await openStreams(200, t.streamUrl, t.headers)) c.close();
  await sleep(1500);
  const before = rssOf(t.pid);
  const open: SseClient[] = [];
  const result = new Map<number, { perStream: number; rss: number }>();
  for (const n of stages) {
    open.push(...(await openStreams(n - open.length, t.streamUrl, t.headers)));
    await sleep(1500);
    const rss = rssOf(t.pid);
    result.set(n, { perStream: (rss - before) / n, rss });
  }
  for (const c of open) c.close();
  await sleep(1500);
  return result;
}

/** Webhook → frame latency over SUBSCRIBERS streams; every sample is one (webhook, stream) pair. */
async function fanoutLatency(t: Target): Promise<{ p50: number; p99: number; max: number; post50: number }> {
  const clients = await openStreams(SUBSCRIBERS, t.streamUrl, t.headers);
  const total = WARMUP + WEBHOOKS;
  const started = new Array<number>(total);
  const received = new Array<number>(total).fill(0);
  const samples: number[] = [];
  const posts: number[] = [];
  for (const c of clients) {
    c.onFrame = (frame, at) => {
      const m = /"preview":"bench-sms (\d+)"/.exec(frame);
      if (!m) return;
      const i = Number(m[1]);
      if (i >= WARMUP) samples.push(at - started[i]);
      received[i]++;
    };
  }
  try {
    for (let i = 0; i < total; i++) {
      started[i] = performance.now();
      await t.webhook(i);
      if (i >= WARMUP) posts.push(performance.now() - started[i]);
      const deadline = performance.now() + 10_000;
      while (received[i] < clients.length && performance.now() < deadline) await sleep(2);
      if (received[i] < clients.length) throw new Error(`${t.label}: webhook ${i} reached ${received[i]} of ${clients.length} streams`);
      await sleep(20);
    }
  } finally {
    for (const c of clients) c.close();
  }
  return { p50: quantile(samples, 0.5), p99: quantile(samples, 0.99), max: quantile(samples, 1), post50: quantile(posts, 0.5) };
}

async function postForm(url: string, form: Record<string, string>, headers: Record<string, string> = {}): Promise<void> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(form).toString() });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`webhook answered ${res.status}: ${text}`);
}

/** The service with an identity that holds a phone, and an identity key for its streams. */
async function serviceTarget(): Promise<{ target: Target; stop: () => Promise<void> }> {
  // One account holds every stream of the measurement (10,000): above the per-account default.
  const svc = await startService({ SMS_PROVIDER: 'local', SMS_WEBHOOK_SECRET: SECRET, ADMIN_TOKEN: ADMIN, SSE_STREAMS_PER_ACCOUNT: '20000' });
  try {
    const { key, pk } = await account(svc.url);
    await api(svc.url, 'PUT', `/api/admin/users/${pk}/subscription/`, { token: ADMIN, body: { plan: 'developer', status: 'active' } });
    const identity = await api<{ uuid: string; phone: string }>(svc.url, 'POST', '/api/identities/', { token: key, body: { name: 'sse bench', provision_phone: true } });
    if (!identity.phone) throw new Error('identity has no phone');
    const idKey = (await api<{ key: string }>(svc.url, 'POST', '/api/auth/keys/identity/', { token: key, body: { identity_uuid: identity.uuid, label: 'bench' } })).key;
    const run = Date.now();
    const target: Target = {
      label: 'service',
      pid: svc.pid,
      streamUrl: `${svc.url}/api/events/stream/`,
      headers: { authorization: `Bearer ${idKey}` },
      webhook: (i) =>
        postForm(
          `${svc.url}/api/webhooks/sms/`,
          { From: '+15555550123', To: identity.phone, Body: `bench-sms ${i}`, MessageSid: `SMbench${run}x${i}`, NumMedia: '0' },
          { 'x-webhook-secret': SECRET },
        ),
    };
    return { target, stop: () => svc.stop() };
  } catch (err) {
    await svc.stop();
    throw err;
  }
}

function rawTarget(raw: { url: string; pid: number }): Target {
  return { label: 'raw', pid: raw.pid, streamUrl: `${raw.url}/`, headers: {}, webhook: (i) => postForm(`${raw.url}/emit`, { Body: `bench-sms ${i}` }) };
}

/** Section `sse`: idle streams per process and RSS per stream. */
export async function sseSection(): Promise<void> {
  const limit = openFileLimit();
  const stages = STAGES.filter((n) => n <= limit - 500);
  if (stages.length < STAGES.length) console.log(`open-file limit ${limit}: skipping stages ${STAGES.filter((n) => !stages.includes(n)).join(', ')} (raise ulimit -n)`);

  const raw = await rawSseServer();
  let rawIdle: Map<number, { perStream: number; rss: number }>;
  try {
    rawIdle = await idleStreams(rawTarget(raw), stages);
  } finally {
    await raw.stop();
  }
  const svc = await serviceTarget();
  try {
    const idle = await idleStreams(svc.target, stages);
    for (const n of stages) {
      const b = rawIdle.get(n)!;
      const s = idle.get(n)!;
      row(`raw node:http, ${n.toLocaleString('en')} idle event-stream responses (baseline)`, `${fmt(b.perStream / 1024)} KB/stream`, `RSS ${fmt(b.rss / 2 ** 20)} MiB`, '100%', '');
      row(
        `service, ${n.toLocaleString('en')} idle SSE streams (identity key)`,
        `${fmt(s.perStream / 1024)} KB/stream`,
        `RSS ${fmt(s.rss / 2 ** 20)} MiB`,
        `${(s.perStream / b.perStream).toFixed(1)}× baseline memory`,
        n === Math.max(...stages) ? 'goal 10,000 streams, ≤ 30 KB each' : '≤ 30 KB each',
      );
    }
  } finally {
    await svc.stop();
  }
}

/** Section `fanout`: webhook → SSE frame latency at SUBSCRIBERS subscribers. */
export async function fanoutSection(): Promise<void> {
  const raw = await rawSseServer();
  let rawLat: Awaited<ReturnType<typeof fanoutLatency>>;
  try {
    rawLat = await fanoutLatency(rawTarget(raw));
  } finally {
    await raw.stop();
  }
  row(
    `raw node:http fan-out to ${SUBSCRIBERS.toLocaleString('en')} streams, ${WEBHOOKS} posts (baseline)`,
    `POST answered p50 ${ms(rawLat.post50)}`,
    `p50 ${ms(rawLat.p50)}, p99 ${ms(rawLat.p99)}, max ${ms(rawLat.max)}`,
    '100%',
    '',
  );
  const svc = await serviceTarget();
  try {
    const lat = await fanoutLatency(svc.target);
    row(
      `SMS webhook → sms frame at ${SUBSCRIBERS.toLocaleString('en')} subscribers, ${WEBHOOKS} webhooks`,
      `POST answered p50 ${ms(lat.post50)}`,
      `p50 ${ms(lat.p50)}, p99 ${ms(lat.p99)}, max ${ms(lat.max)}`,
      `p99 ${(lat.p99 / rawLat.p99).toFixed(1)}× baseline`,
      'goal p99 ≤ 100 ms',
    );
  } finally {
    await svc.stop();
  }
}
