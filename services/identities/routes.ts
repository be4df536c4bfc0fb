/** HTTP surface of identities (SPEC "Identities"; DECISIONS "Auth" for the fences). */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { HttpModule } from '../gateway/app.js';
import type { Authenticator, Principal } from '../gateway/auth.js';
import { body, created, noContent, pageParams, sendPage } from '../gateway/http.js';
import { bodyWith, isTrue, validator } from '../gateway/validate.js';
import { forbidden, notFound, otherAccountsIdentity } from '../gateway/errors.js';
import { isUuid } from '../kernel/ids.js';
import type { IdentityDoc } from '../../projections/identities/index.js';
import { toIdentity, type Identities } from './service.js';

type CreateBody = { name: string; email_identifier?: string | null; provision_phone?: boolean | 'true' | 'false' | null };
type UpdateBody = { name?: string; provision_phone?: boolean | 'true' | 'false' | null };

const v = {
  create: validator<CreateBody>('identities.json#IdentityCreate'),
  put: validator<UpdateBody>('identities.json#IdentityPut'),
  patch: validator<UpdateBody>('identities.json#IdentityPatch'),
};

/**
 * A name is 1 to 150 characters after trimming (docs/IDENTITIES.md): trimmed before the schema
 * counts, unless it holds control characters (a tab or line break at an end too), which the
 * schema refuses as they are.
 */
function trimmedName(raw: unknown): unknown {
  if (raw && typeof raw === 'object' && !Array.isArray(raw) && typeof (raw as { name?: unknown }).name === 'string') {
    const name = (raw as { name: string }).name;
    if (!/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/.test(name)) return bodyWith(raw, { name: name.trim() });
  }
  return raw;
}

export function identityRoutes(deps: { identities: Identities; auth: () => Authenticator; publicUrl: string }): HttpModule {
  const { identities } = deps;

  /**
   * The identity named in the path, as the caller may see it: an identity key sees only its
   * own (another: 403); another account's identity: 403; unknown or deleted: 404.
   */
  async function visible(ctx: Context, p: Principal): Promise<IdentityDoc> {
    const id = String(ctx.params.uuid).toLowerCase();
    if (p.fencedIdentity && p.fencedIdentity !== id) throw forbidden('This identity key is fenced to another identity.');
    if (!isUuid(id)) throw notFound('Identity not found.');
    const doc = await identities.get(id);
    if (!doc) throw notFound('Identity not found.');
    if (doc.ownerPk !== p.userPk) throw otherAccountsIdentity();
    return doc;
  }

  return {
    routes(r: Router) {
      r.get('/api/identities/', async (ctx) => {
        const p = await deps.auth().principal(ctx);
        const page = pageParams(ctx);
        if (p.fencedIdentity) {
          const own = await identities.get(p.fencedIdentity);
          ctx.body = own && !page.cursor ? [toIdentity(own)] : [];
          return;
        }
        sendPage(ctx, await identities.list(p.userPk, page), toIdentity, deps.publicUrl);
      });

      r.post('/api/identities/', async (ctx) => {
        const p = await deps.auth().accountPrincipal(ctx);
        const b = v.create(trimmedName(await body(ctx)));
        const doc = await identities.create(p.userPk, { name: b.name, emailIdentifier: b.email_identifier, provisionPhone: isTrue(b.provision_phone) });
        created(ctx, toIdentity(doc), `/api/identities/${doc.id}/`);
      });

      // Before /{uuid}/: `current` is not a uuid.
      r.get('/api/identities/current/', async (ctx) => {
        const { identityId } = await deps.auth().identity(ctx);
        const doc = await identities.get(identityId);
        if (!doc) throw notFound('Identity not found.');
        ctx.body = toIdentity(doc);
      });

      r.get('/api/identities/:uuid/', async (ctx) => {
        const p = await deps.auth().principal(ctx);
        ctx.body = toIdentity(await visible(ctx, p));
      });

      const update = (validate: (data: unknown) => UpdateBody) => async (ctx: Context) => {
        const p = await deps.auth().principal(ctx);
        const doc = await visible(ctx, p);
        if (p.kind === 'identity_key') throw forbidden('An identity key cannot modify identities; use a management key or a user token.');
        const b = validate(trimmedName(await body(ctx)));
        ctx.body = toIdentity(await identities.update(doc.id, { name: b.name, provisionPhone: isTrue(b.provision_phone) }));
      };
      r.put('/api/identities/:uuid/', update(v.put));
      r.patch('/api/identities/:uuid/', update(v.patch));

      // Gives the number up (PATCH `provision_phone: false` does not: a client sending its
      // defaults would lose a number for good).
      r.delete('/api/identities/:uuid/phone/', async (ctx) => {
        const p = await deps.auth().principal(ctx);
        const doc = await visible(ctx, p);
        if (p.kind === 'identity_key') throw forbidden('An identity key cannot release phone numbers; use a management key or a user token.');
        await identities.releasePhone(doc.id);
        noContent(ctx);
      });

      r.delete('/api/identities/:uuid/', async (ctx) => {
        const p = await deps.auth().principal(ctx);
        const doc = await visible(ctx, p);
        if (p.kind === 'identity_key') throw forbidden('An identity key cannot delete identities; use a management key or a user token.');
        // After the writes scoped to it that are in flight; those arriving meanwhile find it gone.
        await deps.auth().deletingIdentity(doc.id, () => identities.remove(doc.id));
        noContent(ctx);
      });
    },
  };
}
