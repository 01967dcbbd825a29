import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { stringify } from 'yaml';
import { startZtunnelProcess, stopChild, waitReady } from '../local/ztunnel-process.js';
import { type Endpoint, waitListening } from './endpoint.js';
import type { Target, TargetName } from './targets.js';

/** Where a load generator connects for each target on one path, and how to take the path down. */
export interface OpenPath {
  endpoints: Map<TargetName, Endpoint>;
  /** Pids of the proxy processes on this path (roots: forked children are found under them). */
  pids: number[];
  /** The waypoint's pid, on a path through one (its CPU is also reported on its own). */
  waypointPid?: number;
  /**
   * How to run a load generator's argv on this path (inside the client pod on the netns
   * cluster); without it load generators run here, and in-process ones in this process.
   */
  launch?: (argv: string[]) => string[];
  close(): Promise<void>;
}

/**
 * `c-mtls` paths are the ones zmesh is held against ("best C peer"); `node-tls` is Node's
 * own mTLS cost (a `node:tls` pipe pair), the floor for any proxy written on it.
 */
export type PathKind = 'direct' | 'relay' | 'c-mtls' | 'node-tls' | 'zmesh';

/**
 * Where a C peer's pair of proxies runs: on the host's loopback addresses, or in two
 * nodes of the netns cluster. `front` is the client-side proxy's listen address (the load
 * generators connect to it), `back` the server-side one's.
 */
export interface Placement {
  front: string;
  back: string;
  spawn(side: 'client' | 'server', argv: string[], log?: string): ResultPromise;
}

export function loopbackPlacement(addr: BenchAddresses): Placement {
  return { front: addr.client, back: addr.nodeB, spawn: (_side, argv, log) => spawnProxy(argv, log) };
}

/** A listen address that must be up, read in the network namespace of the process `pid` (default: ours). */
export type Listening = Endpoint & { pid?: number | undefined };

export interface PathSpec {
  name: string;
  kind: PathKind;
  /** The path "vs direct" ratios and added latencies are taken against (default `direct`). */
  direct?: string;
  /** Clients run in pods (see OpenPath.launch): no idle-memory step, which opens them here... */
  inPods?: boolean;
  /** ...unless the step holds its idle connections from the client pod (the captured pair). */
  podMemory?: boolean;
  /**
   * A proxy sits between the pair (the waypoint paths and their L7-hop peers): such a path
   * is compared with the others that have one, and the pairs with the pairs.
   */
  l7Hop?: boolean;
  /** Why this path may be unavailable on this machine (a missing binary), or undefined. */
  unavailable(): Promise<string | undefined>;
  open(targets: Target[]): Promise<OpenPath>;
}

export interface BenchAddresses {
  /** Client-side proxy address (node-a) and server-side proxy address (node-b). */
  nodeA: string;
  nodeB: string;
  client: string;
  server: string;
  /** Prefix of the extra pods' addresses (`<prefix>.<n>`, n = 1..). */
  fillerPrefix: string;
}

/** CPU the proxies run on; the load generators get the other one (see bench.ts). */
export const PROXY_CPU = '0';
/** Workloads the ztunnel pair is configured with: the "100 pods" memory target of docs/design.md §12. */
export const ZTUNNEL_PODS = 100;

export function directPath(): PathSpec {
  return {
    name: 'direct',
    kind: 'direct',
    unavailable: async () => undefined,
    open: async (targets) => ({
      endpoints: new Map(targets.map((t) => [t.name, { host: t.host, port: t.port }])),
      pids: [],
      close: async () => {},
    }),
  };
}

/** Two socat processes per target, forking per connection: a plain TCP relay pair, no crypto. */
export function socatPath(addr: BenchAddresses): PathSpec {
  return {
    name: 'socat relay pair',
    kind: 'relay',
    unavailable: async () => missing('socat'),
    open: (targets) => openSocat(targets, loopbackPlacement(addr)),
  };
}

export async function openSocat(targets: Target[], at: Placement): Promise<OpenPath> {
  const children: ResultPromise[] = [];
  const endpoints = new Map<TargetName, Endpoint>();
  const listening: Listening[] = [];
  for (const [i, t] of targets.entries()) {
    const front = { host: at.front, port: 16000 + i };
    const back = { host: at.back, port: 16010 + i };
    const server = at.spawn('server', ['socat', ...socatArgs(back, t)]);
    const client = at.spawn('client', ['socat', ...socatArgs(front, back)]);
    children.push(server, client);
    listening.push({ ...back, pid: server.pid }, { ...front, pid: client.pid });
    endpoints.set(t.name, front);
  }
  return started(endpoints, children, listening);
}

function socatArgs(listen: Endpoint, to: Endpoint): string[] {
  // 128 KiB copy blocks (socat's default is 8 KiB, which would handicap it on bulk transfer).
  return [
    '-b',
    '131072',
    `TCP-LISTEN:${listen.port},bind=${listen.host},fork,reuseaddr,backlog=4096,nodelay`,
    `TCP:${to.host}:${to.port},nodelay`,
  ];
}

