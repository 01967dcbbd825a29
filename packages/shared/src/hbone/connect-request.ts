import type { ErrorCode } from '../errors/index.js';
import { formatIpBytes, ipToBytes } from '../net/ip.js';
import { err, ok, type Result } from '../result.js';

export interface ConnectAuthority {
  /** Canonical text form: dotted quad, or RFC 5952 IPv6 without brackets. */
  host: string;
  port: number;
  family: 4 | 6;
}

export interface ConnectRequest {
  authority: ConnectAuthority;
  /** The `for=` of the first `forwarded` element (RFC 7239 §4), unquoted. */
  forwardedFor?: string;
  baggage?: Record<string, string>;
  traceparent?: string;
}

/** Why a CONNECT was refused; both codes answer 400 (docs/design.md §4). */
export interface ConnectRejection {
  code: Extract<ErrorCode, 'ZM_ERR_HBONE_BAD_METHOD' | 'ZM_ERR_HBONE_BAD_AUTHORITY'>;
  reasons: string[];
}

/** Longest legal authority is a full IPv6 literal in brackets plus ":65535" (53 chars). */
const MAX_AUTHORITY_LENGTH = 64;
/** W3C Baggage §3.3.2 limits: 64 members, 8192 bytes. */
const MAX_BAGGAGE_MEMBERS = 64;
const MAX_BAGGAGE_BYTES = 8192;
/** A `forwarded` header longer than this is ignored rather than parsed. */
const MAX_FORWARDED_LENGTH = 512;

const PORT = /^[1-9][0-9]{0,4}$/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;

/**
 * `ip:port` or `[ipv6]:port`. Only literal addresses: HBONE authorities name a workload
 * address, never a name to resolve (docs/design.md §4). Forms that other parsers read differently
 * (leading zeros, which inet_aton takes as octal; zone ids; short forms) are refused.
 */
export function parseConnectAuthority(authority: string): Result<ConnectAuthority> {
  if (typeof authority !== 'string' || authority.length === 0) return err(['empty authority']);
  if (authority.length > MAX_AUTHORITY_LENGTH) return err([`longer than ${MAX_AUTHORITY_LENGTH} characters`]);
  let host: string;
  let portText: string;
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close === -1 || authority[close + 1] !== ':') return err(['expected [ipv6]:port']);
    host = authority.slice(1, close);
    portText = authority.slice(close + 2);
  } else {
    const colon = authority.lastIndexOf(':');
    if (colon === -1) return err(['missing port']);
    host = authority.slice(0, colon);
    portText = authority.slice(colon + 1);
    if (host.includes(':')) return err(['IPv6 addresses must be in brackets']);
  }
  const reasons: string[] = [];
  const port = PORT.test(portText) ? Number(portText) : Number.NaN;
  if (!(port >= 1 && port <= 65535)) reasons.push(`invalid port "${portText}"`);
  const addr = parseHost(host, authority.startsWith('['));
  if (!addr.ok) reasons.push(...addr.error);
  if (!addr.ok || reasons.length > 0) return err(reasons);
  return ok({ host: addr.value.host, port, family: addr.value.family });
}

function parseHost(host: string, bracketed: boolean): Result<{ host: string; family: 4 | 6 }> {
  if (bracketed) {
    // A zone names an interface of the sender: meaningless to the receiver of a tunnel.
    if (host.includes('%')) return err(['IPv6 zone ids are not allowed']);
    const bytes = ipToBytes(host);
    if (bytes?.length !== 16) return err([`"${host}" is not an IPv6 address`]);
    return ok({ host: formatIpBytes(bytes)!, family: 6 });
  }
  if (ipToBytes(host)?.length === 4) return ok({ host, family: 4 });
  if (/^[0-9.]+$/.test(host)) return err([`"${host}" is not a canonical IPv4 address`]);
  return err([`"${host}" is not an IP address (hostnames are not allowed)`]);
}

type Headers = Record<string, string | string[] | undefined | number>;

/**
 * Validates an HBONE CONNECT (RFC 9113 §8.5: no :scheme or :path). Malformed optional
 * headers (forwarded, baggage, traceparent) are dropped, not fatal: they are telemetry,
 * and `forwarded` is only trusted later, by identity.
 */
