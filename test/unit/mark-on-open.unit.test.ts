/**
 * Opening marks read (services/gateway/http.ts markOnOpen): only on GET, and a store that
 * cannot take the marking right now does not fail the read. (A full event store cannot be
 * made on demand through the interface, hence a unit test of the rule itself.)
 */
import type { Context } from 'koa';
import { markOnOpen } from '../../services/gateway/http.js';
import { EventStoreUnavailableError } from '../../infra/ports/event-store.js';

const ctx = (method: string) => ({ method }) as Context;
const failing = (err: unknown) => async () => {
  throw err;
};

it('marks on GET, never on HEAD', async () => {
  let marks = 0;
  const mark = async () => void marks++;
  expect(await markOnOpen(ctx('GET'), mark)).toBe(true);
  expect(await markOnOpen(ctx('HEAD'), mark)).toBe(false);
  expect(marks).toBe(1);
});

it('a store that cannot take the write now (full disk, event store down) leaves the content unmarked instead of failing the read', async () => {
  expect(await markOnOpen(ctx('GET'), failing(new EventStoreUnavailableError('event store commit failed: database or disk is full')))).toBe(false);
  expect(await markOnOpen(ctx('GET'), failing(Object.assign(new Error('no space left on device'), { code: 'ENOSPC' })))).toBe(false);
});

it('any other failure still fails the request', async () => {
  await expect(markOnOpen(ctx('GET'), failing(new Error('a bug')))).rejects.toThrow('a bug');
});
