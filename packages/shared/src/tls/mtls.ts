import { createHash } from 'node:crypto';
import * as tls from 'node:tls';
import { ZmeshError } from '../errors/index.js';
import { Certificate } from '../identity/certificate.js';
import type { Credential } from '../identity/credential.js';
import { parseSpiffeId } from '../identity/spiffe-id.js';
import { svidLeafReasons } from '../identity/svid.js';
import type { TrustBundle } from '../identity/trust-bundle.js';
import { err, ok, type Result } from '../result.js';

export type ServerTlsOptions = tls.SecureContextOptions & {
  requestCert: true;
  rejectUnauthorized: true;
  minVersion: 'TLSv1.3';
  maxVersion: 'TLSv1.3';
  ALPNProtocols: ['h2'];
};

/**
 * The chain we present: leaf and intermediates. The root is left out (RFC 8446 §4.4.2
 * lets the peer's own anchor stand in for it); presenting it would change nothing.
 */
function presentedChain(cred: Credential): string {
  const chain = cred.certChainPem.length > 1 ? cred.certChainPem.slice(0, -1) : cred.certChainPem;
  return chain.join('\n');
}

/**
 * TLS 1.3 only, ALPN h2, client certificate required and verified against the bundle's
 * roots only (never the system store). The trust-domain rule needs the parsed SAN and is
 * applied after the handshake with `verifyPeerIdentity`.
 */
export function serverTlsOptions(cred: Credential, bundle: TrustBundle): ServerTlsOptions {
  return {
    key: cred.keyPem,
    cert: presentedChain(cred),
    ca: bundle.roots(),
    requestCert: true,
    rejectUnauthorized: true,
    minVersion: 'TLSv1.3',
    maxVersion: 'TLSv1.3',
    ALPNProtocols: ['h2'],
  };
}

interface ClientContext {
  /** The bundle's generation it was built at. */
  generation: number;
  context: tls.SecureContext;
}

const clientContexts = new WeakMap<Credential, WeakMap<TrustBundle, ClientContext>>();

/**
 * The client's TLS context (key, presented chain, the bundle's roots, TLS 1.3 only) for
 * `cred`, built once and shared by every connection dialled with it. tls.connect() without
 * one builds a context per connection: the key, chain and roots parsed again, and an
 * OpenSSL context with its own certificate store held for the connection's life. A rotated
 * credential is another object and a changed bundle another generation, so each gets its own
 * context; an old one lives as long as the connections that use it.
 */
export function clientSecureContext(cred: Credential, bundle: TrustBundle): tls.SecureContext {
  let byBundle = clientContexts.get(cred);
  if (byBundle === undefined) {
    byBundle = new WeakMap();
    clientContexts.set(cred, byBundle);
  }
  const cached = byBundle.get(bundle);
  if (cached?.generation === bundle.generation) return cached.context;
  const context = tls.createSecureContext({
    key: cred.keyPem,
    cert: presentedChain(cred),
    ca: bundle.roots(),
    minVersion: 'TLSv1.3',
    maxVersion: 'TLSv1.3',
  });
  byBundle.set(bundle, { generation: bundle.generation, context });
  return context;
}

/**
 * Client side: the server must present an SVID from a bundle root whose one URI SAN is one
 * of `expectedIdentities` (the destination's identities from config, docs/design.md §4). Host
 * names play no part: the address was chosen by config, the identity is what is checked.
 */
export function clientTlsOptions(
  cred: Credential,
  bundle: TrustBundle,
  expectedIdentities: string[],
): tls.ConnectionOptions {
  const expected = new Set(expectedIdentities);
  return {
    secureContext: clientSecureContext(cred, bundle),
    rejectUnauthorized: true,
    ALPNProtocols: ['h2'],
    checkServerIdentity: (_host, cert) => {
      const id = identityOfDer(cert.raw, bundle.trustDomain);
      if (!id.ok) return id.error;
      if (expected.has(id.value)) return undefined;
      return new ZmeshError('ZM_ERR_TLS_PEER_IDENTITY', {
        actual: id.value,
        expected: [...expected].join(','),
      });
    },
  };
}

/**
 * The verified peer's SPIFFE ID, or the reasons there is none. Callers must use this
 * after the handshake; `rejectUnauthorized` has already checked chain and dates.
 */
export function peerIdentity(socket: tls.TLSSocket, trustDomain: string): Result<string> {
  const id = verifyPeerIdentity(socket, trustDomain);
  return id.ok ? id : err([id.error.message]);
}

/** As `peerIdentity`, with the error code that says which rule failed. */
export function verifyPeerIdentity(socket: tls.TLSSocket, trustDomain: string): Result<string, ZmeshError> {
  if (!socket.authorized) {
    return err(
      new ZmeshError('ZM_ERR_CERT_INVALID', { reason: `peer not authorized: ${socket.authorizationError}` }),
    );
  }
  const cert = socket.getPeerX509Certificate();
  if (cert === undefined)
    return err(new ZmeshError('ZM_ERR_CERT_INVALID', { reason: 'peer sent no certificate' }));
  return identityOfDer(cert.raw, trustDomain);
}

/**
 * Peer certificates checked lately, by trust domain and SHA-256 of the DER, with what
 * they proved. The check is a pure function of the two (dates and chain are TLS's), and
 * a new HBONE session checks its peer's leaf on both ends of a node-local hop (three
 * parses, ~0.2-0.3 ms each): work a tenant's first burst of connects would otherwise
 * put in front of every other tenant's bytes.
 * Least recently used leaves first; a few hundred peers is a large node's working set.
 */
const checkedPeers = new Map<string, Result<string, ZmeshError>>();
export const CHECKED_PEERS_KEPT = 256;

/** For tests: how many peer certificates `identityOfDer` remembers now. */
export function checkedPeerCount(): number {
  return checkedPeers.size;
}

function identityOfDer(der: Buffer, trustDomain: string): Result<string, ZmeshError> {
  const key = `${trustDomain} ${createHash('sha256').update(der).digest('base64')}`;
  const known = checkedPeers.get(key);
  if (known !== undefined) {
    checkedPeers.delete(key);
    checkedPeers.set(key, known);
    return known;
  }
  const result = checkDer(der, trustDomain);
  if (checkedPeers.size >= CHECKED_PEERS_KEPT) checkedPeers.delete(checkedPeers.keys().next().value!);
  checkedPeers.set(key, result);
  return result;
}

function checkDer(der: Buffer, trustDomain: string): Result<string, ZmeshError> {
  const cert = Certificate.parse(der);
  if (!cert.ok) return err(new ZmeshError('ZM_ERR_CERT_INVALID', { reason: cert.error.join('; ') }));
  const leaf = svidLeafReasons(cert.value);
  if (leaf.identity === undefined || leaf.reasons.length > 0) {
    return err(new ZmeshError('ZM_ERR_CERT_INVALID', { reason: leaf.reasons.join('; ') }));
  }
  const id = parseSpiffeId(leaf.identity);
  if (!id.ok || id.value.trustDomain !== trustDomain) {
    return err(new ZmeshError('ZM_ERR_TLS_PEER_TRUST_DOMAIN', { actual: leaf.identity, trustDomain }));
  }
  return ok(leaf.identity);
}
