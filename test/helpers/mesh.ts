import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ControlPlane, startAdminServer } from '@zmesh/control-plane';
import { type AdminTarget, CertificateAuthority, TrustBundle, type Workload } from '@zmesh/shared';
import {
  CaClient,
  type ConfigUpdate,
  drainOnCertChange,
  type ForwardConfig,
  LocalCaSigner,
  parseLocalConfig,
  XdsConfigSource,
  Ztunnel,
  type ZtunnelOptions,
} from '@zmesh/ztunnel';

/**
 * The tests' one local mesh: two ztunnels ("node-a", "node-b") in this process, in
 * explicit-proxy mode, each on its own loopback address inside `127.<block>.0.0/16` so that
 * test files running in parallel never share a port. Their config comes either from a local
 * config applied directly (signing with the CA in this process) or, with `controlPlane`,
 * from a real control plane (xDS + CA + admin) through an XdsConfigSource and a CaClient.
 * The waypoint fixture (waypoint-fixture.ts) adds an in-process waypoint on top.
 *
 * Addresses: control plane .0.1, proxies .0.2 and .0.3, node-a pods .1.x (client .1.1),
 * node-b pods .2.x (server .2.1), waypoint .3.x, VIPs .96.x (the server's .96.10).
 */
export interface Mesh {
  ca: CertificateAuthority;
  bundle: TrustBundle;
  a: Ztunnel;
  b: Ztunnel;
  nodes: Record<'a' | 'b', MeshNode>;
  /** The default topology's workloads (local mode; in control-plane mode, from the same YAML). */
  client: Workload;
  server: Workload;
  ip: { a: string; b: string; client: string; server: string; vip: string };
  /** `127.<block>.<suffix>`. */
  addr(suffix: string): string;
  stop(): Promise<void>;
}

/** The control-plane mode's extras. */
export interface XdsMesh extends Mesh {
  nodes: Record<'a' | 'b', XdsNode>;
  cp: ControlPlane;
  /** Holds node-a.snapshot and node-b.snapshot. */
  dir: string;
  xdsPort: number;
  /** The control plane's admin API (its Unix socket), for `adminRequest`. */
  admin: AdminTarget;
  tokenFor(node: string): string;
  /** Starts a ztunnel for `node` (another proxy address) against this control plane. */
  startNode(node: string, address: string, extra?: NodeExtra): Promise<XdsNode>;
  stopControlPlane(): Promise<void>;
}

interface MeshNode {
  z: Ztunnel;
  bundle: TrustBundle;
  stop(): Promise<void>;
}

/** A node fed by the control plane. */
export interface XdsNode extends MeshNode {
  source: XdsConfigSource;
  ca: CaClient;
}

interface NodeExtra {
  forwards?: ForwardConfig[];
  snapshotPath?: string;
  xdsAddress?: string;
  token?: string;
  certTtlSeconds?: number;
}

export interface MeshOptions {
  /** Forwards for the client on node-a: listen port on the client's IP → destination. */
  forwards: Array<{ port: number; to: string }>;
  /**
   * Local mode only: the config both nodes get instead of the default topology (node-a
   * also gets its `forwards`, replacing the option's).
   */
  config?: ConfigUpdate;
  /** Feed the nodes from a real control plane instead of a local config. */
  controlPlane?: ControlPlaneOptions;
  /** Local mode: options for a node's ztunnel beyond the fixture's own. */
  ztunnel?: (node: string) => Partial<ZtunnelOptions>;
}

export interface ControlPlaneOptions {
  certTtlSeconds?: number;
  /** YAML documents beyond the two namespaces, client, server and its Service. */
  extraDocs?: unknown[];
  /** Authorization last-known-good limit of every node (default: the certificate lifetime). */
  authzMaxStalenessMs?: number;
}

const TRUST_DOMAIN = 'cluster.local';
const NODE_POOL = { idleTimeoutMs: 2000 };

export function startMesh(
  block: number,
  opts: MeshOptions & { controlPlane: ControlPlaneOptions },
): Promise<XdsMesh>;
export function startMesh(block: number, opts: MeshOptions): Promise<Mesh>;
export async function startMesh(block: number, opts: MeshOptions): Promise<Mesh | XdsMesh> {
  const addr = (suffix: string) => `127.${block}.${suffix}`;
  const ip = { a: addr('0.2'), b: addr('0.3'), client: addr('1.1'), server: addr('2.1'), vip: addr('96.10') };
  const topology = parseLocalConfig(localYaml(ip, opts.forwards), 'fixture');
  if (!topology.ok) throw new Error(topology.error.join('; '));
  const [client, server] = topology.value.workloads as [Workload, Workload];
  const ca = await CertificateAuthority.create({ trustDomain: TRUST_DOMAIN });
  const bundle = new TrustBundle(TRUST_DOMAIN, [ca.rootPem]);
  const base = { ca, bundle, client, server, ip, addr };
  if (opts.controlPlane) return startWithControlPlane(block, opts, opts.controlPlane, base);

  const config = opts.config ?? topology.value;
  const make = async (node: string, address: string, forwards: readonly ForwardConfig[]) => {
    const z = new Ztunnel({
      node,
      address,
      bundle,
      signer: new LocalCaSigner(ca),
      defaultMetrics: false,
      pool: NODE_POOL,
      ...opts.ztunnel?.(node),
    });
    await z.start();
    await z.applyConfig({ ...config, forwards });
    return { z, bundle, stop: () => z.stop() };
  };
  const a = await make('node-a', ip.a, config.forwards ?? []);
  const b = await make('node-b', ip.b, []);
  await waitFor(() => a.z.readiness().ready && b.z.readiness().ready, 10_000);
  return {
    ...base,
    a: a.z,
    b: b.z,
    nodes: { a, b },
    stop: async () => {
      await a.stop();
      await b.stop();
    },
  };
}

