import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ControlPlane, startAdminServer } from '@zmesh/control-plane';
import {
  type AdminTarget,
  adminRequest,
  CertificateAuthority,
  formatHostPort,
  TrustBundle,
  type Workload,
} from '@zmesh/shared';
import {
  CaClient,
  type ConfigUpdate,
  DEFAULT_PORTS,
  drainOnCertChange,
  type ForwardConfig,
  LocalCaSigner,
  parseLocalConfig,
  XdsConfigSource,
  Ztunnel,
  type ZtunnelOptions,
} from '@zmesh/ztunnel';
import type { ResultPromise } from 'execa';
import { stringify } from 'yaml';
import { waitReady } from '../local/ztunnel-process.js';
import { LocalMesh } from './local-mesh.js';
import { writeNodeToken } from './mesh-control-plane.js';
import type { ClusterMeshOptions, MeshSpec } from './mesh-spec.js';

/**
 * The mesh fixture: the one way tests, demos, harnesses and the bench stand up a mesh.
 * `startMesh` takes where the proxies run (`run`); the rest of the options say what differs
 * within that:
 *
 * | `run`        | proxies                                          | mode           | config               | needs       |
 * | ------------ | ------------------------------------------------ | -------------- | -------------------- | ----------- |
 * | `in-process` | two `Ztunnel` objects in this process            | explicit proxy | local, or xDS + CA   | loopback    |
 * | `processes`  | `zmesh` control plane, ztunnels, waypoint        | explicit proxy | xDS + CA             | loopback    |
 * | `cluster`    | `zmesh` processes in a netns cluster (LocalMesh) | capture (ZDS)  | local, or xDS + CA   | root + BPF  |
 *
 * In-process meshes let a test reach into the proxies (config dumps, pools, the control
 * plane's store) and run in parallel, each file on its own `127.<block>.0.0/16`; process
 * meshes run the binaries an operator runs.
 */
export function startMesh(o: InProcessMeshOptions & { controlPlane: ControlPlaneOptions }): Promise<XdsMesh>;
export function startMesh(o: InProcessMeshOptions): Promise<Mesh>;
export function startMesh(o: ProcessMeshOptions): Promise<ProcessMesh>;
export function startMesh(o: ClusterMeshStart): Promise<LocalMesh>;
export function startMesh(
  o: InProcessMeshOptions | ProcessMeshOptions | ClusterMeshStart,
): Promise<Mesh | XdsMesh | ProcessMesh | LocalMesh> {
  switch (o.run) {
    case 'in-process':
      return startInProcess(o);
    case 'processes':
      return startProcesses(o);
    case 'cluster': {
      const { run: _, spec, ...options } = o;
      return LocalMesh.up(spec, options);
    }
  }
}

/** `run: 'cluster'`: LocalMesh's spec (nodes, pods, services, waypoints) and its options. */
export interface ClusterMeshStart extends ClusterMeshOptions {
  run: 'cluster';
  spec: MeshSpec;
}

/**
 * The forwards file (ztunnel's `--config`, a local config) for one client workload on node-a
 * in explicit-proxy mode: its identity (service account = its name) and its forward
 * listeners. Every explicit-mode mesh (in-process or processes) describes its client so.
 */
export function clientForwards(
  client: { name: string; namespace: string; address: string },
  forwards: Array<{ listen: string; destination: string }>,
) {
  return {
    workloads: [
      {
        name: client.name,
        namespace: client.namespace,
        serviceAccount: client.name,
        addresses: [client.address],
        node: 'node-a',
      },
    ],
    forwards: forwards.map((f) => ({ workload: `Kubernetes//Pod/${client.namespace}/${client.name}`, ...f })),
  };
}

/** The forwards of a `clientForwards` file as the ztunnel's config takes them (in-process nodes). */
export function forwardConfigs(file: ReturnType<typeof clientForwards>): ForwardConfig[] {
  const parsed = parseLocalConfig(stringify(file), 'forwards');
  if (!parsed.ok) throw new Error(parsed.error.join('; '));
  return parsed.value.forwards ?? [];
}

