import { mkdir, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import type { AdminTarget } from '@zmesh/shared';
import { execa, type ResultPromise } from 'execa';
import { stringify } from 'yaml';
import { tempDir } from '../local/exit-cleanup.js';
import { stopChild, ZMESH_BIN } from '../local/ztunnel-process.js';
import { clientForwards, startMesh } from '../mesh/mesh.js';

export interface L7LabOptions {
  /** First two octets of the lab's loopback /16 (default the demo's `127.50`). */
  block?: string;
  xdsPort?: number;
  /** Put the demo's HTTPRoute (90/10) and DENY policy in mesh.yaml (default true). */
  l7Config?: boolean;
  /** Starts web-v1 and web-v2 on `host`:8080 (default: a 1 KiB answer naming the version). */
  app?: (host: string, version: 'v1' | 'v2') => Promise<{ close(): void }>;
}

/** The L7 lab: control plane, two ztunnels and a waypoint all over xDS, web v1 and v2. */
export interface L7Lab {
  /** `zmesh ns l7 on|off shop`; resolves when every proxy (waypoint too) has acked. */
  l7(on: boolean): Promise<string>;
  /** Where the frontend's traffic enters the mesh (its forward listener). */
  entry: { host: string; port: number };
  /** The control plane's admin API, its Unix socket (`POST /apply`, `GET /proxy-status`). */
  admin: AdminTarget;
  /** The control plane's watched config directory. */
  configDir: string;
  waypointAddress: string;
  waypointPid(): number | undefined;
  stop(): Promise<void>;
}

interface Addresses {
  cp: string;
  nodes: Record<'node-a' | 'node-b', string>;
  frontend: string;
  web: { v1: string; v2: string };
  waypoint: string;
  vip: { web: string; 'web-v1': string; 'web-v2': string };
}

function addresses(block: string): Addresses {
  return {
    cp: `${block}.0.1`,
    nodes: { 'node-a': `${block}.0.2`, 'node-b': `${block}.0.3` },
    frontend: `${block}.1.1`,
    web: { v1: `${block}.2.1`, v2: `${block}.2.2` },
    waypoint: `${block}.3.1`,
    vip: { web: `${block}.96.10`, 'web-v1': `${block}.96.11`, 'web-v2': `${block}.96.12` },
  };
}

/**
 * Starts the lab: namespace `shop` with web-v1/web-v2 behind a waypoint Gateway, namespace
 * `front` with the frontend; everything (the waypoint's routes and policy included) comes
 * from the control plane's mesh.yaml. Explicit-proxy mode on loopback: no root needed.
 */
export async function startL7Lab(opts: L7LabOptions = {}): Promise<L7Lab> {
  const a = addresses(opts.block ?? '127.50');
  const xds = `${a.cp}:${opts.xdsPort ?? 25_810}`;
  const temp = tempDir('zmesh-l7-');
  const dir = temp.path;
  const children: ResultPromise[] = [];
  const apps: Array<{ close(): void }> = [];
  const stop = async () => {
    await Promise.all(children.reverse().map((c) => stopChild(c)));
    for (const s of apps) s.close();
    temp.remove();
  };
  try {
    await mkdir(join(dir, 'cfg'));
    await writeFile(join(dir, 'cfg', 'mesh.yaml'), meshYaml(a, opts.l7Config ?? true));
    const app = opts.app ?? webServer;
    for (const v of ['v1', 'v2'] as const) apps.push(await app(a.web[v], v));
    await writeFile(
      join(dir, 'forwards.yaml'),
      stringify(
        clientForwards({ name: 'frontend', namespace: 'front', address: a.frontend }, [
          { listen: `${a.frontend}:18080`, destination: `${a.vip.web}:80` },
        ]),
      ),
    );
    const { waypoint, admin } = await startMesh({
      run: 'processes',
      children,
      dir,
      cp: a.cp,
      xdsPort: Number(xds.split(':')[1]),
      nodes: a.nodes,
      forwards: join(dir, 'forwards.yaml'),
      waypoint: { gateway: 'shop/waypoint', address: a.waypoint },
      spawn: (argv) => zmesh(argv),
    });
    return {
      l7: (on) =>
        zmeshOnce(
          ['ns', 'l7', on ? 'on' : 'off', 'shop', ...(on ? ['--waypoint', 'waypoint'] : [])].concat([
            '--admin',
            admin.admin,
          ]),
        ),
      entry: { host: a.frontend, port: 18080 },
      admin,
      configDir: join(dir, 'cfg'),
      waypointAddress: a.waypoint,
      waypointPid: () => waypoint.pid,
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** The demo's 90/10 split of `web` and its DENY of POST /admin*, as the control plane takes them. */
export const L7_ROUTE_YAML = stringify({
  apiVersion: 'gateway.networking.k8s.io/v1',
  kind: 'HTTPRoute',
  metadata: { name: 'web', namespace: 'shop' },
  spec: {
    parentRefs: [{ group: '', kind: 'Service', name: 'web', port: 80 }],
    rules: [
      {
        matches: [{ path: { type: 'PathPrefix', value: '/' } }],
        backendRefs: [
          { name: 'web-v1', port: 80, weight: 90 },
          { name: 'web-v2', port: 80, weight: 10 },
        ],
      },
    ],
  },
});
export const L7_POLICY_YAML = stringify({
  apiVersion: 'security.istio.io/v1',
  kind: 'AuthorizationPolicy',
  metadata: { name: 'no-admin-writes', namespace: 'shop' },
  spec: {
    targetRefs: [{ kind: 'Gateway', group: 'gateway.networking.k8s.io', name: 'waypoint' }],
    action: 'DENY',
    rules: [{ to: [{ operation: { methods: ['POST'], paths: ['/admin*'] } }] }],
  },
});

function meshYaml(a: Addresses, l7Config: boolean): string {
  const pod = (
    name: string,
    ns: string,
    sa: string,
    node: string,
    ip: string,
    labels: Record<string, string>,
  ) =>
    stringify({
      kind: 'Pod',
      metadata: { name, namespace: ns, labels },
      spec: { serviceAccountName: sa, nodeName: node },
      status: { podIP: ip },
    });
  const svc = (name: 'web' | 'web-v1' | 'web-v2', selector: Record<string, string>) =>
    stringify({
      kind: 'Service',
      metadata: { name, namespace: 'shop' },
      spec: { clusterIP: a.vip[name], selector, ports: [{ port: 80, targetPort: 8080 }] },
    });
  const ns = (name: string) =>
    stringify({ kind: 'Namespace', metadata: { name, labels: { 'istio.io/dataplane-mode': 'ambient' } } });
  return [
    ns('front'),
    ns('shop'),
    pod('frontend', 'front', 'frontend', 'node-a', a.frontend, { app: 'frontend' }),
    pod('web-v1', 'shop', 'web', 'node-b', a.web.v1, { app: 'web', version: 'v1' }),
    pod('web-v2', 'shop', 'web', 'node-b', a.web.v2, { app: 'web', version: 'v2' }),
    pod('waypoint', 'shop', 'waypoint', 'node-w', a.waypoint, {
      'gateway.networking.k8s.io/gateway-name': 'waypoint',
    }),
    svc('web', { app: 'web' }),
    svc('web-v1', { version: 'v1' }),
    svc('web-v2', { version: 'v2' }),
    stringify({
      kind: 'Gateway',
      metadata: { name: 'waypoint', namespace: 'shop' },
      spec: { gatewayClassName: 'istio-waypoint', addresses: [{ value: a.waypoint }] },
    }),
    ...(l7Config ? [L7_ROUTE_YAML, L7_POLICY_YAML] : []),
  ].join('---\n');
}

function webServer(host: string, version: string): Promise<Server> {
  const server = createServer((req, res) => {
    req.resume();
    // 1 KiB bodies: the waypoint benchmark's unit of work.
    res.end(`${version} ${req.method} ${req.url}\n`.padEnd(1024, '.'));
  });
  return new Promise((resolve) => server.listen({ host, port: 8080 }, () => resolve(server)));
}

function zmesh(argv: string[]): ResultPromise {
  const child = execa(ZMESH_BIN, argv, {
    reject: false,
    stdout: 'ignore',
    stderr: 'pipe',
    env: { ZMESH_LOG: 'error' },
  });
  child.stderr?.on('data', (d: Buffer) => process.stderr.write(`  [${argv[0]}] ${d}`));
  return child;
}

async function zmeshOnce(argv: string[]): Promise<string> {
  const r = await execa(ZMESH_BIN, argv, { reject: false, env: { ZMESH_LOG: 'error' } });
  return r.stdout || r.stderr;
}
