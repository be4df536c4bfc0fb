/**
 * Non-negotiables: acknowledged writes survive kill -9 and a restart; SIGTERM drains and
 * exits 0; bad configuration stops the start with one line naming the variable; a rebuild
 * of the read models from the log equals the live ones.
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import nodemailer from 'nodemailer';
import os from 'node:os';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import pino from 'pino';
import { freePort, spawnService, ROOT } from '../support/spawn.js';
import { loadConfig } from '../../infra/config.js';
import { startRuntime } from '../../infra/runtime.js';
import { openDatabase } from '../../infra/sqlite/driver.js';

const post = (url: string, body: unknown) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** An account signed in on `url`, with one identity named after it: what a test needs to send and read mail. */
async function accountWithIdentity(url: string, username: string, identity: Record<string, string> = {}) {
  expect((await post(`${url}/api/auth/social/`, { username, email: `${username}@example.com`, password1: 'pw', password2: 'pw' })).status).toBe(201);
  const { access } = (await (await post(`${url}/api/auth/login/`, { username, password: 'pw' })).json()) as { access: string };
  const auth = { authorization: `Bearer ${access}`, 'content-type': 'application/json' };
  const created = (await (await fetch(`${url}/api/identities/`, { method: 'POST', headers: auth, body: JSON.stringify({ name: username, ...identity }) })).json()) as { uuid: string; inbox: string };
  return { access, auth, identity: created };
}