/**
 * The zmesh ztunnel pair over HBONE, in explicit-proxy mode (no capture in this path).
 * Node-a holds ZTUNNEL_PODS workloads, each with a forward listener, so that its idle
 * memory is that of a node with that many pods.
 */
export function ztunnelPath(
  dir: string,
  addr: BenchAddresses,
  opts: { name?: string; bin?: string; env?: Readonly<Record<string, string>> } = {},
): PathSpec {
  return {
    name: opts.name ?? 'zmesh ztunnel pair',
    kind: 'zmesh',
    unavailable: async () =>
      opts.bin && !(await readFile(opts.bin).catch(() => undefined)) ? `${opts.bin} not found` : undefined,
    open: async (targets) => {
      const config = join(dir, 'bench-mesh.yaml');
      const endpoints = new Map(targets.map((t, i) => [t.name, { host: addr.client, port: 16200 + i }]));
      await writeFile(config, stringify(benchMesh(addr, targets, endpoints)));
      // An older build (--baseline) that does not know the quota flags keeps its defaults.
      const args = opts.bin && !(await knowsQuotaFlags(opts.bin)) ? [] : BENCH_TENANT_LIMITS;
      const start = (node: string, address: string) =>
        startZtunnelProcess({
          config,
          caDir: dir,
          node,
          address,
          cpu: PROXY_CPU,
          log: 'error',
          bin: opts.bin,
          ...(opts.env ? { env: opts.env } : {}),
          // The bench measures the data path's capacity, not the per-tenant connection-rate
          // quota (500/s by default), which would cap "new connections per second".
          args,
        });
      const children = [start('node-a', addr.nodeA), start('node-b', addr.nodeB)];
      const ready = () => Promise.all([waitReady(addr.nodeA, 30_000), waitReady(addr.nodeB, 30_000)]);
      return started(endpoints, children, [...endpoints.values()], ready);
    },
  };
}

export const BENCH_TENANT_LIMITS = ['--tenant-connect-rate', '1000000', '--tenant-connect-burst', '1000000'];

async function knowsQuotaFlags(bin: string): Promise<boolean> {
  const help = await execa(bin, ['ztunnel', '--help'], { reject: false });
  return help.stdout.includes(BENCH_TENANT_LIMITS[0]!);
}

function benchMesh(addr: BenchAddresses, targets: Target[], endpoints: Map<TargetName, Endpoint>): unknown {
  const pod = (name: string, sa: string, address: string, node: string) => ({
    name,
    namespace: 'bench',
    serviceAccount: sa,
    addresses: [address],
    node,
  });
  const fillers = Array.from({ length: ZTUNNEL_PODS - 1 }, (_, i) =>
    pod(`pod-${i + 1}`, `sa-${i + 1}`, `${addr.fillerPrefix}.${i + 1}`, 'node-a'),
  );
  return {
    workloads: [
      pod('load-client', 'client', addr.client, 'node-a'),
      ...fillers,
      pod('load-server', 'server', addr.server, 'node-b'),
    ],
    forwards: [
      ...targets.map((t) => ({
        workload: 'Kubernetes//Pod/bench/load-client',
        listen: `${endpoints.get(t.name)!.host}:${endpoints.get(t.name)!.port}`,
        destination: `${t.host}:${t.port}`,
      })),
      ...fillers.map((f) => ({
        workload: `Kubernetes//Pod/bench/${f.name}`,
        listen: `${f.addresses[0]}:16299`,
        destination: `${addr.server}:${targets[0]!.port}`,
      })),
    ],
  };
}

/**
 * A proxy process pinned to the proxy CPU. Open files: it inherits this process's limit,
 * which Node raised to the hard limit (1,000 idle connections need 2,000+ per proxy).
 */
export function spawnProxy(argv: string[], log?: string): ResultPromise {
  return execa('taskset', ['-c', PROXY_CPU, ...argv], {
    reject: false,
    stdin: 'ignore',
    stdout: 'ignore',
    // A proxy that will not start says why on stderr: keep it beside its config.
    stderr: log ? { file: log } : 'ignore',
  });
}

/**
 * The path is up once every address in `listening` is; if it never comes up, the children
 * are stopped before the error is passed on.
 */
export async function started(
  endpoints: Map<TargetName, Endpoint>,
  children: ResultPromise[],
  listening: Listening[],
  ready: () => Promise<unknown> = async () => {},
): Promise<OpenPath> {
  const path = closer(endpoints, children);
  try {
    await ready();
    await Promise.all(listening.map((e) => waitListening(e.host, e.port, 15_000, e.pid)));
  } catch (e) {
    await path.close();
    throw e;
  }
  return path;
}

function closer(endpoints: Map<TargetName, Endpoint>, children: ResultPromise[]): OpenPath {
  return {
    endpoints,
    pids: children.flatMap((c) => (c.pid ? [c.pid] : [])),
    close: async () => {
      await Promise.all(children.map((c) => stopChild(c)));
    },
  };
}

export async function missing(bin: string): Promise<string | undefined> {
  const found = (await execa('which', [bin], { reject: false })).exitCode === 0;
  return found ? undefined : `${bin} not installed (apt-get install ${bin}; scripts/bootstrap.sh does)`;
}
