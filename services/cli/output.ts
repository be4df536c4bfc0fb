// What the CLI prints: tables, key/value lists, --json documents, upload progress.
import type { Ctx } from './context.js';

export function table(rows: Record<string, unknown>[], cols: string[]): string {
  if (rows.length === 0) return '(none)';
  const cell = (v: unknown) => (v === null || v === undefined ? '-' : typeof v === 'object' ? JSON.stringify(v) : String(v)).replace(/\s+/g, ' ');
  const cells = rows.map((r) => cols.map((c) => cell(r[c])));
  const widths = cols.map((c, i) => Math.min(60, Math.max(c.length, ...cells.map((r) => r[i].length))));
  const fmt = (vals: string[]) => vals.map((v, i) => (v.length > widths[i] ? v.slice(0, widths[i] - 1) + '…' : v.padEnd(widths[i]))).join('  ').trimEnd();
  return [fmt(cols.map((c) => c.toUpperCase())), ...cells.map(fmt)].join('\n');
}

export function show(ctx: Ctx, value: unknown, human: () => string): void {
  ctx.out(ctx.json ? JSON.stringify(value, null, 2) : forTerminal(human()));
}

/**
 * Human output shows text from others (mail subjects and bodies, SMS): control characters
 * and bidirectional overrides in it would drive the terminal (clear the screen, set the
 * title, reorder what is read), so they are shown as escapes. Line breaks and tabs stay;
 * `--json` output is exact.
 */
export function forTerminal(text: string): string {
  return text.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]|\r(?!\n)/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function kv(obj: Record<string, unknown>, keys?: string[]): string {
  return (keys ?? Object.keys(obj))
    .filter((k) => obj[k] !== undefined)
    .map((k) => `${k}: ${typeof obj[k] === 'object' && obj[k] !== null ? JSON.stringify(obj[k]) : String(obj[k])}`)
    .join('\n');
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MiB`;
}

export function formatDuration(seconds: number): string {
  return seconds >= 120 ? `${Math.round(seconds / 60)} min` : `${seconds} s`;
}

/** A warning on stderr: `warning: …`, or with --json one JSON line `{"warning": "…"}` (as errors are). */
export function warn(ctx: Pick<Ctx, 'json' | 'err'>, message: string): void {
  ctx.err(ctx.json ? JSON.stringify({ warning: message }) : `warning: ${message}`);
}

/**
 * Upload progress on stderr. On a terminal: one line redrawn with bytes sent / total (at most
 * every 100 ms), then the final line. Otherwise only the final line per file (JSON with
 * --json), so logs of agents stay short.
 */
export function progressReporter(ctx: Pick<Ctx, 'json' | 'err' | 'errTTY' | 'errWrite'>): (file: string, sent: number, total: number) => void {
  let last = 0;
  return (file, sent, total) => {
    const done = sent >= total;
    if (ctx.json) {
      if (done) ctx.err(JSON.stringify({ uploaded: file, bytes: total }));
      return;
    }
    if (ctx.errTTY) {
      const now = Date.now();
      if (!done && now - last < 100) return;
      last = now;
      const pct = total ? Math.floor((100 * sent) / total) : 100;
      ctx.errWrite(`\r\x1b[Kuploading ${file}: ${formatBytes(sent)} / ${formatBytes(total)} (${pct}%)`);
      if (done) ctx.errWrite(`\r\x1b[Kuploaded ${file} (${formatBytes(total)})\n`);
      return;
    }
    if (done) ctx.err(`uploaded ${file} (${total} bytes)`);
  };
}
