import { logger } from '@zmesh/shared';
import type { ResultPromise } from 'execa';
import type { PodInfo } from '../cluster/topology.js';
import type { LocalMesh } from '../mesh/local-mesh.js';
import { startMesh } from '../mesh/mesh.js';
import { principalLines } from '../report/principal-lines.js';

const log = logger('demo');

const HTTP_SERVER = `
const name = process.argv[1];
require('http').createServer((req, res) => {
  res.end('hello from ' + name + ': ' + req.method + ' ' + req.url + ' (peer ' + req.socket.remoteAddress + ')\\n');
}).listen(8080, '::', () => console.log('listening'));
`;

/**
 * `make demo` as root: a 2-node cluster of network namespaces with BPF capture, two
 * namespaces, an HTTP server and redis on node-b, unchanged curl and redis-cli clients on
 * node-a reaching them by pod IP and service VIP, then what each ztunnel attributed.
 */
export async function runClusterDemo(): Promise<number> {
  step('bringing up 2 nodes, 4 pods, one ztunnel per node (capture mode, strict inbound)');
  const mesh = await startMesh({
    run: 'cluster',
    spec: {
      nodes: ['node-a', 'node-b'],
      pods: [
        { name: 'web', namespace: 'shop', serviceAccount: 'web', node: 'node-b' },
        { name: 'cache', namespace: 'data', serviceAccount: 'redis', node: 'node-b' },
        { name: 'frontend', namespace: 'shop', serviceAccount: 'frontend', node: 'node-a' },
        { name: 'worker', namespace: 'data', serviceAccount: 'worker', node: 'node-a' },
      ],
      services: [
        {
          name: 'web',
          namespace: 'shop',
          vip: '10.244.250.10',
          ports: [{ port: 80, targetPort: 8080 }],
          pods: ['web'],
        },
        {
          name: 'cache',
          namespace: 'data',
          vip: '10.244.250.20',
          ports: [{ port: 6379, targetPort: 6379 }],
          pods: ['cache'],
        },
      ],
    },
  });
  const servers: ResultPromise[] = [];
  try {
    const web = mesh.pod('web');
    const cache = mesh.pod('cache');
    for (const pod of mesh.cluster.pods)
      console.log(`  ${pod.namespace}/${pod.name} on ${pod.node}: ${pod.ipv4}, ${pod.ipv6}`);
    step('starting an HTTP server in shop/web and redis in data/cache (as their own unprivileged uids)');
    servers.push((await startAndWait(mesh, web, ['node', '-e', HTTP_SERVER, 'web'], 'listening')).proc);
    const redisArgv = [
      'redis-server',
      '--port',
      '6379',
      '--bind',
      '0.0.0.0 ::',
      '--save',
      '',
      '--protected-mode',
      'no',
    ];
    servers.push((await startAndWait(mesh, cache, [...redisArgv, '--dir', '/tmp'], 'Ready to accept')).proc);
    const frontend = mesh.pod('frontend');
    const worker = mesh.pod('worker');
    let ok = true;
    for (const [label, url] of [
      ['by service VIP', 'http://10.244.250.10/'],
      ['by pod IPv4', `http://${web.ipv4}:8080/`],
      ['by pod IPv6', `http://[${web.ipv6}]:8080/`],
    ] as const) {
      step(`curl from shop/frontend ${label}: ${url}`);
      const r = await mesh.cluster.exec(frontend, ['curl', '-sS', '--max-time', '5', url]);
      console.log(`  ${(r.stdout || r.stderr).trim()}`);
      const peer = /\(peer ([^)]+)\)/.exec(r.stdout)?.[1];
      ok &&= r.exitCode === 0 && peerLine('shop/web', peer, frontend);
    }
    step('redis-cli from data/worker: SET and GET through the cache service VIP');
    const set = await mesh.cluster.exec(worker, [
      'redis-cli',
      '-h',
      '10.244.250.20',
      '-p',
      '6379',
      'SET',
      'greeting',
      'hello-mesh',
    ]);
    const get = await mesh.cluster.exec(worker, [
      'redis-cli',
      '-h',
      cache.ipv4,
      '-p',
      '6379',
      'GET',
      'greeting',
    ]);
    console.log(
      `  SET → ${set.stdout.trim() || set.stderr.trim()}; GET by pod IP → ${get.stdout.trim() || get.stderr.trim()}`,
    );
    ok &&= get.stdout.trim() === 'hello-mesh';
    // CLIENT INFO is the server's own view of this connection (addr=ip:port).
    const info = await mesh.cluster.exec(worker, [
      'redis-cli',
      '-h',
      '10.244.250.20',
      '-p',
      '6379',
      'CLIENT',
      'INFO',
    ]);
    const addr = /\baddr=(\S+):\d+/.exec(info.stdout)?.[1];
    ok &&= peerLine('data/cache (redis CLIENT INFO)', addr, worker);
    for (const node of ['node-a', 'node-b']) {
      step(`what ztunnel on ${node} attributed (istio_tcp_connections_opened_total)`);
      for (const line of principalLines(await mesh.metrics(node))) console.log(`  ${line}`);
    }
    step(
      ok
        ? "demo passed: every connection crossed the mesh with mutual TLS, attributed by the kernel, and each server saw its client's own address"
        : 'demo FAILED',
    );
    return ok ? 0 : 1;
  } finally {
    step('tearing down namespaces, cgroups, BPF programs and ztunnels');
    // down() kills every process in the pods' cgroups; the servers go with them.
    for (const s of servers) s.kill('SIGKILL');
    await mesh.down();
  }
}

/** Prints the server's view of its peer and whether it is the client pod's own address (source preserved). */
function peerLine(server: string, peer: string | undefined, client: PodInfo): boolean {
  const bare = peer?.replace(/^::ffff:/, '');
  const isClient = bare === client.ipv4 || bare === client.ipv6;
  console.log(
    `  ${server} saw peer ${peer ?? '?'}: ${isClient ? `the client pod ${client.namespace}/${client.name}'s own address ✓` : `NOT ${client.namespace}/${client.name}'s address ✗`}`,
  );
  return isClient;
}

/** Returns the process boxed: awaiting a subprocess itself would wait for its exit. */
async function startAndWait(
  mesh: LocalMesh,
  pod: PodInfo,
  argv: string[],
  ready: string,
): Promise<{ proc: ResultPromise }> {
  const proc = mesh.cluster.runInPod(pod, argv, { reject: false, stdout: 'pipe', stderr: 'pipe' });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${pod.name}: no "${ready}" within 10 s`)), 10_000);
    const onData = (d: Buffer) => {
      if (d.toString().includes(ready)) {
        clearTimeout(timer);
        resolve();
      }
    };
    proc.stdout?.on('data', onData);
    proc.stderr?.on('data', onData);
    proc.catch((e: unknown) => log.warn({ pod: pod.name, err: (e as Error).message }, 'pod process ended'));
  });
  return { proc };
}

function step(text: string): void {
  console.log(`\n▶ ${text}`);
}
