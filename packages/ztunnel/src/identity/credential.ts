import { X509Certificate } from 'node:crypto';
import type { Credential } from '@zmesh/shared';

/** A key and the chain the CA returned; validity is read from the leaf, not from what was asked for. */
export function toCredential(identity: string, keyPem: string, chain: string[]): Credential {
  const leaf = new X509Certificate(chain[0]!);
  return {
    identity,
    keyPem,
    certChainPem: chain,
    notBefore: new Date(leaf.validFrom),
    notAfter: new Date(leaf.validTo),
  };
}
