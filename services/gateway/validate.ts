/**
 * Request validation against the JSON Schema 2020-12 files in schemas/. The same files
 * feed the OpenAPI document (services/gateway/openapi.ts), so what is validated is what is
 * published. Errors come out in the spec's validation shape: `{field: [messages]}`.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { badRequest, type FieldErrors } from './errors.js';

// ajv-formats is CommonJS; under some loaders its default export arrives wrapped.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (ajv: Ajv2020) => void;

export const SCHEMA_BASE = 'https://agent-identity.dev/schemas/';
export const SCHEMAS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../schemas');

/** Every schema file, parsed: `{ 'accounts.json': {...} }`. */
export function loadSchemaFiles(dir = SCHEMAS_DIR): Record<string, Record<string, unknown>> {
  const files: Record<string, Record<string, unknown>> = {};
  for (const name of readdirSync(dir).filter((f) => f.endsWith('.json')).sort()) {
    files[name] = JSON.parse(readFileSync(path.join(dir, name), 'utf8'));
  }
  return files;
}

/**
 * Two validators over the same schemas. Form fields and query parameters are text, so they
 * are coerced ("42" → 42, "true" → true). A JSON body already has types: it is validated
 * as sent, so `{"name": 123}`, `{"read": null}` or `{"subject": true}` answer 400 instead
 * of turning into "123", false and "true".
 */
function createAjv(coerceTypes: boolean): Ajv2020 {
  // allowUnionTypes: a field may take several JSON types (mail recipients: a string or an array).
  const ajv = new Ajv2020({ allErrors: true, coerceTypes, strict: true, allowUnionTypes: true, useDefaults: true, verbose: true });
  addFormats(ajv);
  // Optional human message for a `pattern` or `format` failure; also shown in the OpenAPI document.
  ajv.addKeyword({ keyword: 'x-message', schemaType: 'string' });
  ajv.addKeyword({ keyword: 'example' });
  // The operations a schema file documents (read by services/gateway/openapi.ts).
  ajv.addKeyword({ keyword: 'x-operations', schemaType: 'array' });
  for (const schema of Object.values(loadSchemaFiles())) ajv.addSchema(schema);
  return ajv;
}
const coercing = createAjv(true);
const asTyped = createAjv(false);

/** Request bodies parsed from JSON (services/gateway/body.ts marks them). */
const jsonBodies = new WeakSet<object>();
/** Marks `body` as parsed from JSON: its values are validated with their JSON types. */
export function markJsonBody<T extends object>(body: T): T {
  jsonBodies.add(body);
  return body;
}
/**
 * A copy of a request body with some fields changed (a name trimmed before the schema counts
 * it), read as the body was: a JSON body keeps its JSON types (a plain spread lost the mark,
 * and `{"password1": 1}` was coerced to "1").
 */
export function bodyWith(raw: object, changes: Record<string, unknown>): object {
  const copy = { ...raw, ...changes };
  return jsonBodies.has(raw) ? markJsonBody(copy) : copy;
}

/**
 * A flag whose schema took the spellings of Django REST framework's BooleanField (forms;
 * fields whose type the spec leaves open): JSON true or 1, or its texts (t, y, yes, true, on, 1
 * in the cases DRF lists: true, True, TRUE ...); the false ones likewise.
 */
export const isTrue = (value: unknown): boolean => value === true || value === 1 || (typeof value === 'string' && TRUE_TEXTS.has(value.toLowerCase()));

/** The texts of Django REST framework's BooleanField, lower-cased (query flags read them too). */
export const TRUE_TEXTS: ReadonlySet<string> = new Set(['t', 'y', 'true', '1', 'yes', 'on']);
export const FALSE_TEXTS: ReadonlySet<string> = new Set(['f', 'n', 'false', '0', 'no', 'off']);

const compiled = new Map<string, ValidateFunction>();

/**
 * The request field an error belongs to (the top-level name: DECISIONS' `{field: [messages]}`,
 * what a client maps to its form), and where inside it, for an error deeper down: `to[1]`
 * for a list's second item.
 */
function placeOf(err: ErrorObject): { field: string; inside: string } {
  const path = err.instancePath.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (err.keyword === 'required') path.push((err.params as { missingProperty: string }).missingProperty);
  const [field, ...rest] = path;
  if (field === undefined) return { field: 'non_field_errors', inside: '' };
  return { field, inside: rest.length ? field + rest.map((p) => (/^\d+$/.test(p) ? `[${p}]` : `.${p}`)).join('') : '' };
}

const TYPE_WORDS: Record<string, string> = { string: 'a string', array: 'a list', object: 'an object', integer: 'an integer', number: 'a number', boolean: 'a boolean', null: 'null' };
/** `["array", "string", "null"]` → "a list, a string or null". */
const oneOfTypes = (types: string[]) => {
  const words = types.map((t) => TYPE_WORDS[t] ?? t);
  return words.length > 1 ? `${words.slice(0, -1).join(', ')} or ${words[words.length - 1]}` : words[0];
};

