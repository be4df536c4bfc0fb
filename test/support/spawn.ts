/** Runs `npm start` (or its entry point) as a child process, the way users run it. */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** A port nothing listens on now: for a server started later, or one meant to stay closed. */
export async function freePort(): Promise<number> {
  // Below the kernel's ephemeral range (Linux: 32768-60999): a port from listen(0) is free
  // only until it is closed, and every outgoing connection (fetch, SMTP clients, in any test
  // worker) takes ports from that range too, so a server started on it moments later could
  // find it taken. Here only another freePort's random pick could take it.
  for (let attempt = 0; ; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const free = await new Promise<boolean>((resolve) => {
      const srv = net.createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
    if (free) return port;
    if (attempt >= 50) throw new Error('no free port found between 20000 and 32000');
  }
}

export interface ServiceProcess {
  child: ChildProcess;
  url: string;
  output: () => string;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
}

/**
 * Starts `script` with the same flags as `npm start` (package.json), or, with `viaNpm`,
 * `npm start` itself (then `child` is npm, as for a user who runs it in a terminal).
 * `fileSizeLimitKiB` runs it under `ulimit -f`: a write that would grow a file past the limit
 * is cut short and then fails with EFBIG, as writes do on a disk that fills up.
 */
export async function spawnService(env: Record<string, string>, script = 'services/main.ts', options: { viaNpm?: boolean; fileSizeLimitKiB?: number } = {}): Promise<ServiceProcess> {
  const port = env.PORT ?? String(await freePort());
  let [command, args] = options.viaNpm ? ['npm', ['start', '--silent']] : [process.execPath, ['--require', './infra/boot.cjs', '--import', 'tsx', script]];
  if (options.fileSizeLimitKiB !== undefined) [command, args] = ['bash', ['-c', `ulimit -f ${options.fileSizeLimitKiB} && exec "$@"`, 'service', command, ...args]];
  const child = spawn(command, args, {
    detached: options.viaNpm, // its own process group, so a test can always clean up what npm started
    cwd: ROOT,
    env: { ...process.env, SMTP_PORT: '0', LOG_LEVEL: 'info', ...env, PORT: port },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const url = `http://127.0.0.1:${port}`;
  let started = false;
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code, signal) => {
      // A service that failed on its own after it started (an error, or a signal no test sends,
      // such as SIGABRT): say why, or the suite only sees its later requests refused.
      const crashed = signal ? !['SIGTERM', 'SIGINT', 'SIGKILL'].includes(signal) : code !== 0;
      if (started && crashed) process.stderr.write(`service at ${url} exited (${signal ?? `code ${code}`}):\n${out}\n`);
      resolve(code);
    }),
  );
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited early:\n${out}`);
    try {
      const res = await fetch(`${url}/api/health/`);
      if (res.ok) break;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`service did not start:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  started = true;
  return { child, url, output: () => out, exited };
}
