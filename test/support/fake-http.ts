/**
 * A stand-in HTTP service for tests (another service the CLI may talk to, a provider's REST
 * API): `handler` gets each request with its whole body as text, and answers with `json`.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export type FakeHandler = (req: http.IncomingMessage, body: string, res: http.ServerResponse) => void;

export async function fakeHttp(handler: FakeHandler): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => handler(req, body, res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Answers `value` as JSON with `status`. */
export function json(res: http.ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
}
