// The CLI's named conditions and their exit codes; every module throws these.
/** Distinct exit codes per condition (documented in docs/CLI.md). */
export const EXIT = {
  ok: 0,
  error: 1,
  usage: 2,
  not_authenticated: 10,
  token_expired: 11,
  identity_not_found: 12,
  device_code_expired: 13,
  pin_locked: 14,
  encryption_missing: 15,
  wrong_pin: 16,
  api_error: 20,
  network_error: 21,
  /** Ctrl-C at a prompt (128 + SIGINT, as a shell reports a process the signal ended). */
  interrupted: 130,
} as const;
type Condition = keyof typeof EXIT;

export class CliError extends Error {
  constructor(
    readonly code: Condition | string,
    message: string,
    readonly exit: number = EXIT[code as Condition] ?? EXIT.error,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

export function usage(u: string): CliError {
  return new CliError('usage', `Usage: ${u}`, EXIT.usage);
}

/** Why a file could not be read or written, in words (the errno code alone says little). */
const FILE_PROBLEMS: Record<string, string> = {
  ENOENT: 'no such file or directory',
  EEXIST: 'the file already exists',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EISDIR: 'it is a directory',
  ENOTDIR: 'a part of the path is not a directory',
  ENOSPC: 'no space left on the device',
  EROFS: 'the file system is read-only',
  EDQUOT: 'disk quota exceeded',
  EFBIG: 'the file is too large',
  ENAMETOOLONG: 'the file name is too long',
  EMFILE: 'too many open files',
};

export function fileProblem(err: unknown): string {
  const code = (err as NodeJS.ErrnoException)?.code;
  return (code && FILE_PROBLEMS[code]) ?? (err as Error)?.message ?? String(err);
}
