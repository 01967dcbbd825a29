/**
 * The Gateway API conformance expectations for HTTPRoute that apply to a mesh, ported as
 * data: each suite is one upstream test (kubernetes-sigs/gateway-api
 * `conformance/tests/mesh/*.go` and `conformance/tests/httproute-*.go`, with their YAML), its
 * route in zmesh's waypoint form, and each request with the backend, status, and headers
 * the upstream test expects. The upstream infra-backend-v1/v2/v3 are the fixture's
 * server-v1/server-v2/server-v3 (v3 in another-namespace, as upstream); the parent Service `echo` is `server`. The facts are the
 * upstream's; the table and runner are ours (test/httproute-conformance.test.ts), and the
 * cases left out are in SKIPPED with the reason. docs/gateway-api-conformance.md lists both.
 */

export type Backend = 'server-v1' | 'server-v2' | 'server-v3';

export interface ConformanceCase {
  request: {
    path: string;
    method?: string;
    /** Host header; default the service's name, as the upstream mesh client sends `echo`. */
    host?: string;
    headers?: Record<string, string>;
    /** Response headers the backend is asked to send (the upstream echo server's X-Echo-Set-Header). */
    echoResponseHeaders?: Record<string, string>;
  };
  /** Default 200. */
  status?: number;
  /** The backend that must answer (none for redirects and local replies). */
  backend?: Backend;
  /** A local reply to a request that did reach this backend (a timeout). */
  reached?: Backend;
  /** A RequestMirror copy must reach each of these backends (with backendHeaders too, when given). */
  mirroredTo?: Backend | Backend[];
  /** What the backend must have received: path and query, headers, headers it must not see. */
  backendTarget?: string;
  backendHost?: string;
  backendHeaders?: Record<string, string>;
  absentBackendHeaders?: string[];
  responseHeaders?: Record<string, string>;
  absentResponseHeaders?: string[];
  /** The whole Location of a redirect. */
  location?: string;
}

export interface ConformanceSuite {
  /** The upstream test's ShortName. */
  name: string;
  /** Upstream file(s) the expectations come from. */
  upstream: string;
  /** `httpRoutes:` entries (YAML) attached to the service `server`. */
  routes: string;
  cases: ConformanceCase[];
}

const PARENT = 'parentRefs: [{ name: server, port: 80 }]';
const v1 = '[{ name: server-v1, port: 80 }]';
const v2 = '[{ name: server-v2, port: 80 }]';

/** A request answered by a redirect: no backend sees it. */
const redirect = (path: string, status: number, location: string): ConformanceCase => ({
  request: { path },
  status,
  location,
});

/** Location prefix for the default scheme, host and port (http, `server`, 80). */
const HERE = 'http://server';

/**
 * HTTPRouteRequestHeaderModifier and HTTPRouteResponseHeaderModifier are one table on two
 * sides: the same routes and rows; the request side sends the headers and checks what the
 * backend saw, the response side has the backend send them and checks the response.
 */
const HEADER_ROWS: Array<{
  path: string;
  send: Record<string, string>;
  want: Record<string, string>;
  absent?: string[];
}> = [
  {
    path: '/set',
    send: { 'Some-Other-Header': 'val' },
    want: { 'some-other-header': 'val', 'x-header-set': 'set-overwrites-values' },
  },
  {
    path: '/set',
    send: { 'Some-Other-Header': 'val', 'X-Header-Set': 'some-other-value' },
    want: { 'some-other-header': 'val', 'x-header-set': 'set-overwrites-values' },
  },
  {
    path: '/add',
    send: { 'Some-Other-Header': 'val' },
    want: { 'some-other-header': 'val', 'x-header-add': 'add-appends-values' },
  },
  {
    path: '/add',
    send: { 'Some-Other-Header': 'val', 'X-Header-Add': 'some-other-value' },
    want: { 'some-other-header': 'val', 'x-header-add': 'some-other-value,add-appends-values' },
  },
  { path: '/remove', send: { 'X-Header-Remove': 'val' }, want: {}, absent: ['x-header-remove'] },
  {
    path: '/multiple',
    send: {
      'X-Header-Set-2': 'set-val-2',
      'X-Header-Add-2': 'add-val-2',
      'X-Header-Remove-2': 'remove-val-2',
      'Another-Header': 'another-header-val',
    },
    want: {
      'x-header-set-1': 'header-set-1',
      'x-header-set-2': 'header-set-2',
      'x-header-add-1': 'header-add-1',
      'x-header-add-2': 'add-val-2,header-add-2',
      'x-header-add-3': 'header-add-3',
      'another-header': 'another-header-val',
    },
    absent: ['x-header-remove-1', 'x-header-remove-2'],
  },
  {
    path: '/case-insensitivity',
    send: {
      'x-header-set': 'original-val-set',
      'x-header-add': 'original-val-add',
      'x-header-remove': 'original-val-remove',
      'Another-Header': 'another-header-val',
    },
    want: {
      'x-header-set': 'header-set',
      'x-header-add': 'original-val-add,header-add',
      'another-header': 'another-header-val',
    },
    absent: ['x-header-remove'],
  },
];

