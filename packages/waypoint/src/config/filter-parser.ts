import type { FieldReader } from '@zmesh/shared';
import type {
  HeaderModifier,
  PathModifier,
  RedirectStatus,
  RequestMirror,
  RequestRedirect,
  RouteFilters,
  RouteMatch,
  UrlRewrite,
} from './waypoint-config.js';

/**
 * Gateway API route filters (HTTPRouteFilter), checked as the API server's CEL rules and
 * the spec's prose check them. Shared by every route kind: GRPCRoute allows the header
 * modifiers and RequestMirror, HTTPRoute all of them.
 */
export type FilterKind =
  | 'RequestHeaderModifier'
  | 'ResponseHeaderModifier'
  | 'RequestRedirect'
  | 'URLRewrite'
  | 'RequestMirror';

export const HTTP_RULE_FILTERS: readonly FilterKind[] = [
  'RequestHeaderModifier',
  'ResponseHeaderModifier',
  'RequestRedirect',
  'URLRewrite',
  'RequestMirror',
];
/** Gateway API GRPCRouteFilter: no redirect or rewrite for gRPC. */
export const GRPC_RULE_FILTERS: readonly FilterKind[] = [
  'RequestHeaderModifier',
  'ResponseHeaderModifier',
  'RequestMirror',
];
/** Gateway API: what a backendRef's own `filters` may hold (HTTPBackendRef). */
export const BACKEND_FILTERS: readonly FilterKind[] = ['RequestHeaderModifier', 'ResponseHeaderModifier'];

/** Gateway API's limit per list (HTTPHeaderFilter set/add/remove: maxItems 16). */
const MAX_HEADER_EDITS = 16;
/** Gateway API HTTPHeaderName: an RFC 7230 token. */
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/;
/** RFC 1123 hostname, no wildcard (PreciseHostname). */
const PRECISE_HOSTNAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const FRAMING = new Set([
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'upgrade',
  'http2-settings',
]);
const STATUS_CODES: readonly RedirectStatus[] = [301, 302, 303, 307, 308];
const KEY_OF: Record<FilterKind, string> = {
  RequestHeaderModifier: 'requestHeaderModifier',
  ResponseHeaderModifier: 'responseHeaderModifier',
  RequestRedirect: 'requestRedirect',
  URLRewrite: 'urlRewrite',
  RequestMirror: 'requestMirror',
};

export interface FilterContext {
  allowed: readonly FilterKind[];
  /** The rule's matches: ReplacePrefixMatch needs exactly one PathPrefix among them. */
  matches: readonly RouteMatch[];
  namespace: string;
}

export function readFilters(
  r: FieldReader,
  value: unknown,
  path: string,
  ctx: FilterContext,
): RouteFilters | undefined {
  const list = r.array(value, path);
  if (list.length === 0) return undefined;
  const out: RouteFilters = {};
  const seen = new Set<string>();
  list.forEach((f, i) => {
    const at = `${path}[${i}]`;
    const o = r.object(f, at);
    if (!o) return;
    const type = o.type as FilterKind;
    if (typeof type !== 'string' || !(type in KEY_OF)) {
      r.fail(
        `${at}.type`,
        `unsupported filter type ${String(o.type)} (supported: ${ctx.allowed.join(', ')})`,
      );
      return;
    }
    if (!ctx.allowed.includes(type)) {
      r.fail(`${at}.type`, `${type} is not allowed here (allowed: ${ctx.allowed.join(', ')})`);
      return;
    }
    const key = KEY_OF[type];
    r.onlyKeys(o, at, ['type', key]);
    for (const other of Object.values(KEY_OF))
      if (other !== key && o[other] !== undefined) r.fail(`${at}.${other}`, `must be unset for type ${type}`);
    if (type !== 'RequestMirror' && seen.has(type)) r.fail(`${at}.type`, `${type} may appear only once`);
    seen.add(type);
    const body = o[key];
    if (body === undefined) {
      r.fail(`${at}.${key}`, `required for type ${type}`);
      return;
    }
    switch (type) {
      case 'RequestHeaderModifier':
        out.requestHeaders = readHeaderModifier(r, body, `${at}.${key}`);
        break;
      case 'ResponseHeaderModifier':
        out.responseHeaders = readHeaderModifier(r, body, `${at}.${key}`);
        break;
      case 'RequestRedirect':
        out.redirect = readRedirect(r, body, `${at}.${key}`, ctx.matches);
        break;
      case 'URLRewrite':
        out.rewrite = readRewrite(r, body, `${at}.${key}`, ctx.matches);
        break;
      case 'RequestMirror': {
        const m = readMirror(r, body, `${at}.${key}`, ctx.namespace);
        if (m) out.mirrors = [...(out.mirrors ?? []), m];
        break;
      }
    }
  });
  if (out.redirect && out.rewrite)
    r.fail(path, 'RequestRedirect and URLRewrite cannot both be set on one rule');
  return out;
}

