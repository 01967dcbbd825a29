import { X509Certificate as NodeX509 } from 'node:crypto';
import { err, ok, type Result } from '../result.js';
import { parseSpiffeId } from './spiffe-id.js';
import { x509 } from './x509.js';

export interface SvidInfo {
  identity: string;
  notBefore: Date;
  notAfter: Date;
}

const SERVER_AUTH = '1.3.6.1.5.5.7.3.1';
const CLIENT_AUTH = '1.3.6.1.5.5.7.3.2';

/**
 * Checks a chain (leaf first) against the X.509-SVID rules (SPIFFE X509-SVID §4, §5):
 * the leaf has exactly one URI SAN holding a workload SPIFFE ID, is not a CA, has a critical
 * keyUsage with digitalSignature and without keyCertSign/cRLSign, EKU serverAuth and
 * clientAuth, and is inside its validity window; every link is signed by the next cert,
 * which must be a CA. With `roots`, the last cert must be one of them or signed by one.
 * Trust-anchoring in the data path is TLS's job; this is for the CA client and tests.
 */
export function validateSvid(
  chainPem: string[],
  opts: { now?: Date; roots?: string[] } = {},
): Result<SvidInfo> {
  if (!Array.isArray(chainPem) || chainPem.length === 0) return err(['empty certificate chain']);
  const parsed = parseChain(chainPem);
  if (!parsed.ok) return parsed;
  const [leaf, ...issuers] = parsed.value;
  const leafCheck = svidLeafReasons(leaf!);
  const reasons = [...leafCheck.reasons, ...validityReasons(leaf!, opts.now ?? new Date())];
  reasons.push(...linkReasons(parsed.value));
  for (const [i, issuer] of issuers.entries()) {
    if (issuer.getExtension(x509.BasicConstraintsExtension)?.ca !== true) {
      reasons.push(`chain[${i + 1}] is not a CA`);
    }
  }
  if (opts.roots !== undefined) reasons.push(...anchorReasons(parsed.value.at(-1)!, opts.roots));
  if (reasons.length > 0 || leafCheck.identity === undefined) return err(reasons);
  return ok({ identity: leafCheck.identity, notBefore: leaf!.notBefore, notAfter: leaf!.notAfter });
}

/**
 * The leaf-only SVID rules (no validity window, no chain): shared with the TLS layer,
 * which has already verified the chain and the dates when it calls this.
 */
export function svidLeafReasons(leaf: x509.X509Certificate): { identity?: string; reasons: string[] } {
  const reasons: string[] = [];
  const san = leaf.getExtension(x509.SubjectAlternativeNameExtension);
  const uris = san?.names.items.filter((n) => n.type === 'url').map((n) => n.value) ?? [];
  let identity: string | undefined;
  if (uris.length !== 1) reasons.push(`leaf must have exactly one URI SAN, has ${uris.length}`);
  else {
    const id = parseSpiffeId(uris[0]!);
    if (id.ok) identity = id.value.uri;
    else reasons.push(...id.error.map((r) => `URI SAN ${uris[0]}: ${r}`));
  }
  if (leaf.getExtension(x509.BasicConstraintsExtension)?.ca === true) reasons.push('leaf must not be a CA');
  const ku = leaf.getExtension(x509.KeyUsagesExtension);
  if (ku === null) reasons.push('leaf has no keyUsage');
  else {
    if (!ku.critical) reasons.push('keyUsage must be critical');
    if ((ku.usages & x509.KeyUsageFlags.digitalSignature) === 0)
      reasons.push('keyUsage lacks digitalSignature');
    if ((ku.usages & (x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign)) !== 0) {
      reasons.push('leaf keyUsage must not include keyCertSign or cRLSign');
    }
  }
  const eku = leaf.getExtension(x509.ExtendedKeyUsageExtension)?.usages.map(String) ?? [];
  if (!eku.includes(SERVER_AUTH) || !eku.includes(CLIENT_AUTH)) {
    reasons.push('extendedKeyUsage must include serverAuth and clientAuth');
  }
  return identity === undefined ? { reasons } : { identity, reasons };
}

/** Parses DER or PEM; never throws. */
export function parseCertificate(data: string | Uint8Array): Result<x509.X509Certificate> {
  try {
    return ok(new x509.X509Certificate(data as string));
  } catch (e) {
    return err([`unparseable certificate: ${(e as Error).message}`]);
  }
}

function parseChain(chainPem: string[]): Result<x509.X509Certificate[]> {
  const out: x509.X509Certificate[] = [];
  for (const [i, pem] of chainPem.entries()) {
    const cert = parseCertificate(pem);
    if (!cert.ok) return err(cert.error.map((r) => `chain[${i}]: ${r}`));
    out.push(cert.value);
  }
  return ok(out);
}

function validityReasons(leaf: x509.X509Certificate, now: Date): string[] {
  if (now < leaf.notBefore) return [`not valid before ${leaf.notBefore.toISOString()}`];
  if (now > leaf.notAfter) return [`expired at ${leaf.notAfter.toISOString()}`];
  return [];
}

function linkReasons(chain: x509.X509Certificate[]): string[] {
  const reasons: string[] = [];
  for (let i = 0; i + 1 < chain.length; i++) {
    const child = new NodeX509(Buffer.from(chain[i]!.rawData));
    const parent = new NodeX509(Buffer.from(chain[i + 1]!.rawData));
    if (!child.checkIssued(parent) || !child.verify(parent.publicKey)) {
      reasons.push(`chain[${i}] is not signed by chain[${i + 1}]`);
    }
  }
  return reasons;
}

function anchorReasons(last: x509.X509Certificate, roots: string[]): string[] {
  const top = new NodeX509(Buffer.from(last.rawData));
  for (const pem of roots) {
    try {
      const root = new NodeX509(pem);
      if (root.raw.equals(top.raw) || (top.checkIssued(root) && top.verify(root.publicKey))) return [];
    } catch {
      // An unparseable root anchors nothing; the bundle validates its own entries.
    }
  }
  return ['chain does not lead to a trusted root'];
}
