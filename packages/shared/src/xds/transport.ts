import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { ZmeshError } from '../errors/zmesh-error.js';

/**
 * How a proxy reaches the control plane (docs/xds.md, Transport). One rule, by address:
 * `unix:<path>` and a loopback host (127.0.0.0/8, ::1, localhost) are plaintext; every
 * other host is TLS, verified against the mesh roots the proxy already loads
 * (`--roots-file`), with the dialled host as the expected SAN (a DNS name among the control
 * plane's `--serving-dns`, or its listen IP). No scheme or flag turns TLS off elsewhere.
 */

/** The mesh roots, re-read when `generation` moves (the proxies' TrustBundle). */
export interface MeshRoots {
  roots(): string[];
  readonly generation: number;
}

export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** The host of `host:port`, `[v6]:port` or a bare host; undefined for `unix:`. */
export function addressHost(address: string): string | undefined {
  if (address.startsWith('unix:')) return undefined;
  const v6 = /^\[([^\]]+)\](?::\d+)?$/.exec(address);
  if (v6) return v6[1];
  const i = address.lastIndexOf(':');
  return i > 0 && address.indexOf(':') === i ? address.slice(0, i) : address;
}

/** True when the rule above dials `address` with TLS. */
export function controlPlaneUsesTls(address: string): boolean {
  const host = addressHost(address);
  return host !== undefined && !isLoopbackHost(host);
}

/**
 * The channel credentials for one control-plane address: insecure on loopback and Unix
 * sockets; otherwise TLS trusting only `roots` (never the system store) and requiring the
 * dialled host among the certificate's SANs. Throws ZM_ERR_XDS_TLS_REFUSED when a TLS
 * address has no roots to verify against.
 */
export function controlPlaneCredentials(
  address: string,
  roots: MeshRoots | undefined,
): grpc.ChannelCredentials {
  if (!controlPlaneUsesTls(address)) return grpc.credentials.createInsecure();
  const pems = roots?.roots() ?? [];
  if (pems.length === 0)
    throw new ZmeshError('ZM_ERR_XDS_TLS_REFUSED', {
      address,
      reason: 'no mesh roots to verify it against (--roots-file)',
    });
  return grpc.credentials.createSsl(Buffer.from(pems.join('\n')), null, null, {
    checkServerIdentity: (host: string, cert: PeerCertificate) => checkServerIdentity(host, cert),
  });
}

/**
 * A failed call or stream to a TLS address whose status says the handshake failed: an
 * unknown root, a name mismatch, an expired certificate, or a plaintext server (which
 * cannot complete a TLS handshake). Such a server is refused, not merely "unreachable".
 */
export function tlsFailure(address: string, status: { code: number; details?: string }): string | undefined {
  if (!controlPlaneUsesTls(address) || status.code !== grpc.status.UNAVAILABLE) return undefined;
  const details = status.details ?? '';
  if (!/certificate|SSL|TLS|altnames|Hostname\/IP|secure|wrong version|self.signed|handshake/i.test(details))
    return undefined;
  const reason = details
    .replace(/^No connection established\. Last error: /, '')
    .replace(/^Error: /, '')
    .replace(/\. Resolution note:.*$/s, '')
    .split('\n')[0]!
    .trim();
  return /wrong version number/.test(reason) ? 'not a TLS server (wrong version number)' : reason;
}
