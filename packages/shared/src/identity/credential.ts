import { buildCsr } from './certificate.js';
import { toPem } from './der.js';
import { exportKeyPem, generateP256, spkiOf } from './keys.js';

/** A workload's key and its X.509-SVID chain. Invariant: certChainPem[0] certifies keyPem. */
export interface Credential {
  /** SPIFFE ID carried as the leaf's one URI SAN. */
  identity: string;
  /** PKCS#8 PEM, ECDSA P-256. */
  keyPem: string;
  /** Leaf first, root last (the CA API's order, docs/design.md §4). */
  certChainPem: string[];
  notBefore: Date;
  notAfter: Date;
}

/**
 * A fresh P-256 key and a CSR naming `identity` as its URI SAN. The CA ignores what the CSR
 * asks for and certifies the identity it was told; the SAN is a courtesy for auditing.
 */
export async function generateCsr(identity: string): Promise<{ keyPem: string; csrPem: string }> {
  const { privateKey, publicKey } = await generateP256();
  const csr = buildCsr(identity, privateKey, spkiOf(publicKey));
  return { keyPem: exportKeyPem(privateKey), csrPem: toPem(csr, 'CERTIFICATE REQUEST') };
}