function messageOf(err: ErrorObject): string {
  // A null where the field takes none: said alike for every field (a flag's spellings included).
  if (err.data === null && (err.keyword === 'type' || err.keyword === 'enum')) return 'This field may not be null.';
  const custom = (err.parentSchema as Record<string, unknown> | undefined)?.['x-message'];
  if (typeof custom === 'string' && ['pattern', 'format', 'enum'].includes(err.keyword)) return custom;
  const p = err.params as Record<string, unknown>;
  switch (err.keyword) {
    case 'required':
      return 'This field is required.';
    case 'maxLength':
      return `Ensure this field has no more than ${p.limit} characters.`;
    case 'minLength':
      return p.limit === 1 ? 'This field may not be blank.' : `Ensure this field has at least ${p.limit} characters.`;
    case 'maxItems':
      return `Ensure this field has no more than ${p.limit} elements.`;
    case 'minItems':
      return `Ensure this field has at least ${p.limit} elements.`;
    case 'maximum':
      return `Ensure this value is less than or equal to ${p.limit}.`;
    case 'minimum':
      return `Ensure this value is greater than or equal to ${p.limit}.`;
    case 'format':
      if (p.format === 'email') return 'Enter a valid email address.';
      if (p.format === 'uuid') return 'Must be a valid UUID.';
      if (p.format === 'date-time') return 'Enter a valid ISO 8601 date-time.';
      return `Enter a valid ${p.format}.`;
    case 'type': {
      // The value is not null, so a null the field also takes is no help in saying what it wants.
      const types = String(p.type).split(',').filter((t) => t !== 'null');
      if (types.includes('boolean')) return 'Must be a valid boolean.';
      if (types.length === 2 && types.includes('string') && types.includes('array')) return 'Not a valid string or list of strings.';
      if (types.length > 1) return `Must be ${oneOfTypes(types)}.`;
      if (types[0] === 'string') return 'Not a valid string.';
      if (types[0] === 'integer') return 'A valid integer is required.';
      if (types[0] === 'array') return 'Expected a list of items.';
      if (types[0] === 'object') return 'Expected an object.';
      return `Must be ${oneOfTypes(types)}.`;
    }
    case 'enum':
      return `Must be one of: ${(p.allowedValues as unknown[]).join(', ')}.`;
    case 'const':
      return `Must be ${JSON.stringify(p.allowedValue)}.`;
    case 'pattern':
      return 'Enter a valid value.';
    default:
      return err.message ?? 'Invalid value.';
  }
}

/** Messages said per field: a list of a thousand bad items needs no thousand messages to be fixed. */
const MESSAGES_PER_FIELD = 20;

/** Turns ajv errors into `{field: [messages]}`, one message per field and rule. */
export function toFieldErrors(errors: ErrorObject[]): FieldErrors {
  const out: FieldErrors = {};
  const said = new Map<string, Set<string>>();
  for (const err of errors) {
    if (['anyOf', 'oneOf', 'if', 'not'].includes(err.keyword)) continue; // summaries of errors already listed
    const { field, inside } = placeOf(err);
    const msg = inside ? `${inside}: ${messageOf(err)}` : messageOf(err);
    const messages = said.get(field) ?? said.set(field, new Set()).get(field)!;
    if (messages.size >= MESSAGES_PER_FIELD || messages.has(msg)) continue;
    messages.add(msg);
    (out[field] ??= []).push(msg);
  }
  if (Object.keys(out).length === 0) out.non_field_errors = ['Invalid input.'];
  return out;
}

/**
 * The `maxLength` of `file.json#Name` (as {@link validator} names it), from the schemas the
 * validators were compiled from: a page's field takes exactly what the API takes.
 */
export function maxLengthOf(ref: string): number {
  const [file, name] = ref.split('#');
  const max = (asTyped.getSchema(`${SCHEMA_BASE}${file}#/$defs/${name}`)?.schema as { maxLength?: unknown } | undefined)?.maxLength;
  if (typeof max !== 'number') throw new Error(`schemas/${file}: $defs.${name} has no maxLength`);
  return max;
}

/**
 * Validator for `file.json#/$defs/Name` (written `file.json#Name` for short), compiled when
 * it is made (at start), so a schema the strict compiler refuses stops the service from
 * starting instead of answering 500 to the first request that needs it.
 */
