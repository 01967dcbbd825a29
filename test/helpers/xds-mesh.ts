import { mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ControlPlane, startAdminServer } from '@zmesh/control-plane';
import { CertificateAuthority, TrustBundle } from '@zmesh/shared';
import { CaClient, drainOnCertChange, type ForwardConfig, XdsConfigSource, Ztunnel } from '@zmesh/ztunnel';
import { waitFor } from './mesh-fixture.js';

/**
 * A real control plane (xDS + CA + admin) and two real ztunnels ("node-a", "node-b") in
 * explicit-proxy mode, each fed by an XdsConfigSource and signing through a CaClient.
 * Addresses live in 127.<block>.0.0/16: proxies .0.x, node-a pods .1.x, node-b pods .2.x,
 * waypoint .3.x, VIPs .96.x.
 */
export interface XdsMesh {
  ca: CertificateAuthority;
  cp: ControlPlane;
  /** Holds node-a.snapshot and node-b.snapshot. */
  dir: string;
  xdsPort: number;
  adminUrl: string;
  nodes: Record<'a' | 'b', MeshNode>;
  ip: (suffix: string) => string;
  tokenFor(node: string): string;
  /** Starts a ztunnel for `node` (another proxy address) against this control plane. */
  startNode(node: string, address: string, extra?: NodeExtra): Promise<MeshNode>;
  stopControlPlane(): Promise<void>;
  stop(): Promise<void>;
}

export interface MeshNode {
  z: Ztunnel;
  source: XdsConfigSource;
  ca: CaClient;
  bundle: TrustBundle;
  stop(): Promise<void>;
}

interface NodeExtra {
  forwards?: ForwardConfig[];
  snapshotPath?: string;
  xdsAddress?: string;
  token?: string;
  certTtlSeconds?: number;
}

export interface XdsMeshOptions {
  /** Forwards for the client on node-a: listen port on the client's IP → destination. */
  forwards: Array<{ port: number; to: string }>;
  certTtlSeconds?: number;
  /** YAML documents beyond the two namespaces, client, server and its Service. */
  extraDocs?: unknown[];
  /** Authorization last-known-good limit of every node (default: the certificate lifetime). */
  authzMaxStalenessMs?: number;
}

export const TRUST_DOMAIN = 'cluster.local';

export function baseDocs(block: number): unknown[] {
  const ns = (name: string) => ({
    kind: 'Namespace',
    metadata: { name, labels: { 'istio.io/dataplane-mode': 'ambient' } },
  });
  return [
    ns('team-a'),
    ns('team-b'),
    podDoc('team-a', 'client', `127.${block}.1.1`, 'node-a'),
    podDoc('team-b', 'server', `127.${block}.2.1`, 'node-b', { app: 'server' }),
    {
      kind: 'Service',
      metadata: { name: 'server', namespace: 'team-b' },
      spec: {
        clusterIP: `127.${block}.96.10`,
        selector: { app: 'server' },
        ports: [{ port: 80, targetPort: 7000 }],
      },
    },
  ];
}

export function podDoc(
  namespace: string,
  name: string,
  ip: string,
  node: string,
  labels: Record<string, string> = {},
): unknown {
  return {
    kind: 'Pod',
    metadata: { name, namespace, labels: { app: name, ...labels } },
    spec: { serviceAccountName: name, nodeName: node },
    status: { podIP: ip },
  };
}

