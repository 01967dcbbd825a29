import type {
  HeaderModifier,
  PathModifier,
  RequestRedirect,
  RouteFilters,
  RouteMatch,
} from '../config/waypoint-config.js';

/**
 * Gateway API filters at request time, for any route kind. Parsing and the spec's
 * admission rules are config/filter-parser.ts; this file only applies what passed.
 */

/**
 * HTTPHeaderFilter on a header map whose names are lower case: remove, then set (overwrite),
 * then add (append to what is there: `a,b`, as Envoy's append does for one header line).
 * The spec does not order remove against set/add on one name; admission refuses no such
 * overlap, and removing first keeps `set` meaningful when a name is in both.
 */
export function applyHeaderModifier(headers: Record<string, string | string[]>, mod: HeaderModifier): void {
  for (const name of mod.remove) delete headers[name];
  for (const [name, value] of mod.set) headers[name] = value;
  for (const [name, value] of mod.add) {
    const had = headers[name];
    headers[name] = had === undefined ? value : `${Array.isArray(had) ? had.join(',') : had},${value}`;
  }
}

/** The header modifiers of the rule and then of the chosen backendRef, in that order. */
export function headerModifiers(
  which: 'requestHeaders' | 'responseHeaders',
  rule: RouteFilters | undefined,
  backend: RouteFilters | undefined,
): HeaderModifier[] | undefined {
  const a = rule?.[which];
  const b = backend?.[which];
  if (!a && !b) return undefined;
  return [a, b].filter((m): m is HeaderModifier => m !== undefined);
}

/**
 * HTTPPathModifier on a normalized path. ReplacePrefixMatch replaces the matched prefix
 * element-wise, as the spec's table has it: `/foo/bar` with prefix `/foo` and replacement
 * `/xyz` or `/xyz/` is `/xyz/bar`; with replacement `/` it is `/bar`; `/foo` alone becomes
 * `/xyz` (or `/`).
 */
export function modifyPath(path: string, mod: PathModifier, match: RouteMatch): string {
  if (mod.type === 'ReplaceFullPath') return mod.value;
  const matched = match.path?.type === 'PathPrefix' ? match.path.value : '/';
  const prefix = trimSlash(matched);
  const rest = path.slice(prefix.length);
  const out = trimSlash(mod.value) + rest;
  return out === '' ? '/' : out;
}

function trimSlash(p: string): string {
  return p.endsWith('/') ? p.slice(0, -1) : p;
}

/** The target (path and query) with the path replaced; the query stays as it was sent. */
export function withPath(target: string, path: string): string {
  const q = target.indexOf('?');
  return q === -1 ? path : path + target.slice(q);
}

const WELL_KNOWN: Record<string, number> = { http: 80, https: 443 };

/**
 * The `Location` of an HTTPRequestRedirectFilter. Unset parts come from the request: scheme
 * http (mesh traffic reaches the waypoint as plaintext HTTP inside HBONE), the request's
 * host without its port, its path and query. The port: the filter's; else the well-known
 * port of a scheme the filter sets; else the port the request was sent to (the service
 * port: a mesh's "listener"). The port is left out where it is the scheme's well-known one.
 */
export function redirectLocation(
  redirect: RequestRedirect,
  req: { authority: string; path: string; target: string; port: number },
  match: RouteMatch,
): string {
  const scheme = redirect.scheme ?? 'http';
  const host = redirect.hostname ?? hostOnly(req.authority);
  const port = redirect.port ?? (redirect.scheme ? WELL_KNOWN[redirect.scheme]! : req.port);
  const path = redirect.path ? modifyPath(req.path, redirect.path, match) : req.path;
  const hostPort = port === WELL_KNOWN[scheme] ? host : `${host}:${port}`;
  return `${scheme}://${hostPort}${withPath(req.target, path)}`;
}

function hostOnly(authority: string): string {
  if (authority.startsWith('[')) {
    const end = authority.indexOf(']');
    return end === -1 ? authority : authority.slice(0, end + 1);
  }
  const colon = authority.lastIndexOf(':');
  return colon === -1 ? authority : authority.slice(0, colon);
}
