import { webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';
import { err, ok, type Result } from '../result.js';

const SUBJECT_ALT_NAME_OID = '2.5.29.17';
/** A CSR is a few hundred bytes; anything far larger is not one we should parse. */
export const MAX_CSR_PEM_BYTES = 16 * 1024;

/**
 * What the CA service needs from a certificate request: proof that the requester holds
 * the key (the CSR's self-signature, RFC 2986 §4.2) and the URI SANs it asks for.
 */
export async function csrUriSans(pem: string): Promise<Result<string[]>> {
  if (pem.length > MAX_CSR_PEM_BYTES) return err([`csr: larger than ${MAX_CSR_PEM_BYTES} bytes`]);
  let csr: x509.Pkcs10CertificateRequest;
  try {
    csr = new x509.Pkcs10CertificateRequest(pem);
  } catch (e) {
    return err([`csr: not a PKCS#10 request: ${(e as Error).message}`]);
  }
  try {
    if (!(await csr.verify(webcrypto as unknown as Parameters<typeof csr.verify>[0])))
      return err(['csr: signature does not verify']);
    const ext = csr.getExtension(SUBJECT_ALT_NAME_OID);
    if (ext === null) return ok([]);
    const san = new x509.SubjectAlternativeNameExtension(ext.rawData);
    return ok(san.names.items.filter((n) => n.type === 'url').map((n) => n.value));
  } catch (e) {
    return err([`csr: cannot verify: ${(e as Error).message}`]);
  }
}
