import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { stringify } from 'yaml';
import { stopChild, waitReady, ZMESH_BIN } from '../local/ztunnel-process.js';

/** 127.50.0.0/16 is this demo's loopback block. */
const CP = '127.50.0.1';
const XDS_PORT = 25_810;
const ADMIN = `http://${CP}:25814`;
const NODES = { 'node-a': '127.50.0.2', 'node-b': '127.50.0.3' } as const;
const FRONTEND = '127.50.1.1';
const WEB = { v1: '127.50.2.1', v2: '127.50.2.2' } as const;
const WAYPOINT = '127.50.3.1';
const VIP = { web: '127.50.96.10', v1: '127.50.96.11', v2: '127.50.96.12' } as const;
const SPLIT_REQUESTS = 200;

/**
 * `make demo`, part 2: L7 for one namespace, live. A real control plane, two ztunnels fed
 * over xDS, a waypoint for namespace `shop`; `zmesh ns l7 on shop` sends the namespace's
 * traffic through the waypoint (GET /public allowed, POST /admin denied with 403, a 90/10
 * split of /public between v1 and v2), and `ns l7 off` takes it back out, without
 * restarting anything. Explicit-proxy mode on loopback, so it needs no root.
 */
/** The L7 lab: control plane, two ztunnels over xDS, a waypoint for `shop`, web v1 and v2. */
export interface L7Lab {
  /** `zmesh ns l7 on|off shop`; resolves when every ztunnel acked. */
  l7(on: boolean): Promise<string>;
  /** Where the frontend's traffic enters the mesh (its forward listener). */
  entry: { host: string; port: number };
  waypointPid(): number | undefined;
  stop(): Promise<void>;
}

