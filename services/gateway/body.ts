/**
 * Request bodies: JSON everywhere; form-urlencoded and multipart too (the spec's auth
 * endpoints accept them, and RFC 8628 clients post forms). Bodies over 1 MiB answer 413
 * (DECISIONS "Wire conventions"); uploads read their own bodies and are not parsed here.
 */
import type { Context } from 'koa';
import getRawBody from 'raw-body';
import busboy from 'busboy';
import { ApiError } from './errors.js';
import { markJsonBody } from './validate.js';
import { bodyHeldBack, continueBody } from './protocol.js';

export const MAX_BODY_BYTES = 1024 * 1024;
/** Fields of a form body (Django's DATA_UPLOAD_MAX_NUMBER_FIELDS); no operation takes more than a few. */
const MAX_FORM_FIELDS = 1000;
const tooManyFields = () => new ApiError(400, 'parse_error', `The form body has more than ${MAX_FORM_FIELDS} fields.`);
/**
 * No request body of this API nests beyond a few levels; deeper ones are refused before
 * anything recursive (validation, copies) could run out of stack on them.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Whether JSON text nests objects/arrays deeper than `max` levels, read off the text before it
 * is parsed: 1 MiB of `[[[…` costs JSON.parse half a million arrays (~10x the time of a flat
 * body, on the one thread that serves everything), this scan a pass over the characters.
 * Brackets inside strings do not count; the text's validity is JSON.parse's to judge.
 */
function nestedDeeperThan(json: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // an escape: the next character is not a quote that ends the string
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

/** A UTF-16 surrogate not paired with its other half (in `u` mode a pair is one code point). */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/**
 * Whether a string or key of `value` holds a lone surrogate: JSON's `\uD800` escape is the
 * only way to write one in a UTF-8 body (RFC 8259 §8.2 leaves such strings' behaviour
 * unpredictable), and it is no text: stored, it came back as-is but left as U+FFFD in mail,
 * and hashing it (uuid v5 of an SMS sender) threw.
 */
function hasLoneSurrogate(value: object): boolean {
  const stack: unknown[] = [value];
  while (stack.length) {
    const node = stack.pop();
    if (typeof node === 'string') {
      if (LONE_SURROGATE.test(node)) return true;
    } else if (node !== null && typeof node === 'object') {
      for (const [key, child] of Object.entries(node)) {
        if (LONE_SURROGATE.test(key)) return true;
        stack.push(child);
      }
    }
  }
  return false;
}

/**
 * Refused before the whole body was read: the rest of it is still on the connection, so the
 * connection is closed after the answer (a client reusing it would have its next request
 * read from the middle of this body, or reset). The gateway reads a bounded rest first
 * ({@link drainRefusedBody}).
 */
const tooLarge = () => new ApiError(413, 'payload_too_large', 'Request body exceeds the 1 MiB limit.', undefined, { Connection: 'close' });

/** Bodies are UTF-8 (RFC 8259 §8.1 for JSON); a byte sequence that is not is refused, never replaced by U+FFFD. */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });
/** The same, keeping a leading U+FEFF (inside a form value it is text, not a byte-order mark). */
const utf8Text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export async function readBody(ctx: Context): Promise<Record<string, unknown>> {
  const contentType = ctx.get('content-type') || '';
  const type = contentType.split(';')[0].trim().toLowerCase();
  const declared = Number(ctx.get('content-length') || 0);
  if (declared > MAX_BODY_BYTES) throw tooLarge();
  const encoding = (ctx.get('content-encoding') || 'identity').trim().toLowerCase();
  if (encoding !== 'identity') throw new ApiError(415, 'unsupported_media_type', `Unsupported Content-Encoding "${encoding}": send the body uncompressed.`);
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType)?.[1].toLowerCase();
  if (charset && charset !== 'utf-8' && charset !== 'utf8' && type !== 'multipart/form-data') {
    throw new ApiError(415, 'unsupported_media_type', `Unsupported charset "${charset}": bodies are UTF-8.`);
  }
  continueBody(ctx.req);
  if (type === 'multipart/form-data') return readMultipart(ctx);
  let raw: string;
  try {
    raw = utf8.decode(await getRawBody(ctx.req, { limit: MAX_BODY_BYTES }));
  } catch (err) {
    if ((err as { type?: string }).type === 'entity.too.large') throw tooLarge();
    if (err instanceof TypeError) throw new ApiError(400, 'parse_error', 'The request body is not valid UTF-8.');
    throw new ApiError(400, 'parse_error', 'Could not read the request body.');
  }
  if (raw.trim() === '') return {};
  if (type === 'application/x-www-form-urlencoded') return parseForm(raw);
  if (type === '' || type === 'application/json' || type.endsWith('+json') || type === 'text/plain') {
    if (nestedDeeperThan(raw, MAX_JSON_DEPTH)) {
      throw new ApiError(400, 'parse_error', `The request body is nested too deeply (more than ${MAX_JSON_DEPTH} levels).`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      throw new ApiError(400, 'parse_error', 'JSON parse error: the request body is not valid JSON.');
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      throw new ApiError(400, 'parse_error', 'The request body must be a JSON object.');
    }
    // Only an escape can make one (the bytes were valid UTF-8): look when one is there.
    if (/\\u[dD][89a-fA-F]/.test(raw) && hasLoneSurrogate(parsed)) {
      throw new ApiError(400, 'parse_error', 'JSON parse error: a string holds an unpaired UTF-16 surrogate escape (\\uD800–\\uDFFF); strings must be Unicode text.');
    }
    return markJsonBody(parsed as Record<string, unknown>);
  }
  throw new ApiError(415, 'unsupported_media_type', `Unsupported media type "${type}" in request.`);
}

