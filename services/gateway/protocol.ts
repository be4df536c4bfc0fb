/**
 * The HTTP layer below Koa: what Node's parser refuses, and requests whose headers are
 * ambiguous, are answered here in the API's error shape `{detail, code}` (Node's own answers
 * have empty bodies, and Koa never sees these requests).
 */
import http from 'node:http';
import type { Socket } from 'node:net';

/** Headers a request may carry once: Node keeps the first of several, another hop may take the last. */
const SINGLE_HEADERS = new Set(['host', 'authorization', 'content-type']);

/**
 * RFC 9112 §3.2: an HTTP/1.1 request without a Host header is a 400, and so is a request
 * with two of a header that holds one value (Host, Authorization, Content-Type): which one
 * counts would be a guess. Answered in the error shape; true when it was.
 */
export function refuseAmbiguousHeaders(req: http.IncomingMessage, res: http.ServerResponse): boolean {
  const seen = new Set<string>();
  let problem: string | null = null;
  for (let i = 0; i < req.rawHeaders.length && !problem; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    if (!SINGLE_HEADERS.has(name)) continue;
    if (seen.has(name)) problem = `The request has more than one ${req.rawHeaders[i]} header.`;
    seen.add(name);
  }
  if (!problem && !seen.has('host') && req.httpVersion !== '1.0') problem = 'The request has no Host header.';
  if (!problem) return false;
  const body = JSON.stringify({ detail: problem, code: 'parse_error' });
  res.writeHead(400, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' });
  res.end(body);
  return true;
}

/**
 * What Node's HTTP parser refuses before Koa sees it (an unknown method, headers over 16 KiB,
 * a malformed request line, an `Expect` other than 100-continue) is answered in the API's
 * error shape `{detail, code}` instead of Node's empty bodies.
 */
export function answerProtocolErrorsInJson(server: http.Server): void {
  const raw = (status: number, code: string, detail: string) => {
    const body = JSON.stringify({ detail, code });
    return `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
  };
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    // A response already under way on this connection (a stream, a pipelined request) must
    // not get an error written into its body: the connection just ends, as Node's own handler does.
    const current = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (err.code === 'ECONNRESET' || !socket.writable || current?.headersSent) {
      socket.destroy();
      return;
    }
    if (err.code === 'HPE_HEADER_OVERFLOW') socket.end(raw(431, 'header_too_large', 'The request line or headers exceed 16 KiB.'));
    else if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') socket.end(raw(408, 'request_timeout', 'The request was not received in time.'));
    else socket.end(raw(400, 'parse_error', 'Malformed HTTP request (method, request line or headers).'));
  });
  server.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const body = JSON.stringify({ detail: `Unsupported Expect: ${req.headers.expect ?? ''} (only 100-continue is).`, code: 'expectation_failed' });
    res.writeHead(417, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' });
    res.end(body);
  });
}
