/**
 * `ais`: the agent's command-line client (issue 8). Every command prints a human table by
 * default and the raw object with `--json`. The client-reported conditions of SPEC "Errors"
 * each have a message, an exit code ({@link EXIT}) and their exact name in `--json` output:
 * `{"error": {"code": "token_expired", "message": ...}}` on stderr.
 */
import { readFileSync } from 'node:fs';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ApiRequestError, type AisClient } from '../sdk/client.js';
import { commands } from './commands/index.js';
import { loadConfig } from './config.js';
import { client, DEFAULT_BASE_URL, DEFAULT_TIMEOUT_S, resolveIdentityName, translate, type Command, type Ctx } from './context.js';
import { CliError, EXIT } from './errors.js';

// Still exported here, where tests import them from.
export { CliError, EXIT };
export { forTerminal, progressReporter } from './output.js';

const GLOBAL: NonNullable<ParseArgsConfig['options']> = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  'base-url': { type: 'string' },
  identity: { type: 'string' },
  'no-input': { type: 'boolean' },
};

export interface Io {
  out: (s: string) => void;
  err: (s: string) => void;
  errTTY?: boolean;
  outTTY?: boolean;
  errWrite?: (s: string) => void;
}

const processIo: Io = {
  out: (s) => process.stdout.write(s + '\n'),
  err: (s) => process.stderr.write(s + '\n'),
  errTTY: !!process.stderr.isTTY,
  outTTY: !!process.stdout.isTTY,
  errWrite: (s) => process.stderr.write(s),
};

function parse(cmd: Command, args: string[]) {
  return parseArgs({ args, options: { ...GLOBAL, ...(cmd.options ?? {}) }, allowPositionals: true, strict: true });
}

/** Command groups: the first word of every two-word command (`keys list` → `keys`). */
const GROUPS = [...new Set(Object.keys(commands).filter((n) => n.includes(' ')).map((n) => n.split(' ')[0]!))];

/** Every variable a command reads (from the commands' own `env`, so the list cannot drift). */
const PROMPT_ENV = [...new Set(Object.values(commands).flatMap((c) => Object.keys(c.env ?? {})))];

function help(prefix?: string): string {
  const names = Object.keys(commands).filter((n) => !prefix || n === prefix || n.startsWith(prefix + ' '));
  if (names.length === 1) {
    const c = commands[names[0]];
    const opts = Object.entries(c.options ?? {}).map(([k, o]) => `  --${k}${o.type === 'string' ? ' VALUE' : ''}${o.multiple ? ' (repeatable)' : ''}`);
    const env = Object.entries(c.env ?? {}).map(([k, d]) => `  ${k.padEnd(18)} ${d}`);
    return [
      `Usage: ${c.usage}`,
      '',
      c.summary,
      '',
      'Options:',
      ...opts,
      '  --json            machine-readable output (errors as {"error": {...}} on stderr)',
      '  --identity ID     identity for this command, uuid or name (AIS_IDENTITY)',
      '  --base-url URL    service address (AIS_BASE_URL)',
      '  --no-input        never prompt; missing values are an error (AIS_NO_INPUT=1)',
      '  -h, --help',
      ...(env.length ? ['', 'Environment (instead of prompts):', ...env] : []),
    ].join('\n');
  }
  return [
    'ais: the Agent Identity Service command-line client',
    '',
    'Usage: ais <command> [options]   (ais <command> --help for details)',
    '',
    ...names.map((n) => `  ${n.padEnd(20)} ${commands[n].summary}`),
    '',
    'Global (before or after the command): --json, --base-url URL (AIS_BASE_URL), --identity UUID|NAME (AIS_IDENTITY), --no-input (AIS_NO_INPUT=1), -h/--help; `ais --version` (-V) prints the version',
    'Config: $XDG_CONFIG_HOME/agent-identity/config.json (default ~/.config/..., mode 0600).',
    `Env: AIS_API_KEY or AIS_TOKEN (a credential instead of the stored login); AIS_TIMEOUT (seconds a request waits for an answer, default ${DEFAULT_TIMEOUT_S}; 0: no limit); read by the commands whose --help lists them (values instead of prompts): ${PROMPT_ENV.join(', ')}.`,
    `Exit codes: ${Object.entries(EXIT).map(([k, v]) => `${v} ${k}`).join(', ')}`,
  ].join('\n');
}