describe('durability', () => {
  let dataDir: string;
  /** Runs `npm start`'s entry on `dataDir` (a free port, no SMTP, `env` over that) to its exit: a start that is to fail. */
  async function startToExit(env: Record<string, string> = {}): Promise<{ code: number | null; err: string }> {
    const child = spawn(process.execPath, ['--import', 'tsx', 'services/main.ts'], {
      cwd: ROOT,
      env: { ...process.env, DATA_DIR: dataDir, PORT: String(await freePort()), SMTP_PORT: '0', LOG_LEVEL: 'silent', ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    return { code, err };
  }
  beforeEach(() => (dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-crash-'))));
  afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

  it('every acknowledged registration survives kill -9 mid-burst and a restart', async () => {
    const svc = await spawnService({ DATA_DIR: dataDir });
    const acknowledged: string[] = [];
    let killed = false;
    const worker = async (w: number) => {
      for (let i = 0; !killed; i++) {
        const username = `crash${w}x${i}`;
        try {
          const res = await post(`${svc.url}/api/auth/social/`, { username, email: `${username}@example.com`, password1: 'pw', password2: 'pw' });
          if (res.status === 201) acknowledged.push(username);
        } catch {
          return; // connection cut by the kill
        }
      }
    };
    const workers = Array.from({ length: 8 }, (_, w) => worker(w));
    while (acknowledged.length < 25) await new Promise((r) => setTimeout(r, 10));
    svc.child.kill('SIGKILL');
    killed = true;
    await svc.exited;
    await Promise.all(workers);
    expect(acknowledged.length).toBeGreaterThanOrEqual(25);

    const again = await spawnService({ DATA_DIR: dataDir });
    try {
      for (const username of acknowledged) {
        const res = await post(`${again.url}/api/auth/login/`, { username, password: 'pw' });
        expect([username, res.status]).toEqual([username, 200]);
      }
    } finally {
      again.child.kill('SIGTERM');
      expect(await again.exited).toBe(0);
    }
  }, 90_000);

  it('SIGTERM drains and exits 0; a restart on the same DATA_DIR keeps the account', async () => {
    const svc = await spawnService({ DATA_DIR: dataDir });
    try {
      expect((await post(`${svc.url}/api/auth/social/`, { username: 'keeper', email: 'keeper@example.com', password1: 'pw', password2: 'pw' })).status).toBe(201);
      // The databases, keys and the outbox (its mails carry reset and verification links) are
      // the service's own, whatever the umask.
      for (const name of ['events.sqlite', 'read-models.sqlite', 'keys', 'outbox']) {
        expect([name, statSync(path.join(dataDir, name)).mode & 0o077]).toEqual([name, 0]);
      }
      // The verification mail of the sign-up (sent by the account mail reactor, maybe still on its way).
      let mails: string[] = [];
      for (let i = 0; i < 100 && mails.length === 0; i++) {
        mails = readdirSync(path.join(dataDir, 'outbox')).filter((f) => f.endsWith('.eml'));
        if (mails.length === 0) await new Promise((r) => setTimeout(r, 100));
      }
      expect(mails.length).toBeGreaterThan(0);
      for (const mail of mails) expect([mail, statSync(path.join(dataDir, 'outbox', mail)).mode & 0o077]).toEqual([mail, 0]);
    } finally {
      svc.child.kill('SIGTERM'); // also when a check failed: no service left running
    }
    expect(await svc.exited).toBe(0);
    // A DATA_DIR from an older version (or a careless restore): readable by others until the start.
    for (const name of ['events.sqlite', 'read-models.sqlite']) chmodSync(path.join(dataDir, name), 0o644);
    chmodSync(path.join(dataDir, 'blobs'), 0o755);
    chmodSync(path.join(dataDir, 'outbox'), 0o755);
    symlinkSync('/nonexistent/old-backup.sqlite', path.join(dataDir, 'old-backup.sqlite')); // a dangling link: not ours, no reason to fail
    const again = await spawnService({ DATA_DIR: dataDir });
    expect((await post(`${again.url}/api/auth/login/`, { username: 'keeper', password: 'pw' })).status).toBe(200);
    for (const name of ['events.sqlite', 'read-models.sqlite', 'blobs', 'outbox']) {
      expect([name, statSync(path.join(dataDir, name)).mode & 0o077]).toEqual([name, 0]);
    }
    again.child.kill('SIGTERM');
    expect(await again.exited).toBe(0);
  }, 60_000);

  it('a stopped service\'s read models hold its final writes: key uses held in memory and appended at SIGTERM are in them', async () => {
    const svc = await spawnService({ DATA_DIR: dataDir });
    try {
      const { auth } = await accountWithIdentity(svc.url, 'flushuser');
      const keys: string[] = [];
      for (let i = 0; i < 10; i++) keys.push(((await (await fetch(`${svc.url}/api/auth/keys/management/`, { method: 'POST', headers: auth, body: JSON.stringify({ label: `k${i}` }) })).json()) as { key: string }).key);
      const useAll = () => Promise.all(keys.map((key) => fetch(`${svc.url}/api/health/whoami/`, { headers: { authorization: `Bearer ${key}` } })));
      await useAll(); // recorded at once
      await new Promise((r) => setTimeout(r, 50));
      await useAll(); // within the minute: held, appended when the service stops
    } finally {
      svc.child.kill('SIGTERM');
    }
    expect(await svc.exited).toBe(0);
    const log = openDatabase(path.join(dataDir, 'events.sqlite'), { readonly: true });
    const latest = new Map<string, string>();
    for (const row of log.prepare("SELECT data FROM events WHERE type = 'ApiKeyUsed' ORDER BY position").all() as { data: string }[]) {
      const { keyId, at } = JSON.parse(row.data) as { keyId: string; at: string };
      latest.set(keyId, at);
    }
    log.close();
    const reads = openDatabase(path.join(dataDir, 'read-models.sqlite'), { readonly: true });
    const projected = new Map((reads.prepare('SELECT id, doc FROM apikeys').all() as { id: string; doc: string }[]).map((r) => [r.id, JSON.parse(r.doc).lastUsedAt as string]));
    reads.close();
    expect(latest.size).toBe(10);
    expect(new Map([...latest.keys()].map((id) => [id, projected.get(id)]))).toEqual(latest);
  }, 60_000);

  it('a key\'s latest use, recorded at most once a minute while running, survives SIGTERM and a restart', async () => {
    const svc = await spawnService({ DATA_DIR: dataDir });
    let before: string | null = null;
    try {
      const { auth } = await accountWithIdentity(svc.url, 'keyuser');
      const minted = (await (await fetch(`${svc.url}/api/auth/keys/management/`, { method: 'POST', headers: auth, body: JSON.stringify({ label: 'bot' }) })).json()) as { key: string };
      const use = () => fetch(`${svc.url}/api/identities/`, { headers: { authorization: `Bearer ${minted.key}` } });
      expect((await use()).status).toBe(200); // recorded
      await new Promise((r) => setTimeout(r, 50));
      expect((await use()).status).toBe(200); // within the minute: only in memory
      const keys = (await (await fetch(`${svc.url}/api/auth/keys/management/`, { headers: auth })).json()) as { last_used_at: string }[];
      before = keys[0]!.last_used_at;
    } finally {
      svc.child.kill('SIGTERM');
    }
    expect(await svc.exited).toBe(0);
    const again = await spawnService({ DATA_DIR: dataDir });
    try {
      const { access } = (await (await post(`${again.url}/api/auth/login/`, { username: 'keyuser', password: 'pw' })).json()) as { access: string };
      const keys = (await (await fetch(`${again.url}/api/auth/keys/management/`, { headers: { authorization: `Bearer ${access}` } })).json()) as { last_used_at: string }[];
      expect(keys[0]!.last_used_at).toBe(before);
    } finally {
      again.child.kill('SIGTERM');
    }
    expect(await again.exited).toBe(0);
  }, 60_000);

  it('one service per DATA_DIR: a second start on it fails naming DATA_DIR; after a kill -9 the next start takes it over', async () => {
    // (The lock is the kernel's: released when the process dies, even before a parent reaps it.)
    const first = await spawnService({ DATA_DIR: dataDir });
    const second = await startToExit();
    expect(second.code).toBe(1);
    expect(second.err.trim()).toMatch(/^failed to start: DATA_DIR: \/\S+ is in use by another process; stop it first$/);
    first.child.kill('SIGKILL');
    await first.exited;
    const again = await spawnService({ DATA_DIR: dataDir }); // the stale lock is taken over
    expect((await fetch(`${again.url}/api/health/`)).status).toBe(200);
    again.child.kill('SIGTERM');
    expect(await again.exited).toBe(0);
  }, 60_000);

  it('an older version\'s lock (a pid in plain text) is taken over only when that process is gone', async () => {
    const port = String(await freePort()); // npm start takes no PORT=0
    const start = () => startToExit({ PORT: port });
    writeFileSync(path.join(dataDir, 'service.lock'), `${process.pid}\n`); // a live process: this test
    const refused = await start();
    expect([refused.code, refused.err.trim()]).toEqual([1, expect.stringMatching(/^failed to start: DATA_DIR: \/\S+ is in use by another process \(pid \d+, an older version\)/)]);
    const gone = spawn(process.execPath, ['-e', '0']);
    await new Promise((resolve) => gone.on('exit', resolve));
    writeFileSync(path.join(dataDir, 'service.lock'), `${gone.pid}\n`);
    const svc = await spawnService({ DATA_DIR: dataDir });
    expect((await fetch(`${svc.url}/api/health/`)).status).toBe(200);
    svc.child.kill('SIGTERM');
    expect(await svc.exited).toBe(0);
  }, 60_000);

  it('SIGTERM while a large answer is still being read: the reader gets all of it', async () => {
    const smtpPort = await freePort();
    const svc = await spawnService({ DATA_DIR: dataDir, SMTP_PORT: String(smtpPort), MAIL_DOMAIN: 'agents.localhost' });
    try {
      const { auth, identity } = await accountWithIdentity(svc.url, 'reader', { email_identifier: 'reader' });
      const text = 'a long line of a large report\n'.repeat(700_000); // 21 MB: more than the kernel's socket buffers hold
      await nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true }).sendMail({ from: 'big@example.com', to: identity.inbox, subject: 'large', text });
      const list = (await (await fetch(`${svc.url}/api/email-messages/`, { headers: { ...auth, 'x-service-identity': identity.uuid } })).json()) as { uuid: string }[];
      const received = await new Promise<{ length: number; expected: number; text: string }>((resolve, reject) => {
        const req = http.get(`${svc.url}/api/email-messages/${list[0].uuid}/`, { headers: { ...auth, 'x-service-identity': identity.uuid } }, (res) => {
          res.pause(); // a slow reader: the answer waits in buffers
          setTimeout(() => {
            svc.child.kill('SIGTERM');
            setTimeout(() => {
              const chunks: Buffer[] = [];
              res.on('data', (c: Buffer) => chunks.push(c));
              res.on('end', () => resolve({ length: Buffer.concat(chunks).length, expected: Number(res.headers['content-length']), text: Buffer.concat(chunks).toString() }));
              res.on('error', reject);
              res.resume();
            }, 500);
          }, 300);
        });
        req.on('error', reject);
      });
      expect(received.length).toBe(received.expected);
      expect((JSON.parse(received.text) as { text: string }).text).toBe(text);
    } finally {
      svc.child.kill('SIGTERM');
    }
    expect(await svc.exited).toBe(0);
  }, 90_000);

  it('SIGTERM with an SMTP client still connected: 421, and the process exits 0 well inside a 10 s supervisor grace period', async () => {
    const smtpPort = await freePort();
    const svc = await spawnService({ DATA_DIR: dataDir, SMTP_PORT: String(smtpPort) });
    const client = net.connect(smtpPort, '127.0.0.1');
    let transcript = '';
    client.setEncoding('utf8');
    client.on('data', (d: string) => (transcript += d));
    client.on('error', () => undefined);
    for (let i = 0; i < 200 && !/^220 /m.test(transcript); i++) await new Promise((r) => setTimeout(r, 10));
    client.write('EHLO lingering.example\r\n'); // and then it just stays connected
    const started = Date.now();
    svc.child.kill('SIGTERM');
    expect(await svc.exited).toBe(0);
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(transcript).toMatch(/^421 /m);
    client.destroy();
  }, 60_000);

  it('SIGTERM lets the requests in flight finish with their normal answer; a request cut off was never applied', async () => {
    // Whether any request is still in flight at the signal depends on the machine's speed: a
    // run where none was (all answered before it, or none taken yet) shows nothing, and is
    // tried again with other accounts, a few times.
    for (let run = 0; ; run++) {
      const svc = await spawnService({ DATA_DIR: dataDir });
      // Registrations hash with argon2id (tens of ms each, 8 at a time): many are in flight.
      const names = Array.from({ length: 64 }, (_, i) => `inflight${run}x${i}`);
      let killedAt = Infinity;
      const answers = names.map((username) =>
        post(`${svc.url}/api/auth/social/`, { username, email: `${username}@example.com`, password1: 'pw', password2: 'pw' }).then(
          (res) => ({ username, status: res.status, after: performance.now() > killedAt }),
          (err: Error & { cause?: { code?: string } }) => ({ username, status: `refused: ${err.cause?.code ?? err.message}`, after: true }),
        ),
      );
      await new Promise((r) => setTimeout(r, 150));
      killedAt = performance.now();
      svc.child.kill('SIGTERM');
      const settled = await Promise.all(answers);
      expect(await svc.exited).toBe(0);
      // Every answer is the normal one, or the connection was refused before the request was
      // taken (not accepted yet when the listener closed); none is cut off half way (a 500 or
      // a reset after the work was done).
      for (const a of settled) expect([a.username, a.status === 201 || /^refused: ECONN(RESET|REFUSED)$/.test(String(a.status))]).toEqual([a.username, true]);
      const again = await spawnService({ DATA_DIR: dataDir });
      try {
        for (const a of settled) {
          const login = await post(`${again.url}/api/auth/login/`, { username: a.username, password: 'pw' });
          expect([a.username, a.status, login.status]).toEqual([a.username, a.status, a.status === 201 ? 200 : 400]);
        }
      } finally {
        again.child.kill('SIGTERM');
        await again.exited;
      }
      const drained = settled.filter((a) => a.status === 201 && a.after).length; // answered after the signal
      if (drained > 0) break;
      expect([run, drained]).not.toEqual([4, 0]);
    }
  }, 240_000);

  it('answers finished while draining say Connection: close, so keep-alive clients do not send more on a connection about to end', async () => {
    // As above: a run where no answer came after the signal shows nothing, and is tried again.
    for (let run = 0; ; run++) {
      const svc = await spawnService({ DATA_DIR: dataDir });
      const { port } = new URL(svc.url);
      // Keep-alive connections, each with a registration in flight (argon2id: tens of ms).
      const replies = Array.from({ length: 8 }, (_, i) => {
        const body = JSON.stringify({ username: `drain${run}x${i}`, email: `drain${run}x${i}@example.com`, password1: 'pw', password2: 'pw' });
        return new Promise<{ head: string; at: number }>((resolve) => {
          const socket = net.connect(Number(port), '127.0.0.1', () =>
            socket.write(`POST /api/auth/social/ HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`),
          );
          let text = '';
          socket.setEncoding('latin1');
          socket.on('data', (chunk) => {
            text += chunk;
            if (text.includes('\r\n\r\n')) resolve({ head: text.split('\r\n\r\n')[0]!, at: performance.now() });
          });
          socket.on('error', () => resolve({ head: '', at: performance.now() }));
          socket.on('close', () => resolve({ head: text.split('\r\n\r\n')[0] ?? '', at: performance.now() }));
        });
      });
      await new Promise((r) => setTimeout(r, 30 * (run + 1)));
      const signalled = performance.now();
      svc.child.kill('SIGTERM');
      const answered = await Promise.all(replies);
      expect(await svc.exited).toBe(0);
      const afterSignal = answered.filter((a) => a.at > signalled && a.head.startsWith('HTTP/1.1 201'));
      for (const a of afterSignal) expect(a.head).toMatch(/\r\nConnection: close/i);
      if (afterSignal.length > 0) break;
      expect([run, afterSignal.length]).not.toEqual([4, 0]);
    }
  }, 120_000);

  it('npm start: SIGTERM to the npm process reaches the service, which drains; npm exits 0 and nothing is left running', async () => {
    const svc = await spawnService({ DATA_DIR: dataDir }, undefined, { viaNpm: true });
    expect((await post(`${svc.url}/api/auth/social/`, { username: 'npmkeeper', email: 'npmkeeper@example.com', password1: 'pw', password2: 'pw' })).status).toBe(201);
    try {
      svc.child.kill('SIGTERM'); // npm only, as `kill <pid of npm>` would
      expect(await svc.exited).toBe(0);
      expect(svc.output()).toMatch(/shutting down[^]*stopped: drained and flushed/);
      await expect(fetch(`${svc.url}/api/health/`)).rejects.toThrow(); // the service is gone, not orphaned
    } finally {
      try {
        process.kill(-svc.child.pid!, 'SIGKILL'); // whatever is left of npm's process group
      } catch {
        // nothing left: the expected case
      }
    }
  }, 60_000);

  it('SIGTERM during the start (here: an event store that does not answer yet) stops it at once and exits 0', async () => {
    // A server that takes connections and never answers: the start waits on it, as on a
    // cluster's servers coming up or a long catch-up of the log.
    const connected: net.Socket[] = [];
    const silent = net.createServer((socket) => connected.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as net.AddressInfo;
    const child = spawn(process.execPath, ['--require', './infra/boot.cjs', '--import', 'tsx', 'services/main.ts'], {
      cwd: ROOT,
      env: { ...process.env, DATA_DIR: dataDir, PORT: String(await freePort()), SMTP_PORT: '0', LOG_LEVEL: 'info', STORE: 'cluster', EVENTSTORE_URL: `esdb://127.0.0.1:${port}?tls=false`, MONGO_URL: 'mongodb://127.0.0.1:1/ais', KAFKA_BROKERS: '127.0.0.1:1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    try {
      for (let i = 0; i < 300 && connected.length === 0 && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
      expect([connected.length > 0, out]).toEqual([true, out]); // the start is waiting on the event store
      child.kill('SIGTERM');
      expect(await exited).toEqual({ code: 0, signal: null });
      expect(out).toMatch(/stopped during start-up \(SIGTERM\)/);
      expect(out).not.toMatch(/gateway listening/);
    } finally {
      child.kill('SIGKILL');
      for (const socket of connected) socket.destroy();
      silent.close();
    }
  }, 60_000);

  it('npm start killed with kill -9 (its whole process group): a restart at once on the same DATA_DIR comes up with the data', async () => {
    const svc = await spawnService({ DATA_DIR: dataDir }, undefined, { viaNpm: true });
    expect((await post(`${svc.url}/api/auth/social/`, { username: 'crashkeeper', email: 'crashkeeper@example.com', password1: 'pw', password2: 'pw' })).status).toBe(201);
    // npm dies first; node, orphaned, may stay a zombie a while where nothing reaps orphans.
    process.kill(-svc.child.pid!, 'SIGKILL');
    await svc.exited;
    const again = await spawnService({ DATA_DIR: dataDir }, undefined, { viaNpm: true });
    try {
      expect((await post(`${again.url}/api/auth/login/`, { username: 'crashkeeper', password: 'pw' })).status).toBe(200);
    } finally {
      again.child.kill('SIGTERM');
      await again.exited;
    }
  }, 60_000);

  it('a relay that cannot be reached, and an hourly limit above the daily one, are told at start (without the relay\'s password)', async () => {
    const closed = await freePort();
    const svc = await spawnService({ DATA_DIR: dataDir, SMTP_RELAY_URL: `smtp://mailer:s3cret-pw@127.0.0.1:${closed}`, EMAIL_LIMIT_HOUR: '100', EMAIL_LIMIT_DAY: '10' });
    try {
      const deadline = Date.now() + 10_000;
      while (!svc.output().includes('SMTP_RELAY_URL cannot be used now') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(svc.output()).toContain('SMTP_RELAY_URL cannot be used now; outbound mail waits and is retried');
      expect(svc.output()).toContain('EMAIL_LIMIT_HOUR is above EMAIL_LIMIT_DAY');
      expect(svc.output()).not.toContain('s3cret-pw');
    } finally {
      svc.child.kill('SIGTERM');
    }
    expect(await svc.exited).toBe(0);
  }, 30_000);

  it('bad configuration fails the start with one line naming the variable', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'services/main.ts'], {
      cwd: ROOT,
      env: { ...process.env, DATA_DIR: dataDir, PORT: 'eighty', SMS_PROVIDER: 'carrier-pigeon' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise((resolve) => child.on('exit', resolve));
    expect(code).toBe(1);
    expect(err.trim().split('\n')).toHaveLength(1);
    expect(err).toMatch(/PORT/);
    expect(err).toMatch(/SMS_PROVIDER/);
  }, 30_000);

  it('a start that fails on the environment names the variable at fault: port in use, unknown host, DATA_DIR a file', async () => {
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const busy = String((blocker.address() as net.AddressInfo).port);
    const file = path.join(dataDir, 'a-file');
    writeFileSync(file, 'not a directory');
    const startWith = async (env: Record<string, string>) => {
      const { code, err } = await startToExit(env);
      return { code, lines: err.trim().split('\n') };
    };
    try {
      for (const [env, variable] of [
        [{ PORT: busy }, /^failed to start: PORT: /],
        [{ SMTP_PORT: busy }, /^failed to start: SMTP_PORT: /],
        [{ HOST: 'no-such-host.invalid' }, /^failed to start: HOST: /],
        [{ DATA_DIR: file }, /^configuration error: DATA_DIR /],
        [{ DATA_DIR: '/proc/no-such-dir' }, /^failed to start: DATA_DIR: /], // recursive mkdir used to spin here forever
        [{ DATA_DIR: '/proc/no-such-dir/data' }, /^failed to start: DATA_DIR: /], // fails on a parent it would create
        [{ SMTP_TLS_CERT: '/nope.pem', SMTP_TLS_KEY: '/nope.key' }, /^configuration error: SMTP_TLS_CERT must be a readable file .*; SMTP_TLS_KEY must be a readable file/],
        [{ SMTP_TLS_CERT: file, SMTP_TLS_KEY: file }, /^configuration error: SMTP_TLS_CERT and SMTP_TLS_KEY must be a PEM certificate and its private key/],
        [{ PORT: '47999', SMTP_PORT: '47999' }, /^configuration error: SMTP_PORT must differ from PORT/],
        [{ PORT: '0' }, /^configuration error: PORT must be 1 to 65535 for npm start/], // links would name port 0
        [{ SMTP_RELAY_URL: 'smtp://' }, /^configuration error: SMTP_RELAY_URL must name a host/],
        // A refused URL is shown without its password (an unencoded # or / is the usual reason).
        [{ SMTP_RELAY_URL: 'smtp://relayuser:p#ss/Secr3t@127.0.0.1:1' }, /^configuration error: SMTP_RELAY_URL must be a URL; a user name or password with # \/ \? @ or : in it must be percent-encoded \(%23 %2F %3F %40 %3A\) \(got "smtp:\/\/relayuser:\*\*\*@127\.0\.0\.1:1"\)$/],
        [{ SMTP_RELAY_URL: 'relayuser:Secr3t@mail.example.com:587' }, /^configuration error: SMTP_RELAY_URL must use smtp: or smtps: \(got "relayuser:\*\*\*@mail\.example\.com:587"\)$/],
        [{ SMTP_RELAY_URL: 'submission://tok3n-Secr3t@mail.example.com:587' }, /^configuration error: SMTP_RELAY_URL must use smtp: or smtps: \(got "submission:\/\/\*\*\*@mail\.example\.com:587"\)$/],
        [{ STORE: 'cluster', EVENTSTORE_URL: 'esdb://a:2113', MONGO_URL: 'mongo://admin:MongoPw-Secr3t@db:27017', KAFKA_BROKERS: 'k:9092' }, /^configuration error: MONGO_URL .*\(got "mongo:\/\/admin:\*\*\*@db:27017"\)$/],
        [{ STORE: 'cluster', EVENTSTORE_URL: 'notaurl', MONGO_URL: 'mongodb://m:27017', KAFKA_BROKERS: 'k:9092' }, /^configuration error: EVENTSTORE_URL /],
        [{ STORE: 'cluster', EVENTSTORE_URL: 'esdb://a:2113,b:2113?tls=false', MONGO_URL: 'notaurl', KAFKA_BROKERS: 'k' }, /^configuration error: MONGO_URL .*; KAFKA_BROKERS /],
      ] as const) {
        const { code, lines } = await startWith(env);
        expect([env, code, lines.length]).toEqual([env, 1, 1]);
        expect(lines[0]).toMatch(variable);
      }
    } finally {
      blocker.close();
    }
  }, 180_000); // sixteen starts of the service, one after the other: seconds each on a busy machine

  it('a DATA_DIR on a read-only file system fails the start saying so (SQLite said "unable to open database file", or "attempt to write a readonly database" with data in it)', async () => {
    // A read-only bind mount of a DATA_DIR with data (root may write anywhere else).
    const svc = await spawnService({ DATA_DIR: path.join(dataDir, 'data') });
    svc.child.kill('SIGTERM');
    expect(await svc.exited).toBe(0);
    const mount = path.join(os.tmpdir(), `ais-ro-${process.pid}`);
    mkdirSync(mount, { recursive: true });
    const run = (cmd: string) => spawnSync('sh', ['-c', cmd], { encoding: 'utf8' });
    if (run(`mount --bind ${dataDir} ${mount} && mount -o remount,ro,bind ${mount}`).status !== 0) {
      run(`umount ${mount}`);
      console.log('SKIPPED: read-only DATA_DIR (this machine lets no test mount a file system)');
      return;
    }
    try {
      expect(await startToExit({ DATA_DIR: path.join(mount, 'data') })).toEqual({ code: 1, err: `failed to start: DATA_DIR: ${path.join(mount, 'data')} cannot be written: it is on a read-only file system (EROFS)\n` });
      // Only a directory it writes in read-only (the blobs: mail would be refused from the first).
      run(`umount ${mount}`);
      const blobs = path.join(dataDir, 'data', 'blobs');
      expect(run(`mount --bind ${blobs} ${blobs} && mount -o remount,ro,bind ${blobs}`).status).toBe(0);
      try {
        expect(await startToExit({ DATA_DIR: path.join(dataDir, 'data') })).toEqual({ code: 1, err: `failed to start: DATA_DIR: ${blobs} cannot be written: it is on a read-only file system (EROFS)\n` });
      } finally {
        run(`umount ${blobs}`);
      }
    } finally {
      run(`umount ${mount}`);
      rmSync(mount, { recursive: true, force: true });
    }
  }, 60_000);

  it('a write the disk cannot hold is a temporary refusal (503 with Retry-After, SMTP 4xx), and the service goes on with what fits', async () => {
    // Files of at most 2 MiB (`ulimit -f`): the 3 MiB blobs below are cut short and fail
    // (EFBIG), as writes do on a full disk; the small databases of this test stay under it.
    const smtpPort = await freePort();
    const svc = await spawnService({ DATA_DIR: dataDir, SMTP_PORT: String(smtpPort), MAIL_DOMAIN: 'agents.localhost' }, undefined, { fileSizeLimitKiB: 2048 });
    try {
      const { auth, identity } = await accountWithIdentity(svc.url, 'full', { email_identifier: 'full' });
      const upload = async (size: number) => {
        const presign = await fetch(`${svc.url}/api/email-attachments/presign/`, {
          method: 'POST',
          headers: { ...auth, 'x-service-identity': identity.uuid },
          body: JSON.stringify({ filename: 'data.bin', content_type: 'application/octet-stream', size }),
        });
        const target = new URL(((await presign.json()) as { upload_url: string }).upload_url);
        return fetch(`${svc.url}${target.pathname}${target.search}`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: Buffer.alloc(size, 7) });
      };
      const refused = await upload(3 * 1024 * 1024);
      expect([refused.status, refused.headers.get('retry-after'), ((await refused.json()) as { code: string }).code]).toEqual([503, '1', 'service_unavailable']);
      expect((await upload(100 * 1024)).status).toBe(200);

      const smtp = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
      const big = await smtp
        .sendMail({ from: 'big@example.com', to: identity.inbox, subject: 'too big for the disk', text: 'x', attachments: [{ filename: 'big.bin', content: Buffer.alloc(3 * 1024 * 1024, 1) }] })
        .then(() => 250, (err: { responseCode?: number }) => err.responseCode);
      expect(big).toBe(452); // RFC 5321: insufficient system storage, temporary: the sender retries later
      await smtp.sendMail({ from: 'small@example.com', to: identity.inbox, subject: 'fits', text: 'y' });
      const list = (await (await fetch(`${svc.url}/api/email-messages/`, { headers: { ...auth, 'x-service-identity': identity.uuid } })).json()) as { subject: string }[];
      expect(list.map((m) => m.subject)).toEqual(['fits']);
    } finally {
      svc.child.kill('SIGTERM');
    }
    expect(await svc.exited).toBe(0);
  }, 90_000);

  it('a client that drops a download, a stream or an SMTP transaction midway is no error in the log', async () => {
    const smtpPort = await freePort();
    const svc = await spawnService({ DATA_DIR: dataDir, SMTP_PORT: String(smtpPort), MAIL_DOMAIN: 'agents.localhost' });
    try {
      const { access, auth, identity } = await accountWithIdentity(svc.url, 'dropper');
      await nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true }).sendMail({ from: 'a@example.org', to: identity.inbox, subject: 'big', text: 'x', attachments: [{ filename: 'big.bin', content: Buffer.alloc(5_000_000, 3) }] });
      const list = (await (await fetch(`${svc.url}/api/email-messages/`, { headers: { ...auth, 'x-service-identity': identity.uuid } })).json()) as { attachments: { download_url: string }[] }[];
      const dropAfterFirstBytes = (url: string, headers: Record<string, string>) =>
        new Promise<void>((resolve, reject) => {
          const req = http.get(url, { headers }, (res) => res.once('data', () => (req.destroy(), resolve())));
          req.on('error', () => {});
          setTimeout(() => reject(new Error('no bytes')), 10_000);
        });
      for (let i = 0; i < 3; i++) await dropAfterFirstBytes(list[0].attachments[0].download_url, { authorization: `Bearer ${access}` });
      await dropAfterFirstBytes(`${svc.url}/api/events/stream/`, { authorization: `Bearer ${access}`, 'x-service-identity': identity.uuid });
      // A sender cut off mid-DATA (a TCP reset): its mail was not acknowledged, nothing of ours failed.
      await new Promise<void>((resolve, reject) => {
        const socket = net.connect(smtpPort, '127.0.0.1');
        const script = ['EHLO dropper.example', 'MAIL FROM:<a@example.org>', `RCPT TO:<${identity.inbox}>`, 'DATA', null];
        let buffered = '';
        socket.on('data', (d) => {
          buffered += d;
          const lines = buffered.split('\r\n');
          if (lines.at(-1) !== '' || !/^\d{3} /.test(lines.at(-2)!)) return; // until a reply's last line
          buffered = '';
          const next = script.shift();
          if (next) socket.write(`${next}\r\n`);
          else {
            socket.write('Subject: cut\r\n\r\nhalf a bo');
            setTimeout(() => (socket.resetAndDestroy(), resolve()), 100);
          }
        });
        socket.on('error', reject);
      });
      await new Promise((r) => setTimeout(r, 300));
      expect(svc.output()).not.toMatch(/"level":50/);
    } finally {
      svc.child.kill('SIGTERM');
    }
    expect(await svc.exited).toBe(0);
  }, 90_000);

  it('rebuilding every read model from position 0 gives the same documents as the live ones', async () => {
    const config = loadConfig({ DATA_DIR: dataDir, PORT: '0', SMTP_PORT: '0' });
    const logger = pino({ level: 'silent' });
    const rt = await startRuntime(config, { logger });
    for (let i = 0; i < 5; i++) {
      const res = await post(`${rt.url}/api/auth/social/`, { username: `rb${i}`, email: `rb${i}@example.com`, password1: 'pw', password2: 'pw' });
      const { access } = (await res.json()) as { access: string };
      await fetch(`${rt.url}/api/auth/user/`, { method: 'PATCH', headers: { authorization: `Bearer ${access}`, 'content-type': 'application/json' }, body: JSON.stringify({ first_name: `F${i}` }) });
    }
    const snapshot = async () => ({
      users: (await rt.reads.collection('users').find({})).items,
      sessions: (await rt.reads.collection('sessions').find({})).items,
    });
    const live = await snapshot();
    expect(live.users).toHaveLength(5);
    await rt.runner.rebuild();
    expect(await snapshot()).toEqual(live);
    await rt.close();
    // `npm run rebuild` itself: refused (naming DATA_DIR) while a service runs, and lets go of DATA_DIR.
    const rebuild = (env: Record<string, string>) =>
      new Promise<{ code: number | null; err: string }>((resolve) => {
        const child = spawn(process.execPath, ['--import', 'tsx', 'services/rebuild.ts'], { cwd: ROOT, env: { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'silent', ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
        let err = '';
        child.stderr.on('data', (d) => (err += d));
        child.on('exit', (code) => resolve({ code, err }));
      });
    const running = await spawnService({ DATA_DIR: dataDir });
    const refused = await rebuild({});
    expect([refused.code, refused.err.trim()]).toEqual([1, expect.stringMatching(/^rebuild failed: DATA_DIR: \/\S+ is in use by another process/)]);
    running.child.kill('SIGTERM');
    expect(await running.exited).toBe(0);
    // Read models deleted by hand (they can always be rebuilt): made again, the service user's only (0600).
    for (const f of ['read-models.sqlite', 'read-models.sqlite-wal', 'read-models.sqlite-shm']) rmSync(path.join(dataDir, f), { force: true });
    expect((await rebuild({})).code).toBe(0);
    expect(statSync(path.join(dataDir, 'read-models.sqlite')).mode & 0o077).toBe(0);
    // Read models SQLite cannot read: the start names the file and the way out, which works
    // (the file set aside, not deleted; the accounts are back from the log).
    const readModels = path.join(dataDir, 'read-models.sqlite');
    writeFileSync(readModels, 'x'.repeat(8192));
    expect(await startToExit()).toEqual({ code: 1, err: `failed to start: DATA_DIR: read models ${readModels}: file is not a database; they hold nothing the event log does not: \`npm run rebuild\` sets this file aside and makes them again\n` });
    expect((await rebuild({})).code).toBe(0);
    const aside = readdirSync(dataDir).filter((f) => f.startsWith('read-models.sqlite.unreadable-'));
    expect(aside).toHaveLength(1);
    expect(statSync(path.join(dataDir, aside[0]!)).size).toBe(8192);
    const repaired = await spawnService({ DATA_DIR: dataDir });
    expect((await post(`${repaired.url}/api/auth/login/`, { username: 'rb4', password: 'pw' })).status).toBe(200);
    repaired.child.kill('SIGTERM');
    expect(await repaired.exited).toBe(0);
    // A DATA_DIR with no event log (a typo) is refused, not made into a new, empty service.
    const typo = `${dataDir}-typo`;
    const nothing = await rebuild({ DATA_DIR: typo });
    expect([nothing.code, nothing.err.trim(), existsSync(typo)]).toEqual([1, expect.stringMatching(/^rebuild failed: DATA_DIR: \S+ holds no event log/), false]);
    // The rebuild let go of DATA_DIR: the service starts on it again.
    const after = await spawnService({ DATA_DIR: dataDir });
    expect((await fetch(`${after.url}/api/health/`)).status).toBe(200);
    after.child.kill('SIGTERM');
    expect(await after.exited).toBe(0);
  }, 60_000);
});
