/** The indexed router matches exactly what @koa/router matches, for every path shape, plus preferLiteral. */
import Router from '@koa/router';
import { IndexedRouter, preferLiteral } from '../../services/gateway/router.js';

const noop = async () => {};

function routes(r: Router): void {
  r.get('/', noop);
  r.get('/api/health/', noop);
  r.get('/api/identities/', noop);
  r.post('/api/identities/', noop);
  r.get('/api/identities/current/', noop);
  r.get('/api/identities/:uuid/', noop);
  r.delete('/api/identities/:uuid/', noop);
  r.get('/api/identities/:uuid/keys/:key/', noop);
  r.get('/device/:code', noop); // a parameter in the second segment: tested for every path
  r.get('/dashboard/', noop);
  r.get('/dashboard/identities/:id/', noop);
  r.get(/^\/legacy\/.*$/, noop); // a RegExp path
  r.get('/files/:name.txt', noop);
}

const paths = [
  '/',
  '/api/health/',
  '/api/health',
  '/API/Health/',
  '/api/identities/',
  '/api/identities/current/',
  '/api/identities/0190f1a2-0000-7000-8000-000000000000/',
  '/api/identities/abc/keys/def/',
  '/api/identities/abc/keys/',
  '/api//identities/',
  '/device/ABCD-1234',
  '/device/',
  '/dashboard',
  '/dashboard/',
  '/dashboard/identities/x/',
  '/legacy/anything/here',
  '/files/readme.txt',
  '/api/unknown/',
  '/api/',
  '/api/identities:x/',
  '',
];

const summary = (m: Router['match'] extends (...a: never[]) => infer R ? R : never) => ({
  path: m.path.map((l) => String(l.path)),
  pathAndMethod: m.pathAndMethod.map((l) => `${l.methods.join(',')} ${String(l.path)}`),
  route: m.route,
});

describe('IndexedRouter', () => {
  for (const sensitive of [false, true]) {
    it(`matches like @koa/router + preferLiteral (${sensitive ? 'case-sensitive' : 'case-insensitive'}) for every path and method`, () => {
      const stock = new Router({ sensitive });
      const indexed = new IndexedRouter({ sensitive });
      routes(stock);
      routes(indexed);
      for (const path of paths) {
        for (const method of ['GET', 'POST', 'DELETE', 'PATCH']) {
          expect([path, method, summary(indexed.match(path, method))]).toEqual([path, method, summary(preferLiteral(stock.match(path, method), method))]);
        }
      }
    });
  }

  it('a fixed path is never a parameter value: DELETE /api/identities/current/ is 405, not DELETE /:uuid/', () => {
    const r = new IndexedRouter();
    routes(r);
    const del = r.match('/api/identities/current/', 'DELETE');
    expect(summary(del)).toEqual({ path: ['/api/identities/current/'], pathAndMethod: [], route: false });
    expect(summary(r.match('/api/identities/current/', 'GET')).pathAndMethod).toEqual(['HEAD,GET /api/identities/current/']);
    expect(r.match('/api/identities/abc/', 'DELETE').route).toBe(true); // any other value still is one
  });

  it('sees routes added after its first match', () => {
    const r = new IndexedRouter();
    r.get('/api/a/', noop);
    expect(r.match('/api/b/', 'GET').route).toBe(false);
    r.get('/api/b/', noop);
    expect(r.match('/api/b/', 'GET').route).toBe(true);
  });
});
