/** Small response helpers shared by every context's routes. */
import type { Context } from 'koa';
import type { Page } from '../../infra/ports/read-store.js';
import { drainRefusedBody, readBody } from './body.js';
import { ApiError, badRequest } from './errors.js';
import { FALSE_TEXTS, TRUE_TEXTS } from './validate.js';
import { isTemporaryFault } from '../kernel/faults.js';

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

/** Parsed JSON/form body (cached on the context). */
export async function body(ctx: Context): Promise<Record<string, unknown>> {
  if (ctx.state.body === undefined) ctx.state.body = await readBody(ctx);
  return ctx.state.body as Record<string, unknown>;
}

/**
 * The body of a page's form, or why it cannot be read (not UTF-8, too large, a type no form
 * has: the API's 4xx, with its headers set), for the page to say in its own look rather than
 * as the API's JSON. A refusal that closes the connection first reads the body's bounded rest,
 * as the gateway does for the API, so the browser gets the page rather than a reset.
 */
export async function formBody(ctx: Context): Promise<Record<string, unknown> | ApiError> {
  try {
    return await body(ctx);
  } catch (err) {
    if (!(err instanceof ApiError) || err.status >= 500) throw err;
    for (const [name, value] of Object.entries(err.headers ?? {})) ctx.set(name, value);
    if (err.headers?.Connection === 'close') await drainRefusedBody(ctx.req);
    return err;
  }
}

/** 201 with the new resource; `location` (its path) goes out as Location (RFC 9110 §10.2.2). */
export function created(ctx: Context, payload: unknown, location?: string): void {
  ctx.status = 201;
  if (location) ctx.set('Location', location);
  ctx.body = payload;
}

export function noContent(ctx: Context): void {
  ctx.status = 204;
  ctx.body = null;
}

/**
 * A query parameter's text, or undefined when absent. Every API parameter is read through
 * it: given twice it is a 400, since either value would be a guess (a repeated cursor once
 * restarted a list silently, a repeated filter was dropped and everything listed).
 */
export function queryParam(ctx: Context, name: string): string | undefined {
  const v = ctx.query[name];
  if (Array.isArray(v)) throw badRequest({ [name]: [`Give ${name} once.`] });
  return v;
}

/** `limit` (default 50, max 200) and `cursor` from the query (DECISIONS "Wire conventions"). */
export function pageParams(ctx: Context): { limit: number; cursor: string | null } {
  const raw = queryParam(ctx, 'limit');
  const c = queryParam(ctx, 'cursor');
  let limit = DEFAULT_PAGE_SIZE;
  if (raw !== undefined) {
    if (!/^\d+$/.test(raw) || Number(raw) < 1) throw badRequest({ limit: ['A valid positive integer is required.'] });
    limit = Math.min(Number(raw), MAX_PAGE_SIZE);
  }
  const cursor = c !== undefined && c !== '' ? c : null;
  return { limit, cursor };
}

/**
 * JSON of pages already answered, per page object and mapping. The embedded read store hands
 * out the same frozen page for a repeated query until a write changes it, so its JSON can be
 * reused as long as the page lives (weak keys: no page or mapping is kept alive by this).
 */
const serialized = new WeakMap<object, WeakMap<object, Buffer>>();

/**
 * A page of a small list kept in one document (e.g. an identity's phone numbers), with the
 * same limit/cursor rules as the read store's lists: the cursor names the last key given.
 */
export function pageOfList<T>(items: readonly T[], keyOf: (item: T) => string, params: { limit: number; cursor: string | null }): Page<T> {
  let start = 0;
  if (params.cursor !== null) {
    let after: unknown;
    try {
      after = JSON.parse(Buffer.from(params.cursor, 'base64url').toString('utf8'));
    } catch {
      after = undefined;
    }
    const at = typeof after === 'string' ? items.findIndex((item) => keyOf(item) === after) : -1;
    if (at < 0) throw badRequest({ cursor: ['Invalid cursor.'] });
    start = at + 1;
  }
  const slice = items.slice(start, start + params.limit);
  const more = start + params.limit < items.length;
  return { items: slice, next: more ? Buffer.from(JSON.stringify(keyOf(slice[slice.length - 1]))).toString('base64url') : null };
}

/** Answers a page as a JSON array, with an RFC 8288 `Link: <...>; rel="next"` when more remain. */
export function sendPage<T, R>(ctx: Context, page: Page<T>, map: (item: T) => R, publicUrl: string): void {
  if (page.next) {
    // PUBLIC_URL with the request's path and query only: a request line in absolute form
    // (`GET http://elsewhere/api/...`) must not name the host of the link.
    const url = new URL(publicUrl);
    url.pathname = ctx.path;
    url.search = ctx.querystring;
    url.searchParams.set('cursor', page.next);
    ctx.set('Link', `<${url.toString()}>; rel="next"`);
  }
  if (!Object.isFrozen(page)) {
    ctx.body = page.items.map(map);
    return;
  }
  let byMap = serialized.get(page);
  if (!byMap) serialized.set(page, (byMap = new WeakMap()));
  let json = byMap.get(map);
  if (json === undefined) byMap.set(map, (json = Buffer.from(JSON.stringify(page.items.map(map)))));
  ctx.set('Content-Type', 'application/json; charset=utf-8'); // what `ctx.type = 'json'` sets, without the lookup
  ctx.body = json;
}

/**
 * `?unread=true` style booleans, spelled as a body's boolean fields are (DRF's texts:
 * true/t/yes/y/on/1, false/f/no/n/off/0) or absent; anything else (or the flag twice) is a 400.
 */
export function queryFlag(ctx: Context, name: string): boolean {
  const s = queryParam(ctx, name)?.trim().toLowerCase();
  if (s === undefined || s === '' || FALSE_TEXTS.has(s)) return false;
  if (TRUE_TEXTS.has(s)) return true;
  throw badRequest({ [name]: ['Must be a valid boolean.'] });
}

/**
 * The write that opening something makes (DECISIONS: opening a message or a conversation
 * marks it read): only on GET, since HEAD is safe (RFC 9110 §9.2.1); and a store that cannot
 * take it right now (a full disk) does not fail the read: the content is shown unmarked, and
 * the next opening marks it. True when it was marked.
 */
export async function markOnOpen(ctx: Context, mark: () => Promise<void>): Promise<boolean> {
  if (ctx.method !== 'GET') return false;
  try {
    await mark();
    return true;
  } catch (err) {
    if (isTemporaryFault(err)) return false;
    throw err;
  }
}
