import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { stringify } from 'yaml';
import { stopChild, ZMESH_BIN } from '../local/ztunnel-process.js';
import { clientForwards, startMesh } from '../mesh/mesh.js';
import type { Endpoint } from './endpoint.js';
import {
  BENCH_TENANT_LIMITS,
  type BenchAddresses,
  type PathSpec,
  spawnProxy,
  started,
} from './peer-paths.js';
import type { Target, TargetName } from './targets.js';

/** The waypoint path's own loopback addresses: control plane, the two nodes, the waypoint, VIPs. */
const WP = {
  cp: '127.42.0.1',
  nodeA: '127.42.0.2',
  nodeB: '127.42.0.3',
  waypoint: '127.42.3.1',
  vip: (i: number) => `127.42.96.${10 + i}`,
  xdsPort: 25_910,
};
const FORWARD_PORT = 16_300;

/**
 * zmesh ztunnel → waypoint → ztunnel: the bench's servers as Services of a namespace that
 * uses a waypoint, everything configured by a control plane over xDS (as in the L7 lab),
 * in explicit-proxy mode on loopback. Both ztunnels and the waypoint run on the proxy CPU;
 * opaque TCP (iperf3, redis, echo) crosses the waypoint at L4, HTTP at L7.
 */
export const WAYPOINT_PATH = 'zmesh ztunnel → waypoint → ztunnel';

export function waypointPath(
  dir: string,
  addr: BenchAddresses,
  opts: { name?: string; bin?: string } = {},
): PathSpec {
  const bin = opts.bin ?? ZMESH_BIN;
  return {
    name: opts.name ?? WAYPOINT_PATH,
    kind: 'zmesh',
    l7Hop: true,
    unavailable: async () =>
      opts.bin && !(await readFile(opts.bin).catch(() => undefined)) ? `${opts.bin} not found` : undefined,
    open: async (targets) => {
      const base = join(dir, opts.bin ? 'waypoint-path-before' : 'waypoint-path');
      await mkdir(join(base, 'cfg'), { recursive: true });
      await writeFile(join(base, 'cfg', 'mesh.yaml'), meshYaml(addr, targets));
      const endpoints = new Map<TargetName, Endpoint>(
        targets.map((t, i) => [t.name, { host: addr.client, port: FORWARD_PORT + i }]),
      );
      await writeFile(
        join(base, 'forwards.yaml'),
        stringify(
          clientForwards(
            { name: 'load-client', namespace: 'front', address: addr.client },
            targets.map((t, i) => ({
              listen: `${endpoints.get(t.name)!.host}:${endpoints.get(t.name)!.port}`,
              destination: `${WP.vip(i)}:${t.port}`,
            })),
          ),
        ),
      );
      const children: ResultPromise[] = [];
      const log = (name: string) => join(base, `${name}.log`);
      // Every process is spawned before `started` records the path's pids.
      try {
        await startMesh({
          run: 'processes',
          children,
          dir: base,
          cp: WP.cp,
          xdsPort: WP.xdsPort,
          nodes: { 'node-a': WP.nodeA, 'node-b': WP.nodeB },
          forwards: join(base, 'forwards.yaml'),
          waypoint: { gateway: 'bench/waypoint', address: WP.waypoint },
          ztunnelArgs: BENCH_TENANT_LIMITS,
          readyTimeoutMs: 30_000,
          // The control plane is not on the data path: it stays on the load CPU with this
          // process; the ztunnels and the waypoint go to the proxy CPU.
          spawn: (argv, role, name) =>
            role === 'control-plane'
              ? execa(bin, argv, {
                  reject: false,
                  stdin: 'ignore',
                  stdout: 'ignore',
                  stderr: { file: log(name) },
                })
              : spawnProxy([bin, ...argv], log(name)),
        });
      } catch (e) {
        await Promise.all(children.map((c) => stopChild(c)));
        throw e;
      }
      const path = await started(endpoints, children, [...endpoints.values()]);
      // CPU and memory are the data path's: both ztunnels and the waypoint, not the control plane.
      return { ...path, pids: path.pids.slice(1), waypointPid: children.at(-1)?.pid };
    },
  };
}

function meshYaml(addr: BenchAddresses, targets: Target[]): string {
  const doc = (o: unknown) => stringify(o);
  const pod = (name: string, ns: string, node: string, ip: string, labels: Record<string, string>) =>
    doc({
      kind: 'Pod',
      metadata: { name, namespace: ns, labels },
      spec: { serviceAccountName: name, nodeName: node },
      status: { podIP: ip },
    });
  return [
    doc({ kind: 'Namespace', metadata: { name: 'front', labels: { 'istio.io/dataplane-mode': 'ambient' } } }),
    doc({
      kind: 'Namespace',
      metadata: {
        name: 'bench',
        labels: { 'istio.io/dataplane-mode': 'ambient', 'istio.io/use-waypoint': 'waypoint' },
      },
    }),
    pod('load-client', 'front', 'node-a', addr.client, { app: 'load-client' }),
    pod('load-server', 'bench', 'node-b', addr.server, { app: 'load-server' }),
    pod('waypoint', 'bench', 'node-w', WP.waypoint, { 'gateway.networking.k8s.io/gateway-name': 'waypoint' }),
    doc({
      kind: 'Gateway',
      metadata: { name: 'waypoint', namespace: 'bench' },
      spec: { gatewayClassName: 'istio-waypoint', addresses: [{ value: WP.waypoint }] },
    }),
    ...targets.map((t, i) =>
      doc({
        kind: 'Service',
        metadata: { name: `bench-${t.name}`, namespace: 'bench' },
        spec: {
          clusterIP: WP.vip(i),
          selector: { app: 'load-server' },
          ports: [{ port: t.port, targetPort: t.port }],
        },
      }),
    ),
  ].join('---\n');
}
