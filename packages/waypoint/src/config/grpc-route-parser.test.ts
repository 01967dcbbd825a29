import { FieldReader } from '@zmesh/shared';
import test from 'ava';
import { NO_QUERY, RouteTable } from '../route/route-table.js';
import { readGrpcRoute } from './grpc-route-parser.js';

const route = (rules: unknown[]) => ({ name: 'r', parentRefs: [{ kind: 'Service', name: 'svc' }], rules });

function read(rules: unknown[]) {
  const r = new FieldReader('t');
  const out = readGrpcRoute(r, route(rules), 'grpcRoutes[0]', 'ns');
  return { route: out, reasons: r.reasons };
}

test('method matches become path matches, as Istio translates GRPCRoute', (t) => {
  const cases: Array<[unknown, unknown]> = [
    [
      { service: 'pkg.Svc', method: 'Get' },
      { type: 'Exact', value: '/pkg.Svc/Get' },
    ],
    [
      { service: '.pkg.Svc', method: 'Get' },
      { type: 'Exact', value: '/pkg.Svc/Get' },
    ],
    [{ service: 'pkg.Svc' }, { type: 'PathPrefix', value: '/pkg.Svc' }],
    [{ method: 'Get' }, { type: 'RegularExpression', value: '/[^/]+/Get' }],
    [
      { type: 'RegularExpression', service: 'pkg\\..*', method: 'G.t' },
      { type: 'RegularExpression', value: '/(?:pkg\\..*)/(?:G.t)' },
    ],
    [
      { type: 'RegularExpression', method: 'Get|Put' },
      { type: 'RegularExpression', value: '/(?:[^/]+)/(?:Get|Put)' },
    ],
  ];
  for (const [method, path] of cases) {
    const { route: r, reasons } = read([{ matches: [{ method }], backendRefs: [{ name: 'svc', port: 80 }] }]);
    t.deepEqual(reasons, []);
    t.deepEqual(r?.rules[0]?.matches[0]?.path, path, JSON.stringify(method));
  }
});

test('refused with the field and the reason: no service or method, bad names, bad regex, unknown fields, a bad or HTTP-only filter', (t) => {
  const { reasons } = read([
    { matches: [{ method: {} }] },
    { matches: [{ method: { service: 'a b' } }] },
    { matches: [{ method: { method: 'Get/x' } }] },
    { matches: [{ method: { type: 'RegularExpression', service: '(' } }] },
    { matches: [{ method: { type: 'Prefix', service: 'a' } }] },
    { matches: [{ path: { value: '/x' } }] },
    { filters: [{ type: 'RequestHeaderModifier' }] },
    { matches: Array.from({ length: 65 }, () => ({ method: { service: 'a' } })) },
    { filters: [{ type: 'URLRewrite', urlRewrite: { hostname: 'x' } }] },
  ]);
  t.log(reasons);
  const want = [
    /rules\[0\]\.matches\[0\]\.method: one or both of service or method/,
    /rules\[1\]\.matches\[0\]\.method\.service: must be a service name/,
    /rules\[2\]\.matches\[0\]\.method\.method: must be a method name/,
    /rules\[3\]\.matches\[0\]\.method\.service: invalid regex/,
    /rules\[4\]\.matches\[0\]\.method\.type/,
    /rules\[5\]\.matches\[0\]/,
    /rules\[6\]\.filters/,
    /rules\[7\]\.matches: at most 64 matches/,
    /rules\[8\]\.filters\[0\]\.type: URLRewrite is not allowed here/,
  ];
  for (const w of want)
    t.true(
      reasons.some((r) => w.test(r)),
      String(w),
    );
});

test('precedence: a full method name, then the longest service, then method-only; headers break ties', (t) => {
  const { route: r } = read([
    { matches: [{ method: { method: 'Get' } }], backendRefs: [{ name: 'method-only' }] },
    { matches: [{ method: { service: 'pkg.Svc' } }], backendRefs: [{ name: 'service' }] },
    { matches: [{ method: { service: 'pkg.Svc', method: 'Get' } }], backendRefs: [{ name: 'exact' }] },
    { matches: [{ headers: [{ name: 'version', value: 'two' }] }], backendRefs: [{ name: 'v2' }] },
  ]);
  const table = new RouteTable(r ? [r] : []);
  const pick = (path: string, headers: Record<string, string> = {}) =>
    table.match({ method: 'POST', path, host: 'svc', header: (n) => headers[n], query: NO_QUERY })?.rule
      .backendRefs[0]?.name;
  t.is(pick('/pkg.Svc/Get'), 'exact');
  t.is(pick('/pkg.Svc/Put'), 'service');
  t.is(pick('/other.Svc/Get'), 'method-only');
  t.is(pick('/other.Svc/Put', { version: 'two' }), 'v2');
  t.is(pick('/other.Svc/Put'), undefined);
});

test('GRPCRoute filters: header modifiers and RequestMirror, on the rule and header modifiers on a backendRef', (t) => {
  const { route: r, reasons } = read([
    {
      matches: [{ method: { service: 'pkg.Svc' } }],
      filters: [
        { type: 'RequestHeaderModifier', requestHeaderModifier: { set: [{ name: 'X-A', value: '1' }] } },
        { type: 'ResponseHeaderModifier', responseHeaderModifier: { remove: ['x-b'] } },
        { type: 'RequestMirror', requestMirror: { backendRef: { name: 'shadow', port: 50051 } } },
      ],
      backendRefs: [
        {
          name: 'svc',
          filters: [
            { type: 'RequestHeaderModifier', requestHeaderModifier: { add: [{ name: 'x-c', value: '2' }] } },
          ],
        },
      ],
    },
  ]);
  t.deepEqual(reasons, []);
  const rule = r?.rules[0];
  t.deepEqual(rule?.filters?.requestHeaders?.set, [['x-a', '1']]);
  t.deepEqual(rule?.filters?.responseHeaders?.remove, ['x-b']);
  t.is(rule?.filters?.mirrors?.[0]?.backend.name, 'shadow');
  t.deepEqual(rule?.backendRefs[0]?.filters?.requestHeaders?.add, [['x-c', '2']]);
});
