import { X509Certificate } from 'node:crypto';
import { err, ok, type Result } from '../result.js';
import { Certificate, KeyUsage, OIDS } from './certificate.js';
import { parseSpiffeId } from './spiffe-id.js';

export interface SvidInfo {
  identity: string;
  notBefore: Date;
  notAfter: Date;
}

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
    if (!issuer.isCa) {
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
export function svidLeafReasons(leaf: Certificate): { identity?: string; reasons: string[] } {
  const reasons: string[] = [];
  const uris = leaf.uriSans;
  let identity: string | undefined;
  if (uris.length !== 1) reasons.push(`leaf must have exactly one URI SAN, has ${uris.length}`);
  else {
    const id = parseSpiffeId(uris[0]!);
    if (id.ok) identity = id.value.uri;
    else reasons.push(...id.error.map((r) => `URI SAN ${uris[0]}: ${r}`));
  }
  reasons.push(...extensionReasons(leaf));
  return identity === undefined ? { reasons } : { identity, reasons };
}

/** basicConstraints, keyUsage and extKeyUsage of a leaf (SPIFFE X509-SVID §4.3-4.4). */
function extensionReasons(leaf: Certificate): string[] {
  const reasons: string[] = [];
  if (leaf.isCa) reasons.push('leaf must not be a CA');
  const ku = leaf.keyUsage;
  if (ku === undefined) reasons.push('leaf has no keyUsage');
  else {
    if (!ku.critical) reasons.push('keyUsage must be critical');
    if ((ku.flags & KeyUsage.digitalSignature) === 0) reasons.push('keyUsage lacks digitalSignature');
    if ((ku.flags & (KeyUsage.keyCertSign | KeyUsage.cRLSign)) !== 0) {
      reasons.push('leaf keyUsage must not include keyCertSign or cRLSign');
    }
  }
  const eku = leaf.extendedKeyUsage;
  if (!eku.includes(OIDS.serverAuth) || !eku.includes(OIDS.clientAuth)) {
    reasons.push('extendedKeyUsage must include serverAuth and clientAuth');
  }
  return reasons;
}

function parseChain(chainPem: string[]): Result<Certificate[]> {
  const out: Certificate[] = [];
  for (const [i, pem] of chainPem.entries()) {
    const cert = Certificate.parse(pem);
    if (!cert.ok) return err(cert.error.map((r) => `chain[${i}]: ${r}`));
    out.push(cert.value);
  }
  return ok(out);
}

function validityReasons(leaf: Certificate, now: Date): string[] {
  if (now < leaf.notBefore) return [`not valid before ${leaf.notBefore.toISOString()}`];
  if (now > leaf.notAfter) return [`expired at ${leaf.notAfter.toISOString()}`];
  return [];
}

function linkReasons(chain: Certificate[]): string[] {
  const reasons: string[] = [];
  for (let i = 0; i + 1 < chain.length; i++) {
    const child = chain[i]!.x509;
    const parent = chain[i + 1]!.x509;
    if (!child.checkIssued(parent) || !child.verify(parent.publicKey)) {
      reasons.push(`chain[${i}] is not signed by chain[${i + 1}]`);
    }
  }
  return reasons;
}

function anchorReasons(last: Certificate, roots: string[]): string[] {
  const top = last.x509;
  for (const pem of roots) {
    try {
      const root = new X509Certificate(pem);
      if (root.raw.equals(top.raw) || (top.checkIssued(root) && top.verify(root.publicKey))) return [];
    } catch {
      // An unparseable root anchors nothing; the bundle validates its own entries.
    }
  }
  return ['chain does not lead to a trusted root'];
}
