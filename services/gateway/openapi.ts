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
  /**
   * `none` for anonymous endpoints; `account`: any credential but an identity key; `jwt`: a
   * JWT alone; `human`: a person's sign-in (JWT, session cookie, HTTP basic), no API key;
   * default: any credential.
   */
  auth?: 'none' | 'any' | 'account' | 'jwt' | 'human' | 'admin' | 'identity';
  /** Extra documented statuses. */
  errors?: number[];
  /** A status whose body is not the common error shape: the def it may take instead. */
  errorSchemas?: Record<string, string>;
  contentType?: string;
  description?: string;
  /** Query parameters beyond the common ones (lists get limit/cursor, identity-scoped ones `identity`). */
  query?: { name: string; description: string; schema?: Record<string, unknown> }[];
  /** Request headers beyond the credentials and X-Service-Identity (e.g. Idempotency-Key). */
  headers?: { name: string; description: string; schema?: Record<string, unknown> }[];
  /** Another success status with the same body (e.g. an upsert's 200 beside its 201). */
  alsoStatus?: number;
  /** The request is the raw bytes of an upload, not a document. */
  rawBody?: boolean;
  /** Request media types beyond JSON (default: JSON; auth endpoints also take forms). */
  requestTypes?: string[];
  /** The success answer has no body (as 204s and redirects have none). */
  emptyBody?: boolean;
  /** A 201 that names the new resource in `Location`. */
  location?: boolean;
}

/** Query parameters of every list (DECISIONS "Wire conventions"). */
const PAGE_PARAMS = [
  { name: 'limit', in: 'query', required: false, description: 'Page size (default 50, max 200).', schema: { type: 'integer', minimum: 1, maximum: 200, default: 50 } },
  { name: 'cursor', in: 'query', required: false, description: 'Opaque cursor from the previous page\'s Link rel="next".', schema: { type: 'string' } },
];
const LINK_HEADER = { Link: { description: 'RFC 8288 `<url>; rel="next"` when more items remain.', schema: { type: 'string' } } };
const LOCATION_HEADER = { Location: { description: 'The path of the resource created.', schema: { type: 'string' } } };
const RETRY_AFTER_HEADER = { 'Retry-After': { description: 'Seconds to wait before trying again.', schema: { type: 'integer' } } };
/** 400 is a field map for validation, or `{detail, code}` for other bad requests (identity_required, parse_error). */
const BAD_REQUEST = { anyOf: [{ $ref: '#/components/schemas/CommonValidationError' }, { $ref: '#/components/schemas/CommonError' }] };