function headerModifierSuite(side: 'request' | 'response'): ConformanceSuite {
  const type = side === 'request' ? 'RequestHeaderModifier' : 'ResponseHeaderModifier';
  const key = side === 'request' ? 'requestHeaderModifier' : 'responseHeaderModifier';
  const rule = (path: string, body: string) => `
      - matches: [{ path: { type: PathPrefix, value: ${path} } }]
        filters: [{ type: ${type}, ${key}: ${body} }]
        backendRefs: ${v1}`;
  return {
    name: side === 'request' ? 'MeshHTTPRouteRequestHeaderModifier' : 'HTTPRouteResponseHeaderModifier',
    upstream:
      side === 'request'
        ? 'conformance/tests/mesh/httproute-request-header-modifier.go, conformance/tests/httproute-request-header-modifier.{go,yaml}'
        : 'conformance/tests/httproute-response-header-modifier.{go,yaml} (mesh: MeshPorts uses it)',
    routes: `
  - name: ${side}-header-modifier
    ${PARENT}
    rules:${rule('/set', '{ set: [{ name: X-Header-Set, value: set-overwrites-values }] }')}${rule(
      '/add',
      '{ add: [{ name: X-Header-Add, value: add-appends-values }] }',
    )}${rule('/remove', '{ remove: [X-Header-Remove] }')}${rule(
      '/multiple',
      `{ set: [{ name: X-Header-Set-1, value: header-set-1 }, { name: X-Header-Set-2, value: header-set-2 }],
           add: [{ name: X-Header-Add-1, value: header-add-1 }, { name: X-Header-Add-2, value: header-add-2 }, { name: X-Header-Add-3, value: header-add-3 }],
           remove: [X-Header-Remove-1, X-Header-Remove-2] }`,
    )}${rule(
      '/case-insensitivity',
      '{ set: [{ name: X-Header-Set, value: header-set }], add: [{ name: X-Header-Add, value: header-add }], remove: [X-Header-Remove] }',
    )}
`,
    cases: HEADER_ROWS.map(
      (row): ConformanceCase =>
        side === 'request'
          ? {
              request: { path: row.path, headers: row.send },
              backend: 'server-v1',
              backendHeaders: row.want,
              ...(row.absent ? { absentBackendHeaders: row.absent } : {}),
            }
          : {
              request: { path: row.path, echoResponseHeaders: row.send },
              backend: 'server-v1',
              responseHeaders: row.want,
              ...(row.absent ? { absentResponseHeaders: row.absent } : {}),
            },
    ),
  };
}

