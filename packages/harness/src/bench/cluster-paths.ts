import type { CertificateAuthority } from '@zmesh/shared';
import { BpfCapture } from '@zmesh/ztunnel';
import type { ResultPromise } from 'execa';
import { podArgv } from '../cluster/pod-runner.js';
import type { PodInfo } from '../cluster/topology.js';
import { stopChild } from '../local/ztunnel-process.js';
import type { LocalMesh } from '../mesh/local-mesh.js';
import { startMesh } from '../mesh/mesh.js';
import { type MeshSpec, VIP_PREFIX } from '../mesh/mesh-spec.js';
import { ECHO_SERVER } from '../mesh/pod-programs.js';
import type { Endpoint } from './endpoint.js';
import {
  BENCH_TENANT_LIMITS,
  missing,
  type OpenPath,
  openSocat,
  type PathSpec,
  type Placement,
  PROXY_CPU,
  ZTUNNEL_PODS,
} from './peer-paths.js';
import { HTTP_BODY_BYTES, type Target, type TargetName } from './targets.js';
import { openHaproxy, openStunnel } from './tls-peers.js';

export const CLUSTER_DIRECT_PATH = 'cluster: direct pod-to-pod';
export const CLUSTER_ZMESH_PATH = 'cluster: zmesh ztunnel pair (captured)';
export const CLUSTER_WAYPOINT_PATH = 'cluster: zmesh ztunnel → waypoint → ztunnel';

/** How the client pod reaches the server pod on a cluster path. */
type Mode = 'direct' | 'captured' | 'waypoint';

/** The server pod's namespace's waypoint, on the waypoint path. */
const WAYPOINT = { name: 'waypoint', namespace: 'bench', pod: 'waypoint' };

/** The HTTP target inside the server pod: the same 1 KiB answer as the loopback one. */
const HTTP_SERVER = `
const body = Buffer.alloc(Number(process.argv[2]), 'z');
require('http').createServer({ keepAliveTimeout: 60000 }, (_req, res) => {
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
  res.end(body);
}).listen(Number(process.argv[1]), '::');
`;

const PORTS: Record<TargetName, number> = { iperf3: 5201, redis: 6379, echo: 7007, http: 8080 };

/**
 * The bench on the netns cluster (docs/design.md §10), cross-node pod to pod: a client pod on
 * node-a and a server pod on node-b, each with its own network namespace, cgroup and uid.
 * `captured`: both pods enrolled, so the client's connections are redirected by BPF into
 * node-a's ztunnel and cross to node-b's over HBONE; otherwise the same pods unenrolled
 * (the direct path this one is compared with). The servers run in the server pod and the
 * load generators in the client pod, on the load CPU; the ztunnels on the proxy CPU.
 */
export function clusterPath(captured: boolean, loadCpu: string): PathSpec {
  return {
    name: captured ? CLUSTER_ZMESH_PATH : CLUSTER_DIRECT_PATH,
    kind: captured ? 'zmesh' : 'direct',
    direct: CLUSTER_DIRECT_PATH,
    inPods: true,
    podMemory: captured,
    unavailable: clusterUnavailable,
    open: (targets) => openCluster(captured ? 'captured' : 'direct', loadCpu, targets),
  };
}

/**
 * Captured as above, with the servers as Services of a namespace that uses a waypoint: the
 * client's connections go to the Service VIPs, node-a's ztunnel tunnels them to the
 * waypoint (its own pod on node-b, configured over xDS by a control plane), which sends them
 * on to node-b's ztunnel. Opaque TCP crosses the waypoint at L4, HTTP at L7.
 */
export function clusterWaypointPath(loadCpu: string): PathSpec {
  return {
    name: CLUSTER_WAYPOINT_PATH,
    kind: 'zmesh',
    l7Hop: true,
    direct: CLUSTER_DIRECT_PATH,
    inPods: true,
    unavailable: clusterUnavailable,
    open: (targets) => openCluster('waypoint', loadCpu, targets),
  };
}

