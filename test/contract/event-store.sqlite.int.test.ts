/** The event store contract against the embedded SQLite adapter, plus what only it promises. */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { EventStoreUnavailableError, type EventData } from '../../infra/ports/event-store.js';
import { openSqliteEventStore, type EventStoreLogger } from '../../infra/sqlite/event-store.js';
import { eventStoreContract } from './event-store.contract.js';

const quiet: EventStoreLogger = { warn: () => {}, error: () => {} };
const tempDirs: string[] = [];
const newDbFile = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-store-'));
  tempDirs.push(dir);
  return path.join(dir, 'events.db');
};
afterAll(() => {
  for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
});

const event = (data: unknown = {}): EventData => ({ id: randomUUID(), type: 'Tested', data });

eventStoreContract('sqlite', async () => {
  const store = await openSqliteEventStore({ file: newDbFile(), logger: quiet });
  return { store, cleanup: () => store.close() };
});

describe('SQLite event store', () => {
  it('a file that is no database is refused in words (SQLite\'s reason, not [object Object])', async () => {
    const file = newDbFile();
    fs.writeFileSync(file, Buffer.alloc(8192, 0x5a));
    const refused = await openSqliteEventStore({ file, logger: quiet }).then(
      () => null,
      (err: Error) => err,
    );
    expect(refused).toBeInstanceOf(EventStoreUnavailableError);
    expect(refused!.message).toMatch(/cannot open event store .*: file is not a database/);
  });

  it('starts empty: no head position', async () => {
    const store = await openSqliteEventStore({ file: newDbFile(), logger: quiet });
    expect(await store.headPosition()).toBeNull();
    expect(await store.readAll()).toEqual([]);
    await store.close();
  });

  it('keeps the data across close and reopen, and goes on numbering', async () => {
    const file = newDbFile();
    const store = await openSqliteEventStore({ file, logger: quiet });
    const first = await store.append('user-1', [event({ a: 1 }), event({ b: 'ü' })], { expectedRevision: 'no_stream' });
    await store.close();

    const reopened = await openSqliteEventStore({ file, logger: quiet });
    expect(await reopened.readStream('user-1')).toEqual(first.events);
    expect(await reopened.headPosition()).toBe(first.position);
    const next = await reopened.append('user-1', [event()], { expectedRevision: 1 });
    expect(Number(next.position)).toBe(Number(first.position) + 1);
    await reopened.close();
  });

  it('commits concurrent appends in far fewer transactions than appends (group commit)', async () => {
    const store = await openSqliteEventStore({ file: newDbFile(), logger: quiet });
    await Promise.all(Array.from({ length: 200 }, (_, i) => store.append(`group-${i}`, [event()])));
    const { batches, appends } = store.stats();
    expect(appends).toBe(200);
    expect(batches).toBeLessThanOrEqual(5);
    await store.close();
  });

  it('commits what was appended before close() and refuses appends after it', async () => {
    const file = newDbFile();
    const store = await openSqliteEventStore({ file, logger: quiet });
    const pending = Array.from({ length: 20 }, (_, i) => store.append(`close-${i}`, [event()]));
    const closed = store.close();
    await expect(store.append('close-late', [event()])).rejects.toBeInstanceOf(EventStoreUnavailableError);
    await Promise.all(pending);
    await closed;
    await expect(store.readAll()).rejects.toThrow(/closed/);

    const reopened = await openSqliteEventStore({ file, logger: quiet });
    expect(await reopened.readAll()).toHaveLength(20);
    await reopened.close();
  });

  it('fails pending and later appends when the writer thread dies, and reports it', async () => {
    const errors: unknown[][] = [];
    const store = await openSqliteEventStore({ file: newDbFile(), logger: { warn: () => {}, error: (...a) => errors.push(a) } });
    const before = await store.append('crash-1', [event()]);
    const sub = store.subscribeAll({}, () => {});
    const pending = store.append('crash-2', [event()]);
    await store.crashWriterForTesting();
    await expect(pending).rejects.toBeInstanceOf(EventStoreUnavailableError);
    await expect(store.append('crash-3', [event()])).rejects.toBeInstanceOf(EventStoreUnavailableError);
    await expect(sub.done).rejects.toBeInstanceOf(EventStoreUnavailableError);
    expect(errors.length).toBeGreaterThan(0);
    expect(await store.readStream('crash-1')).toEqual(before.events); // reads still work
    await store.close();
  });

  it('serves thousands of subscriptions by in-memory fan-out', async () => {
    const store = await openSqliteEventStore({ file: newDbFile(), logger: quiet });
    const n = 3000;
    let delivered = 0;
    const subs = Array.from({ length: n }, (_, i) =>
      store.subscribeAll({ filter: { streams: [`fan-${i}`] } }, () => {
        delivered++;
      }),
    );
    const everything: string[] = [];
    const all = store.subscribeAll({ filter: { streamPrefixes: ['fan-'] } }, (e) => {
      everything.push(e.id);
    });
    await Promise.all(Array.from({ length: n }, (_, i) => store.append(`fan-${i}`, [event()])));
    const deadline = Date.now() + 10_000;
    while ((delivered < n || everything.length < n) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(delivered).toBe(n);
    expect(everything).toHaveLength(n);
    await store.close(); // closes the subscriptions too
    await Promise.all([...subs, all].map((s) => s.done));
  });

  it('loses no acknowledged append when the process is killed with SIGKILL', async () => {
    const file = newDbFile();
    const fixture = fileURLToPath(new URL('../fixtures/event-store-crash-writer.ts', import.meta.url));
    const root = fileURLToPath(new URL('../..', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', fixture, file], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const acknowledged: string[] = [];
    let partial = '';
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
      child.on('exit', (code, signal) => resolve(signal ?? code)),
    );
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        const lines = (partial + chunk.toString()).split('\n');
        partial = lines.pop()!;
        acknowledged.push(...lines);
        if (acknowledged.length >= 1000) resolve();
      });
      void exited.then(() => reject(new Error(`crash writer exited early: ${stderr}`)));
    });
    child.kill('SIGKILL');
    expect(await exited).toBe('SIGKILL');

    const store = await openSqliteEventStore({ file, logger: quiet });
    const stored = new Set((await store.readAll()).map((e) => e.id));
    await store.close();
    const lost = acknowledged.filter((id) => !stored.has(id));
    expect(lost).toEqual([]);
    expect(stored.size).toBeGreaterThanOrEqual(acknowledged.length);
  });
});