/** Gateway API HTTPHeaderFilter; names are case-insensitive, so each name once per list. */
function readHeaderModifier(r: FieldReader, value: unknown, path: string): HeaderModifier {
  const o = r.object(value, path) ?? {};
  r.onlyKeys(o, path, ['set', 'add', 'remove']);
  const pairs = (field: 'set' | 'add'): Array<[string, string]> => {
    const list = r.array(o[field], `${path}.${field}`);
    if (list.length > MAX_HEADER_EDITS) r.fail(`${path}.${field}`, `at most ${MAX_HEADER_EDITS} entries`);
    const names = new Set<string>();
    return list.flatMap((h, i) => {
      const at = `${path}.${field}[${i}]`;
      const q = r.object(h, at);
      if (!q) return [];
      r.onlyKeys(q, at, ['name', 'value']);
      const name = headerName(r, q.name, `${at}.name`);
      const v = typeof q.value === 'string' ? q.value : r.fail(`${at}.value`, 'must be a string');
      if (v !== undefined && /[\r\n\0]/.test(v)) r.fail(`${at}.value`, 'may not hold CR, LF or NUL');
      if (name === undefined || v === undefined) return [];
      if (names.has(name)) r.fail(`${at}.name`, `${name} appears twice in ${field}`);
      names.add(name);
      return [[name, v] as [string, string]];
    });
  };
  const removeList = r.array(o.remove, `${path}.remove`);
  if (removeList.length > MAX_HEADER_EDITS) r.fail(`${path}.remove`, `at most ${MAX_HEADER_EDITS} entries`);
  const remove = removeList.flatMap((n, i) => headerName(r, n, `${path}.remove[${i}]`) ?? []);
  if (new Set(remove).size !== remove.length) r.fail(`${path}.remove`, 'a name appears twice');
  return { set: pairs('set'), add: pairs('add'), remove };
}

function headerName(r: FieldReader, value: unknown, path: string): string | undefined {
  const name = r.string(value, path, { pattern: HEADER_NAME });
  if (name === undefined) return undefined;
  const lower = name.toLowerCase();
  // Pseudo-headers cannot match the pattern; Host is routing, not a header to edit (URLRewrite sets it).
  if (lower === 'host') return r.fail(path, 'Host cannot be modified (use URLRewrite hostname)');
  // Framing and hop-by-hop fields belong to each hop: editing them would unframe a message.
  if (FRAMING.has(lower))
    return r.fail(path, `${name} is a framing or hop-by-hop header and cannot be modified`);
  return lower;
}

function readRedirect(
  r: FieldReader,
  value: unknown,
  path: string,
  matches: readonly RouteMatch[],
): RequestRedirect {
  const o = r.object(value, path) ?? {};
  r.onlyKeys(o, path, ['scheme', 'hostname', 'port', 'path', 'statusCode']);
  const scheme =
    o.scheme === undefined
      ? undefined
      : r.oneOf(o.scheme, `${path}.scheme`, ['http', 'https'] as const, 'http');
  const hostname = readHostname(r, o.hostname, `${path}.hostname`);
  const port = o.port === undefined ? undefined : r.port(o.port, `${path}.port`);
  const pathMod = o.path === undefined ? undefined : readPathModifier(r, o.path, `${path}.path`, matches);
  let statusCode: RedirectStatus = 302;
  if (o.statusCode !== undefined) {
    if (STATUS_CODES.includes(o.statusCode as RedirectStatus)) statusCode = o.statusCode as RedirectStatus;
    else r.fail(`${path}.statusCode`, `must be one of ${STATUS_CODES.join(', ')}`);
  }
  return {
    statusCode,
    ...(scheme ? { scheme } : {}),
    ...(hostname ? { hostname } : {}),
    ...(port ? { port } : {}),
    ...(pathMod ? { path: pathMod } : {}),
  };
}