export const SUITES: ConformanceSuite[] = [
  {
    name: 'MeshHTTPRouteMatching',
    upstream: 'conformance/tests/mesh/httproute-matching.{go,yaml}',
    routes: `
  - name: mesh-matching
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: / } }, { headers: [{ name: version, value: one }] }]
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /v2 } }, { headers: [{ name: version, value: two }] }]
        backendRefs: ${v2}
`,
    cases: [
      { request: { path: '/' }, backend: 'server-v1' },
      { request: { path: '/example' }, backend: 'server-v1' },
      { request: { path: '/', headers: { Version: 'one' } }, backend: 'server-v1' },
      { request: { path: '/v2' }, backend: 'server-v2' },
      { request: { path: '/v2/example' }, backend: 'server-v2' },
      { request: { path: '/', headers: { Version: 'two' } }, backend: 'server-v2' },
      { request: { path: '/v2/' }, backend: 'server-v2' },
      { request: { path: '/v2example' }, backend: 'server-v1' },
      { request: { path: '/foo/v2/example' }, backend: 'server-v1' },
    ],
  },
  {
    name: 'MeshHTTPRouteQueryParamMatching',
    upstream:
      'conformance/tests/mesh/httproute-query-param-matching.go; route from conformance/tests/httproute-query-param-matching.yaml without its infra-backend-v3 rules',
    routes: `
  - name: mesh-query-param-matching
    ${PARENT}
    rules:
      - matches: [{ queryParams: [{ name: animal, value: whale }] }]
        backendRefs: ${v1}
      - matches: [{ queryParams: [{ name: animal, value: dolphin }] }]
        backendRefs: ${v2}
      - matches: [{ path: { type: PathPrefix, value: /path1 }, queryParams: [{ name: animal, value: whale }] }]
        backendRefs: ${v1}
      - matches: [{ headers: [{ name: version, value: one }], queryParams: [{ name: animal, value: whale }] }]
        backendRefs: ${v2}
      - matches:
          - { path: { type: PathPrefix, value: /path3 }, queryParams: [{ name: animal, value: shark }] }
          - { path: { type: PathPrefix, value: /path4 }, headers: [{ name: version, value: three }], queryParams: [{ name: animal, value: kraken }] }
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /path5 } }]
        backendRefs: ${v1}
      - matches: [{ queryParams: [{ name: animal, value: hydra }] }]
        backendRefs: ${v2}
`,
    cases: [
      { request: { path: '/?animal=whale' }, backend: 'server-v1' },
      { request: { path: '/?animal=dolphin' }, backend: 'server-v2' },
      { request: { path: '/?animal=whale&otherparam=irrelevant' }, backend: 'server-v1' },
      { request: { path: '/?animal=dolphin&color=yellow' }, backend: 'server-v2' },
      { request: { path: '/?color=blue' }, status: 404 },
      { request: { path: '/?animal=dog' }, status: 404 },
      { request: { path: '/?animal=whaledolphin' }, status: 404 },
      { request: { path: '/' }, status: 404 },
      { request: { path: '/path1?animal=whale' }, backend: 'server-v1' },
      { request: { path: '/?animal=whale', headers: { version: 'one' } }, backend: 'server-v2' },
      { request: { path: '/path3?animal=shark' }, backend: 'server-v1' },
      { request: { path: '/path4?animal=kraken', headers: { version: 'three' } }, backend: 'server-v1' },
      { request: { path: '/?animal=shark' }, status: 404 },
      { request: { path: '/path4?animal=kraken' }, status: 404 },
      { request: { path: '/path5?animal=hydra' }, backend: 'server-v1' },
    ],
  },
  headerModifierSuite('request'),
  headerModifierSuite('response'),
  {
    name: 'MeshHTTPRouteRewritePath',
    upstream:
      'conformance/tests/mesh/httproute-rewrite-path.go, conformance/tests/httproute-rewrite-path.{go,yaml}',
    routes: `
  - name: mesh-rewrite-path
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /prefix/one } }]
        filters: [{ type: URLRewrite, urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: /one } } }]
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /strip-prefix } }]
        filters: [{ type: URLRewrite, urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: / } } }]
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /full/one } }]
        filters: [{ type: URLRewrite, urlRewrite: { path: { type: ReplaceFullPath, replaceFullPath: /one } } }]
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /full/rewrite-path-and-modify-headers } }]
        filters:
          - { type: URLRewrite, urlRewrite: { path: { type: ReplaceFullPath, replaceFullPath: /test } } }
          - type: RequestHeaderModifier
            requestHeaderModifier:
              set: [{ name: X-Header-Set, value: set-overwrites-values }]
              add: [{ name: X-Header-Add, value: header-val-1 }, { name: X-Header-Add-Append, value: header-val-2 }]
              remove: [X-Header-Remove]
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /prefix/rewrite-path-and-modify-headers } }]
        filters:
          - { type: URLRewrite, urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: /prefix } } }
          - type: RequestHeaderModifier
            requestHeaderModifier:
              set: [{ name: X-Header-Set, value: set-overwrites-values }]
              add: [{ name: X-Header-Add, value: header-val-1 }, { name: X-Header-Add-Append, value: header-val-2 }]
              remove: [X-Header-Remove]
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /host } }]
        filters: [{ type: URLRewrite, urlRewrite: { hostname: rewritten.example } }]
        backendRefs: ${v1}
`,
    cases: [
      { request: { path: '/prefix/one/two' }, backend: 'server-v1', backendTarget: '/one/two' },
      { request: { path: '/prefix/one/two?q=1' }, backend: 'server-v1', backendTarget: '/one/two?q=1' },
      { request: { path: '/strip-prefix/three' }, backend: 'server-v1', backendTarget: '/three' },
      { request: { path: '/strip-prefix' }, backend: 'server-v1', backendTarget: '/' },
      { request: { path: '/full/one/two' }, backend: 'server-v1', backendTarget: '/one' },
      {
        request: {
          path: '/full/rewrite-path-and-modify-headers/test',
          headers: {
            'X-Header-Remove': 'remove-val',
            'X-Header-Add-Append': 'append-val-1',
            'X-Header-Set': 'set-val',
          },
        },
        backend: 'server-v1',
        backendTarget: '/test',
        backendHeaders: {
          'x-header-add': 'header-val-1',
          'x-header-add-append': 'append-val-1,header-val-2',
          'x-header-set': 'set-overwrites-values',
        },
        absentBackendHeaders: ['x-header-remove'],
      },
      {
        request: {
          path: '/prefix/rewrite-path-and-modify-headers/one',
          headers: {
            'X-Header-Remove': 'remove-val',
            'X-Header-Add-Append': 'append-val-1',
            'X-Header-Set': 'set-val',
          },
        },
        backend: 'server-v1',
        backendTarget: '/prefix/one',
        backendHeaders: {
          'x-header-add': 'header-val-1',
          'x-header-add-append': 'append-val-1,header-val-2',
          'x-header-set': 'set-overwrites-values',
        },
        absentBackendHeaders: ['x-header-remove'],
      },
      // HTTPRouteRewriteHost (conformance/tests/httproute-rewrite-host.go): the backend sees the new Host.
      {
        request: { path: '/host/x' },
        backend: 'server-v1',
        backendTarget: '/host/x',
        backendHost: 'rewritten.example',
      },
    ],
  },
  {
    name: 'MeshHTTPRouteRedirectPath',
    upstream: 'conformance/tests/mesh/httproute-redirect-path.{go,yaml}',
    routes: `
  - name: mesh-redirect-path
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /original-prefix } }]
        filters: [{ type: RequestRedirect, requestRedirect: { path: { type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix } } }]
      - matches: [{ path: { type: PathPrefix, value: /full } }]
        filters: [{ type: RequestRedirect, requestRedirect: { path: { type: ReplaceFullPath, replaceFullPath: /full-path-replacement } } }]
      - matches: [{ path: { type: PathPrefix, value: /path-and-host } }]
        filters: [{ type: RequestRedirect, requestRedirect: { hostname: example.org, path: { type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix } } }]
      - matches: [{ path: { type: PathPrefix, value: /path-and-status } }]
        filters: [{ type: RequestRedirect, requestRedirect: { statusCode: 301, path: { type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix } } }]
      - matches: [{ path: { type: PathPrefix, value: /full-path-and-host } }]
        filters: [{ type: RequestRedirect, requestRedirect: { hostname: example.org, path: { type: ReplaceFullPath, replaceFullPath: /replacement-full } } }]
      - matches: [{ path: { type: PathPrefix, value: /full-path-and-status } }]
        filters: [{ type: RequestRedirect, requestRedirect: { statusCode: 301, path: { type: ReplaceFullPath, replaceFullPath: /replacement-full } } }]
`,
    cases: [
      redirect('/original-prefix/lemon', 302, `${HERE}/replacement-prefix/lemon`),
      redirect('/full/path/original', 302, `${HERE}/full-path-replacement`),
      redirect('/path-and-host', 302, 'http://example.org/replacement-prefix'),
      redirect('/path-and-status', 301, `${HERE}/replacement-prefix`),
      redirect('/full-path-and-host', 302, 'http://example.org/replacement-full'),
      redirect('/full-path-and-status', 301, `${HERE}/replacement-full`),
    ],
  },
  {
    name: 'MeshHTTPRouteRedirectHostAndStatus',
    upstream:
      'conformance/tests/mesh/httproute-redirect-host-and-status.{go,yaml} and its 303/307/308 variants (mesh/httproute-30x-redirect-host-and-status)',
    routes: `
  - name: mesh-redirect-host-and-status
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /hostname-redirect } }]
        filters: [{ type: RequestRedirect, requestRedirect: { hostname: example.org } }]
      - matches: [{ path: { type: PathPrefix, value: /host-and-status } }]
        filters: [{ type: RequestRedirect, requestRedirect: { statusCode: 301, hostname: example.org } }]
      - matches: [{ path: { type: PathPrefix, value: /host-and-see-other } }]
        filters: [{ type: RequestRedirect, requestRedirect: { statusCode: 303, hostname: example.org } }]
      - matches: [{ path: { type: PathPrefix, value: /host-and-temporary } }]
        filters: [{ type: RequestRedirect, requestRedirect: { statusCode: 307, hostname: example.org } }]
      - matches: [{ path: { type: PathPrefix, value: /host-and-permanent } }]
        filters: [{ type: RequestRedirect, requestRedirect: { statusCode: 308, hostname: example.org } }]
`,
    cases: [
      redirect('/hostname-redirect', 302, 'http://example.org/hostname-redirect'),
      redirect('/host-and-status', 301, 'http://example.org/host-and-status'),
      redirect('/host-and-see-other', 303, 'http://example.org/host-and-see-other'),
      redirect('/host-and-temporary', 307, 'http://example.org/host-and-temporary'),
      redirect('/host-and-permanent', 308, 'http://example.org/host-and-permanent'),
    ],
  },
  {
    name: 'MeshHTTPRouteRedirectPort',
    upstream: 'conformance/tests/mesh/httproute-redirect-port.{go,yaml}',
    routes: `
  - name: mesh-redirect-port
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /port } }]
        filters: [{ type: RequestRedirect, requestRedirect: { port: 8083 } }]
      - matches: [{ path: { type: PathPrefix, value: /port-and-host } }]
        filters: [{ type: RequestRedirect, requestRedirect: { hostname: example.org, port: 8083 } }]
      - matches: [{ path: { type: PathPrefix, value: /port-and-status } }]
        filters: [{ type: RequestRedirect, requestRedirect: { port: 8083, statusCode: 301 } }]
      - matches: [{ path: { type: PathPrefix, value: /port-and-temporary } }]
        filters: [{ type: RequestRedirect, requestRedirect: { port: 8083, statusCode: 307 } }]
      - matches: [{ path: { type: PathPrefix, value: /port-and-permanent } }]
        filters: [{ type: RequestRedirect, requestRedirect: { port: 8083, statusCode: 308 } }]
      - matches: [{ path: { type: PathPrefix, value: /port-and-host-and-status } }]
        filters: [{ type: RequestRedirect, requestRedirect: { port: 8083, hostname: example.org, statusCode: 302 } }]
`,
    cases: [
      redirect('/port', 302, 'http://server:8083/port'),
      redirect('/port-and-host', 302, 'http://example.org:8083/port-and-host'),
      redirect('/port-and-status', 301, 'http://server:8083/port-and-status'),
      redirect('/port-and-temporary', 307, 'http://server:8083/port-and-temporary'),
      redirect('/port-and-permanent', 308, 'http://server:8083/port-and-permanent'),
      redirect('/port-and-host-and-status', 302, 'http://example.org:8083/port-and-host-and-status'),
    ],
  },
  {
    name: 'MeshHTTPRouteSchemeRedirect',
    upstream: 'conformance/tests/mesh/httproute-redirect-scheme.{go,yaml}',
    routes: `
  - name: mesh-redirect-scheme
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /scheme } }]
        filters: [{ type: RequestRedirect, requestRedirect: { scheme: https } }]
      - matches: [{ path: { type: PathPrefix, value: /scheme-and-host } }]
        filters: [{ type: RequestRedirect, requestRedirect: { scheme: https, hostname: example.org } }]
      - matches: [{ path: { type: PathPrefix, value: /scheme-and-status } }]
        filters: [{ type: RequestRedirect, requestRedirect: { scheme: https, statusCode: 301 } }]
      - matches: [{ path: { type: PathPrefix, value: /scheme-and-host-and-status } }]
        filters: [{ type: RequestRedirect, requestRedirect: { scheme: https, hostname: example.org, statusCode: 302 } }]
`,
    cases: [
      redirect('/scheme', 302, 'https://server/scheme'),
      redirect('/scheme-and-host', 302, 'https://example.org/scheme-and-host'),
      redirect('/scheme-and-status', 301, 'https://server/scheme-and-status'),
      redirect('/scheme-and-host-and-status', 302, 'https://example.org/scheme-and-host-and-status'),
    ],
  },
  {
    name: 'HTTPRouteTimeoutRequest + HTTPRouteTimeoutBackendRequest',
    upstream:
      'conformance/tests/httproute-timeout-request.go, conformance/tests/httproute-timeout-backend-request.go (the echo delay is the fixture app’s /slow/<ms>)',
    routes: `
  - name: timeouts
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /slow }, headers: [{ name: x-timeout, value: request }] }]
        timeouts: { request: 300ms }
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /slow }, headers: [{ name: x-timeout, value: backend }] }]
        timeouts: { request: 5s, backendRequest: 300ms }
        backendRefs: ${v1}
`,
    cases: [
      { request: { path: '/slow/0', headers: { 'x-timeout': 'request' } }, backend: 'server-v1' },
      {
        request: { path: '/slow/1000', headers: { 'x-timeout': 'request' } },
        status: 504,
        reached: 'server-v1',
      },
      { request: { path: '/slow/0', headers: { 'x-timeout': 'backend' } }, backend: 'server-v1' },
      {
        request: { path: '/slow/1000', headers: { 'x-timeout': 'backend' } },
        status: 504,
        reached: 'server-v1',
      },
    ],
  },
  {
    name: 'HTTPRouteRequestMirror',
    upstream:
      'conformance/tests/httproute-request-mirror.{go,yaml} (mesh: mesh/grpcroute-request-mirror); the mirror backend is checked for the copy',
    routes: `
  - name: request-mirror
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /mirror } }]
        filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: server-v2, port: 80 } } }]
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /mirror-and-modify-request-headers } }]
        filters:
          - type: RequestHeaderModifier
            requestHeaderModifier:
              set: [{ name: X-Header-Set, value: set-overwrites-values }]
              add: [{ name: X-Header-Add, value: header-val-1 }]
              remove: [X-Header-Remove]
          - { type: RequestMirror, requestMirror: { backendRef: { name: server-v2, port: 80 } } }
        backendRefs: ${v1}
`,
    cases: [
      { request: { path: '/mirror' }, backend: 'server-v1', mirroredTo: 'server-v2' },
      {
        request: {
          path: '/mirror-and-modify-request-headers',
          headers: { 'X-Header-Set': 'some-other-value', 'X-Header-Remove': 'remove-val' },
        },
        backend: 'server-v1',
        backendHeaders: { 'x-header-set': 'set-overwrites-values', 'x-header-add': 'header-val-1' },
        absentBackendHeaders: ['x-header-remove'],
        mirroredTo: 'server-v2',
      },
    ],
  },
  {
    name: 'HTTPRouteRequestMultipleMirrors',
    upstream:
      'conformance/tests/httproute-request-multiple-mirrors.{go,yaml}: two RequestMirror filters on one rule, the second to infra-backend-v3 in another namespace; each mirror backend is checked for its copy',
    routes: `
  - name: request-multiple-mirrors
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /mirror } }]
        filters:
          - { type: RequestMirror, requestMirror: { backendRef: { name: server-v2, port: 80 } } }
          - { type: RequestMirror, requestMirror: { backendRef: { name: server-v3, namespace: another-namespace, port: 80 } } }
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /mirror-and-modify-headers } }]
        filters:
          - type: RequestHeaderModifier
            requestHeaderModifier:
              set: [{ name: X-Header-Set, value: set-overwrites-values }]
              add: [{ name: X-Header-Add, value: header-val-1 }, { name: X-Header-Add-Append, value: header-val-2 }]
              remove: [X-Header-Remove]
          - { type: RequestMirror, requestMirror: { backendRef: { name: server-v2, port: 80 } } }
          - { type: RequestMirror, requestMirror: { backendRef: { name: server-v3, namespace: another-namespace, port: 80 } } }
        backendRefs: ${v1}
`,
    cases: [
      { request: { path: '/mirror' }, backend: 'server-v1', mirroredTo: ['server-v2', 'server-v3'] },
      {
        request: {
          path: '/mirror-and-modify-headers',
          headers: {
            'X-Header-Set': 'some-other-value',
            'X-Header-Add-Append': 'append-val-1',
            'X-Header-Remove': 'remove-val',
          },
        },
        backend: 'server-v1',
        backendHeaders: {
          'x-header-set': 'set-overwrites-values',
          'x-header-add': 'header-val-1',
          'x-header-add-append': 'append-val-1,header-val-2',
        },
        absentBackendHeaders: ['x-header-remove'],
        mirroredTo: ['server-v2', 'server-v3'],
      },
    ],
  },
  {
    name: 'HTTPRouteInvalidNonExistentBackendRef + HTTPRouteAllBackendsWeightZero',
    upstream:
      'conformance/tests/httproute-invalid-backendref-nonexistent.go, conformance/tests/httproute-all-backends-weight-zero.go (config given to the waypoint directly: apply refuses the first)',
    routes: `
  - name: unresolved
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /missing } }]
        backendRefs: [{ name: does-not-exist, port: 80 }]
      - matches: [{ path: { type: PathPrefix, value: /zero } }]
        backendRefs: [{ name: server-v1, port: 80, weight: 0 }, { name: server-v2, port: 80, weight: 0 }]
`,
    cases: [
      { request: { path: '/missing' }, status: 500 },
      { request: { path: '/zero' }, status: 500 },
    ],
  },
];