export type ClusterPeer = 'socat relay pair' | 'stunnel4 pair' | 'haproxy pair';

/**
 * A C peer's proxy pair on the cluster, in the nodes' namespaces as ztunnel is: the
 * client-side proxy on node-a (the client pod connects to its address on the pod subnet's
 * gateway), the server-side one on node-b (on its fabric address), which connects to the
 * server pod. The pods are not enrolled.
 */
export function clusterPeerPath(
  peer: ClusterPeer,
  loadCpu: string,
  dir: string,
  ca: CertificateAuthority,
): PathSpec {
  const bin = { 'socat relay pair': 'socat', 'stunnel4 pair': 'stunnel4', 'haproxy pair': 'haproxy' }[peer];
  const open = {
    'socat relay pair': (targets: Target[], at: Placement) => openSocat(targets, at),
    'stunnel4 pair': (targets: Target[], at: Placement) => openStunnel(dir, ca, targets, at),
    'haproxy pair': (targets: Target[], at: Placement) => openHaproxy(dir, ca, targets, at),
  }[peer];
  return {
    name: `cluster: ${peer}`,
    kind: peer === 'socat relay pair' ? 'relay' : 'c-mtls',
    direct: CLUSTER_DIRECT_PATH,
    inPods: true,
    unavailable: async () => (await missing(bin)) ?? (await clusterUnavailable()),
    open: (targets) =>
      openCluster('direct', loadCpu, targets, (mesh, podTargets) => open(podTargets, nodePlacement(mesh))),
  };
}

async function clusterUnavailable(): Promise<string | undefined> {
  const why = await BpfCapture.unavailableReason();
  return why ? `the netns cluster needs root and BPF (${why})` : undefined;
}

function nodePlacement(mesh: LocalMesh): Placement {
  const [a, b] = [mesh.node('node-a'), mesh.node('node-b')];
  return {
    front: a.gateway4,
    back: b.fabric4,
    spawn: (side, argv, log) =>
      mesh.cluster.runInNode(side === 'client' ? a : b, ['taskset', '-c', PROXY_CPU, ...argv], {
        reject: false,
        stdin: 'ignore',
        stdout: 'ignore',
        stderr: log ? { file: log } : 'ignore',
      }),
  };
}

/** Enrolled pods beside the client on the captured pair's node-a: 100 in all (ZTUNNEL_PODS). */
const FILLER_PODS = ZTUNNEL_PODS - 1;

/** A Service VIP per target on the waypoint path (in the harness's VIP range). */
const vipOf = (i: number) => `${VIP_PREFIX}${10 + i}`;

function clusterSpec(mode: Mode, targets: Target[]): MeshSpec {
  const spec: MeshSpec = {
    nodes: ['node-a', 'node-b'],
    pods: [
      { name: 'load-client', namespace: 'bench', serviceAccount: 'client', node: 'node-a' },
      { name: 'load-server', namespace: 'bench', serviceAccount: 'server', node: 'node-b' },
    ],
  };
  // The captured pair's node-a holds 100 enrolled pods, as the memory target asks: the
  // client and 99 idle ones (a netns, cgroup, BPF attachment and listeners each).
  if (mode === 'captured')
    for (let i = 0; i < FILLER_PODS; i++)
      spec.pods.push({ name: `filler-${i}`, namespace: 'bench', serviceAccount: 'filler', node: 'node-a' });
  if (mode !== 'waypoint') return spec;
  spec.pods.push({
    name: WAYPOINT.pod,
    namespace: WAYPOINT.namespace,
    serviceAccount: 'waypoint',
    node: 'node-b',
  });
  spec.services = targets.map((t, i) => ({
    name: `bench-${t.name}`,
    namespace: 'bench',
    vip: vipOf(i),
    ports: [{ port: PORTS[t.name], targetPort: PORTS[t.name] }],
    pods: ['load-server'],
  }));
  spec.waypoints = [WAYPOINT];
  return spec;
}

