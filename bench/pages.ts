/**
 * `pages`: walking a long list to its end. One inbox gets BENCH_PAGE_MESSAGES mails over
 * SMTP; then `GET /api/email-messages/?limit=50` follows its cursors to the last page, one
 * request at a time. A page deep in the list should cost what the first ones do (keyset
 * pagination seeking in the index); a cost growing with depth makes a whole walk quadratic.
 * Baseline (same run, same walk): the median latency of the first tenth of the pages;
 * measured: the median of the last tenth.
 */
import nodemailer from 'nodemailer';
import { account, api, fmt, freePort, ms, quantile, row, startService } from './lib.js';

const MESSAGES = Number(process.env.BENCH_PAGE_MESSAGES ?? 10_000);
const LIMIT = 50;

export async function pagesSection(): Promise<void> {
  const smtpPort = await freePort();
  const svc = await startService({ SMTP_PORT: String(smtpPort) });
  try {
    const { key } = await account(svc.url);
    const identity = await api<{ uuid: string; inbox: string }>(svc.url, 'POST', '/api/identities/', { token: key, body: { name: 'pages' } });
    const sender = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true, pool: true, maxConnections: 4, maxMessages: Infinity });
    const seeded = Date.now();
    for (let sent = 0; sent < MESSAGES; sent += 200) {
      const batch = Array.from({ length: Math.min(200, MESSAGES - sent) }, (_, i) =>
        sender.sendMail({ from: `s${(sent + i) % 97}@example.com`, to: identity.inbox, subject: `message ${sent + i}`, text: `body ${sent + i}` }),
      );
      await Promise.all(batch);
    }
    sender.close();
    console.log(`seeded ${MESSAGES} messages in ${((Date.now() - seeded) / 1000).toFixed(1)} s`);

    const headers = { authorization: `Bearer ${key}`, 'x-service-identity': identity.uuid };
    const latencies: number[] = [];
    let next: string | null = `${svc.url}/api/email-messages/?limit=${LIMIT}`;
    let seen = 0;
    while (next) {
      const started = performance.now();
      const res: Response = await fetch(next, { headers });
      const items = (await res.json()) as unknown[];
      latencies.push(performance.now() - started);
      if (!res.ok) throw new Error(`page ${latencies.length}: ${res.status}`);
      seen += items.length;
      next = /<([^>]+)>;\s*rel="next"/.exec(res.headers.get('link') ?? '')?.[1] ?? null;
    }
    if (seen !== MESSAGES) throw new Error(`the walk saw ${seen} of ${MESSAGES} messages`);
    const tenth = Math.max(1, Math.floor(latencies.length / 10));
    const first = quantile(latencies.slice(0, tenth), 0.5);
    const last = quantile(latencies.slice(-tenth), 0.5);
    const total = latencies.reduce((a, b) => a + b, 0);
    row(`GET /api/email-messages/?limit=${LIMIT}, first tenth of a ${fmt(latencies.length)}-page walk (baseline)`, '', `median ${ms(first)}`, '100%', '');
    row(
      `the same walk, last tenth (${fmt(MESSAGES)} messages in the list)`,
      `whole walk ${(total / 1000).toFixed(1)} s`,
      `median ${ms(last)}`,
      `${(last / first).toFixed(2)}×`,
      'deep pages cost what the first do (≤ 1.5×)',
    );
  } finally {
    await svc.stop();
  }
}