/** One request of HTTPRouteRequestPercentageMirror: sent many times, the copies counted. */
export interface PercentageMirrorCase {
  request: { path: string; headers?: Record<string, string> };
  /** The share of requests whose copy must reach server-v2 (the primary is server-v1). */
  percent: number;
  /** The share whose copy must also reach server-v3 (upstream's infra-backend-v3), drawn apart. */
  percentV3?: number;
  backendHeaders?: Record<string, string>;
  absentBackendHeaders?: string[];
}

/**
 * HTTPRouteRequestPercentageMirror (conformance/tests/httproute-request-percentage-mirror.{go,yaml},
 * provisional): each request is answered by infra-backend-v1 and copied to infra-backend-v2
 * for the given share of requests. Upstream counts the copies in the mirror's logs over 500
 * requests within ±5% of the expected count, retrying the whole batch up to 5 times; here the
 * waypoint's random source is seeded, so the count is reproducible, and it must lie within
 * 4 standard deviations of the binomial mean (test/httproute-conformance.test.ts). Two
 * departures: the third request's path is the one its rule matches
 * (`/percent-multi-mirror-and-modify-headers`; upstream sends `/percent-mirror-and-modify-headers`,
 * which no PathPrefix of the route matches element by element). That rule's second mirror
 * (infra-backend-v3, 50%) is server-v3 in another-namespace, counted the same way.
 */
