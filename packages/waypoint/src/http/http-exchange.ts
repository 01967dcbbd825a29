import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { ZmeshError } from '@zmesh/shared';

/** One downstream request and its response, the same shape for HTTP/1.1 and HTTP/2. */
export interface Exchange {
  protocol: 'h1' | 'h2';
  req: IncomingMessage | Http2ServerRequest;
  res: ServerResponse | Http2ServerResponse;
  method: string;
  /** Path with query, as received. */
  rawPath: string;
  /** Path without query, for matching and policy. */
  path: string;
  authority: string;
  header(name: string): string | undefined;
  /** HTTP/1.1 Upgrade (RFC 9110 §7.8): the client's socket and the bytes read past the head. */
  upgrade?: { socket: Duplex; head: Buffer };
}

/** RFC 9110 §7.6.1 connection options, plus HTTP/2's banned connection-specific fields (RFC 9113 §8.2.2). */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
  'host',
]);

export function exchangeOf(protocol: 'h1' | 'h2', req: Exchange['req'], res: Exchange['res']): Exchange {
  const rawPath = (protocol === 'h2' ? String(req.headers[':path'] ?? '/') : req.url) || '/';
  const q = rawPath.indexOf('?');
  const authority = String((protocol === 'h2' ? req.headers[':authority'] : req.headers.host) ?? '');
  return {
    protocol,
    req,
    res,
    method: (req.method ?? 'GET').toUpperCase(),
    rawPath,
    path: q === -1 ? rawPath : rawPath.slice(0, q),
    authority,
    header: (name) => {
      const v = req.headers[name];
      return Array.isArray(v) ? v.join(',') : v;
    },
  };
}

/** End-to-end request headers for the upstream: no pseudo-headers, no hop-by-hop fields. */
export function forwardableHeaders(ex: Exchange): Record<string, string | string[]> {
  const named = connectionTokens(ex.req.headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(ex.req.headers)) {
    if (v === undefined || k.startsWith(':') || HOP_BY_HOP.has(k) || named.has(k)) continue;
    out[k] = v;
  }
  // gRPC needs "te: trailers" end to end (gRPC over HTTP/2 spec); it is the one TE value HTTP/2 allows.
  if (ex.header('te')?.toLowerCase() === 'trailers') out.te = 'trailers';
  return out;
}

export function responseHeaders(
  headers: Record<string, string | string[]>,
): Record<string, string | string[]> {
  const named = connectionTokens(headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(headers)) if (!HOP_BY_HOP.has(k) && !named.has(k)) out[k] = v;
  return out;
}

const NO_TOKENS: ReadonlySet<string> = new Set();

function connectionTokens(value: string | string[] | undefined): ReadonlySet<string> {
  // Most messages name no options, or only keep-alive/close, which are hop-by-hop anyway.
  if (value === undefined) return NO_TOKENS;
  const text = Array.isArray(value) ? value.join(',') : value;
  const lower = text.toLowerCase();
  if (lower === 'keep-alive' || lower === 'close') return NO_TOKENS;
  return new Set(
    text
      .split(',')
      .map((t) => t.trim().toLowerCase())
      .filter(Boolean),
  );
}

/** A local reply; the L7 denial body is Envoy's, which clients and tests look for. */
export function replyError(ex: Exchange, error: ZmeshError, headers: Record<string, string> = {}): void {
  const res = ex.res;
  if (res.headersSent || res.destroyed || res.writableEnded) {
    res.destroy();
    return;
  }
  const body =
    error.code === 'ZM_ERR_WAYPOINT_DENIED' ? 'RBAC: access denied' : `${error.code}: ${error.message}`;
  // gRPC clients read grpc-status, not the HTTP status: answer trailers-only (gRPC over HTTP/2 spec).
  const grpc = (ex.header('content-type') ?? '').startsWith('application/grpc')
    ? { 'grpc-status': String(grpcStatusOf(error)), 'grpc-message': encodeURIComponent(body) }
    : {};
  res.writeHead(error.status, {
    'content-type': 'text/plain',
    'content-length': String(Buffer.byteLength(body)),
    'x-zmesh-error': error.code,
    ...grpc,
    ...headers,
  });
  res.end(body);
}

/** Envoy's HTTP → gRPC status mapping for local replies, with deadlines as DEADLINE_EXCEEDED. */
export function grpcStatusOf(error: ZmeshError): number {
  if (error.code === 'ZM_ERR_WAYPOINT_DEADLINE') return 4;
  switch (error.status) {
    case 400:
      return 13;
    case 401:
      return 16;
    case 403:
      return 7;
    case 404:
      return 12;
    case 429:
    case 502:
    case 503:
    case 504:
      return 14;
    default:
      return 2;
  }
}
