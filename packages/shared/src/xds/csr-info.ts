import { parseCsr } from '../identity/csr.js';
import { err, ok, type Result } from '../result.js';

export { MAX_CSR_PEM_BYTES } from '../identity/csr.js';

/**
 * What the CA service needs from a PKCS#10 request (RFC 2986): proof that the requester
 * holds the key (the self-signature, §4.2) and the URI SANs of its extensionRequest.
 */
export function csrUriSans(pem: string): Result<string[]> {
  const csr = parseCsr(pem);
  return csr.ok ? ok(csr.value.uriSans) : err(csr.error);
}

/** The CSR's SubjectPublicKeyInfo as DER (RFC 2986 §4.1), so a returned leaf can be matched to it. */
export function csrPublicKey(pem: string): Result<Buffer> {
  const csr = parseCsr(pem);
  return csr.ok ? ok(csr.value.spki) : err(csr.error);
}
