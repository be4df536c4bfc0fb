/** Runs the `ais` CLI (services/cli/bin.js) as a subprocess, the way an agent runs it. */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { ROOT } from './spawn.js';

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON (with --json), else undefined. */
  json: any;
  /** The `error` of the last stderr line when it is JSON (the condition name), else undefined. */
  error: any;
}

export interface CliOptions {
  /** Service base URL (AIS_BASE_URL). */
  url: string;
  /** Config home (XDG_CONFIG_HOME and HOME): where the CLI keeps its state. */
  home: string;
  env?: Record<string, string>;
  /** Called with the whole stderr so far, on every chunk (to react to prompts and codes). */
  onStderr?: (stderr: string) => void;
  /** Written to stdin, then closed; stdin is ignored when absent. */
  input?: string | Buffer;
  /** Read stdout only after this many ms (a slow reader: a full pipe must not lose output at exit). */
  readAfterMs?: number;
}

const parse = (s: string) => {
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
};

export function runCli(args: string[], o: CliOptions): Promise<CliRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'services/cli/bin.js'), ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: o.home, XDG_CONFIG_HOME: o.home, AIS_BASE_URL: o.url, ...o.env },
      stdio: [o.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    if (o.input !== undefined) child.stdin!.end(o.input);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d) => (stdout += d));
    if (o.readAfterMs) {
      child.stdout!.pause();
      setTimeout(() => child.stdout!.resume(), o.readAfterMs);
    }
    child.stderr!.on('data', (d) => {
      stderr += d;
      o.onStderr?.(stderr);
    });
    // 'close': the process ended and its pipes are read to the end ('exit' may come first).
    child.on('close', (code) => {
      const lastErr = stderr.trim().split('\n').pop() ?? '';
      resolve({ code, stdout, stderr, json: parse(stdout), error: parse(lastErr)?.error });
    });
  });
}

/**
 * Runs the CLI on a pseudo-terminal (util-linux `script`, as a person at a terminal runs it),
 * typing each of `typing` in turn once the output (since the previous one was typed) matches
 * its `when` (`\x03` is Ctrl-C, `\x04` Ctrl-D, `\r` Enter). Stdout and stderr arrive together,
 * as a terminal shows them.
 */
export function runCliOnTerminal(args: string[], o: CliOptions & { typing: Array<{ when: RegExp; keys: string }> }): Promise<{ code: number | null; output: string }> {
  const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const command = [process.execPath, path.join(ROOT, 'services/cli/bin.js'), ...args].map(quote).join(' ');
  return new Promise((resolve) => {
    const child = spawn('script', ['-qefc', command, '/dev/null'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: o.home, XDG_CONFIG_HOME: o.home, AIS_BASE_URL: o.url, TERM: 'dumb', ...o.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    let seenFrom = 0;
    let next = 0;
    const read = (d: Buffer) => {
      output += d;
      const step = o.typing[next];
      if (step && step.when.test(output.slice(seenFrom))) {
        next += 1;
        seenFrom = output.length;
        child.stdin!.write(step.keys);
      }
    };
    child.stdout!.on('data', read);
    child.stderr!.on('data', read);
    const guard = setTimeout(() => child.kill('SIGKILL'), 20_000); // a prompt that never ends fails the test
    child.on('close', (code) => {
      clearTimeout(guard);
      resolve({ code, output });
    });
  });
}