export function validateConnectHeaders(headers: Headers): Result<ConnectRequest, ConnectRejection> {
  const method = single(headers[':method']);
  if (method !== 'CONNECT') {
    return err({ code: 'ZM_ERR_HBONE_BAD_METHOD', reasons: [`method ${method ?? '(none)'} is not CONNECT`] });
  }
  if (
    headers[':protocol'] !== undefined ||
    headers[':path'] !== undefined ||
    headers[':scheme'] !== undefined
  ) {
    return err({
      code: 'ZM_ERR_HBONE_BAD_METHOD',
      reasons: ['extended CONNECT (:protocol, :path, :scheme) is not HBONE'],
    });
  }
  const authority = parseConnectAuthority(single(headers[':authority']) ?? '');
  if (!authority.ok) return err({ code: 'ZM_ERR_HBONE_BAD_AUTHORITY', reasons: authority.error });
  const request: ConnectRequest = { authority: authority.value };
  const forwardedFor = parseForwardedFor(single(headers.forwarded));
  if (forwardedFor !== undefined) request.forwardedFor = forwardedFor;
  const baggage = parseBaggage(single(headers.baggage));
  if (baggage !== undefined) request.baggage = baggage;
  const traceparent = single(headers.traceparent);
  if (traceparent !== undefined && validTraceparent(traceparent)) request.traceparent = traceparent;
  return ok(request);
}

/** Repeated headers are ambiguous and treated as absent. */
function single(value: string | string[] | number | undefined): string | undefined {
  if (typeof value === 'string') return value;
  if (Array.isArray(value) && value.length === 1) return value[0];
  return undefined;
}

/** W3C Trace Context §3.2: version 00, non-zero trace-id and parent-id. */
function validTraceparent(value: string): boolean {
  const m = TRACEPARENT.exec(value);
  return m !== null && !/^0+$/.test(m[1]!) && !/^0+$/.test(m[2]!);
}

export function parseForwardedFor(value: string | undefined): string | undefined {
  if (value === undefined || value.length > MAX_FORWARDED_LENGTH) return undefined;
  const first = value.split(',', 1)[0]!;
  for (const pair of first.split(';')) {
    const eq = pair.indexOf('=');
    if (eq === -1 || pair.slice(0, eq).trim().toLowerCase() !== 'for') continue;
    const raw = pair.slice(eq + 1).trim();
    const quoted = /^"([^"\\]*)"$/.exec(raw);
    const text = quoted ? quoted[1]! : TOKEN.test(raw) ? raw : undefined;
    return text === undefined || text.length === 0 ? undefined : text;
  }
  return undefined;
}

export function parseBaggage(value: string | undefined): Record<string, string> | undefined {
  if (value === undefined || Buffer.byteLength(value) > MAX_BAGGAGE_BYTES) return undefined;
  const out: Record<string, string> = {};
  let count = 0;
  for (const member of value.split(',')) {
    if (count >= MAX_BAGGAGE_MEMBERS) break;
    const kv = member.split(';', 1)[0]!;
    const eq = kv.indexOf('=');
    if (eq === -1) continue;
    const key = kv.slice(0, eq).trim();
    const decoded = safeDecode(kv.slice(eq + 1).trim());
    if (!TOKEN.test(key) || decoded === undefined || key === '__proto__') continue;
    out[key] = decoded;
    count++;
  }
  return count === 0 ? undefined : out;
}

function safeDecode(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

/** Request headers for Node's `session.request()`; invalid optional parts are left out. */
export function buildConnectHeaders(req: {
  authority: string;
  forwardedFor?: string;
  baggage?: Record<string, string>;
  traceparent?: string;
}): Record<string, string> {
  const headers: Record<string, string> = { ':method': 'CONNECT', ':authority': req.authority };
  if (req.forwardedFor !== undefined && /^[^"\\\r\n]+$/.test(req.forwardedFor)) {
    headers.forwarded = `for="${req.forwardedFor}"`;
  }
  const baggage = Object.entries(req.baggage ?? {})
    .filter(([k]) => TOKEN.test(k))
    .map(([k, v]) => `${k}=${encodeURIComponent(v)}`);
  if (baggage.length > 0) headers.baggage = baggage.join(',');
  if (req.traceparent !== undefined && validTraceparent(req.traceparent))
    headers.traceparent = req.traceparent;
  return headers;
}