export const PERCENTAGE_MIRROR: { upstream: string; routes: string; cases: PercentageMirrorCase[] } = {
  upstream: 'conformance/tests/httproute-request-percentage-mirror.{go,yaml}',
  routes: `
  - name: request-percentage-mirror
    ${PARENT}
    rules:
      - matches: [{ path: { type: PathPrefix, value: /percent-mirror } }]
        filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: server-v2, port: 80 }, percent: 20 } }]
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /percent-mirror-fraction } }]
        filters:
          - type: RequestMirror
            requestMirror: { backendRef: { name: server-v2, port: 80 }, fraction: { numerator: 25, denominator: 50 } }
        backendRefs: ${v1}
      - matches: [{ path: { type: PathPrefix, value: /percent-multi-mirror-and-modify-headers } }]
        filters:
          - type: RequestHeaderModifier
            requestHeaderModifier:
              set: [{ name: X-Header-Set, value: set-overwrites-values }]
              add: [{ name: X-Header-Add, value: header-val-1 }, { name: X-Header-Add-Append, value: header-val-2 }]
              remove: [X-Header-Remove]
          - { type: RequestMirror, requestMirror: { backendRef: { name: server-v2, port: 80 }, percent: 35 } }
          - { type: RequestMirror, requestMirror: { backendRef: { name: server-v3, namespace: another-namespace, port: 80 }, percent: 50 } }
        backendRefs: ${v1}
`,
  cases: [
    { request: { path: '/percent-mirror' }, percent: 20 },
    { request: { path: '/percent-mirror-fraction' }, percent: 50 },
    {
      request: {
        path: '/percent-multi-mirror-and-modify-headers',
        headers: { 'X-Header-Remove': 'remove-val', 'X-Header-Add-Append': 'append-val-1' },
      },
      percent: 35,
      percentV3: 50,
      backendHeaders: {
        'x-header-add': 'header-val-1',
        'x-header-add-append': 'append-val-1,header-val-2',
        'x-header-set': 'set-overwrites-values',
      },
      absentBackendHeaders: ['x-header-remove'],
    },
  ],
};