function readRewrite(
  r: FieldReader,
  value: unknown,
  path: string,
  matches: readonly RouteMatch[],
): UrlRewrite {
  const o = r.object(value, path) ?? {};
  r.onlyKeys(o, path, ['hostname', 'path']);
  const hostname = readHostname(r, o.hostname, `${path}.hostname`);
  const pathMod = o.path === undefined ? undefined : readPathModifier(r, o.path, `${path}.path`, matches);
  return { ...(hostname ? { hostname } : {}), ...(pathMod ? { path: pathMod } : {}) };
}

function readHostname(r: FieldReader, value: unknown, path: string): string | undefined {
  if (value === undefined) return undefined;
  const h = r.string(value, path);
  if (h === undefined) return undefined;
  if (h.length > 253 || !PRECISE_HOSTNAME.test(h))
    return r.fail(path, 'must be a lower-case RFC 1123 hostname');
  return h;
}

function readPathModifier(
  r: FieldReader,
  value: unknown,
  path: string,
  matches: readonly RouteMatch[],
): PathModifier | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['type', 'replaceFullPath', 'replacePrefixMatch']);
  if (o.type !== 'ReplaceFullPath' && o.type !== 'ReplacePrefixMatch')
    return r.fail(`${path}.type`, 'must be one of ReplaceFullPath, ReplacePrefixMatch');
  const key = o.type === 'ReplaceFullPath' ? 'replaceFullPath' : 'replacePrefixMatch';
  const other = o.type === 'ReplaceFullPath' ? 'replacePrefixMatch' : 'replaceFullPath';
  if (o[other] !== undefined) r.fail(`${path}.${other}`, `must be unset for type ${o.type}`);
  const v = r.string(o[key], `${path}.${key}`);
  if (v === undefined) return undefined;
  if (!v.startsWith('/') || /[\s?#]/.test(v))
    return r.fail(`${path}.${key}`, 'must be a path starting with / (no query)');
  if (o.type === 'ReplacePrefixMatch') {
    // CEL on HTTPRouteRule: the prefix to replace must be known, so exactly one PathPrefix match.
    const prefixes = matches.filter((m) => m.path?.type === 'PathPrefix' || m.path === undefined);
    if (matches.length !== 1 || prefixes.length !== 1)
      return r.fail(`${path}.type`, 'ReplacePrefixMatch needs the rule to have exactly one PathPrefix match');
  }
  return { type: o.type, value: v };
}

function readMirror(r: FieldReader, value: unknown, path: string, ns: string): RequestMirror | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['backendRef', 'percent', 'fraction']);
  const b = r.object(o.backendRef, `${path}.backendRef`);
  const backend = b ? readServiceRef(r, b, `${path}.backendRef`, ns, []) : undefined;
  if (o.percent !== undefined && o.fraction !== undefined) r.fail(path, 'percent and fraction are exclusive');
  let percent = 100;
  if (o.percent !== undefined) percent = r.int(o.percent, `${path}.percent`, 0, 100) ?? 100;
  if (o.fraction !== undefined) {
    const f = r.object(o.fraction, `${path}.fraction`) ?? {};
    r.onlyKeys(f, `${path}.fraction`, ['numerator', 'denominator']);
    const num = r.int(f.numerator, `${path}.fraction.numerator`, 0, 1_000_000) ?? 0;
    const den = r.int(f.denominator, `${path}.fraction.denominator`, 1, 1_000_000, 100) ?? 100;
    if (num > den) r.fail(`${path}.fraction`, 'numerator may not exceed denominator');
    percent = (Math.min(num, den) / den) * 100;
  }
  return backend ? { backend, percent } : undefined;
}

/**
 * A Gateway API BackendObjectReference to a Service (kind Service or unset; the namespace
 * defaults to the route's), with whatever extra keys the caller's type allows.
 */
export function readServiceRef(
  r: FieldReader,
  o: Record<string, unknown>,
  path: string,
  ns: string,
  extraKeys: readonly string[],
): { name: string; namespace: string; port?: number } | undefined {
  r.onlyKeys(o, path, ['kind', 'group', 'name', 'namespace', 'port', ...extraKeys]);
  if (o.kind !== undefined && o.kind !== 'Service') r.fail(`${path}.kind`, 'only Service');
  const name = r.string(o.name, `${path}.name`);
  const port = o.port === undefined ? undefined : r.port(o.port, `${path}.port`);
  const namespace = r.string(o.namespace, `${path}.namespace`, { optional: true }) ?? ns;
  return name ? { name, namespace, ...(port ? { port } : {}) } : undefined;
}
