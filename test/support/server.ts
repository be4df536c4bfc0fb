/**
 * A real service for HTTP tests: the full runtime on port 0 with a fresh DATA_DIR.
 * `api()` is a small fetch wrapper; `signUp()` registers a user and returns its tokens;
 * `createIdentity()` and `compose()` make an identity and send a mail, failing loudly.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig } from '../../infra/config.js';
import { startRuntime, type Runtime } from '../../infra/runtime.js';

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
  body?: unknown;
  form?: Record<string, string>;
  headers?: Record<string, string>;
  identity?: string;
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

let counter = 0;

export async function startTestServer(env: Record<string, string> = {}): Promise<TestServer> {
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
    runtime = await startRuntime(config, { logger: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }) });
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true }); // a test of a refused configuration leaves nothing behind
    throw err;
  }
  const url = runtime.url;

  async function api(method: string, p: string, o: ApiOptions = {}): Promise<ApiResponse> {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    if (o.token) headers.authorization = `Bearer ${o.token}`;
    if (o.identity) headers['x-service-identity'] = o.identity;
    let payload: string | undefined;
    if (o.form) {
      headers['content-type'] = 'application/x-www-form-urlencoded';
      payload = new URLSearchParams(o.form).toString();
    } else if (o.body !== undefined) {
      headers['content-type'] ??= 'application/json';
      payload = typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
    }
    const res = await fetch(url + p, { method, headers, body: payload });
    const text = await res.text();
    let body: unknown = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = text;
    }
    return { status: res.status, headers: res.headers, body, text };
  }

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