/**
 * The service address, from --base-url, AIS_BASE_URL, the login's, or the default. One that is
 * no http(s) URL is a usage error naming where it came from (it was tried, and failed as a
 * network error after the retries).
 */
function serviceAddress(flag: string | undefined, env: NodeJS.ProcessEnv, stored: string | undefined): string {
  // An empty AIS_BASE_URL is unset (an empty AIS_IDENTITY, by contrast, selects no identity).
  const [from, raw] = flag !== undefined ? ['--base-url', flag] : env.AIS_BASE_URL ? ['AIS_BASE_URL', env.AIS_BASE_URL] : stored !== undefined ? ['base_url in the config', stored] : ['', DEFAULT_BASE_URL];
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    url = undefined;
  }
  // A user or password is refused without being shown (fetch refused it, quoting the URL, after retries).
  if (url && (url.username || url.password)) throw new CliError('usage', `${from} holds a user name or password: give the service address alone (one like https://ais.example.com).`, EXIT.usage);
  // A query or fragment is no part of an address: the API's paths were written after it.
  if (!url || !/^https?:$/.test(url.protocol) || !url.host || url.search || url.hash) {
    throw new CliError('usage', `${from} is not a service address: ${JSON.stringify(raw)} (one like http://localhost:8000 or https://ais.example.com).`, EXIT.usage);
  }
  return raw.replace(/\/+$/, '');
}

/** The package's version (`ais --version`), read only when asked: not on every command's start. */
const version = (): string => (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** The most positional arguments a usage line shows: `<name>` and `[value]` (not `[--option]`). */
const positionalsOf = (usage: string): number => (usage.match(/<[^>]+>|\[(?!-)[^\]]+\]/g) ?? []).length;

/** Global options that take a value (`--identity X`); the others are flags. */
const GLOBAL_WITH_VALUE = new Set(['--identity', '--base-url']);

