import { err, ok, type Result } from '../result.js';

/** A parsed workload SPIFFE ID (SPIFFE-ID spec §2). `uri` is the exact input, already canonical. */
export interface SpiffeId {
  uri: string;
  trustDomain: string;
  /** Starts with '/', never empty for a workload ID. */
  path: string;
  /** Set only when the path is exactly `/ns/<ns>/sa/<sa>` (Istio's convention). */
  namespace?: string;
  serviceAccount?: string;
}

const SCHEME = 'spiffe://';
/** SPIFFE-ID §2.1: trust domain names are at most 255 bytes. */
export const MAX_TRUST_DOMAIN_BYTES = 255;
/** SPIFFE-ID §2.3: a SPIFFE ID is at most 2048 bytes. */
export const MAX_SPIFFE_ID_BYTES = 2048;

const TRUST_DOMAIN_CHARS = /^[a-z0-9._-]+$/;
const SEGMENT_CHARS = /^[A-Za-z0-9._-]+$/;

/**
 * Validates a workload SPIFFE ID. Decoding outside input never throws: every reason found
 * is returned. Upper-case schemes and trust domains are refused rather than folded, since
 * certificates carry the ID verbatim and comparisons are byte-wise (SPIFFE-ID §2.1, §2.2).
 */
export function parseSpiffeId(uri: string, opts: { allowTrustDomainOnly?: boolean } = {}): Result<SpiffeId> {
  if (typeof uri !== 'string' || uri.length === 0) return err(['empty SPIFFE ID']);
  const reasons: string[] = [];
  if (Buffer.byteLength(uri) > MAX_SPIFFE_ID_BYTES) reasons.push(`longer than ${MAX_SPIFFE_ID_BYTES} bytes`);
  if (!uri.startsWith(SCHEME)) return err([...reasons, 'scheme must be spiffe:// (lowercase)']);
  if (uri.includes('?')) reasons.push('query is not allowed');
  if (uri.includes('#')) reasons.push('fragment is not allowed');
  const rest = uri.slice(SCHEME.length).split(/[?#]/, 1)[0]!;
  const slash = rest.indexOf('/');
  const trustDomain = slash === -1 ? rest : rest.slice(0, slash);
  const path = slash === -1 ? '' : rest.slice(slash);
  reasons.push(...trustDomainReasons(trustDomain));
  reasons.push(...pathReasons(path, opts.allowTrustDomainOnly === true));
  if (reasons.length > 0) return err(reasons);
  const id: SpiffeId = { uri, trustDomain, path };
  const istio = /^\/ns\/([^/]+)\/sa\/([^/]+)$/.exec(path);
  if (istio) {
    id.namespace = istio[1]!;
    id.serviceAccount = istio[2]!;
  }
  return ok(id);
}

/** Reasons a trust domain name is invalid (SPIFFE-ID §2.1); empty when valid. */
export function trustDomainReasons(trustDomain: string): string[] {
  if (trustDomain.length === 0) return ['trust domain is empty'];
  const reasons: string[] = [];
  if (trustDomain.includes('@')) reasons.push('userinfo is not allowed');
  if (trustDomain.includes(':')) reasons.push('port is not allowed');
  if (Buffer.byteLength(trustDomain) > MAX_TRUST_DOMAIN_BYTES) {
    reasons.push(`trust domain longer than ${MAX_TRUST_DOMAIN_BYTES} bytes`);
  }
  if (reasons.length === 0 && !TRUST_DOMAIN_CHARS.test(trustDomain)) {
    reasons.push('trust domain may contain only lowercase letters, digits, ".", "-" and "_"');
  }
  return reasons;
}

function pathReasons(path: string, allowEmpty: boolean): string[] {
  if (path === '') return allowEmpty ? [] : ['a workload ID needs a path'];
  const reasons: string[] = [];
  for (const segment of path.slice(1).split('/')) {
    if (segment === '') reasons.push('path segments must not be empty');
    else if (segment === '.' || segment === '..') reasons.push(`path segment "${segment}" is not allowed`);
    else if (!SEGMENT_CHARS.test(segment)) {
      reasons.push('path segments may contain only letters, digits, ".", "-" and "_"');
    }
  }
  return [...new Set(reasons)];
}

/** `spiffe://<td>/ns/<ns>/sa/<sa>`; the inputs are not validated here, parse the result to check. */
export function formatSpiffeId(trustDomain: string, namespace: string, serviceAccount: string): string {
  return `${SCHEME}${trustDomain}/ns/${namespace}/sa/${serviceAccount}`;
}
