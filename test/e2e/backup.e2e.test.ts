/**
 * `npm run backup -- <dir>` while the service runs and takes writes; a service started on
 * the copy has every write acknowledged before the backup began: accounts, tokens (the key
 * ring), mail with its attachment bytes (blobs), and nothing readable by other users.
 */
import { spawn, spawnSync } from 'node:child_process';
import net from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import nodemailer from 'nodemailer';
import { openDatabase } from '../../infra/sqlite/driver.js';
import { freePort, spawnService, ROOT } from '../support/spawn.js';

type Json = any;

const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

/** `npm run backup -- <target>` (its script's command) on `dataDir`: exit code and output. */
function runBackup(dataDir: string, target: string): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'services/backup.ts', target], { cwd: ROOT, env: { ...process.env, DATA_DIR: dataDir } });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('exit', (code) => resolve({ code, out, err }));
  });
}

/** Every file and directory under `dir` with its permission bits for group and others. */
function modes(dir: string): string[] {
  const open: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    const file = path.join(entry.parentPath ?? (entry as unknown as { path: string }).path, entry.name);
    if (statSync(file).mode & 0o077) open.push(path.relative(dir, file));
  }
  return open;
}

let root: string;
beforeEach(() => (root = mkdtempSync(path.join(os.tmpdir(), 'ais-backup-'))));
afterEach(() => rmSync(root, { recursive: true, force: true }));

test('a backup taken under load restores every write acknowledged before it: accounts, tokens, mail and attachment bytes', async () => {
  const dataDir = path.join(root, 'data');
  const copy = path.join(root, 'copy');
  const smtpPort = await freePort();
  const port = String(await freePort()); // the restored service on the same URL: tokens name their issuer
  const svc = await spawnService({ DATA_DIR: dataDir, PORT: port, SMTP_PORT: String(smtpPort), PASSWORD_HASH_MEMORY_KIB: '1024' });
  let before: { access: string; identity: Json; attachment: Buffer; later?: { access: string; pk: number } };
  const acknowledged: string[] = [];
  try {
    // given: an account, an identity, and a mail with an attachment
    expect((await post(`${svc.url}/api/auth/social/`, { username: 'saved', email: 'saved@example.com', password1: 'pw', password2: 'pw' })).status).toBe(201);
    const { access } = (await (await post(`${svc.url}/api/auth/login/`, { username: 'saved', password: 'pw' })).json()) as Json;
    const identity = (await (await post(`${svc.url}/api/identities/`, { name: 'keeper' }, { authorization: `Bearer ${access}` })).json()) as Json;
    const attachment = Buffer.from(Array.from({ length: 70_000 }, (_, i) => i % 251));
    await nodemailer
      .createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true })
      .sendMail({ from: 'sender@example.com', to: identity.inbox, subject: 'kept', text: 'in the backup', attachments: [{ filename: 'data.bin', content: attachment }] });
    before = { access, identity, attachment };

    // when: a backup runs while sign-ups keep coming
    let loading = true;
    const load = (async () => {
      for (let i = 0; loading; i++) {
        const res = await post(`${svc.url}/api/auth/social/`, { username: `busy${i}`, email: `busy${i}@example.com`, password1: 'pw', password2: 'pw' });
        if (res.status === 201) acknowledged.push(`busy${i}`);
      }
    })();
    while (acknowledged.length < 3) await new Promise((r) => setTimeout(r, 10));
    const ackedBefore = [...acknowledged];
    const result = await runBackup(dataDir, copy);
    loading = false;
    await load;
    expect([result.code, result.err]).toEqual([0, '']);
    expect(JSON.parse(result.out)).toMatchObject({ backup: copy, bytes: { 'events.sqlite': expect.any(Number), blobs: expect.any(Number), keys: expect.any(Number) } });
    acknowledged.splice(0, acknowledged.length, ...ackedBefore);
    // an account made after the copy: the restored service will number another one the same
    expect((await post(`${svc.url}/api/auth/social/`, { username: 'later', email: 'later@example.com', password1: 'pw', password2: 'pw' })).status).toBe(201);
    const later = (await (await post(`${svc.url}/api/auth/login/`, { username: 'later', password: 'pw' })).json()) as Json;
    before = { ...before, later: { access: later.access, pk: later.user.pk } };
  } finally {
    svc.child.kill('SIGTERM');
  }
  expect(await svc.exited).toBe(0);

  // then: the copy is private, and a service started on it has everything acknowledged before
  expect(modes(copy)).toEqual([]);
  const restored = await spawnService({ DATA_DIR: copy, PORT: port, PASSWORD_HASH_MEMORY_KIB: '1024' });
  try {
    const auth = { authorization: `Bearer ${before!.access}`, 'x-service-identity': before!.identity.uuid };
    expect((await fetch(`${restored.url}/api/auth/user/`, { headers: auth })).status).toBe(200); // the key ring came along
    for (const username of acknowledged) expect([username, (await post(`${restored.url}/api/auth/login/`, { username, password: 'pw' })).status]).toEqual([username, 200]);
    const messages = (await (await fetch(`${restored.url}/api/email-messages/`, { headers: auth })).json()) as Json[];
    expect(messages.map((m) => m.subject)).toEqual(['kept']);
    const download = await fetch(messages[0].attachments[0].download_url, { headers: auth });
    expect(download.status).toBe(200);
    expect(Buffer.from(await download.arrayBuffer()).equals(before!.attachment)).toBe(true);

    // A token signed after the copy names a session this log never had: refused, even once
    // its user number belongs to someone who signed up on the restored service.
    const { later } = before!;
    for (let i = 0, pk = 0; pk < later!.pk; i++) {
      const res = await post(`${restored.url}/api/auth/social/`, { username: `restored${i}`, email: `restored${i}@example.com`, password1: 'pw', password2: 'pw' });
      pk = ((await res.json()) as Json).user.pk;
    }
    const stray = await fetch(`${restored.url}/api/auth/user/`, { headers: { authorization: `Bearer ${later!.access}` } });
    expect([stray.status, ((await stray.json()) as Json).code]).toEqual([401, 'token_not_valid']);
    expect((await post(`${restored.url}/api/auth/token/verify/`, { token: later!.access })).status).toBe(401);
  } finally {
    restored.child.kill('SIGTERM');
  }
  expect(await restored.exited).toBe(0);
}, 120_000);