/**
 * Brings up the two-node cluster and the servers in the server pod; `proxies` (a C peer
 * pair) then goes between the pods, or nothing does (the pods talk directly, or through
 * ztunnel when captured, or ztunnel and the waypoint).
 */
async function openCluster(
  mode: Mode,
  loadCpu: string,
  targets: Target[],
  proxies?: (mesh: LocalMesh, podTargets: Target[]) => Promise<OpenPath>,
): Promise<OpenPath> {
  const mesh = await startMesh({
    run: 'cluster',
    spec: clusterSpec(mode, targets),
    enroll: () => mode !== 'direct',
    ztunnelCpus: PROXY_CPU,
    waypointCpus: PROXY_CPU,
    ztunnelLog: 'error',
    // As on the loopback pair: the data path's capacity, not the connection-rate quota.
    ztunnelArgs: BENCH_TENANT_LIMITS,
    // A waypoint is configured over xDS, so that path has a control plane (off the data path).
    controlPlane: mode === 'waypoint',
  });
  const servers: ResultPromise[] = [];
  let inner: OpenPath | undefined;
  const close = async () => {
    await inner?.close();
    await Promise.all(servers.map((s) => stopChild(s)));
    await mesh.down();
  };
  try {
    const server = mesh.pod('load-server');
    const names = targets.map((t) => t.name);
    for (const name of names) servers.push(startServer(mesh, server, name, loadCpu));
    await waitPodListening(
      mesh,
      server,
      names.map((n) => PORTS[n]),
    );
    const podTargets = names.map((name, i) => ({
      name,
      host: mode === 'waypoint' ? vipOf(i) : server.ipv4,
      port: PORTS[name],
    }));
    inner = proxies ? await proxies(mesh, podTargets) : undefined;
    const client = mesh.pod('load-client');
    const ztunnels = mode === 'direct' ? [] : ['node-a', 'node-b'].flatMap((n) => mesh.ztunnelPid(n) ?? []);
    const waypointPid = mesh.waypointPid(`${WAYPOINT.namespace}/${WAYPOINT.name}`);
    return {
      endpoints: inner?.endpoints ?? new Map<TargetName, Endpoint>(podTargets.map((t) => [t.name, t])),
      pids: inner?.pids ?? [...ztunnels, ...(waypointPid ? [waypointPid] : [])],
      ...(waypointPid ? { waypointPid } : {}),
      launch: (argv) => ['sh', ...podArgv(client, argv)],
      close,
    };
  } catch (e) {
    await close();
    throw e;
  }
}

function startServer(mesh: LocalMesh, pod: PodInfo, name: TargetName, cpu: string): ResultPromise {
  const pin = ['taskset', '-c', cpu];
  const argv: Record<TargetName, string[]> = {
    iperf3: ['iperf3', '-s', '-p', String(PORTS.iperf3)],
    redis: [
      'redis-server',
      ...['--port', String(PORTS.redis), '--save', '', '--appendonly', 'no', '--protected-mode', 'no'],
      ...['--dir', '/tmp', '--maxclients', '4000', '--loglevel', 'warning'],
    ],
    echo: ['node', '-e', ECHO_SERVER, String(PORTS.echo)],
    http: ['node', '-e', HTTP_SERVER, String(PORTS.http), String(HTTP_BODY_BYTES)],
  };
  return mesh.cluster.runInPod(pod, [...pin, ...argv[name]], { reject: false, stdio: 'ignore' });
}

/** Polls the pod's listening sockets (ss in its namespace) until every port is up. */
async function waitPodListening(mesh: LocalMesh, pod: PodInfo, ports: number[], timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await mesh.cluster.exec(pod, ['ss', '-Hltn']);
    const up = new Set([...r.stdout.matchAll(/:(\d+)\s/g)].map((m) => Number(m[1])));
    const missing = ports.filter((p) => !up.has(p));
    if (missing.length === 0) return;
    if (Date.now() > deadline)
      throw new Error(`servers in ${pod.name} not listening on ${missing.join(', ')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