async function startWithControlPlane(
  block: number,
  opts: MeshOptions,
  cpOpts: ControlPlaneOptions,
  base: Pick<Mesh, 'ca' | 'bundle' | 'client' | 'server' | 'ip' | 'addr'>,
): Promise<XdsMesh> {
  const { ca, addr } = base;
  const dir = await mkdtemp(join(tmpdir(), `zmesh-xds-${block}-`));
  let cpUp = true;
  const cp = new ControlPlane({
    trustDomain: TRUST_DOMAIN,
    tokenKey: Buffer.alloc(32, block),
    signCsr: (csr, o) => ca.signCsr(csr, o),
    ...(cpOpts.certTtlSeconds ? { maxCertTtlSeconds: cpOpts.certTtlSeconds } : {}),
  });
  const applied = cp.store.apply([...baseDocs(block), ...(cpOpts.extraDocs ?? [])]);
  if (!applied.ok) throw new Error(applied.error.join('; '));
  const xdsPort = await cp.start(0, addr('0.1'));
  const admin = await startAdminServer(cp, { socket: join(dir, 'admin.sock') });
  const started: XdsNode[] = [];

  const startNode = async (node: string, address: string, extra: NodeExtra = {}): Promise<XdsNode> => {
    const handle = await startXdsNode({
      node,
      address,
      xds: extra.xdsAddress ?? `${addr('0.1')}:${xdsPort}`,
      token: extra.token ?? cp.issueNodeToken(node),
      rootsPem: [ca.rootPem],
      certTtlSeconds: extra.certTtlSeconds ?? cpOpts.certTtlSeconds ?? 3600,
      ...(cpOpts.authzMaxStalenessMs ? { authzMaxStalenessMs: cpOpts.authzMaxStalenessMs } : {}),
      ...(extra.forwards ? { forwards: extra.forwards } : {}),
      ...(extra.snapshotPath ? { snapshotPath: extra.snapshotPath } : {}),
    });
    started.push(handle);
    return handle;
  };

  const forwards = clientForwards(addr, opts.forwards);
  const a = await startNode('node-a', addr('0.2'), { forwards, snapshotPath: join(dir, 'node-a.snapshot') });
  const b = await startNode('node-b', addr('0.3'), { snapshotPath: join(dir, 'node-b.snapshot') });
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
    ...base,
    a: a.z,
    b: b.z,
    nodes: { a, b },
    cp,
    dir,
    xdsPort,
    admin: { admin: admin.address },
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

export interface XdsNodeOptions {
  node: string;
  /** The proxy's own loopback address. */
  address: string;
  /** Control-plane address(es), comma-separated: ADS and CA fail over in turn. */
  xds: string;
  token: string;
  /** Roots the node trusts (the control plane's CA). */
  rootsPem: string[];
  certTtlSeconds: number;
  authzMaxStalenessMs?: number;
  forwards?: ForwardConfig[];
  snapshotPath?: string;
}

/** A ztunnel in this process fed by a control plane (ADS and CA at `xds`). */
export async function startXdsNode(o: XdsNodeOptions): Promise<XdsNode> {
  const bundle = new TrustBundle(TRUST_DOMAIN, o.rootsPem);
  const caClient = new CaClient({ address: o.xds, token: () => o.token, bundle, timeoutMs: 2000 });
  const z = new Ztunnel({
    node: o.node,
    address: o.address,
    bundle,
    signer: caClient,
    defaultMetrics: false,
    pool: NODE_POOL,
    certTtlSeconds: o.certTtlSeconds,
  });
  const undrain = drainOnCertChange(z.certs, z.pool);
  const source = new XdsConfigSource({
    ztunnel: z,
    address: o.xds,
    node: o.node,
    proxyAddress: o.address,
    token: o.token,
    backoff: { initialMs: 50, maxMs: 500 },
    ...(o.authzMaxStalenessMs ? { authzMaxStalenessMs: o.authzMaxStalenessMs } : {}),
    ...(o.forwards ? { forwards: o.forwards } : {}),
    ...(o.snapshotPath ? { snapshotPath: o.snapshotPath } : {}),
  });
  await z.start();
  await source.start();
  return {
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
}

/** The forwards of the client on node-a, as the ztunnel's config takes them. */
export function clientForwards(
  addr: (suffix: string) => string,
  forwards: MeshOptions['forwards'],
): ForwardConfig[] {
  return forwards.map((f) => ({
    workloadUid: 'Kubernetes//Pod/team-a/client',
    listen: { host: addr('1.1'), port: f.port },
    destination: {
      host: f.to.slice(0, f.to.lastIndexOf(':')),
      port: Number(f.to.slice(f.to.lastIndexOf(':') + 1)),
    },
  }));
}

/** The default topology as the ztunnel's local config file writes it. */
function localYaml(ip: Mesh['ip'], forwards: MeshOptions['forwards']): string {
  return `
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
}

/** The default topology as the control plane takes it (Kubernetes-shaped documents). */
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