export async function startXdsMesh(block: number, opts: XdsMeshOptions): Promise<XdsMesh> {
  const ip = (suffix: string) => `127.${block}.${suffix}`;
  const ca = await CertificateAuthority.create({ trustDomain: TRUST_DOMAIN });
  const dir = await mkdtemp(join(tmpdir(), `zmesh-xds-${block}-`));
  let cpUp = true;
  const cp = new ControlPlane({
    trustDomain: TRUST_DOMAIN,
    tokenKey: Buffer.alloc(32, block),
    signCsr: (csr, o) => ca.signCsr(csr, o),
    ...(opts.certTtlSeconds ? { maxCertTtlSeconds: opts.certTtlSeconds } : {}),
  });
  const applied = cp.store.apply([...baseDocs(block), ...(opts.extraDocs ?? [])]);
  if (!applied.ok) throw new Error(applied.error.join('; '));
  const xdsPort = await cp.start(0, ip('0.1'));
  const admin = await startAdminServer(cp, 0, ip('0.1'));
  const started: MeshNode[] = [];

  const startNode = async (node: string, address: string, extra: NodeExtra = {}): Promise<MeshNode> => {
    const xds = extra.xdsAddress ?? `${ip('0.1')}:${xdsPort}`;
    const token = extra.token ?? cp.issueNodeToken(node);
    const bundle = new TrustBundle(TRUST_DOMAIN, [ca.rootPem]);
    const caClient = new CaClient({ address: xds, token: () => token, bundle, timeoutMs: 2000 });
    const z = new Ztunnel({
      node,
      address,
      bundle,
      signer: caClient,
      defaultMetrics: false,
      pool: { idleTimeoutMs: 2000 },
      certTtlSeconds: extra.certTtlSeconds ?? opts.certTtlSeconds ?? 3600,
    });
    const undrain = drainOnCertChange(z.certs, z.pool);
    const source = new XdsConfigSource({
      ztunnel: z,
      address: xds,
      node,
      proxyAddress: address,
      token,
      backoff: { initialMs: 50, maxMs: 500 },
      ...(opts.authzMaxStalenessMs ? { authzMaxStalenessMs: opts.authzMaxStalenessMs } : {}),
      ...(extra.forwards ? { forwards: extra.forwards } : {}),
      ...(extra.snapshotPath ? { snapshotPath: extra.snapshotPath } : {}),
    });
    await z.start();
    await source.start();
    const handle: MeshNode = {
      z,
      source,
      ca: caClient,
      bundle,
      stop: async () => {
        undrain();
        await source.stop();
        await z.stop();
        caClient.close();
      },
    };
    started.push(handle);
    return handle;
  };

  const forwards: ForwardConfig[] = opts.forwards.map((f) => ({
    workloadUid: 'Kubernetes//Pod/team-a/client',
    listen: { host: ip('1.1'), port: f.port },
    destination: {
      host: f.to.slice(0, f.to.lastIndexOf(':')),
      port: Number(f.to.slice(f.to.lastIndexOf(':') + 1)),
    },
  }));
  const a = await startNode('node-a', ip('0.2'), { forwards, snapshotPath: join(dir, 'node-a.snapshot') });
  const b = await startNode('node-b', ip('0.3'), { snapshotPath: join(dir, 'node-b.snapshot') });
  await waitFor(
    () => a.source.synced && b.source.synced && a.z.readiness().ready && b.z.readiness().ready,
    10_000,
  );
  const stopControlPlane = async () => {
    if (!cpUp) return;
    cpUp = false;
    await admin.close();
    await cp.stop();
  };
  return {
    ca,
    cp,
    dir,
    xdsPort,
    adminUrl: `http://${ip('0.1')}:${admin.port}`,
    nodes: { a, b },
    ip,
    tokenFor: (node) => cp.issueNodeToken(node),
    startNode,
    stopControlPlane,
    stop: async () => {
      for (const n of started.reverse()) await n.stop();
      await stopControlPlane();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Sends a probe through `host:port` and resolves true only if it comes back: the tunnel
 * carried it end to end. A refusal (reset, close, silence for `timeoutMs`) is false.
 */
export function echoes(host: string, port: number, timeoutMs = 2000): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = `probe-${Math.random()}`;
    const socket = connect({ host, port });
    let got = '';
    const done = (value: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(value);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.on('data', (d: Buffer) => {
      got += d.toString();
      if (got === probe) done(true);
    });
    socket.once('error', () => done(false));
    socket.once('close', () => done(false));
    socket.once('connect', () => socket.write(probe));
  });
}

export function workloadUids(z: Ztunnel): string[] {
  return (z.configDump() as { workloads: Array<{ uid: string }> }).workloads.map((w) => w.uid);
}