export function validator<T>(ref: string, options: { allowNul?: boolean } = {}): (data: unknown) => T {
  const [file, name] = ref.split('#');
  const fullRef = `${SCHEMA_BASE}${file}#/$defs/${name}`;
  const compile = (ajv: Ajv2020, key: string) => {
    let fn = compiled.get(key);
    if (!fn) {
      fn = ajv.getSchema(fullRef);
      if (!fn) throw new Error(`unknown schema ${fullRef}`);
      compiled.set(key, fn);
    }
    return fn;
  };
  const forJson = compile(asTyped, `typed ${fullRef}`);
  const forText = compile(coercing, fullRef);
  const fields = fieldsOf(forJson.schema, fullRef);
  const lists = listLimitsOf(fields);
  const numbers = numberTextsOf(fields);
  return (data: unknown) => {
    refuseLongLists(data, lists);
    const json = typeof data === 'object' && data !== null && jsonBodies.has(data);
    const fn = json ? forJson : forText;
    // Validate a copy: coercion and defaults must not mutate the caller's object.
    const copy = data && typeof data === 'object' ? structuredClone(data) : data;
    if (!json) refuseLooseNumbers(copy, numbers);
    if (!fn(copy)) throw badRequest(toFieldErrors(fn.errors ?? []));
    if (!options.allowNul) {
      const nul = fieldsWithNul(copy);
      if (nul.length) throw badRequest(Object.fromEntries(nul.map((f) => [f, ['Null characters are not allowed.']])));
    }
    return copy as T;
  };
}

/** Items a list field takes when its schema names no `maxItems`. */
const MAX_LIST_ITEMS = 1000;

interface FieldSchema {
  /** The JSON types the field takes. */
  types: unknown[];
  maxItems?: unknown;
}

/** The top-level fields of an object schema (a `$ref`'d one read from its definition). */
function fieldsOf(schema: unknown, base: string): Map<string, FieldSchema> {
  const fields = new Map<string, FieldSchema>();
  const properties = (schema as { properties?: Record<string, { type?: unknown; maxItems?: unknown; $ref?: unknown }> }).properties ?? {};
  for (const [field, declared] of Object.entries(properties)) {
    const property = typeof declared.$ref === 'string' ? ((asTyped.getSchema(new URL(declared.$ref, base).href)?.schema ?? {}) as typeof declared) : declared;
    fields.set(field, { types: Array.isArray(property.type) ? property.type : [property.type], maxItems: property.maxItems });
  }
  return fields;
}

/** The fields that may be lists, with the items each takes. */
function listLimitsOf(fields: Map<string, FieldSchema>): Map<string, number> {
  const limits = new Map<string, number>();
  for (const [field, { types, maxItems }] of fields) if (types.includes('array')) limits.set(field, typeof maxItems === 'number' ? maxItems : MAX_LIST_ITEMS);
  return limits;
}

/**
 * A list longer than its field takes is refused before the schema walks it: with every
 * error collected, each of half a million items would make one, in seconds of the one
 * thread (Django REST framework's ListField checks its length the same way, first).
 */
function refuseLongLists(data: unknown, limits: Map<string, number>): void {
  if (data === null || typeof data !== 'object' || limits.size === 0) return;
  for (const [field, max] of limits) {
    const value = (data as Record<string, unknown>)[field];
    if (Array.isArray(value) && value.length > max) throw badRequest({ [field]: [`Ensure this field has no more than ${max} elements.`] });
  }
}

/** Text of an integer as Django REST framework's IntegerField reads it: decimal digits, a sign, a `.0`, spaces around. */
const INTEGER_TEXT = /^\s*[+-]?\d+(\.0*)?\s*$/;
/** Text of a number as its FloatField reads it: decimal, with an exponent. */
const NUMBER_TEXT = /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/;

/** The fields that take a number, with the text each reads one from. */
function numberTextsOf(fields: Map<string, FieldSchema>): Map<string, RegExp> {
  const texts = new Map<string, RegExp>();
  for (const [field, { types }] of fields) {
    if (types.includes('number')) texts.set(field, NUMBER_TEXT);
    else if (types.includes('integer')) texts.set(field, INTEGER_TEXT);
  }
  return texts;
}

/**
 * A form field is text, and ajv's coercion reads it as JavaScript does
 * (`Number(text)`): `0x10`, `1e1` and blanks became numbers, `Infinity` got past `maximum`
 * and was stored as null. Text that is no decimal number, or none a double holds, is made
 * NaN here, which the schema then refuses with the field's usual message.
 */
function refuseLooseNumbers(data: unknown, texts: Map<string, RegExp>): void {
  if (data === null || typeof data !== 'object' || texts.size === 0) return;
  const fields = data as Record<string, unknown>;
  for (const [field, text] of texts) {
    const value = fields[field];
    if (typeof value === 'string' && value !== '' && !(text.test(value) && Number.isFinite(Number(value)))) fields[field] = Number.NaN;
  }
}

/**
 * Fields whose text holds U+0000, refused as Django REST framework's CharField does: no
 * field means one, and C-based tools downstream (terminals, mail relays, logs) cut at it.
 * A provider's message (the SMS webhook) opts out: it is kept as it came.
 */
function fieldsWithNul(data: unknown): string[] {
  const holdsNul = (v: unknown): boolean =>
    typeof v === 'string' ? v.includes('\u0000') : Array.isArray(v) ? v.some(holdsNul) : v !== null && typeof v === 'object' ? Object.values(v).some(holdsNul) : false;
  if (data !== null && typeof data === 'object' && !Array.isArray(data)) return Object.entries(data).filter(([, v]) => holdsNul(v)).map(([k]) => k);
  return holdsNul(data) ? ['non_field_errors'] : [];
}
