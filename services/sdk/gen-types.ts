/**
 * Generates services/sdk/types.gen.ts from the server's JSON Schemas (schemas/*.json), so the
 * SDK's wire types are the ones the gateway validates and publishes at /api/schema/.
 *
 * - Every `$defs` entry becomes one exported type named like its OpenAPI component
 *   (`accounts.json#/$defs/User` → `AccountsUser`, see services/gateway/openapi.ts).
 * - `Operations` maps `"METHOD /path/"` of every `x-operations` entry to its request body,
 *   response body and success status.
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
      ops.push(`  '${op.method.toUpperCase()} ${op.path}': { request: ${request}; response: ${response}; status: ${status} };`);
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
  return `${HEADER}\n${body}\n\n/** Every endpoint of the schemas' \`x-operations\`. */\nexport interface Operations {\n${ops.join('\n')}\n}\n\nexport type OperationKey = keyof Operations;\nexport type RequestOf<K extends OperationKey> = Operations[K]['request'];\nexport type ResponseOf<K extends OperationKey> = Operations[K]['response'];\n`;
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  writeFileSync(TYPES_FILE, await generateSdkTypes());
  console.log(`wrote ${path.relative(process.cwd(), TYPES_FILE)}`);
}