/** Polls `cond` every 20 ms until it holds; throws after `timeoutMs`. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * `run: 'in-process'`: two ztunnels ("node-a", "node-b") in this process, in explicit-proxy
 * mode, each on its own loopback address inside `127.<block>.0.0/16` so that test files
 * running in parallel never share a port. Their config comes either from a local config
 * applied directly (signing with the CA in this process) or, with `controlPlane`, from a real
 * control plane (xDS + CA + admin) in this process through an XdsConfigSource and a CaClient.
 * test/helpers/waypoint-fixture.ts adds an in-process waypoint on top.
 *
 * Addresses: control plane .0.1, proxies .0.2 and .0.3, node-a pods .1.x (client .1.1),
 * node-b pods .2.x (server .2.1), waypoint .3.x, VIPs .96.x (the server's .96.10).
 */
export interface InProcessMeshOptions {
  run: 'in-process';
  /** The second octet of this mesh's `127.<block>.0.0/16`. */
  block: number;
  /** Forwards for the client on node-a: listen port on the client's IP → destination. */
  forwards: Array<{ port: number; to: string }>;
  /**
   * Local config only: the config both nodes get instead of the default topology (node-a
   * also gets its `forwards`, replacing the option's).
   */
  config?: ConfigUpdate;
  /** Feed the nodes from a real control plane instead of a local config. */
  controlPlane?: ControlPlaneOptions;
  /** Local config: options for a node's ztunnel beyond the fixture's own. */
  ztunnel?: (node: string) => Partial<ZtunnelOptions>;
}

export interface ControlPlaneOptions {
  certTtlSeconds?: number;
  /** YAML documents beyond the two namespaces, client, server and its Service. */
  extraDocs?: unknown[];
  /** Authorization last-known-good limit of every node (default: the certificate lifetime). */
  authzMaxStalenessMs?: number;
}

/** An in-process mesh. */
export interface Mesh {
  ca: CertificateAuthority;
  bundle: TrustBundle;
  a: Ztunnel;
  b: Ztunnel;
  nodes: Record<'a' | 'b', MeshNode>;
  /** The default topology's workloads (local config; with a control plane, from the same YAML). */
  client: Workload;
  server: Workload;
  ip: { a: string; b: string; client: string; server: string; vip: string };
  /** `127.<block>.<suffix>`. */
  addr(suffix: string): string;
  stop(): Promise<void>;
}

/** An in-process mesh fed by a control plane. */
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

/** An in-process node fed by a control plane. */
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

const TRUST_DOMAIN = 'cluster.local';
const NODE_POOL = { idleTimeoutMs: 2000 };

