/**
 * services/sdk/types.gen.ts is generated from schemas/*.json: it must be up to date (a schema
 * change without `npm run gen:sdk-types` fails here), name its types like the OpenAPI
 * components, and type every x-operation.
 */
import { readFileSync } from 'node:fs';
import { generateSdkTypes, loadSchemas, type SchemaOperation, TYPES_FILE, typeNameOf } from '../../services/sdk/gen-types.js';
import { buildOpenApi } from '../../services/gateway/openapi.js';
import type { IdentitiesIdentity, Operations, RequestOf, ResponseOf } from '../../services/sdk/types.gen.js';

const committed = readFileSync(TYPES_FILE, 'utf8');
const schemas = loadSchemas();

const exported = (name: string) => new RegExp(`^export (interface|type) ${name}\\b`, 'm').test(committed);

describe('services/sdk/types.gen.ts', () => {
  it('is what the generator makes from schemas/*.json today (run `npm run gen:sdk-types`)', async () => {
    const fresh = await generateSdkTypes(schemas);
    expect(fresh).toBe(committed);
  }, 30_000);

  it('says it is generated and how to regenerate it', () => {
    expect(committed.slice(0, 300)).toMatch(/GENERATED FILE: DO NOT EDIT/);
    expect(committed.slice(0, 300)).toContain('npm run gen:sdk-types');
  });

  it('changes when a schema changes (so the staleness check can fail)', async () => {
    const changed = structuredClone(schemas);
    const defs = changed['identities.json'].$defs as Record<string, { properties: Record<string, unknown>; required: string[] }>;
    defs.Identity.properties.nickname = { type: 'string' };
    defs.Identity.required.push('nickname');
    const out = await generateSdkTypes(changed);
    expect(out).not.toBe(committed);
    expect(out).toMatch(/export interface IdentitiesIdentity \{[^}]*\n {2}nickname: string;/);
  }, 30_000);

  it('has one type per schema def, named like the OpenAPI components', () => {
    const components = Object.keys((buildOpenApi().components as { schemas: Record<string, unknown> }).schemas);
    expect(components.length).toBeGreaterThan(50);
    expect(components.filter((name) => !exported(name))).toEqual([]);
    for (const name of ['AccountsUser', 'IdentitiesIdentity', 'CommonError', 'KeysWhoami', 'MailEmailMessage', 'VaultSecret']) {
      expect(components).toContain(name);
    }
    // A cross-file $ref resolves to the other file's type, not a copy.
    expect(committed).toMatch(/export interface DeviceDeviceToken \{[^}]*\n {2}user: AccountsUser;/);
  });

  it('types the request and response of every x-operation', () => {
    const ops = [...committed.matchAll(/^ {2}'([A-Z]+ [^']+)': \{ request: (\w+); response: ([\w[\]]+); status: (\d+) \};$/gm)];
    const table = new Map(ops.map((m) => [m[1], { request: m[2], response: m[3], status: Number(m[4]) }]));
    let count = 0;
    for (const [file, schema] of Object.entries(schemas)) {
      for (const op of (schema['x-operations'] ?? []) as SchemaOperation[]) {
        count++;
        const key = `${op.method.toUpperCase()} ${op.path}`;
        const entry = table.get(key);
        expect({ key, found: !!entry }).toEqual({ key, found: true });
        const request = op.request ? typeNameOf(op.request, file) : 'undefined';
        const response = op.response ? `${typeNameOf(op.response, file)}${op.array ? '[]' : ''}` : undefined;
        expect({ key, request: entry!.request }).toEqual({ key, request });
        if (response) expect({ key, response: entry!.response }).toEqual({ key, response });
        else expect({ key, response: ['null', 'unknown'].includes(entry!.response) }).toEqual({ key, response: true });
        expect({ key, status: entry!.status }).toEqual({ key, status: op.status ?? 200 });
        if (op.request) expect(exported(request)).toBe(true);
        if (op.response) expect(exported(typeNameOf(op.response, file))).toBe(true);
      }
    }
    expect(table.size).toBe(count);
    expect(count).toBeGreaterThan(60);
  });

  it('gives usable types (checked by tsc)', () => {
    const list: ResponseOf<'GET /api/identities/'> = [];
    const created: IdentitiesIdentity = { uuid: 'u', name: 'n', inbox: 'n@x', phone: null, created_dt: '2026-01-01T00:00:00.000Z' };
    list.push(created);
    const body: RequestOf<'POST /api/identities/'> = { name: 'bot', provision_phone: false };
    const none: Operations['DELETE /api/identities/{uuid}/']['response'] = null;
    expect([list.length, body.name, none]).toEqual([1, 'bot', null]);
  });
});
