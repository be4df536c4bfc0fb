/**
 * Every dependency with an install script is approved in package.json's `allowScripts`: npm
 * 12 skips an unapproved one without failing, and better-sqlite3 or argon2 unbuilt means a
 * service that does not start. A dependency that gains an install script fails here first.
 */
import { readFileSync } from 'node:fs';

const read = (file: string) => JSON.parse(readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8'));

test('the lockfile names no install script that allowScripts does not approve', () => {
  const lock = read('package-lock.json') as { packages: Record<string, { hasInstallScript?: boolean }> };
  const approved = (read('package.json') as { allowScripts?: Record<string, boolean> }).allowScripts ?? {};
  const withScripts = [...new Set(Object.entries(lock.packages).filter(([, p]) => p.hasInstallScript).map(([at]) => at.slice(at.lastIndexOf('node_modules/') + 'node_modules/'.length)))];
  expect(withScripts).toContain('better-sqlite3'); // what the check is for is still there to check
  expect(withScripts.filter((name) => approved[name] !== true)).toEqual([]);
});