test('refuses a target that is not empty, one inside DATA_DIR, and a DATA_DIR without an event log, leaving nothing behind', async () => {
  const dataDir = path.join(root, 'data');
  mkdirSync(dataDir);
  const empty = await runBackup(dataDir, path.join(root, 'copy'));
  expect([empty.code, empty.err]).toEqual([1, expect.stringMatching(/^backup failed: .*holds no event log/)]);
  expect(readdirSync(root)).toEqual(['data']);

  writeFileSync(path.join(dataDir, 'events.sqlite'), '');
  const inside = await runBackup(dataDir, path.join(dataDir, 'copy'));
  expect([inside.code, inside.err]).toEqual([1, expect.stringMatching(/inside DATA_DIR/)]);

  mkdirSync(path.join(root, 'used'));
  writeFileSync(path.join(root, 'used', 'something'), 'x');
  const used = await runBackup(dataDir, path.join(root, 'used'));
  expect([used.code, used.err]).toEqual([1, expect.stringMatching(/exists and is not empty/)]);
  expect(readdirSync(path.join(root, 'used'))).toEqual(['something']);

  // A target where no directory can be made (under /proc): an error, not a hang (Node's
  // recursive mkdir never returns there).
  const hung = new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 20_000).unref());
  const proc = await Promise.race([runBackup(dataDir, '/proc/1/ais-backup'), hung]);
  expect(proc === 'hung' ? proc : [proc.code, proc.err]).toEqual([1, expect.stringMatching(/^backup failed: .*\/proc\/1\/ais-backup/)]);

  // A target under a file: the reason alone (the clean-up of what was never made added its own error).
  writeFileSync(path.join(root, 'afile'), 'x');
  const underFile = await runBackup(dataDir, path.join(root, 'afile', 'copy'));
  expect([underFile.code, underFile.err]).toEqual([1, `backup failed: ENOTDIR: not a directory, mkdir '${path.join(root, 'afile', 'copy')}'\n`]);

  // Options are not directories: --help is help, another one a usage error; nothing is made.
  const help = await runBackup(dataDir, '--help');
  expect([help.code, help.out]).toEqual([0, expect.stringMatching(/^usage: npm run backup -- <new directory>\n/)]);
  const option = await runBackup(dataDir, '--verbose');
  expect([option.code, option.err]).toEqual([1, 'backup failed: unknown option --verbose; usage: npm run backup -- <new directory>\n']);
  expect(readdirSync(ROOT).filter((name) => name.startsWith('--'))).toEqual([]);
  expect(readdirSync(root).sort()).toEqual(['afile', 'data', 'used']);
}, 60_000);

