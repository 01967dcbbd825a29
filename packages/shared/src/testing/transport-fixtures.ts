import { readdirSync } from 'node:fs';
import * as net from 'node:net';
import { PassThrough } from 'node:stream';
import { HboneServer, type HboneServerOptions } from '../hbone/hbone-server.js';
import type { TunnelAccept } from '../hbone/inbound-session.js';
import { CertificateAuthority } from '../identity/ca.js';
import type { Credential } from '../identity/credential.js';
import { formatSpiffeId } from '../identity/spiffe-id.js';
import { TrustBundle } from '../identity/trust-bundle.js';
import { MeshMetrics } from '../metrics/index.js';

/** Test fixtures shared by the transport tests (and usable by ztunnel's): a CA, creds, an echo. */
export const TRUST_DOMAIN = 'zmesh.test';

export function sa(name: string, ns = 'default', td = TRUST_DOMAIN): string {
  return formatSpiffeId(td, ns, name);
}

export interface Pki {
  ca: CertificateAuthority;
  bundle: TrustBundle;
  server: Credential;
  client: Credential;
}

export async function makePki(trustDomain = TRUST_DOMAIN): Promise<Pki> {
  const ca = await CertificateAuthority.create({ trustDomain, rootTtlSeconds: 3600 });
  const bundle = new TrustBundle(trustDomain, [ca.rootPem]);
  const server = await ca.issue(sa('server', 'default', trustDomain), 600);
  const client = await ca.issue(sa('client', 'default', trustDomain), 600);
  return { ca, bundle, server, client };
}

/**
 * A TCP echo server that, when the client half-closes, sends `trailer` and then ends: it
 * proves data still flows server→client after the client's END_STREAM.
 */
export async function startEcho(
  trailer = Buffer.alloc(0),
): Promise<{ port: number; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    s.on('data', (chunk) => {
      if (!s.write(chunk)) s.pause();
    });
    s.on('drain', () => s.resume());
    s.on('end', () => s.end(trailer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Connects to the echo on 127.0.0.1:<authority port>, half-open so END_STREAM maps to FIN. */
export async function echoUpstream(port: number): Promise<TunnelAccept> {
  const upstream = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true });
  await new Promise<void>((resolve, reject) => upstream.once('connect', resolve).once('error', reject));
  return { upstream };
}

export async function startHbone(
  pki: Pki,
  echoPort: number,
  extra: Partial<HboneServerOptions> = {},
): Promise<{ server: HboneServer; port: number; metrics: MeshMetrics }> {
  const metrics = new MeshMetrics();
  const server = new HboneServer({
    credential: pki.server,
    bundle: pki.bundle,
    metrics,
    // Port 9 gets an in-memory echo (cheap for tests that open many streams); port 19 the
    // same after 100 ms, like an upstream connect in flight.
    onTunnel: async ({ request }) => {
      if (request.authority.port === 19) await new Promise((resolve) => setTimeout(resolve, 100));
      if (request.authority.port === 9 || request.authority.port === 19)
        return { upstream: new PassThrough() };
      return echoUpstream(echoPort);
    },
    ...extra,
  });
  const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
  return { server, port, metrics };
}

export function openFds(): number {
  return readdirSync('/proc/self/fd').length;
}

/** Waits until the fd count drops to `target` (sockets close asynchronously); returns the last count. */
export async function settleFds(target: number, timeoutMs = 2000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let n = openFds();
  while (n > target && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 25));
    n = openFds();
  }
  return n;
}

export async function metricValue(metrics: MeshMetrics, name: string, labels: Record<string, string> = {}) {
  const metric = (await metrics.registry.getMetricsAsJSON()).find((m) => m.name === name);
  const values = (metric?.values ?? []) as { value: number; labels: Record<string, string | number> }[];
  return values
    .filter((v) => Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want))
    .reduce((sum, v) => sum + v.value, 0);
}
