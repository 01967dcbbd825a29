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
 * The channels of one proxy component (the xDS client, the CA client) to its control-plane
 * addresses, one per address, each made under the transport rule above. A TLS channel is made
 * from the mesh roots of one `MeshRoots` generation; when the roots move (the roots file
 * changed: a root rotated in or out), the next `get` of that address closes it and makes a new
 * one from the roots now held, so the next handshake trusts exactly the current mesh roots and
 * nothing else. Calls still waiting for a connection on the old channel end UNAVAILABLE (each
 * caller treats that as an unreachable address). `credentials` (tests) pins every channel.
 */
export class ControlPlaneChannels {
  readonly addresses: readonly string[];
  readonly #roots: MeshRoots | undefined;
  readonly #credentials: grpc.ChannelCredentials | undefined;
  readonly #options: grpc.ChannelOptions;
  readonly #channels: Array<{ client: grpc.Client; generation: number }>;

  constructor(
    addresses: readonly string[],
    opts: { roots?: MeshRoots; credentials?: grpc.ChannelCredentials; options?: grpc.ChannelOptions },
  ) {
    this.addresses = addresses;
    this.#roots = opts.roots;
    this.#credentials = opts.credentials;
    this.#options = opts.options ?? {};
    this.#channels = addresses.map((a) => this.#make(a));
  }

  /** The channel to `addresses[i]`, rebuilt first when it is TLS and the mesh roots moved since it was made. */
  get(i: number): grpc.Client {
    const address = this.addresses[i]!;
    const at = this.#channels[i]!;
    const roots = this.#roots;
    if (
      this.#credentials === undefined &&
      roots !== undefined &&
      roots.generation !== at.generation &&
      controlPlaneUsesTls(address)
    ) {
      at.client.close();
      this.#channels[i] = this.#make(address);
    }
    return this.#channels[i]!.client;
  }

  close(): void {
    for (const { client } of this.#channels) client.close();
  }

  #make(address: string): { client: grpc.Client; generation: number } {
    return {
      generation: this.#roots?.generation ?? 0,
      client: new grpc.Client(
        address,
        this.#credentials ?? controlPlaneCredentials(address, this.#roots),
        this.#options,
      ),
    };
  }
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
