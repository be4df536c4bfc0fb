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
