/**
 * Runs a client script (an ES module's source) in a node process of its own and answers what
 * it printed, as JSON. For what only shows between processes: a client sharing the server's
 * event loop is scheduled with it, and can see an answer a real client never gets (it read a
 * 413 before the reset that followed it, where a client of its own got EPIPE).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

export async function runClient<T>(source: string, ...args: string[]): Promise<T> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', source, ...args], { maxBuffer: 16 * 1024 * 1024 });
  return JSON.parse(stdout) as T;
}
