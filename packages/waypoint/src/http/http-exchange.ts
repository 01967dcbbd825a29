import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { ZmeshError } from '@zmesh/shared';
import { DEFAULT_PATH_NORMALIZATION, type PathNormalization, readRequestTarget } from './request-target.js';

/** One downstream request and its response, the same shape for HTTP/1.1 and HTTP/2. */
export interface Exchange {
  protocol: 'h1' | 'h2';
  req: IncomingMessage | Http2ServerRequest;
  res: ServerResponse | Http2ServerResponse;
  method: string;
  /**
   * The normalized origin-form target (path and query) that goes upstream; see
   * request-target.ts. Empty when the request is `refused`.
   */
  target: string;
  /** The normalized path without query: what policy and routes match. */
  path: string;
  authority: string;
  header(name: string): string | undefined;
  /** HTTP/1.1 Upgrade (RFC 9110 §7.8); see UpgradeRequest. */
  upgrade?: UpgradeRequest;
  /** Why the request cannot be served as received: answered 400, never forwarded. */
  refused?: { reason: string; detail: string };
  /** Headers to drop and set on the way upstream (RequestAuthentication: the token, its payload). */
  headerEdits?: { remove: readonly string[]; set: Readonly<Record<string, string>> };
  /**
   * The original client's address (the tunnel's source, kernel-given), appended to
   * `x-forwarded-for` upstream as Envoy does, so an HTTP app behind the waypoint that reads
   * the header, not its socket, also sees the real client.
   */
  clientAddress?: string;
}

/**
 * An HTTP/1.1 request with `Connection: upgrade`. Node's server has let go of the socket; it
 * becomes a tunnel only when the app answers 101 with a protocol the client asked for.
 * Otherwise the forwarder sets `keepParsing` and the frontend goes on reading requests from
 * the socket (`head` first), each through the whole pipeline again.
 */
export interface UpgradeRequest {
  socket: Duplex;
  /** Bytes the client sent past the request head. */
  head: Buffer;
  keepParsing: boolean;
}

/**
 * Writes the status line and headers on either protocol's response. The two classes'
 * writeHead overloads differ (@types/node 24), so TypeScript cannot call one through the union;
 * both take (status, headers).
 */
export function writeHead(res: Exchange['res'], status: number, headers: OutgoingHttpHeaders): void {
  const head: { writeHead(status: number, headers: OutgoingHttpHeaders): unknown } = res;
  head.writeHead(status, headers);
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

/** Headers that carry the message's framing or routing: `Connection` may not strip them. */
const NOT_CONNECTION_OPTIONS = new Set(['content-length', 'transfer-encoding', 'host']);

export function exchangeOf(
  protocol: 'h1' | 'h2',
  req: Exchange['req'],
  res: Exchange['res'],
  normalization: PathNormalization = DEFAULT_PATH_NORMALIZATION,
): Exchange {
  const raw = (protocol === 'h2' ? req.headers[':path'] : req.url) ?? '';
  const authority = String((protocol === 'h2' ? req.headers[':authority'] : req.headers.host) ?? '');
  const method = (req.method ?? 'GET').toUpperCase();
  const reading = readRequestTarget(protocol, method, String(raw), authority, normalization);
  const header = (name: string) => {
    const v = req.headers[name];
    return Array.isArray(v) ? v.join(',') : v;
  };
  const ex: Exchange = {
    protocol,
    req,
    res,
    method,
    target: reading.ok ? reading.target : '',
    path: reading.ok ? reading.path : '',
    authority,
    header,
  };
  const refused = reading.ok ? framingRefusal(protocol, header) : reading;
  if (refused) ex.refused = { reason: refused.reason, detail: refused.detail };
  return ex;
}

/**
 * What makes a request's framing or authority ambiguous between this hop and the app:
 * - `Connection` naming Content-Length, Transfer-Encoding, Host or a pseudo-header (dropping
 *   them as hop-by-hop would unframe the body, which then reaches the app as a new request);
 * - a Transfer-Encoding other than exactly `chunked` (the waypoint re-frames bodies chunked
 *   and cannot carry other codings across);
 * - over HTTP/2, a `host` that is not `:authority` (RFC 9113 §8.3.1 says they must agree).
 */
function framingRefusal(
  protocol: 'h1' | 'h2',
  header: (name: string) => string | undefined,
): { reason: string; detail: string } | undefined {
  for (const option of tokens(header('connection')))
    if (NOT_CONNECTION_OPTIONS.has(option) || option.startsWith(':'))
      return { reason: 'connection_option', detail: `Connection may not name ${option}` };
  const te = header('transfer-encoding');
  if (te !== undefined && te.trim().toLowerCase() !== 'chunked')
    return { reason: 'transfer_encoding', detail: 'Transfer-Encoding other than chunked' };
  if (protocol === 'h2') {
    const host = header('host');
    if (host !== undefined && host.toLowerCase() !== (header(':authority') ?? '').toLowerCase())
      return { reason: 'host_authority', detail: 'host differs from :authority' };
  }
  return undefined;
}

function tokens(value: string | undefined): string[] {
  if (value === undefined) return [];
  return value
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter(Boolean);
}

/** The protocols an Upgrade header asks for, lower case without versions (`websocket`, `h2c`). */
export function upgradeProtocols(value: string | undefined): string[] {
  return tokens(value).map((t) => t.split('/')[0]!);
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
  // A body is always framed upstream: Node's client sends the body of a GET, HEAD, DELETE or
  // OPTIONS bare unless told otherwise, and bare bytes would reach the app as a new request.
  // HTTP/1.1 only: upstream HTTP/2 frames bodies itself (and forbids the header).
  if (ex.protocol === 'h1' && ex.req.headers['transfer-encoding'] !== undefined)
    out['transfer-encoding'] = 'chunked';
  if (ex.headerEdits) {
    for (const name of ex.headerEdits.remove) delete out[name];
    Object.assign(out, ex.headerEdits.set);
  }
  if (ex.clientAddress !== undefined) {
    // Appended (RFC 7239's predecessor convention): what the client itself wrote stays
    // first, and only the last entry, this hop's, is to be trusted.
    const sent = out['x-forwarded-for'];
    const prior = Array.isArray(sent) ? sent.join(', ') : sent;
    out['x-forwarded-for'] = prior ? `${prior}, ${ex.clientAddress}` : ex.clientAddress;
  }
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
  writeHead(res, error.status, {
    'content-type': 'text/plain',
    'content-length': String(Buffer.byteLength(body)),
    'x-zmesh-error': error.code,
    ...grpc,
    ...headers,
  });
  res.end(body);
}

/** Envoy's HTTP → gRPC status mapping for local replies, with deadlines as DEADLINE_EXCEEDED. */
function grpcStatusOf(error: ZmeshError): number {
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