const isHex = (c: number | undefined) => c !== undefined && ((c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66));

/** A form component (WHATWG URL "application/x-www-form-urlencoded"), its bytes strictly UTF-8. */
function formComponent(text: string): string {
  const input = Buffer.from(text.replace(/\+/g, ' '), 'utf8');
  const out = Buffer.allocUnsafe(input.length);
  let n = 0;
  for (let i = 0; i < input.length; i++) {
    if (input[i] === 0x25 && isHex(input[i + 1]) && isHex(input[i + 2])) {
      out[n++] = parseInt(String.fromCharCode(input[i + 1]!, input[i + 2]!), 16);
      i += 2;
    } else out[n++] = input[i]!;
  }
  return utf8Text.decode(out.subarray(0, n));
}

/**
 * Adds a form field: a name given again makes a list of its values, in order (as Django's
 * QueryDict keeps them: `to=a&to=b` is two recipients; a field taking one value answers 400
 * to a list), never a silent pick of one. Own properties only, even for a name like __proto__.
 */
function addField(fields: Record<string, unknown>, name: string, value: string): void {
  const before = Object.hasOwn(fields, name) ? fields[name] : undefined;
  const next = before === undefined ? value : Array.isArray(before) ? [...before, value] : [before, value];
  Object.defineProperty(fields, name, { value: next, enumerable: true, writable: true, configurable: true });
}

/**
 * Form fields as URLSearchParams reads them, a repeated name kept as a list (addField), and
 * percent-escapes which do not decode to UTF-8 (`%FF`, `%ED%A0%80`) refused like invalid
 * bytes in a JSON body, instead of becoming U+FFFD.
 */
function parseForm(raw: string): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  // Cut by hand, stopping past the limit: split('&') made a string of each of a million `&`.
  const parts: string[] = [];
  for (let start = 0; start <= raw.length; ) {
    const end = raw.indexOf('&', start);
    const stop = end < 0 ? raw.length : end;
    if (stop > start && parts.push(raw.slice(start, stop)) > MAX_FORM_FIELDS) throw tooManyFields();
    start = stop + 1;
  }
  try {
    for (const part of parts) {
      const eq = part.indexOf('=');
      addField(fields, formComponent(eq < 0 ? part : part.slice(0, eq)), eq < 0 ? '' : formComponent(part.slice(eq + 1)));
    }
  } catch {
    throw new ApiError(400, 'parse_error', 'The form body is not valid UTF-8 once percent-decoded.');
  }
  return fields;
}

function readMultipart(ctx: Context): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const fields: Record<string, unknown> = {};
    let bb: busboy.Busboy;
    try {
      bb = busboy({ headers: ctx.req.headers, limits: { fieldSize: MAX_BODY_BYTES, files: 0, fields: MAX_FORM_FIELDS } });
    } catch {
      reject(new ApiError(400, 'parse_error', 'Malformed multipart body.'));
      return;
    }
    let total = 0;
    ctx.req.on('data', (chunk: Buffer) => {
      total += chunk.length;
      if (total > MAX_BODY_BYTES) {
        ctx.req.unpipe(bb);
        reject(tooLarge());
      }
    });
    // busboy decodes a field by its part's charset (UTF-8 unless declared), replacing bytes
    // that do not decode with U+FFFD: such a field is refused, as a JSON or form body's is.
    bb.on('field', (name, value) => {
      if (name.includes('\uFFFD') || value.includes('\uFFFD')) reject(new ApiError(400, 'parse_error', `The multipart field "${name.replace(/\uFFFD/g, '?')}" is not valid in its charset (UTF-8 unless its part says otherwise).`));
      else addField(fields, name, value);
    });
    bb.on('file', (_name, stream) => stream.resume());
    // Past a limit busboy drops the rest silently: the fields it dropped would then read as missing.
    bb.on('fieldsLimit', () => reject(tooManyFields()));
    bb.on('filesLimit', () => reject(new ApiError(400, 'parse_error', 'The multipart body has a file part: every field is a text part here.')));
    bb.on('error', () => reject(new ApiError(400, 'parse_error', 'Malformed multipart body.')));
    bb.on('close', () => resolve(fields));
    ctx.req.pipe(bb);
  });
}

/** A refused body's rest is read (and dropped) up to this size... */
const DRAIN_MAX_BYTES = 32 * 1024 * 1024;
/** ...and for this long, before the refusal is answered. */
const DRAIN_MAX_MS = 10_000;

/**
 * Reads and drops what is left of a request's body, at most {@link DRAIN_MAX_BYTES} (a body
 * declared larger is not waited for) and {@link DRAIN_MAX_MS}. For an answer that closes the
 * connection before the body was read (413): closed with the client still sending, the
 * socket is reset, and most clients (fetch among them) then report the reset, never the
 * answer. Read to its end first, the body leaves nothing unread, and the close is clean.
 */
export function drainRefusedBody(req: Context['req']): Promise<void> {
  const declared = Number(req.headers['content-length']);
  // A client waiting for `100 Continue` sends no body: nothing to wait for.
  if (req.complete || req.destroyed || declared > DRAIN_MAX_BYTES || bodyHeldBack(req)) return Promise.resolve();
  return new Promise((resolve) => {
    let left = DRAIN_MAX_BYTES;
    const done = () => {
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', done);
      req.off('close', done);
      req.off('error', done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      left -= chunk.length;
      if (left < 0) {
        req.pause();
        done();
      }
    };
    const timer = setTimeout(() => {
      req.pause();
      done();
    }, DRAIN_MAX_MS);
    req.on('data', onData);
    req.once('end', done);
    req.once('close', done);
    req.once('error', done);
    req.resume();
  });
}