/** Upstream HTTPRoute cases not ported, and why. */
export const SKIPPED: Array<{ name: string; upstream: string; reason: string }> = [
  {
    name: 'MeshHTTPRouteWeight, MeshSplit',
    upstream: 'conformance/tests/mesh/httproute-weight.go, mesh-split.go',
    reason: 'covered by test/waypoint-routing.test.ts: a 90/10 split within ±5% over 2,000 requests',
  },
  {
    name: 'MeshPorts',
    upstream: 'conformance/tests/mesh/mesh-ports.go',
    reason:
      'the fixture service has one HTTP port; parentRef port scoping is checked on the route table in packages/waypoint/src/config/config-view.test.ts',
  },
  {
    name: 'MeshConsumerRoute, MeshFrontend, MeshFrontendHostname',
    upstream: 'conformance/tests/mesh/mesh-consumer-route.go, mesh-frontend*.go',
    reason:
      'consumer routes (a route in the client namespace) and Service-frontend addressing need the control plane: not in the waypoint table',
  },
  {
    name: 'HTTPRouteCORS, HTTPRouteExternalAuth*, HTTPRouteDirectResponse, HTTPRouteSessionPersistence',
    upstream: 'conformance/tests/httproute-cors*.go, httproute-external-auth*.go, ...',
    reason: 'experimental filters zmesh does not implement; refused at parse (unsupported filter type)',
  },
  {
    name: 'HTTPRouteHTTPSListener, HTTPRouteListenerHostnameMatching, HTTPRouteHostnameIntersection, HTTPRouteCrossNamespace, HTTPRouteReferenceGrant, HTTPRouteDisallowedKind, HTTPRoutePartiallyInvalidViaInvalidReferenceGrant',
    upstream: 'conformance/tests/httproute-*listener*.go, httproute-*reference-grant*.go, ...',
    reason:
      'about Gateway listeners, TLS and ReferenceGrant: a mesh route has a Service parent, not a listener',
  },
  {
    name: 'HTTPRouteBackendProtocolH2C, HTTPRouteBackendProtocolWebSocket',
    upstream: 'conformance/tests/httproute-backend-protocol-*.go',
    reason:
      'covered by test/waypoint-routing.test.ts (h2c and Upgrade through the waypoint), not by appProtocol',
  },
];
