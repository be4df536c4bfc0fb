/**
 * The HTTP layer below Koa: what Node's parser refuses, and requests the API cannot read
 * safely (ambiguous headers, unknown transfer codings, another HTTP version), are answered
 * here in the API's error shape `{detail, code}` (Node's own answers have empty bodies, and
 * Koa never sees these requests), in request order on a pipelined connection; `Expect:
 * 100-continue` is answered when a body is read.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import { randomUUID } from 'node:crypto';

/** Headers a request may carry once: Node keeps the first of several, another hop may take the last. */
const SINGLE_HEADERS = new Set(['host', 'authorization', 'content-type']);

export const SECURITY_HEADERS = {
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
  'Cross-Origin-Opener-Policy': 'same-origin',
};
/** JSON API answers are never cached and never rendered as documents (app.ts sets them on Koa's; refusals here carry them too). */
export const API_HEADERS = { ...SECURITY_HEADERS, 'Cache-Control': 'no-store', 'Content-Security-Policy': "default-src 'none'; frame-ancestors 'none'" };

/** Headers of an answer written below Koa: an API answer's, closing the connection. */
function refusalHeaders(length: number): Record<string, string | number> {
  return { ...API_HEADERS, 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': length, 'X-Request-Id': randomUUID(), Connection: 'close' };
}

function refuse(res: http.ServerResponse, status: number, code: string, detail: string): void {
  const body = JSON.stringify({ detail, code });
  res.writeHead(status, refusalHeaders(Buffer.byteLength(body)));
  res.end(body);
}

/**
 * A request Node's parser let through that the API cannot read safely is answered here, in
 * the error shape; true when it was:
 * - RFC 9112 §3.2: an HTTP/1.1 request without a Host header is a 400, and so is a request
 *   with two of a header that holds one value (Host, Authorization, Content-Type): which one
 *   counts would be a guess.
 * - RFC 9112 §6.1: a transfer coding other than chunked (`gzip, chunked`) is a 501; the body
 *   would otherwise be read as the coded bytes.
 * - RFC 9110 §15.6.6: a major version other than 1 (`HTTP/2.0` in an HTTP/1 request line) is a 505.
 * - RFC 9110 §9.3.7: `OPTIONS *` asks about the server as a whole: the methods it serves.
 */
export function refuseMalformedRequest(req: http.IncomingMessage, res: http.ServerResponse): boolean {
  if (req.httpVersionMajor !== 1) {
    refuse(res, 505, 'http_version_not_supported', `HTTP/${req.httpVersion} is not supported: send HTTP/1.1.`);
    return true;
  }
  const seen = new Set<string>();
  let problem: string | null = null;
  for (let i = 0; i < req.rawHeaders.length && !problem; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    if (!SINGLE_HEADERS.has(name)) continue;
    if (seen.has(name)) problem = `The request has more than one ${req.rawHeaders[i]} header.`;
    seen.add(name);
  }
  if (!problem && !seen.has('host') && req.httpVersion !== '1.0') problem = 'The request has no Host header.';
  if (problem) {
    refuse(res, 400, 'parse_error', problem);
    return true;
  }
  const codings = req.headers['transfer-encoding'];
  if (codings !== undefined && codings.split(',').some((c) => c.trim().toLowerCase() !== 'chunked')) {
    refuse(res, 501, 'not_implemented', `Unsupported Transfer-Encoding "${codings}": send the body with chunked alone, or with a Content-Length.`);
    return true;
  }
  if (req.method === 'OPTIONS' && req.url === '*') {
    res.writeHead(200, { Allow: 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS', 'Content-Length': 0 });
    res.end();
    return true;
  }
  return false;
}

const rawAnswer = (status: number, code: string, detail: string) => {
  const body = JSON.stringify({ detail, code });
  const head = Object.entries({ Date: new Date().toUTCString(), ...refusalHeaders(Buffer.byteLength(body)) }).map(([name, value]) => `${name}: ${value}`);
  return `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\n${head.join('\r\n')}\r\n\r\n${body}`;
};

/** Requests read on each connection whose answers are not finished (pipelined ones queue theirs, in order). */
const open = new WeakMap<Socket, Map<http.ServerResponse, http.IncomingMessage>>();
/** A connection's refusal, written once the answers it waits for are finished. */
const held = new WeakMap<Socket, { answer: string; waiting: Set<http.ServerResponse> }>();
/** Connections whose refusal is decided: nothing more is read from them. */
const refused = new WeakSet<Socket>();

/** Whether requests read on `socket` still wait for (the end of) their answers. */
export const hasUnfinishedAnswers = (socket: Socket): boolean => (open.get(socket)?.size ?? 0) > 0;
/** The answers of the requests read on `socket` that are not finished yet. */
export const unfinishedAnswers = (socket: Socket): Iterable<http.ServerResponse> => open.get(socket)?.keys() ?? [];

/** Writes a refusal (null: none can be written) and closes, also against a client that keeps its side open. */
function writeRefusal(socket: Socket, answer: string | null): void {
  if (answer === null || !socket.writable) return void socket.destroy();
  socket.end(answer);
  socket.destroySoon();
}

/**
 * Refuses the rest of a connection. Nothing more is read from it (a request that arrives after
 * its refusal is not served). The requests read whole before it get their answers first (RFC
 * 9112 §9.3.2: written at once, the refusal took the place of an applied write's 201); a
 * request still being read is what failed: the refusal is its answer, or, with its own answer
 * already under way, the connection just ends, as Node's own handler does.
 */
function refuseConnection(socket: Socket, answer: string): void {
  refused.add(socket);
  socket.pause();
  const answers = [...(open.get(socket) ?? [])];
  if (answers.some(([res, req]) => !req.complete && res.headersSent)) return writeRefusal(socket, null);
  const waiting = new Set(answers.filter(([, req]) => req.complete).map(([res]) => res));
  if (waiting.size) held.set(socket, { answer, waiting });
  else writeRefusal(socket, answer);
}

/** Requests whose client waits for `100 Continue` before it sends the body, with their answers. */
const awaitingContinue = new WeakMap<http.IncomingMessage, http.ServerResponse>();

/**
 * Asks the client for the body now, if it is waiting to be asked (`Expect: 100-continue`).
 * Whoever reads a request's body calls this first: a request answered without its body being
 * read (401, a 413 by its declared length) gets its final status at once, not after the client
 * sent what nobody reads (RFC 9110 §10.1.1).
 */
export function continueBody(req: http.IncomingMessage): void {
  const res = awaitingContinue.get(req);
  if (!res) return;
  awaitingContinue.delete(req);
  if (!res.headersSent) res.writeContinue();
}

/** Whether the client still holds the body back, waiting for a `100 Continue` it will not get now. */
export const bodyHeldBack = (req: http.IncomingMessage): boolean => awaitingContinue.has(req);

/**
 * The HTTP/1.1 protocol below Koa:
 * - what Node's parser refuses before Koa sees it (an unknown method, headers over 16 KiB, a
 *   malformed request line, an `Expect` other than 100-continue) is answered in the API's
 *   error shape `{detail, code}` instead of Node's empty bodies, and after the answers to the
 *   requests before it on the same connection (RFC 9112 §9.3.2: pipelined answers go in
 *   request order; written at once, the refusal took the place of an applied write's 201);
 * - `Expect: 100-continue` is answered when the body is read ({@link continueBody}), not
 *   before the request is looked at;
 * - CONNECT, which only a proxy serves, is refused in the error shape (Node just closed).
 */
export function serveHttpProtocol(server: http.Server): void {
  server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => {
    awaitingContinue.set(req, res);
    server.emit('request', req, res);
  });
  server.on('connect', (_req: http.IncomingMessage, socket: Socket) => {
    socket.on('error', () => socket.destroy());
    refuseConnection(socket, rawAnswer(405, 'method_not_allowed', 'Method "CONNECT" not allowed: this server is no proxy.'));
  });
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const socket = req.socket;
    const answers = open.get(socket) ?? open.set(socket, new Map()).get(socket)!;
    answers.set(res, req);
    res.once('close', () => {
      answers.delete(res);
      if (!answers.size) open.delete(socket);
      const refusal = held.get(socket);
      if (!refusal?.waiting.delete(res) || refusal.waiting.size) return;
      held.delete(socket);
      writeRefusal(socket, refusal.answer);
    });
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (err.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    if (refused.has(socket)) return; // this connection's refusal is already decided
    if (err.code === 'HPE_HEADER_OVERFLOW') refuseConnection(socket, rawAnswer(431, 'header_too_large', 'The request line or headers exceed 16 KiB.'));
    else if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') refuseConnection(socket, rawAnswer(408, 'request_timeout', 'The request was not received in time.'));
    else refuseConnection(socket, rawAnswer(400, 'parse_error', 'Malformed HTTP request (method, request line or headers).'));
  });
  server.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) => {
    refuse(res, 417, 'expectation_failed', `Unsupported Expect: ${req.headers.expect ?? ''} (only 100-continue is).`);
  });
}
