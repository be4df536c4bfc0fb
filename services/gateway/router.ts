/**
 * @koa/router, with route matching narrowed by the path's first two segments.
 *
 * The stock `match` tests every route's regular expression on every request (over a
 * hundred routes here, each test also logging through `debug`). This subclass files each
 * route under the first two segments of its path when they are literal (`/api/identities`
 * for `/api/identities/:uuid/`), and tests only that bucket plus the routes it could not
 * file (a parameter or pattern in the first two segments, a RegExp path, prefix middleware).
 * The routes keep their order and their regular expressions, so the result is exactly the
 * stock one; only the routes that cannot match are skipped. One rule on top
 * ({@link preferLiteral}): a fixed path is never read as a parameter's value.
 */
import Router, { type Layer, type MatchResult } from '@koa/router';

/** Characters that make a path segment a pattern rather than a literal (path-to-regexp). */
const PATTERN = /[:*?+(){}[\]\\]/;

/** The bucket of a path: its first two non-empty segments, or null if one is a pattern. */
function bucketOf(path: string, lower: boolean): string | null {
  const segments: string[] = [];
  for (const segment of path.split('/')) {
    if (segment === '') continue;
    if (PATTERN.test(segment)) return null;
    segments.push(lower ? segment.toLowerCase() : segment);
    if (segments.length === 2) break;
  }
  return segments.join('/');
}

interface Index {
  /** The stack length it was built from (routes added later rebuild it). */
  size: number;
  /** Per bucket: the routes that may match a path of that bucket, in stack order. */
  buckets: Map<string, Layer[]>;
  /** Routes tested for every path (what could not be filed), in stack order. */
  unfiled: Layer[];
}

export class IndexedRouter extends Router {
  #index: Index | null = null;

  #build(): Index {
    const sensitive = Boolean(this.opts.sensitive);
    const filed = new Map<string, number[]>();
    const unfiled: number[] = [];
    this.stack.forEach((layer, i) => {
      const end = layer.opts.end !== false; // prefix middleware matches below its path too
      const bucket = typeof layer.path === 'string' && end && layer.methods.length > 0 ? bucketOf(layer.path, !sensitive) : null;
      // A path with fewer than two segments ("/", "/api/") is filed under what it has: a
      // request path matching it has exactly those segments (trailing slash aside).
      if (bucket === null) unfiled.push(i);
      else filed.set(bucket, [...(filed.get(bucket) ?? []), i]);
    });
    const buckets = new Map<string, Layer[]>();
    for (const [bucket, indexes] of filed) {
      buckets.set(bucket, [...indexes, ...unfiled].sort((a, b) => a - b).map((i) => this.stack[i]));
    }
    return { size: this.stack.length, buckets, unfiled: unfiled.map((i) => this.stack[i]) };
  }

  override match(path: string, method: string): MatchResult {
    if (!this.#index || this.#index.size !== this.stack.length) this.#index = this.#build();
    const bucket = bucketOf(path, !this.opts.sensitive);
    // A request path with a pattern character in its first segments is rare: test everything.
    const candidates = bucket === null ? this.stack : (this.#index.buckets.get(bucket) ?? this.#index.unfiled);
    const result: MatchResult = { path: [], pathAndMethod: [], route: false };
    const upper = method.toUpperCase();
    for (const layer of candidates) {
      if (!layer.match(path)) continue;
      result.path.push(layer);
      if (layer.methods.length === 0 || layer.methods.includes(upper)) {
        result.pathAndMethod.push(layer);
        if (layer.methods.length > 0) result.route = true;
      }
    }
    return preferLiteral(result, upper);
  }
}

/**
 * A path that names a fixed route is that route, never a value of a parameter:
 * `GET /api/email-messages/compose/` (compose is POST only) answers 405 with `Allow: POST`
 * rather than being read as the message id "compose". Routes with parameters are dropped
 * from a match that holds a route without any (middleware stays).
 */
const isLiteralRoute = (layer: Layer) => layer.methods.length > 0 && layer.paramNames.length === 0;
const isParamRoute = (layer: Layer) => layer.methods.length > 0 && layer.paramNames.length > 0;

export function preferLiteral(result: MatchResult, method: string): MatchResult {
  if (result.path.length < 2 || !result.path.some(isLiteralRoute) || !result.path.some(isParamRoute)) return result;
  const keep = (layer: Layer) => layer.methods.length === 0 || layer.paramNames.length === 0;
  const pathAndMethod = result.pathAndMethod.filter(keep);
  return {
    path: result.path.filter(keep),
    pathAndMethod,
    route: pathAndMethod.some((layer) => layer.methods.includes(method)),
  };
}
