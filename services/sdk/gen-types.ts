/**
 * Generates services/sdk/types.gen.ts from the server's JSON Schemas (schemas/*.json), so the
 * SDK's wire types are the ones the gateway validates and publishes at /api/schema/.
 *
 * - Every `$defs` entry becomes one exported type named like its OpenAPI component
 *   (`accounts.json#/$defs/User` → `AccountsUser`, see services/gateway/openapi.ts).
 * - `Operations` maps `"METHOD /path/"` of every `x-operations` entry to its request body,
 *   response body and success status.
 * - `ANSWER_SHAPES`, the one runtime value: for every operation answering JSON, whether it is
 *   a list, and the first field its object (each item of a list) is required to have, the one
 *   that names it (`uuid`, `access`, `detail`); for every operation answering no body (204,
 *   `emptyBody`), `{ none: true }`. The SDK tells an answer of this API from one of something
 *   else at that address by them (services/sdk/client.ts). One field, not all: a field added
 *   in a later version must not make this SDK refuse an older service.
 *
 * Run `npm run gen:sdk-types` after changing a schema; test/unit/sdk-types.unit.test.ts fails
 * while the committed file is stale.
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { compile, type JSONSchema } from 'json-schema-to-typescript';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const SCHEMAS_DIR = path.resolve(HERE, '../../schemas');
export const TYPES_FILE = path.join(HERE, 'types.gen.ts');

type Json = Record<string, unknown>;

export interface SchemaOperation {
  method: string;
  path: string;
  request?: string;
  response?: string;
  array?: boolean;
  status?: number;
  contentType?: string;
  /** The success answer has no body (a 200 that says nothing, as a 204). */
  emptyBody?: boolean;
}

/** Same as `prefixOf` in services/gateway/openapi.ts: `accounts.json` → `Accounts`. */
export const prefixOf = (file: string): string =>
  file
    .replace(/\.json$/, '')
    .split(/[-_.]/)
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join('');

/** The generated type name of `Def` (in `file`) or of `other.json#Def`. */
export function typeNameOf(ref: string, file: string): string {
  const [f, def] = ref.includes('#') ? ref.split('#') : [file, ref];
  return `${prefixOf(f || file)}${def}`;
}

export function loadSchemas(dir = SCHEMAS_DIR): Record<string, Json> {
  const files: Record<string, Json> = {};
  for (const name of readdirSync(dir).filter((f) => f.endsWith('.json')).sort()) {
    files[name] = JSON.parse(readFileSync(path.join(dir, name), 'utf8')) as Json;
  }
  return files;
}

/**
 * A def with every `$ref` pointed at the merged `$defs` (`common.json#/$defs/Error` →
 * `#/$defs/CommonError`), and without `title`s, which would rename the generated types.
 */
function localize(node: unknown, file: string): unknown {
  if (Array.isArray(node)) return node.map((n) => localize(n, file));
  if (!node || typeof node !== 'object') return node;
  const out: Json = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === '$ref' && typeof v === 'string') {
      const [target, pointer = ''] = v.split('#');
      if (!pointer.startsWith('/$defs/')) throw new Error(`${file}: unsupported $ref ${v}`);
      out.$ref = `#/$defs/${prefixOf(target ? target.replace(/^.*\//, '') : file)}${pointer.slice('/$defs/'.length)}`;
    } else if (k !== 'title' && k !== 'x-operations') {
      out[k] = localize(v, file);
    }
  }
  return out;
}

/**
 * The fields an object of `def` always has (its `required`, with those of every `allOf` part,
 * `$ref`s followed), or null when it is no object.
 */
function requiredOf(def: unknown, defs: Json): string[] | null {
  const d = def as { $ref?: string; type?: unknown; required?: string[]; allOf?: unknown[] };
  if (d.$ref) return requiredOf(defs[d.$ref.slice('#/$defs/'.length)], defs);
  if (d.allOf) {
    const parts = d.allOf.map((p) => requiredOf(p, defs));
    return parts.some((p) => p === null) ? null : [...new Set(parts.flatMap((p) => p!))];
  }
  return d.type === 'object' ? [...(d.required ?? [])] : null;
}

