// Secrets input (never an argument: env var, stdin for agents, or a prompt).
import { createInterface } from 'node:readline';
import type { Ctx } from './context.js';
import { CliError, EXIT } from './errors.js';

/** Stdin read once (it is not a terminal): the text, and how far lines were taken from it. */
let stdin: { text: string; at: number } | null = null;
/**
 * A secret, in this order: the env var; the next line of stdin when stdin is not a terminal
 * (agents pipe values in, one per line; a value to store takes the rest of stdin); else a
 * prompt on the terminal with echo off.
 * With --no-input (AIS_NO_INPUT=1) it never prompts.
 */
export async function readSecret(ctx: Ctx, envName: string, prompt: string, opts: { value?: boolean; confirm?: boolean } = {}): Promise<string> {
  const fromEnv = ctx.env[envName];
  // A stored value is kept exactly (spaces, tabs); PINs, keys and passwords to sign in are trimmed.
  if (fromEnv) return opts.value ? fromEnv : fromEnv.trim();
  const missing = () => new CliError('usage', `${prompt} needed: set ${envName} or give it on stdin (one value per line).`, EXIT.usage);
  if (!process.stdin.isTTY) {
    if (stdin === null) {
      const chunks: Buffer[] = [];
      for await (const c of process.stdin) chunks.push(c as Buffer);
      try {
        stdin = { text: new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(Buffer.concat(chunks)), at: 0 };
      } catch {
        // Bytes that are no UTF-8 would be stored as U+FFFD, silently: refused instead.
        throw new CliError('usage', 'stdin is not UTF-8 text (the vault stores text: encode binary values, e.g. base64).', EXIT.usage);
      }
    }
    if (opts.value) {
      // The value to store is the last thing read: the rest of stdin, exactly as given (a
      // multi-line PEM, CRLF line ends), less the one line break that ends it.
      const rest = stdin.text.slice(stdin.at).replace(/\r?\n$/, '');
      stdin.at = stdin.text.length;
      if (rest === '') throw missing();
      return rest;
    }
    if (stdin.at >= stdin.text.length) throw missing();
    const end = stdin.text.indexOf('\n', stdin.at);
    const line = stdin.text.slice(stdin.at, end < 0 ? undefined : end).replace(/\r$/, '');
    stdin.at = end < 0 ? stdin.text.length : end + 1;
    if (line === '') throw missing();
    return line.trim();
  }
  if (ctx.noInput) throw missing();
  const answer = await promptHidden(prompt, missing);
  // A new PIN typed blind: once more, so one typo does not lock its owner out.
  if (opts.confirm && (await promptHidden(`${prompt} (again)`, missing)) !== answer) {
    throw new CliError('usage', `${prompt}: the two entries differ, nothing was changed.`, EXIT.usage);
  }
  return opts.value ? answer : answer.trim();
}

/** One line typed on the terminal with echo off; Ctrl-C and Ctrl-D end it with an error. */
async function promptHidden(prompt: string, missing: () => CliError): Promise<string> {
  const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
  // Echo off: readline writes typed characters through _writeToOutput; keep only the prompt.
  const muted = rl as unknown as { _writeToOutput: (s: string) => void; output: NodeJS.WritableStream };
  let prompted = false;
  muted._writeToOutput = (s: string) => {
    if (!prompted) {
      prompted = true;
      muted.output.write(s);
    }
  };
  try {
    // Ctrl-C (readline takes it from the terminal, so no signal comes) or Ctrl-D ends the
    // prompt with an error: left unanswered, the process would exit 0 with nothing read.
    const answer = await new Promise<string>((resolve, reject) => {
      let answered = false;
      rl.on('SIGINT', () => reject(new CliError('interrupted', 'Interrupted.', EXIT.interrupted)));
      rl.on('close', () => answered || reject(missing()));
      rl.question(`${prompt}: `, (a) => {
        answered = true;
        resolve(a);
      });
    });
    return answer;
  } finally {
    rl.close();
    process.stderr.write('\n');
  }
}