/** Options written before the command (`ais --identity pager sms watch`) move behind it. */
function commandFirst(argv: string[]): string[] {
  let i = 0;
  while (i < argv.length && argv[i].startsWith('-')) i += GLOBAL_WITH_VALUE.has(argv[i]) ? 2 : 1;
  return [...argv.slice(i), ...argv.slice(0, i)];
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env, io: Io = processIo): Promise<number> {
  argv = commandFirst(argv);
  const json = argv.includes('--json');
  if (argv[0] === 'help') argv = [...argv.slice(1), '--help'];
  let name = argv[0] && !argv[0].startsWith('-') ? argv[0] : undefined;
  let rest = argv.slice(name ? 1 : 0);
  if (name && GROUPS.includes(name)) {
    const sub = rest[0] && !rest[0].startsWith('-') ? rest[0] : undefined;
    if (sub && commands[`${name} ${sub}`]) {
      name = `${name} ${sub}`;
      rest = rest.slice(1);
    } else if (!sub || rest.includes('--help') || rest.includes('-h')) {
      io.out(help(name));
      return sub ? EXIT.usage : EXIT.ok;
    }
  }
  const asksHelp = argv.includes('--help') || argv.includes('-h');
  if (!name && (asksHelp || argv.length === 0)) {
    io.out(help());
    return asksHelp ? EXIT.ok : EXIT.usage;
  }
  if (!name && (argv.includes('--version') || argv.includes('-V'))) {
    io.out(json ? JSON.stringify({ version: version() }) : `ais ${version()}`);
    return EXIT.ok;
  }
  const cmd = name ? commands[name] : undefined;
  let ctx: Ctx | undefined;
  try {
    // Options and no command (`ais --json`, `ais --identity scout`): an error like any, also as JSON.
    if (!name) throw new CliError('usage', `No command given (only ${argv.join(' ')}). Run \`ais --help\` for the commands.`, EXIT.usage);
    if (!cmd) {
      const group = GROUPS.find((g) => name!.startsWith(`${g} `)) ?? (GROUPS.includes(name!) ? name : undefined);
      const what = group && rest[0] ? `${group} ${rest[0]}` : name;
      throw new CliError('usage', `Unknown command: ${what}. Run \`ais ${group ?? ''}${group ? ' ' : ''}--help\`.`, EXIT.usage);
    }
    let parsed;
    try {
      parsed = parse(cmd, rest);
    } catch (e) {
      throw new CliError('usage', `${(e as Error).message}\nUsage: ${cmd.usage}`, EXIT.usage);
    }
    const v = parsed.values as Record<string, any>;
    // `ais identities create my agent` created "my": a word more than the usage line takes is refused.
    const extra = parsed.positionals.slice(positionalsOf(cmd.usage));
    if (extra.length && !v.help) throw new CliError('usage', `Unexpected argument${extra.length > 1 ? 's' : ''}: ${extra.map((a) => JSON.stringify(a)).join(' ')} (quote a value that has spaces).\nUsage: ${cmd.usage}`, EXIT.usage);
    if (v.help) {
      io.out(help(name));
      return EXIT.ok;
    }
    const config = loadConfig(env);
    ctx = {
      json,
      env,
      config,
      baseUrl: serviceAddress(v['base-url'], env, config.base_url),
      identityFlag: v.identity,
      identityFrom: v.identity !== undefined ? 'flag' : env.AIS_IDENTITY !== undefined ? 'env' : config.identity ? 'default' : undefined,
      noInput: !!v['no-input'] || /^(1|true|yes)$/i.test(env.AIS_NO_INPUT ?? ''),
      out: io.out,
      err: io.err,
      errTTY: !!io.errTTY,
      outTTY: !!io.outTTY,
      errWrite: io.errWrite ?? ((s) => io.err(s.replace(/\n$/, ''))),
    };
    let c: AisClient | undefined;
    try {
      await resolveIdentityName(ctx);
      await cmd.run(ctx, parsed.positionals, v);
    } catch (err) {
      try {
        c = err instanceof ApiRequestError && err.status === 404 ? client(ctx, { identity: true }) : undefined;
      } catch {
        c = undefined;
      }
      throw await translate(err, c, ctx);
    }
    return EXIT.ok;
  } catch (err) {
    const e = err instanceof CliError ? err : new CliError('error', (err as Error)?.message ?? String(err), EXIT.error);
    if (json) io.err(JSON.stringify({ error: { code: e.code, message: e.message, exit_code: e.exit, ...e.extra } }));
    else io.err(`error: ${e.message}`);
    return e.exit;
  }
}

/**
 * Exits once stdout and stderr are written out: a pipe takes 64 KiB at a time, and
 * process.exit drops what is still queued (a large `--json` document was cut short when
 * the reader was slower than the CLI).
 */
export async function exitWhenWritten(code: number): Promise<never> {
  const written = (stream: NodeJS.WriteStream) => new Promise<void>((resolve) => stream.write('', () => resolve()));
  process.exitCode = code;
  await Promise.all([written(process.stdout), written(process.stderr)]);
  // Keep-alive sockets of fetch must not hold the process open.
  process.exit(code);
}

// Run when executed (bin.js imports this module; tests may import `main`).
const invoked = process.argv[1] && /(?:^|[\\/])(bin\.js|main\.ts|ais)$/.test(process.argv[1]);
if (invoked) {
  // A reader that went away (`ais ... | head -c 10`) ends the output, quietly, as with any
  // CLI, instead of an unhandled EPIPE and its stack trace.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => process.exit(err.code === 'EPIPE' ? Number(process.exitCode ?? 0) : 1));
  }
  main(process.argv.slice(2)).then(
    (code) => exitWhenWritten(code),
    (err) => {
      process.stderr.write(`fatal: ${err?.stack ?? err}\n`);
      process.exit(1);
    },
  );
}
