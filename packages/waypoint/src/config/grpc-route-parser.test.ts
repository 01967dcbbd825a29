import { FieldReader } from '@zmesh/shared';
import test from 'ava';
import { RouteTable } from '../route/route-table.js';
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

test('refused with the field and the reason: no service or method, bad names, bad regex, unknown fields, filters for now', (t) => {
  const { reasons } = read([
    { matches: [{ method: {} }] },
    { matches: [{ method: { service: 'a b' } }] },
    { matches: [{ method: { method: 'Get/x' } }] },
    { matches: [{ method: { type: 'RegularExpression', service: '(' } }] },
    { matches: [{ method: { type: 'Prefix', service: 'a' } }] },
    { matches: [{ path: { value: '/x' } }] },
    { filters: [{ type: 'RequestHeaderModifier' }] },
    { matches: Array.from({ length: 65 }, () => ({ method: { service: 'a' } })) },
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
    table.match({ method: 'POST', path, host: 'svc', header: (n) => headers[n] })?.rule.backendRefs[0]?.name;
  t.is(pick('/pkg.Svc/Get'), 'exact');
  t.is(pick('/pkg.Svc/Put'), 'service');
  t.is(pick('/other.Svc/Get'), 'method-only');
  t.is(pick('/other.Svc/Put', { version: 'two' }), 'v2');
  t.is(pick('/other.Svc/Put'), undefined);
});