async function startInProcess(opts: InProcessMeshOptions): Promise<Mesh | XdsMesh> {
  const { block } = opts;
  const addr = (suffix: string) => `127.${block}.${suffix}`;
  const ip = { a: addr('0.2'), b: addr('0.3'), client: addr('1.1'), server: addr('2.1'), vip: addr('96.10') };
  const client = clientForwards(
    { name: 'client', namespace: 'team-a', address: ip.client },
    opts.forwards.map((f) => ({ listen: `${ip.client}:${f.port}`, destination: f.to })),
  );
  const topology = parseLocalConfig(stringify(localConfig(ip, client)), 'fixture');
  if (!topology.ok) throw new Error(topology.error.join('; '));
  const [clientWorkload, serverWorkload] = topology.value.workloads as [Workload, Workload];
  const ca = await CertificateAuthority.create({ trustDomain: TRUST_DOMAIN });
  const bundle = new TrustBundle(TRUST_DOMAIN, [ca.rootPem]);
  const base = { ca, bundle, client: clientWorkload, server: serverWorkload, ip, addr };
  if (opts.controlPlane) return startWithControlPlane(block, forwardConfigs(client), opts.controlPlane, base);

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
  forwards: ForwardConfig[],
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

/**
 * One in-process ztunnel fed by a control plane (ADS and CA at `xds`): the in-process mesh's
 * node, for tests that run their own control planes (processes, replicas).
 */
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
    adminAddress: formatHostPort(o.address, DEFAULT_PORTS.admin),
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

/** The default topology as the ztunnel's local config takes it: the client's file plus the server. */
function localConfig(ip: Mesh['ip'], client: ReturnType<typeof clientForwards>): object {
  const server = { servicePort: 80, targetPort: 7000 };
  return {
    workloads: [
      ...client.workloads,
      {
        name: 'server',
        namespace: 'team-b',
        serviceAccount: 'server',
        addresses: [ip.server],
        node: 'node-b',
        services: { 'team-b/server.team-b.svc.cluster.local': [server] },
      },
    ],
    services: [{ name: 'server', namespace: 'team-b', addresses: [ip.vip], ports: [server] }],
    forwards: client.forwards,
  };
}

/** The in-process default topology as the control plane takes it (Kubernetes-shaped documents). */
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

type ProcessRole = 'control-plane' | 'ztunnel' | 'waypoint';

/**
 * `run: 'processes'`: `zmesh` processes on host loopback in explicit-proxy mode (no network
 * namespaces, no capture): a control plane, one ztunnel per node and a waypoint, all
 * configured over xDS, started in order and waited for (the L7 lab, the soak and the bench's
 * waypoint path). Every process started is pushed onto `children` as it starts, so the
 * caller can stop them whatever happens here.
 */
export interface ProcessMeshOptions {
  run: 'processes';
  /** Scratch directory; `<dir>/cfg` must already hold the control plane's YAML. */
  dir: string;
  /** Control plane address and its xDS/CA port; its admin API is `<dir>/admin.sock`. */
  cp: string;
  xdsPort: number;
  /** Node name → that node's ztunnel address. */
  nodes: Readonly<Record<string, string>>;
  /** The ztunnels' forwards file (`--config`), written from `clientForwards`. */
  forwards: string;
  waypoint: { gateway: string; address: string };
  /** Starts one `zmesh` process (argv without the binary): the caller decides pinning and logs. */
  spawn: (argv: string[], role: ProcessRole, name: string) => ResultPromise;
  /** Receives every process as it starts. */
  children: ResultPromise[];
  ztunnelArgs?: readonly string[];
  readyTimeoutMs?: number;
}

export interface ProcessMesh {
  admin: AdminTarget;
  waypoint: ResultPromise;
}

async function startProcesses(o: ProcessMeshOptions): Promise<ProcessMesh> {
  const { children } = o;
  const xds = `${o.cp}:${o.xdsPort}`;
  const admin: AdminTarget = { admin: join(o.dir, 'admin.sock') };
  const roots = join(o.dir, 'roots.pem');
  const timeoutMs = o.readyTimeoutMs ?? 15_000;
  children.push(
    o.spawn(
      ['control-plane', '-c', join(o.dir, 'cfg'), '--host', o.cp, '--port', String(o.xdsPort)].concat([
        '--admin-socket',
        admin.admin,
        '--ca-dir',
        join(o.dir, 'ca'),
        '--roots-file',
        roots,
        '--no-state-dir',
      ]),
      'control-plane',
      'control-plane',
    ),
  );
  await waitFor(
    async () => (await adminRequest(admin, '/healthz').catch(() => undefined))?.ok === true,
    timeoutMs,
  );
  const tokenFile = async (node: string) => {
    const file = join(o.dir, `${node}.token`);
    await writeNodeToken(admin, node, file);
    return file;
  };
  const common = async (node: string) => [
    '--xds',
    xds,
    '--token-file',
    await tokenFile(node),
    '--roots-file',
    roots,
  ];
  for (const [node, address] of Object.entries(o.nodes)) {
    children.push(
      o.spawn(
        ['ztunnel', ...(await common(node)), '--node', node, '--address', address].concat(
          ['--snapshot', join(o.dir, `${node}.snapshot`), '--config', o.forwards],
          o.ztunnelArgs ?? [],
        ),
        'ztunnel',
        node,
      ),
    );
  }
  await Promise.all(Object.values(o.nodes).map((address) => waitReady(address, timeoutMs)));
  const waypoint = o.spawn(
    [
      'waypoint',
      ...(await common('node-w')),
      '--gateway',
      o.waypoint.gateway,
      '--address',
      o.waypoint.address,
    ],
    'waypoint',
    'waypoint',
  );
  children.push(waypoint);
  // The waypoint reports readiness on its metrics port.
  await waitReady(o.waypoint.address, timeoutMs, 15020);
  return { admin, waypoint };
}
