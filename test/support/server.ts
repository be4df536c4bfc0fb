/**
 * A real service for HTTP tests: the full runtime on port 0 with a fresh DATA_DIR.
 * `api()` is a small fetch wrapper (`apiClient`, also for a service started otherwise); `signUp()` registers a user and returns its tokens;
 * `createIdentity()` and `compose()` make an identity and send a mail, failing loudly.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig } from '../../infra/config.js';
import { startRuntime, type Runtime, type StartOptions } from '../../infra/runtime.js';

export interface TestServer {
  url: string;
  runtime: Runtime;
  dataDir: string;
  api: (method: string, path: string, options?: ApiOptions) => Promise<ApiResponse>;
  signUp: (name?: string) => Promise<{ access: string; refresh: string; user: { pk: number; username: string; email: string }; password: string }>;
  /** POST /api/identities/ with `token`; the Identity (anything but a 201 throws). */
  createIdentity: (token: string, name: string, extra?: Record<string, unknown>) => Promise<{ uuid: string; inbox: string; name: string; phone: string | null }>;
  /** POST /api/email-messages/compose/ from identity `from` of the account `token`; the message (anything but a 201 throws). */
  compose: (token: string, from: string, mail: { to: string; subject: string; body: string; cc?: string; bcc?: string }) => Promise<any>;
  close: () => Promise<void>;
}

export interface ApiOptions {
  token?: string;
  /** Sent as JSON (a string as it is). */
  body?: unknown;
  form?: Record<string, string>;
  /** Bytes sent as they are (with whatever content type `headers` give). */
  raw?: Buffer;
  headers?: Record<string, string>;
  identity?: string;
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  /** The answer as JSON when it is JSON, else its text. */
  body: any;
  text: string;
  bytes: Buffer;
}

/** A fetch wrapper for the service at `base()` (asked on every call: a restarted service moves); a path may also be a whole URL. */
export function apiClient(base: () => string): (method: string, path: string, options?: ApiOptions) => Promise<ApiResponse> {
  return async (method, p, o = {}) => {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    if (o.token) headers.authorization = `Bearer ${o.token}`;
    if (o.identity) headers['x-service-identity'] = o.identity;
    let payload: string | Buffer | undefined;
    if (o.form) {
      headers['content-type'] = 'application/x-www-form-urlencoded';
      payload = new URLSearchParams(o.form).toString();
    } else if (o.raw) {
      payload = o.raw;
    } else if (o.body !== undefined) {
      headers['content-type'] ??= 'application/json';
      payload = typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
    }
    const res = await fetch(/^https?:/.test(p) ? p : base() + p, { method, headers, body: payload });
    const bytes = Buffer.from(await res.arrayBuffer());
    const text = new TextDecoder().decode(bytes); // as res.text() reads it
    let body: unknown = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = text;
    }
    return { status: res.status, headers: res.headers, body, text, bytes };
  };
}

let counter = 0;

export async function startTestServer(env: Record<string, string> = {}, options: Pick<StartOptions, 'extraContexts' | 'logger'> = {}): Promise<TestServer> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'ais-test-'));
  let runtime: Runtime;
  try {
    const config = loadConfig({
      PORT: '0',
      SMTP_PORT: '0',
      DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
      PASSWORD_HASH_MEMORY_KIB: '19456',
      ...env,
    });
    runtime = await startRuntime(config, { logger: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }), ...options });
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true }); // a test of a refused configuration leaves nothing behind
    throw err;
  }
  const url = runtime.url;

  const api = apiClient(() => url);

  async function signUp(name?: string) {
    const username = name ?? `user${process.pid}x${++counter}x${Date.now() % 100000}`;
    const password = `pw-${username}-Secret1`;
    const res = await api('POST', '/api/auth/social/', {
      body: { username, email: `${username}@example.com`, password1: password, password2: password },
    });
    if (res.status !== 201) throw new Error(`signUp failed: ${res.status} ${res.text}`);
    return { ...res.body, password };
  }

  async function createIdentity(token: string, name: string, extra: Record<string, unknown> = {}) {
    const res = await api('POST', '/api/identities/', { token, body: { name, ...extra } });
    if (res.status !== 201) throw new Error(`createIdentity failed: ${res.status} ${res.text}`);
    return res.body;
  }

  async function compose(token: string, from: string, mail: { to: string; subject: string; body: string; cc?: string; bcc?: string }) {
    const res = await api('POST', '/api/email-messages/compose/', { token, identity: from, body: mail });
    if (res.status !== 201) throw new Error(`compose failed: ${res.status} ${res.text}`);
    return res.body;
  }

  return {
    url,
    runtime,
    dataDir,
    api,
    signUp,
    createIdentity,
    compose,
    close: async () => {
      await runtime.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