const HEADER = `/**
 * GENERATED FILE: DO NOT EDIT. Regenerate with \`npm run gen:sdk-types\`
 * (services/sdk/gen-types.ts) from schemas/*.json.
 *
 * One type per schema \`$defs\` entry, named like its OpenAPI component
 * (\`accounts.json#/$defs/User\` → \`AccountsUser\`), and \`Operations\`: every endpoint of the
 * schemas' \`x-operations\`, keyed by \`"METHOD /path/"\`, with its request body (\`undefined\`:
 * none), response body (\`null\`: none, \`unknown\`: not described; non-JSON bodies are
 * typed by their def too, e.g. an HTML page as \`string\`) and status.
 */
/* eslint-disable */
`;

/** The whole of types.gen.ts, from the schema files. */
export async function generateSdkTypes(files: Record<string, Json> = loadSchemas()): Promise<string> {
  const defs: Json = {};
  const names: string[] = [];
  const ops: string[] = [];
  const shapes: string[] = [];
  for (const [file, schema] of Object.entries(files)) {
    for (const [name, def] of Object.entries((schema.$defs ?? {}) as Json)) {
      const full = `${prefixOf(file)}${name}`;
      if (full in defs) throw new Error(`duplicate type name ${full} (${file})`);
      defs[full] = localize(def, file);
      names.push(full);
    }
  }
  for (const [file, schema] of Object.entries(files)) {
    for (const op of (schema['x-operations'] ?? []) as SchemaOperation[]) {
      const check = (ref: string) => {
        const name = typeNameOf(ref, file);
        if (!(name in defs)) throw new Error(`${file}: ${op.method} ${op.path} names an unknown def ${ref}`);
        return name;
      };
      const status = op.status ?? 200;
      const request = op.request ? check(op.request) : 'undefined';
      const noBody = status === 204 || (status >= 300 && status < 400);
      const response = op.response ? `${check(op.response)}${op.array ? '[]' : ''}` : noBody ? 'null' : 'unknown';
      const key = `'${op.method.toUpperCase()} ${op.path}'`;
      ops.push(`  ${key}: { request: ${request}; response: ${response}; status: ${status} };`);
      if (op.response && (op.contentType ?? 'application/json') === 'application/json') {
        const field = requiredOf(defs[check(op.response)], defs)?.[0];
        if (field) shapes.push(`  ${key}: { list: ${!!op.array}, field: '${field}' },`);
      } else if (!op.response && !op.contentType && (status === 204 || op.emptyBody)) {
        shapes.push(`  ${key}: { none: true },`);
      }
    }
  }
  // One root whose `$defs` are every file's defs; the root itself is dropped below.
  const root = { $defs: defs, type: 'object', properties: Object.fromEntries(names.map((n) => [n, { $ref: `#/$defs/${n}` }])), additionalProperties: false } as JSONSchema;
  const compiled = await compile(root, 'SdkTypesRoot', {
    bannerComment: '',
    additionalProperties: false,
    unreachableDefinitions: true,
    declareExternallyReferenced: true,
    strictIndexSignatures: false,
    format: true,
    style: { singleQuote: true, printWidth: 140 },
    $refOptions: { resolve: { external: false } },
  });
  const body = compiled
    .replace(/export interface SdkTypesRoot \{[\s\S]*?\n\}\n/, '')
    .replace(/\n \*\n \* This interface was referenced by `SdkTypesRoot`'s JSON-Schema\n \* via the `definition` "\w+"\./g, '')
    .replace(/\/\*\*\n \* This interface was referenced by `SdkTypesRoot`'s JSON-Schema\n \* via the `definition` "\w+"\.\n \*\/\n/g, '')
    .trim();
  if (body.includes('SdkTypesRoot')) throw new Error('json-schema-to-typescript output changed shape; update gen-types.ts');
  for (const n of names) {
    if (!new RegExp(`^export (interface|type) ${n}\\b`, 'm').test(body)) throw new Error(`no type generated for ${n}`);
  }
  return (
    `${HEADER}\n${body}\n\n/** Every endpoint of the schemas' \`x-operations\`. */\nexport interface Operations {\n${ops.join('\n')}\n}\n\nexport type OperationKey = keyof Operations;\nexport type RequestOf<K extends OperationKey> = Operations[K]['request'];\nexport type ResponseOf<K extends OperationKey> = Operations[K]['response'];\n` +
    `\n/** What the operations of \`Operations\` answer: a list or one object, and the field naming its object (each item of a list), the first its schema requires; or no body (\`none\`). */\nexport const ANSWER_SHAPES: Readonly<Record<string, { list: boolean; field: string } | { none: true }>> = {\n${shapes.join('\n')}\n};\n`
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  writeFileSync(TYPES_FILE, await generateSdkTypes());
  console.log(`wrote ${path.relative(process.cwd(), TYPES_FILE)}`);
}
