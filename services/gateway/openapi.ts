/**
 * The OpenAPI 3.1 document served at /api/schema/, built from the same JSON Schema files
 * (schemas/*.json) that validate requests. Each file lists its operations under
 * `x-operations`; its `$defs` become components. A test checks that every route the
 * gateway serves is listed here.
 */
import { loadSchemaFiles } from './validate.js';

export interface OperationSpec {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  path: string;
  summary: string;
  tag?: string;
  /** `Def` of this file or `file.json#Def`. */
  request?: string;
  /** Success status (default 200) and its schema; `array: true` for lists. */
  status?: number;
  response?: string;
  array?: boolean;
  /** `none` for anonymous endpoints; `account`: any credential but an identity key; default: any credential. */
  auth?: 'none' | 'any' | 'account' | 'jwt' | 'admin' | 'identity';
  /** Extra documented statuses. */
  errors?: number[];
  /** A status whose body is not the common error shape: the def it may take instead. */
  errorSchemas?: Record<string, string>;
  contentType?: string;
  description?: string;
}

const prefixOf = (file: string) =>
  file
    .replace(/\.json$/, '')
    .split(/[-_.]/)
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join('');

/** `accounts.json` + `#/$defs/User` → `#/components/schemas/AccountsUser`. */
function rewriteRefs(node: unknown, file: string): unknown {
  if (Array.isArray(node)) return node.map((n) => rewriteRefs(n, file));
  if (!node || typeof node !== 'object') return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === '$ref' && typeof v === 'string') {
      const [target, pointer] = v.split('#');
      const name = pointer?.replace(/^\/\$defs\//, '') ?? '';
      out.$ref = `#/components/schemas/${prefixOf(target ? target.replace(/^.*\//, '') : file)}${name}`;
    } else if (k !== 'x-operations') {
      out[k] = rewriteRefs(v, file);
    }
  }
  return out;
}

function refOf(ref: string, file: string): string {
  const [f, def] = ref.includes('#') ? ref.split('#') : [file, ref];
  return `#/components/schemas/${prefixOf(f || file)}${def}`;
}

export function buildOpenApi(): Record<string, unknown> {
  const files = loadSchemaFiles();
  const schemas: Record<string, unknown> = {};
  const paths: Record<string, Record<string, unknown>> = {};
  for (const [file, schema] of Object.entries(files)) {
    const defs = (schema.$defs ?? {}) as Record<string, unknown>;
    for (const [name, def] of Object.entries(defs)) schemas[`${prefixOf(file)}${name}`] = rewriteRefs(def, file);
    for (const op of (schema['x-operations'] ?? []) as OperationSpec[]) {
      const params = [...op.path.matchAll(/\{(\w+)\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
      if (op.auth === 'identity') {
        params.push({ name: 'X-Service-Identity', in: 'header', required: false, schema: { type: 'string', format: 'uuid' } } as never);
      }
      const status = String(op.status ?? 200);
      const responseSchema = op.response ? (op.array ? { type: 'array', items: { $ref: refOf(op.response, file) } } : { $ref: refOf(op.response, file) }) : undefined;
      const responses: Record<string, unknown> = {
        [status]: { description: op.summary, ...(responseSchema ? { content: { [op.contentType ?? 'application/json']: { schema: responseSchema } } } : {}) },
      };
      for (const code of op.errors ?? []) {
        const common = { $ref: code === 400 ? '#/components/schemas/CommonValidationError' : '#/components/schemas/CommonError' };
        const own = op.errorSchemas?.[String(code)];
        responses[String(code)] = {
          description: code === 400 ? 'Validation error' : 'Error',
          content: { 'application/json': { schema: own ? { anyOf: [{ $ref: refOf(own, file) }, common] } : common } },
        };
      }
      const userCredentials = [{ managementKeyAuth: [] }, { jwtAuth: [] }, { cookieAuth: [] }, { basicAuth: [] }];
      const security =
        op.auth === 'none'
          ? []
          : op.auth === 'jwt'
            ? [{ jwtAuth: [] }]
            : op.auth === 'admin'
              ? [{ adminToken: [] }]
              : op.auth === 'account'
                ? userCredentials
                : [{ identityKeyAuth: [] }, ...userCredentials];
      (paths[op.path] ??= {})[op.method] = {
        summary: op.summary,
        ...(op.description ? { description: op.description } : {}),
        tags: [op.tag ?? prefixOf(file)],
        operationId: `${op.method}_${op.path.replace(/[^\w]+/g, '_').replace(/^_|_$/g, '')}`,
        ...(params.length ? { parameters: params } : {}),
        ...(op.request
          ? {
              requestBody: {
                required: true,
                content: {
                  'application/json': { schema: { $ref: refOf(op.request, file) } },
                  ...(op.tag === 'auth' ? { 'application/x-www-form-urlencoded': { schema: { $ref: refOf(op.request, file) } } } : {}),
                },
              },
            }
          : {}),
        security,
        responses,
      };
    }
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Agent Identity Service',
      version: '1.0.0',
      description: 'Identity provider for autonomous software agents: identities with email inboxes, SMS, an end-to-end-encrypted vault, and OAuth 2.0 device-flow sign-up.',
    },
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    paths: Object.fromEntries(Object.entries(paths).sort(([a], [b]) => a.localeCompare(b))),
    components: {
      schemas,
      securitySchemes: {
        identityKeyAuth: { type: 'http', scheme: 'bearer', description: 'Identity key (svc_id_...)' },
        managementKeyAuth: { type: 'http', scheme: 'bearer', description: 'Management key (svc_mgmt_...)' },
        jwtAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
        cookieAuth: { type: 'apiKey', in: 'cookie', name: 'ais_session' },
        basicAuth: { type: 'http', scheme: 'basic' },
        adminToken: { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN' },
      },
    },
  };
}