test('a DATA_DIR SQLite cannot read (a read-only file system) fails the backup naming the database and why', async () => {
  const dataDir = path.join(root, 'data');
  const svc = await spawnService({ DATA_DIR: dataDir });
  svc.child.kill('SIGTERM');
  expect(await svc.exited).toBe(0);
  // A read-only bind mount (root may read and write anything else).
  const mount = path.join(root, 'ro');
  mkdirSync(mount);
  const run = (cmd: string) => spawnSync('sh', ['-c', cmd], { encoding: 'utf8' });
  if (run(`mount --bind ${root} ${mount} && mount -o remount,ro,bind ${mount}`).status !== 0) {
    run(`umount ${mount}`);
    console.log('SKIPPED: backup of a read-only DATA_DIR (this machine lets no test mount a file system)');
    return;
  }
  try {
    const source = path.join(mount, 'data');
    const refused = await runBackup(source, path.join(os.tmpdir(), `ais-backup-ro-${process.pid}`));
    expect([refused.code, refused.err]).toEqual([1, `backup failed: ${source}/read-models.sqlite: unable to open database file (DATA_DIR cannot be written: SQLite reads a database in WAL mode only where it can write beside it)\n`]);
    expect(existsSync(path.join(os.tmpdir(), `ais-backup-ro-${process.pid}`))).toBe(false);
  } finally {
    run(`umount ${mount}`);
  }
}, 60_000);

test('copies what a symbolic link points to; a link looping back into the copy fails the backup, leaving nothing', async () => {
  const dataDir = path.join(root, 'data');
  mkdirSync(path.join(dataDir, 'keys'), { recursive: true });
  const db = openDatabase(path.join(dataDir, 'events.sqlite'));
  db.exec('CREATE TABLE t (x)');
  db.close();
  writeFileSync(path.join(root, 'hmac.key.real'), 'secret key');
  symlinkSync(path.join(root, 'hmac.key.real'), path.join(dataDir, 'keys', 'hmac.key')); // an operator keeps the key elsewhere
  const ok = await runBackup(dataDir, path.join(root, 'copy'));
  expect([ok.code, ok.err]).toEqual([0, '']);
  expect(readFileSync(path.join(root, 'copy', 'keys', 'hmac.key'), 'utf8')).toBe('secret key');

  mkdirSync(path.join(dataDir, 'blobs'));
  symlinkSync(dataDir, path.join(dataDir, 'blobs', 'loop'));
  const looped = await runBackup(dataDir, path.join(root, 'copy2'));
  expect([looped.code, looped.err]).toEqual([1, expect.stringMatching(/symbolic link loop/)]);
  expect(existsSync(path.join(root, 'copy2'))).toBe(false);
}, 60_000);

test('a backup cut short never passes for one: a service refuses its copy, as it refuses an event log without its keys', async () => {
  const dataDir = path.join(root, 'data');
  const svc = await spawnService({ DATA_DIR: dataDir, PASSWORD_HASH_MEMORY_KIB: '1024' });
  try {
    expect((await post(`${svc.url}/api/auth/social/`, { username: 'kept', email: 'kept@example.com', password1: 'pw', password2: 'pw' })).status).toBe(201);
  } finally {
    svc.child.kill('SIGTERM');
  }
  expect(await svc.exited).toBe(0);

  // a backup stopped by a signal (Ctrl-C, a shutdown) leaves nothing
  writeFileSync(path.join(dataDir, 'outbox', 'large.eml'), Buffer.alloc(64 << 20)); // time to stop it midway
  // (On a loaded machine this process may not look while the copy runs: then it tries again.)
  for (let attempt = 1; ; attempt++) {
    const stopped = path.join(root, `stopped-${attempt}`);
    const child = spawn(process.execPath, ['--import', 'tsx', 'services/backup.ts', stopped], { cwd: ROOT, env: { ...process.env, DATA_DIR: dataDir } });
    const exited = new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    while (!existsSync(path.join(stopped, 'BACKUP-UNFINISHED')) && child.exitCode === null) await new Promise((r) => setTimeout(r, 2));
    if (child.exitCode !== null && attempt < 5) {
      rmSync(stopped, { recursive: true, force: true }); // finished before it could be stopped
      continue;
    }
    child.kill('SIGTERM');
    expect(await exited).toBe(143);
    expect(err).toMatch(/stopped by SIGTERM; nothing was kept/);
    expect(existsSync(stopped)).toBe(false);
    break;
  }

  // one killed outright keeps its mark: the service will not start on it
  const killed = path.join(root, 'killed');
  expect((await runBackup(dataDir, killed)).code).toBe(0);
  writeFileSync(path.join(killed, 'BACKUP-UNFINISHED'), 'cut short'); // as a kill -9 midway leaves it
  rmSync(path.join(killed, 'keys'), { recursive: true });
  const refused = await startFails(killed);
  expect(refused).toMatch(/^failed to start: DATA_DIR: an unfinished backup/m);

  // without the mark, an event log without its key ring is refused too (a new ring would end every token)
  rmSync(path.join(killed, 'BACKUP-UNFINISHED'));
  expect(await startFails(killed)).toMatch(/^failed to start: DATA_DIR: keys\/ is missing, but the event log has events/m);
  expect(existsSync(path.join(killed, 'keys'))).toBe(false);

  // the documented way to go on with new keys: an empty keys/
  mkdirSync(path.join(killed, 'keys'));
  const renewed = await spawnService({ DATA_DIR: killed, PASSWORD_HASH_MEMORY_KIB: '1024' });
  try {
    expect((await post(`${renewed.url}/api/auth/login/`, { username: 'kept', password: 'pw' })).status).toBe(200);
  } finally {
    renewed.child.kill('SIGTERM');
  }
  expect(await renewed.exited).toBe(0);
}, 120_000);

