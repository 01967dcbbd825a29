import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CertificateAuthority } from '@zmesh/shared';
import { execa, type ResultPromise } from 'execa';
import { stringify } from 'yaml';
import { startZtunnelProcess, stopChild, waitReady } from '../local/ztunnel-process.js';

/** Where a load generator connects for one path, and how to take the path down. */
export interface OpenPath {
  host: string;
  port: number;
  /** Pids of the proxy processes on this path, for CPU and RSS readings. */
  pids: number[];
  close(): Promise<void>;
}

export interface PathSpec {
  name: string;
  /** Why this path may be unavailable on this machine (a missing binary), or undefined. */
  unavailable(): Promise<string | undefined>;
  open(target: { host: string; port: number }): Promise<OpenPath>;
}

export interface BenchAddresses {
  /** Client-side proxy address (node-a) and server-side proxy address (node-b). */
  nodeA: string;
  nodeB: string;
  client: string;
  server: string;
}

/** CPU the proxies run on; the load generators get the other one (see bench.ts). */
export const PROXY_CPU = '0';

export function directPath(): PathSpec {
  return {
    name: 'direct',
    unavailable: async () => undefined,
    open: async (target) => ({ ...target, pids: [], close: async () => {} }),
  };
}

/**
 * Two stunnel4 processes doing TLS 1.3 with client certificates from the same CA as zmesh:
 * the C mTLS tunnel pair zmesh is measured against.
 */
export function stunnelPath(dir: string, ca: CertificateAuthority, addr: BenchAddresses): PathSpec {
  return {
    name: 'stunnel4 pair',
    unavailable: async () =>
      (await onPath('stunnel4')) ? undefined : 'stunnel4 not installed (apt-get install stunnel4)',
    open: async (target) => {
      const files = await writeCredentials(dir, ca, 'stunnel');
      const port = 16100;
      const server = conf({
        ...files,
        accept: `${addr.nodeB}:${port}`,
        connect: `${target.host}:${target.port}`,
      });
      const client = conf({
        ...files,
        client: true,
        accept: `${addr.client}:${port + 1}`,
        connect: `${addr.nodeB}:${port}`,
      });
      await writeFile(join(dir, 'stunnel-server.conf'), server);
      await writeFile(join(dir, 'stunnel-client.conf'), client);
      const children = ['server', 'client'].map((side) =>
        execa('taskset', ['-c', PROXY_CPU, 'stunnel4', join(dir, `stunnel-${side}.conf`)], {
          reject: false,
          stdio: 'ignore',
        }),
      );
      await waitListening(addr.client, port + 1);
      return closer({ host: addr.client, port: port + 1 }, children);
    },
  };
}

/** The zmesh ztunnel pair over HBONE, in explicit-proxy mode (no capture in this path). */
export function ztunnelPath(dir: string, addr: BenchAddresses): PathSpec {
  return {
    name: 'zmesh ztunnel pair',
    unavailable: async () => undefined,
    open: async (target) => {
      const port = 16200;
      const config = join(dir, 'bench-mesh.yaml');
      await writeFile(config, stringify(benchMesh(addr, target, port)));
      const children = [
        startZtunnelProcess({
          config,
          caDir: dir,
          node: 'node-a',
          address: addr.nodeA,
          cpu: PROXY_CPU,
          log: 'error',
        }),
        startZtunnelProcess({
          config,
          caDir: dir,
          node: 'node-b',
          address: addr.nodeB,
          cpu: PROXY_CPU,
          log: 'error',
        }),
      ];
      await Promise.all([waitReady(addr.nodeA), waitReady(addr.nodeB)]);
      await waitListening(addr.client, port);
      return closer({ host: addr.client, port }, children);
    },
  };
}

function benchMesh(addr: BenchAddresses, target: { host: string; port: number }, port: number): unknown {
  return {
    workloads: [
      {
        name: 'load-client',
        namespace: 'bench',
        serviceAccount: 'client',
        addresses: [addr.client],
        node: 'node-a',
      },
      {
        name: 'load-server',
        namespace: 'bench',
        serviceAccount: 'server',
        addresses: [addr.server],
        node: 'node-b',
      },
    ],
    forwards: [
      {
        workload: 'Kubernetes//Pod/bench/load-client',
        listen: `${addr.client}:${port}`,
        destination: `${target.host}:${target.port}`,
      },
    ],
  };
}

function closer(at: { host: string; port: number }, children: ResultPromise[]): OpenPath {
  return {
    ...at,
    pids: children.flatMap((c) => (c.pid ? [c.pid] : [])),
    close: async () => {
      await Promise.all(children.map((c) => stopChild(c)));
    },
  };
}

async function writeCredentials(dir: string, ca: CertificateAuthority, name: string) {
  const cred = await ca.issue(`spiffe://${ca.trustDomain}/ns/bench/sa/${name}`, 3600);
  const cert = join(dir, `${name}-cert.pem`);
  const key = join(dir, `${name}-key.pem`);
  const root = join(dir, `${name}-root.pem`);
  await writeFile(cert, cred.certChainPem.slice(0, -1).join(''));
  await writeFile(key, cred.keyPem, { mode: 0o600 });
  await writeFile(root, ca.rootPem);
  return { cert, key, root };
}

function conf(o: {
  cert: string;
  key: string;
  root: string;
  accept: string;
  connect: string;
  client?: boolean;
}): string {
  return [
    'foreground = yes',
    'pid =',
    'debug = 3',
    '[tunnel]',
    o.client ? 'client = yes' : '',
    `accept = ${o.accept}`,
    `connect = ${o.connect}`,
    `cert = ${o.cert}`,
    `key = ${o.key}`,
    `CAfile = ${o.root}`,
    'verifyChain = yes',
    'sslVersionMin = TLSv1.3',
    '',
  ].join('\n');
}

async function onPath(bin: string): Promise<boolean> {
  return (await execa('which', [bin], { reject: false })).exitCode === 0;
}

/**
 * Waits until something listens on host:port, read from /proc/net/tcp rather than by
 * connecting: a probe connection would reach the server behind the proxy and confuse
 * servers such as iperf3 that expect every connection to be a test.
 */
export async function waitListening(host: string, port: number, timeoutMs = 10_000): Promise<void> {
  const { readFile } = await import('node:fs/promises');
  const want = `${host
    .split('.')
    .reverse()
    .map((o) => Number(o).toString(16).padStart(2, '0'))
    .join('')}:${port.toString(16).padStart(4, '0')}`.toUpperCase();
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const table = await readFile('/proc/net/tcp', 'utf8');
    // Column 2 is local address, column 4 the state; 0A is LISTEN.
    if (table.split('\n').some((l) => l.trim().split(/\s+/)[1] === want && l.trim().split(/\s+/)[3] === '0A'))
      return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`nothing listening on ${host}:${port} after ${timeoutMs} ms`);
}
