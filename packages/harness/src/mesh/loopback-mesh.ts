import { join } from 'node:path';
import { type AdminTarget, adminRequest } from '@zmesh/shared';
import type { ResultPromise } from 'execa';
import { waitReady } from '../local/ztunnel-process.js';
import { writeNodeToken } from './mesh-control-plane.js';

type LoopbackMeshRole = 'control-plane' | 'ztunnel' | 'waypoint';

export interface LoopbackMeshOptions {
  /** Scratch directory; `<dir>/cfg` must already hold the control plane's YAML. */
  dir: string;
  /** Control plane address and its xDS/CA port; its admin API is `<dir>/admin.sock`. */
  cp: string;
  xdsPort: number;
  /** Node name → that node's ztunnel address (explicit-proxy mode on loopback). */
  nodes: Readonly<Record<string, string>>;
  /** Forward listeners for the ztunnels (`--config`). */
  forwards: string;
  waypoint: { gateway: string; address: string };
  /** Starts one `zmesh` process (argv without the binary): the caller decides pinning and logs. */
  spawn: (argv: string[], role: LoopbackMeshRole, name: string) => ResultPromise;
  ztunnelArgs?: readonly string[];
  readyTimeoutMs?: number;
}

export interface LoopbackMesh {
  admin: AdminTarget;
  waypoint: ResultPromise;
}

/**
 * The forwards file (`LoopbackMeshOptions.forwards`) for one client workload on node-a in
 * explicit-proxy mode: its identity (service account = its name) and its forward listeners.
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

/**
 * LocalMesh's rootless sibling: `zmesh` processes on host loopback in explicit-proxy mode (no
 * network namespaces, no capture), a control plane, one ztunnel per node and a waypoint, all
 * configured over xDS, started in order and waited for (the L7 lab and the bench's waypoint
 * path). Every process started is pushed onto `children` as it starts, so the caller can
 * stop them whatever happens here.
 */
export async function startLoopbackMesh(
  o: LoopbackMeshOptions,
  children: ResultPromise[],
): Promise<LoopbackMesh> {
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
  await poll(
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

async function poll(cond: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 100));
  }
}