test('refuses a target inside DATA_DIR reached through a symbolic link', async () => {
  const dataDir = path.join(root, 'data');
  mkdirSync(path.join(dataDir, 'outbox'), { recursive: true });
  writeFileSync(path.join(dataDir, 'events.sqlite'), '');
  symlinkSync(path.join(dataDir, 'outbox'), path.join(root, 'link'));
  const through = await runBackup(dataDir, path.join(root, 'link', 'copy'));
  expect([through.code, through.err]).toEqual([1, expect.stringMatching(/inside DATA_DIR/)]);
  expect(readdirSync(path.join(dataDir, 'outbox'))).toEqual([]);
}, 60_000);

test('a start with another PUBLIC_URL says that the tokens signed before are refused', async () => {
  const dataDir = path.join(root, 'data');
  const first = await spawnService({ DATA_DIR: dataDir, PUBLIC_URL: 'https://ais.example.com' });
  first.child.kill('SIGTERM');
  expect(await first.exited).toBe(0);
  expect(first.output()).not.toMatch(/PUBLIC_URL changed/);
  // A rebuild signs no token: run without the service's PUBLIC_URL, it neither warns nor records one.
  const rebuild = spawn(process.execPath, ['--import', 'tsx', 'services/rebuild.ts'], { cwd: ROOT, env: { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'info' } });
  let rebuilt = '';
  rebuild.stdout.on('data', (d) => (rebuilt += d));
  rebuild.stderr.on('data', (d) => (rebuilt += d));
  expect(await new Promise((resolve) => rebuild.on('exit', resolve))).toBe(0);
  expect(rebuilt).not.toMatch(/PUBLIC_URL changed/);
  // A start that fails (its port taken) records nothing either: the next start with the old address is no change.
  const busy = net.createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  const taken = String((busy.address() as net.AddressInfo).port);
  const failed = spawn(process.execPath, ['--import', 'tsx', 'services/main.ts'], { cwd: ROOT, env: { ...process.env, DATA_DIR: dataDir, PORT: taken, HOST: '127.0.0.1', SMTP_PORT: '0', PUBLIC_URL: 'https://elsewhere.example' } });
  expect(await new Promise((resolve) => failed.on('exit', resolve))).toBe(1);
  busy.close();
  const same = await spawnService({ DATA_DIR: dataDir, PUBLIC_URL: 'https://ais.example.com' });
  same.child.kill('SIGTERM');
  expect(await same.exited).toBe(0);
  expect(same.output()).not.toMatch(/PUBLIC_URL changed/);
  const moved = await spawnService({ DATA_DIR: dataDir, PUBLIC_URL: 'https://id.example.org' });
  moved.child.kill('SIGTERM');
  expect(await moved.exited).toBe(0);
  expect(moved.output()).toMatch(/"was":"https:\/\/ais.example.com","now":"https:\/\/id.example.org","msg":"PUBLIC_URL changed: tokens signed for the old address are refused/);
}, 60_000);

/** `npm start` on `dataDir`: the service must exit at once; its stderr. */
async function startFails(dataDir: string): Promise<string> {
  const port = String(await freePort()); // npm start takes no PORT=0
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'services/main.ts'], { cwd: ROOT, env: { ...process.env, DATA_DIR: dataDir, PORT: port, SMTP_PORT: '0' } });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => (child.kill('SIGKILL'), reject(new Error('the service started'))), 30_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code === 1) resolve(err);
      else reject(new Error(`exit ${code}: ${err}`));
    });
  });
}