/** The body of a success answer that has no JSON Schema def, by media type. */
function untypedBody(contentType: string): Record<string, unknown> {
  if (contentType === 'application/json') return { type: 'object' };
  if (contentType.startsWith('text/')) return { type: 'string' };
  return { type: 'string', contentMediaType: contentType, contentEncoding: 'binary' };
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

/** JSON (and forms where taken); optional when the request def requires nothing (e.g. logout, device start). */
function requestBodyOf(op: OperationSpec, file: string, files: Record<string, Record<string, unknown>>): Record<string, unknown> {
  const ref = { $ref: refOf(op.request!, file) };
  const types = op.requestTypes ?? (op.tag === 'auth' ? ['application/json', 'application/x-www-form-urlencoded', 'multipart/form-data'] : ['application/json']);
  const [defFile, defName] = op.request!.includes('#') ? op.request!.split('#') : [file, op.request!];
  const owner = files[defFile];
  const def = ((owner?.$defs ?? {}) as Record<string, { required?: string[] }>)[defName];
  return { required: Boolean(def?.required?.length), content: Object.fromEntries(types.map((t) => [t, { schema: ref }])) };
}

export function buildOpenApi(): Record<string, unknown> {
  const files = loadSchemaFiles();
  const schemas: Record<string, unknown> = {};
  const paths: Record<string, Record<string, unknown>> = {};
  for (const [file, schema] of Object.entries(files)) {
    const defs = (schema.$defs ?? {}) as Record<string, unknown>;
    for (const [name, def] of Object.entries(defs)) schemas[`${prefixOf(file)}${name}`] = rewriteRefs(def, file);
    for (const op of (schema['x-operations'] ?? []) as OperationSpec[]) {
      const params: Record<string, unknown>[] = [...op.path.matchAll(/\{(\w+)\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
      if (op.auth === 'identity') {
        params.push({ name: 'X-Service-Identity', in: 'header', required: false, schema: { type: 'string', format: 'uuid' } });
        params.push({ name: 'identity', in: 'query', required: false, description: 'The identity, instead of X-Service-Identity (management keys and user tokens).', schema: { type: 'string', format: 'uuid' } });
      }
      if (op.array) params.push(...PAGE_PARAMS);
      for (const q of op.query ?? []) params.push({ name: q.name, in: 'query', required: false, description: q.description, schema: q.schema ?? { type: 'string' } });
      for (const h of op.headers ?? []) params.push({ name: h.name, in: 'header', required: false, description: h.description, schema: h.schema ?? { type: 'string' } });

      const status = String(op.status ?? 200);
      const contentType = op.contentType ?? 'application/json';
      const responseSchema = op.response
        ? op.array
          ? { type: 'array', items: { $ref: refOf(op.response, file) } }
          : { $ref: refOf(op.response, file) }
        : status === '204' || status.startsWith('3') || op.emptyBody
          ? undefined
          : untypedBody(contentType);
      const success = {
        description: op.summary,
        ...(op.array ? { headers: LINK_HEADER } : op.location ? { headers: LOCATION_HEADER } : {}),
        ...(responseSchema ? { content: { [contentType]: { schema: responseSchema } } } : {}),
      };
      const responses: Record<string, unknown> = { [status]: success };
      // The other success answers the same body; a Location names only what was created.
      if (op.alsoStatus) responses[String(op.alsoStatus)] = op.location ? { ...success, headers: undefined } : success;
      // Statuses every operation of a kind can answer: bad query/paging and bodies (400), bodies
      // over 1 MiB (413) or of a media type not taken (415); with credentials, a missing or bad
      // one (401), an identity named twice (400), and where user credentials are taken an
      // identity header naming another account's identity (403) or none (404), and HTTP Basic
      // throttled (429); the admin token is throttled too (429). Every write may find the
      // store unable to take it, or its read models late (503, with Retry-After).
      const codes = new Set(op.errors ?? []);
      if (op.array || op.request || op.auth !== 'none') codes.add(400);
      if (op.method !== 'get') codes.add(503);
      if (op.request) {
        codes.add(413);
        codes.add(415);
      }
      if (op.auth !== 'none') codes.add(401);
      if (op.auth !== 'none' && op.auth !== 'jwt' && op.auth !== 'admin') [403, 404, 429].forEach((c) => codes.add(c));
      if (op.auth === 'admin') codes.add(429);
      for (const code of [...codes].sort((a, b) => a - b)) {
        const common = code === 400 ? BAD_REQUEST : { $ref: '#/components/schemas/CommonError' };
        const own = op.errorSchemas?.[String(code)];
        responses[String(code)] = {
          description: code === 400 ? 'Validation error or bad request' : 'Error',
          ...(code === 429 || code === 503 ? { headers: RETRY_AFTER_HEADER } : {}),
          content: { 'application/json': { schema: own ? { anyOf: [{ $ref: refOf(own, file) }, common] } : common } },
        };
      }
      const signIns = [{ jwtAuth: [] }, { cookieAuth: [] }, { basicAuth: [] }];
      const userCredentials = [{ managementKeyAuth: [] }, ...signIns];
      const security =
        op.auth === 'none'
          ? []
          : op.auth === 'jwt'
            ? [{ jwtAuth: [] }]
            : op.auth === 'human'
              ? signIns
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
        ...(op.request ? { requestBody: requestBodyOf(op, file, files) } : op.rawBody ? { requestBody: { required: true, content: { '*/*': { schema: { type: 'string', contentEncoding: 'binary' } } } } } : {}),
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