export async function startL7Lab(): Promise<L7Lab> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-l7-'));
  const children: ResultPromise[] = [];
  const apps: Server[] = [];
  const stop = async () => {
    await Promise.all(children.reverse().map((c) => stopChild(c)));
    for (const a of apps) a.close();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await mkdir(join(dir, 'cfg'));
    await writeFile(join(dir, 'cfg', 'mesh.yaml'), MESH_YAML);
    children.push(
      zmesh([
        'control-plane',
        '-c',
        join(dir, 'cfg'),
        '--host',
        CP,
        '--port',
        String(XDS_PORT),
        '--admin-port',
        '25814',
        '--ca-dir',
        join(dir, 'ca'),
        '--roots-file',
        join(dir, 'roots.pem'),
      ]),
    );
    await poll(async () => (await fetch(`${ADMIN}/healthz`).catch(() => undefined))?.ok === true);
    for (const v of ['v1', 'v2'] as const) apps.push(await webServer(WEB[v], v));
    await writeFile(join(dir, 'forwards.yaml'), stringify(FORWARDS));
    for (const [node, address] of Object.entries(NODES)) {
      const { token } = (await (
        await fetch(`${ADMIN}/node-token?node=${node}`, { method: 'POST' })
      ).json()) as { token: string };
      await writeFile(join(dir, `${node}.token`), token);
      children.push(
        zmesh([
          'ztunnel',
          '--xds',
          `${CP}:${XDS_PORT}`,
          '--node',
          node,
          '--address',
          address,
          '--token-file',
          join(dir, `${node}.token`),
          '--roots-file',
          join(dir, 'roots.pem'),
          '--snapshot',
          join(dir, `${node}.snapshot`),
          '--config',
          join(dir, 'forwards.yaml'),
        ]),
      );
    }
    await Promise.all(Object.values(NODES).map((a) => waitReady(a)));
    await writeFile(join(dir, 'waypoint.yaml'), stringify(WAYPOINT_CONFIG));
    const waypoint = zmesh([
      'waypoint',
      '--config',
      join(dir, 'waypoint.yaml'),
      '--address',
      WAYPOINT,
      '--ca-dir',
      join(dir, 'ca'),
      '--trust-domain',
      'cluster.local',
    ]);
    children.push(waypoint);
    await poll(
      async () => (await fetch(`http://${WAYPOINT}:15020/healthz/ready`).catch(() => undefined))?.ok === true,
    );
    return {
      l7: (on) =>
        zmeshOnce([
          'ns',
          'l7',
          on ? 'on' : 'off',
          'shop',
          ...(on ? ['--waypoint', 'waypoint'] : []),
          '--admin',
          ADMIN,
        ]),
      entry: { host: FRONTEND, port: 18080 },
      waypointPid: () => waypoint.pid,
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

export async function runL7Demo(): Promise<number> {
  step(
    'control plane (xDS + CA on loopback) with namespaces front and shop, web-v1/web-v2, a waypoint Gateway',
  );
  const lab = await startL7Lab();
  try {
    step('L7 off: front/frontend → web.shop (L4 only, through ztunnels)');
    const before = await requests();
    console.log(`  GET /public → ${before.get}; POST /admin → ${before.post} (no L7 policy applies)`);
    step('zmesh ns l7 on shop: returns when every ztunnel has acked');
    console.log(`  ${(await lab.l7(true)).trim()}`);
    const on = await requests();
    console.log(`  GET /public → ${on.get}; POST /admin → ${on.post}`);
    const split = await splitCount();
    console.log(`  ${SPLIT_REQUESTS} × GET /public: v1 ${split.v1}, v2 ${split.v2} (route: 90/10)`);
    for (const line of (await (await fetch(`http://${WAYPOINT}:15020/metrics`)).text()).split('\n')) {
      if (line.startsWith('istio_requests_total{')) console.log(`  ${summarise(line)}`);
    }
    step('zmesh ns l7 off shop: new connections skip the waypoint again');
    console.log(`  ${(await lab.l7(false)).trim()}`);
    const off = await requests();
    console.log(`  GET /public → ${off.get}; POST /admin → ${off.post}`);
    const ok =
      before.post.startsWith('200') &&
      on.get.startsWith('200') &&
      on.post.startsWith('403') &&
      Math.abs(split.v1 / SPLIT_REQUESTS - 0.9) <= 0.07 &&
      off.post.startsWith('200');
    step(ok ? 'L7 demo passed: policy and routing applied and removed live' : 'L7 demo FAILED');
    return ok ? 0 : 1;
  } finally {
    await lab.stop();
  }
}

const MESH_YAML = [
  { kind: 'Namespace', metadata: { name: 'front', labels: { 'istio.io/dataplane-mode': 'ambient' } } },
  { kind: 'Namespace', metadata: { name: 'shop', labels: { 'istio.io/dataplane-mode': 'ambient' } } },
  pod('frontend', 'front', 'frontend', 'node-a', FRONTEND, { app: 'frontend' }),
  pod('web-v1', 'shop', 'web', 'node-b', WEB.v1, { app: 'web', version: 'v1' }),
  pod('web-v2', 'shop', 'web', 'node-b', WEB.v2, { app: 'web', version: 'v2' }),
  pod('waypoint', 'shop', 'waypoint', 'node-w', WAYPOINT, {
    'gateway.networking.k8s.io/gateway-name': 'waypoint',
  }),
  svc('web', VIP.web, { app: 'web' }),
  svc('web-v1', VIP.v1, { version: 'v1' }),
  svc('web-v2', VIP.v2, { version: 'v2' }),
  {
    kind: 'Gateway',
    metadata: { name: 'waypoint', namespace: 'shop' },
    spec: { gatewayClassName: 'istio-waypoint', addresses: [{ value: WAYPOINT }] },
  },
]
  .map((d) => stringify(d))
  .join('---\n');

const FORWARDS = {
  workloads: [
    {
      name: 'frontend',
      namespace: 'front',
      serviceAccount: 'frontend',
      addresses: [FRONTEND],
      node: 'node-a',
    },
  ],
  forwards: [
    { workload: 'Kubernetes//Pod/front/frontend', listen: `${FRONTEND}:18080`, destination: `${VIP.web}:80` },
  ],
};

const webPorts = (name: string) => ({
  [`shop/${name}.shop.svc.cluster.local`]: [{ servicePort: 80, targetPort: 8080 }],
});
const WAYPOINT_CONFIG = {
  waypoint: { name: 'waypoint', namespace: 'shop' },
  workloads: (['v1', 'v2'] as const).map((v) => ({
    name: `web-${v}`,
    namespace: 'shop',
    serviceAccount: 'web',
    addresses: [WEB[v]],
    services: { ...webPorts('web'), ...webPorts(`web-${v}`) },
  })),
  services: (['web', 'web-v1', 'web-v2'] as const).map((name) => ({
    name,
    namespace: 'shop',
    addresses: [VIP[name === 'web' ? 'web' : name === 'web-v1' ? 'v1' : 'v2']],
    ports: [{ servicePort: 80, targetPort: 8080 }],
  })),
  httpRoutes: [
    {
      name: 'web',
      parentRefs: [{ name: 'web', port: 80 }],
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
  ],
  authorizationPolicies: [
    {
      name: 'no-admin-writes',
      targetRefs: [{ kind: 'Gateway', group: 'gateway.networking.k8s.io', name: 'waypoint' }],
      action: 'DENY',
      rules: [{ to: [{ operation: { methods: ['POST'], paths: ['/admin*'] } }] }],
    },
  ],
};

function pod(name: string, ns: string, sa: string, node: string, ip: string, labels: Record<string, string>) {
  return {
    kind: 'Pod',
    metadata: { name, namespace: ns, labels },
    spec: { serviceAccountName: sa, nodeName: node },
    status: { podIP: ip },
  };
}

function svc(name: string, vip: string, selector: Record<string, string>) {
  return {
    kind: 'Service',
    metadata: { name, namespace: 'shop' },
    spec: { clusterIP: vip, selector, ports: [{ port: 80, targetPort: 8080 }] },
  };
}

function webServer(host: string, version: string): Promise<Server> {
  const server = createServer((req, res) => {
    req.resume();
    // 1 KiB bodies: the waypoint benchmark's unit of work.
    res.end(`${version} ${req.method} ${req.url}\n`.padEnd(1024, '.'));
  });
  return new Promise((resolve) => server.listen({ host, port: 8080 }, () => resolve(server)));
}

async function curl(method: string, path: string): Promise<string> {
  const r = await execa(
    'curl',
    [
      '-sS',
      '--max-time',
      '5',
      '-X',
      method,
      '-o',
      '-',
      '-w',
      ' [%{http_code}]',
      `http://${FRONTEND}:18080${path}`,
    ],
    { reject: false },
  );
  const code = /\[(\d{3})\]$/.exec(r.stdout)?.[1] ?? '000';
  const body = r.stdout
    .replace(/\s*\[\d{3}\]$/, '')
    .replace(/\.+$/, '')
    .trim();
  return `${code} ${body || r.stderr.trim()}`;
}

async function requests(): Promise<{ get: string; post: string }> {
  return { get: await curl('GET', '/public'), post: await curl('POST', '/admin') };
}

async function splitCount(): Promise<{ v1: number; v2: number }> {
  const counts = { v1: 0, v2: 0 };
  for (let i = 0; i < SPLIT_REQUESTS; i++) {
    const r = await curl('GET', '/public');
    if (r.includes(' v1 ')) counts.v1++;
    else if (r.includes(' v2 ')) counts.v2++;
  }
  return counts;
}

function summarise(line: string): string {
  const label = (k: string) => new RegExp(`${k}="([^"]*)"`).exec(line)?.[1];
  return `istio_requests_total ${label('destination_service') ?? label('destination_workload')} ${label('request_method') ?? ''} ${label('response_code')} [${label('response_flags')}] = ${line.split(' ').pop()}`;
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

async function poll(cond: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 100));
  }
}

function step(text: string): void {
  console.log(`\n▶ ${text}`);
}
