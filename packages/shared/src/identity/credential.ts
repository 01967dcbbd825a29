import { EC_P256, exportKeyPem, type KeyPair, subtle, x509 } from './x509.js';

/** A workload's key and its X.509-SVID chain. Invariant: certChainPem[0] certifies keyPem. */
export interface Credential {
  /** SPIFFE ID carried as the leaf's one URI SAN. */
  identity: string;
  /** PKCS#8 PEM, ECDSA P-256. */
  keyPem: string;
  /** Leaf first, root last (the CA API's order, DESIGN §4). */
  certChainPem: string[];
  notBefore: Date;
  notAfter: Date;
}

/**
 * A fresh P-256 key and a CSR naming `identity` as its URI SAN. The CA ignores what the CSR
 * asks for and certifies the identity it was told; the SAN is a courtesy for auditing.
 */
export async function generateCsr(identity: string): Promise<{ keyPem: string; csrPem: string }> {
  const keys = (await subtle.generateKey(EC_P256, true, ['sign', 'verify'])) as KeyPair;
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: '',
    keys,
    signingAlgorithm: EC_P256,
    extensions: [new x509.SubjectAlternativeNameExtension([{ type: 'url', value: identity }])],
  });
  return { keyPem: await exportKeyPem(keys.privateKey), csrPem: csr.toString('pem') };
}
