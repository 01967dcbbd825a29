import { createServer, type Server, type Socket } from 'node:net';
import { CertificateAuthority, TrustBundle, type Workload } from '@zmesh/shared';
import { type ForwardConfig, LocalCaSigner, parseLocalConfig, Ztunnel } from '@zmesh/ztunnel';

/**
 * Two ztunnels ("node-a", "node-b") in this process, explicit-proxy mode, each on its own
 * loopback address inside `127.<block>.0.0/16` so that test files running in parallel
 * never share a port.
 */
export interface MeshFixture {
  ca: CertificateAuthority;
  bundle: TrustBundle;
  a: Ztunnel;
  b: Ztunnel;
  client: Workload;
  server: Workload;
  ip: { a: string; b: string; client: string; server: string; vip: string };
  stop(): Promise<void>;
}

export async function startMesh(
  block: number,
  forwards: Array<{ port: number; to: string }>,
): Promise<MeshFixture> {
  const ip = {
    a: `127.${block}.0.2`,
    b: `127.${block}.0.3`,
    client: `127.${block}.1.1`,
    server: `127.${block}.2.1`,
    vip: `127.${block}.96.10`,
  };
  const yaml = `
workloads:
  - { name: client, namespace: team-a, serviceAccount: client, addresses: [${ip.client}], node: node-a }
  - name: server
    namespace: team-b
    serviceAccount: server
    addresses: [${ip.server}]
    node: node-b
    services: { team-b/server.team-b.svc.cluster.local: [{ servicePort: 80, targetPort: 7000 }] }
services:
  - { name: server, namespace: team-b, addresses: [${ip.vip}], ports: [{ servicePort: 80, targetPort: 7000 }] }
forwards:
${forwards.map((f) => `  - { workload: Kubernetes//Pod/team-a/client, listen: "${ip.client}:${f.port}", destination: "${f.to}" }`).join('\n')}
`;
  const config = parseLocalConfig(yaml, 'fixture');
  if (!config.ok) throw new Error(config.error.join('; '));
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const bundle = new TrustBundle('cluster.local', [ca.rootPem]);
  const make = (node: string, address: string, forwards: ForwardConfig[]) => {
    const z = new Ztunnel({
      node,
      address,
      bundle,
      signer: new LocalCaSigner(ca),
      defaultMetrics: false,
      pool: { idleTimeoutMs: 2000 },
    });
    return { z, update: { ...config.value, forwards } };
  };
  const a = make('node-a', ip.a, config.value.forwards);
  const b = make('node-b', ip.b, []);
  await a.z.start();
  await b.z.start();
  await a.z.applyConfig(a.update);
  await b.z.applyConfig(b.update);
  await waitFor(() => a.z.readiness().ready && b.z.readiness().ready, 10_000);
  const workloads = config.value.workloads;
  return {
    ca,
    bundle,
    a: a.z,
    b: b.z,
    client: workloads[0]!,
    server: workloads[1]!,
    ip,
    stop: async () => {
      await a.z.stop();
      await b.z.stop();
    },
  };
}

export async function waitFor(cond: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** An echo server that keeps half-close: it ends its side when the client ends. */
export function startEcho(host: string, port: number): Promise<Server & { sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
    s.on('error', () => {});
    s.pipe(s);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => resolve(Object.assign(server, { sockets })));
  });
}
