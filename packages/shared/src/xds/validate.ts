import { bytesToIp } from '../net/ip.js';

/**
 * Field checks shared by the decoders. Each appends `path: reason` to `reasons` and never
 * throws, so one pass reports every problem of a resource (a NACK lists them all).
 */
export type Reasons = string[];

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** SPIFFE ID spec §2.1: trust domain characters. */
const TRUST_DOMAIN = /^[a-z0-9._-]+$/;

export function nonEmpty(value: unknown, path: string, reasons: Reasons): string {
  if (typeof value !== 'string' || value === '') {
    reasons.push(`${path}: must not be empty`);
    return '';
  }
  return value;
}

/** Kubernetes namespace names are DNS-1123 labels, which also makes them legal in a SPIFFE path. */
export function namespaceName(value: unknown, path: string, reasons: Reasons): string {
  const s = nonEmpty(value, path, reasons);
  if (s !== '' && (s.length > 63 || !DNS_LABEL.test(s))) {
    reasons.push(`${path}: ${JSON.stringify(s)} is not a DNS-1123 label`);
  }
  return s;
}

export function serviceAccountName(value: unknown, path: string, reasons: Reasons): string {
  const s = nonEmpty(value, path, reasons);
  if (s !== '' && (s.length > 253 || !DNS_SUBDOMAIN.test(s))) {
    reasons.push(`${path}: ${JSON.stringify(s)} is not a DNS-1123 subdomain`);
  }
  return s;
}

export function trustDomain(value: unknown, path: string, reasons: Reasons): string {
  const s = nonEmpty(value, path, reasons);
  if (s !== '' && (s.length > 255 || !TRUST_DOMAIN.test(s))) {
    reasons.push(`${path}: ${JSON.stringify(s)} is not a SPIFFE trust domain`);
  }
  return s;
}

export function port(value: unknown, path: string, reasons: Reasons): number {
  const n = Number(value ?? 0);
  if (!Number.isInteger(n) || n < 1 || n > 65535) reasons.push(`${path}: ${n} is not a port in 1..65535`);
  return n;
}

export function ipBytes(value: unknown, path: string, reasons: Reasons): string {
  const bytes = value instanceof Uint8Array ? value : new Uint8Array();
  const ip = bytesToIp(bytes);
  if (ip === undefined) reasons.push(`${path}: ${bytes.length} bytes, want 4 or 16`);
  return ip ?? '';
}

/** Maps a wire enum number to its name, rejecting values this build does not know. */
export function enumName<T extends string>(
  names: readonly T[],
  value: unknown,
  path: string,
  reasons: Reasons,
): T {
  const n = Number(value ?? 0);
  const name = names[n];
  if (!Number.isInteger(n) || name === undefined) {
    reasons.push(`${path}: unknown value ${String(value)}`);
    return names[0]!;
  }
  return name;
}
