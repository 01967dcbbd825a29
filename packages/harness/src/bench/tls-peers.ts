import { stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { CertificateAuthority } from '@zmesh/shared';
import type { ResultPromise } from 'execa';
import type { Endpoint } from './endpoint.js';
import {
  type BenchAddresses,
  loopbackPlacement,
  missing,
  type OpenPath,
  type PathSpec,
  type Placement,
  started,
} from './peer-paths.js';
import type { Target, TargetName } from './targets.js';

interface Credentials {
  cert: string;
  key: string;
  /** Certificate and key in one file (haproxy's `crt`). */
  combined: string;
  root: string;
}

/**
 * Two stunnel4 processes doing TLS 1.3 with client certificates from the same CA as zmesh,
 * one service per target.
 */
export function stunnelPath(dir: string, ca: CertificateAuthority, addr: BenchAddresses): PathSpec {
  return {
    name: 'stunnel4 pair',
    kind: 'c-mtls',
    unavailable: async () => missing('stunnel4'),
    open: (targets) => openStunnel(dir, ca, targets, loopbackPlacement(addr)),
  };
}

export async function openStunnel(
  dir: string,
  ca: CertificateAuthority,
  targets: Target[],
  at: Placement,
): Promise<OpenPath> {
  const files = await writeCredentials(dir, ca, 'stunnel');
  const { front, back, endpoints } = layout(at, targets, 16100);
  const server = targets.map((t, i) => service(t.name, files, back[i]!, t));
  const client = targets.map((t, i) => service(t.name, files, front[i]!, back[i]!, true));
  await writeFile(join(dir, 'stunnel-server.conf'), [...stunnelGlobal(), ...server].join('\n'));
  await writeFile(join(dir, 'stunnel-client.conf'), [...stunnelGlobal(), ...client].join('\n'));
  const [s, c] = (['server', 'client'] as const).map((side) =>
    at.spawn(side, ['stunnel4', join(dir, `stunnel-${side}.conf`)]),
  );
  return startedPair(endpoints, front, back, s!, c!);
}

function stunnelGlobal(): string[] {
  return ['foreground = yes', 'pid =', 'debug = 3', ''];
}

function service(name: string, f: Credentials, accept: Endpoint, connect: Endpoint, client = false): string {
  return [
    `[${name}]`,
    client ? 'client = yes' : '',
    `accept = ${accept.host}:${accept.port}`,
    `connect = ${connect.host}:${connect.port}`,
    `cert = ${f.cert}`,
    `key = ${f.key}`,
    `CAfile = ${f.root}`,
    'verifyChain = yes',
    'sslVersionMin = TLSv1.3',
    'socket = l:TCP_NODELAY=1',
    'socket = r:TCP_NODELAY=1',
    '',
  ].join('\n');
}

/**
 * Two haproxy processes (one thread each, like every proxy here on one pinned CPU) in TCP
 * mode: TLS 1.3 only, client certificates presented and verified against the CA both ways.
 */
export function haproxyPath(dir: string, ca: CertificateAuthority, addr: BenchAddresses): PathSpec {
  return {
    name: 'haproxy pair',
    kind: 'c-mtls',
    unavailable: async () => missing('haproxy'),
    open: (targets) => openHaproxy(dir, ca, targets, loopbackPlacement(addr)),
  };
}

export async function openHaproxy(
  dir: string,
  ca: CertificateAuthority,
  targets: Target[],
  at: Placement,
): Promise<OpenPath> {
  const f = await writeCredentials(dir, ca, 'haproxy');
  const { front, back, endpoints } = layout(at, targets, 16300);
  const tls = haproxyTls(f);
  const serverCfg = await haproxyConfig(dir, 'server', haproxyServer(targets, back, tls));
  const clientCfg = await haproxyConfig(dir, 'client', haproxyClient(targets, front, back, tls));
  const server = haproxyProcess(dir, 'server', 'server', at, serverCfg);
  const client = haproxyProcess(dir, 'client', 'client', at, clientCfg);
  return startedPair(endpoints, front, back, server, client);
}

function haproxyTls(f: Credentials): string {
  return `crt ${f.combined} ca-file ${f.root} verify required ssl-min-ver TLSv1.3`;
}

/** The pair's server side: mTLS in on `back`, plain TCP to each target. */
function haproxyServer(targets: Target[], back: Endpoint[], tls: string): string[] {
  return targets.flatMap((t, i) => [
    `frontend in-${t.name}`,
    `  bind ${back[i]!.host}:${back[i]!.port} ssl ${tls}`,
    `  default_backend app-${t.name}`,
    `backend app-${t.name}`,
    `  server app ${t.host}:${t.port}`,
  ]);
}

/** The pair's client side: plain TCP in on `front`, mTLS out to `to` (the server side, or a hop). */
function haproxyClient(targets: Target[], front: Endpoint[], to: Endpoint[], tls: string): string[] {
  return targets.flatMap((t, i) => [
    `frontend out-${t.name}`,
    `  bind ${front[i]!.host}:${front[i]!.port}`,
    `  default_backend tunnel-${t.name}`,
    `backend tunnel-${t.name}`,
    `  server peer ${to[i]!.host}:${to[i]!.port} ssl ${tls}`,
  ]);
}

/** Writes `haproxy-NAME.cfg`; spawning is left to the caller (awaiting a subprocess waits for its exit). */
async function haproxyConfig(dir: string, name: string, sections: string[]): Promise<string> {
  const cfg = join(dir, `haproxy-${name}.cfg`);
  await writeFile(cfg, [...haproxyGlobal(), ...sections, ''].join('\n'));
  return cfg;
}

/** `side`: where the placement runs it (the hop runs beside the server side). */
function haproxyProcess(
  dir: string,
  name: string,
  side: 'client' | 'server',
  at: Placement,
  cfg: string,
): ResultPromise {
  return at.spawn(side, ['haproxy', '-db', '-f', cfg], join(dir, `haproxy-${name}.log`));
}

/**
 * The bench's L7-hop peers: a pair with a proxy between its two sides, mTLS on both legs,
 * the shape of zmesh's waypoint path (ztunnel → waypoint → ztunnel). The HTTP target
 * crosses the hop at L7 (each request parsed and sent on over kept-alive upstream
 * connections); the others cross it at L4, as opaque TCP crosses the waypoint. The hop's
 * pid is the path's `waypointPid`, so the HTTP step reports its CPU beside the waypoint's:
 * haproxy for what a C L7 proxy costs, `node:https` for what Node's own HTTP costs.
 */
const HAPROXY_HOP_PATH = 'haproxy pair + HTTP hop';
const NODE_HOP_PATH = 'node:tls pipes + node:https hop';

export function haproxyHopPath(dir: string, ca: CertificateAuthority, addr: BenchAddresses): PathSpec {
  return {
    name: HAPROXY_HOP_PATH,
    kind: 'c-mtls',
    l7Hop: true,
    unavailable: async () => missing('haproxy'),
    open: async (targets) => {
      const at = loopbackPlacement(addr);
      const f = await writeCredentials(dir, ca, 'haproxy-hop');
      const { front, mid, back, endpoints } = hopLayout(addr, targets, 16500);
      const tls = haproxyTls(f);
      const hopSections = targets.flatMap((t, i) => {
        const mode = t.name === 'http' ? 'http' : 'tcp';
        return [
          `frontend hop-${t.name}`,
          `  mode ${mode}`,
          `  bind ${mid[i]!.host}:${mid[i]!.port} ssl ${tls}`,
          `  default_backend onward-${t.name}`,
          `backend onward-${t.name}`,
          `  mode ${mode}`,
          `  server peer ${back[i]!.host}:${back[i]!.port} ssl ${tls}`,
        ];
      });
      const cfg = {
        server: await haproxyConfig(dir, 'hop-server', haproxyServer(targets, back, tls)),
        hop: await haproxyConfig(dir, 'hop', hopSections),
        client: await haproxyConfig(dir, 'hop-client', haproxyClient(targets, front, mid, tls)),
      };
      const server = haproxyProcess(dir, 'hop-server', 'server', at, cfg.server);
      const hop = haproxyProcess(dir, 'hop', 'server', at, cfg.hop);
      const client = haproxyProcess(dir, 'hop-client', 'client', at, cfg.client);
      return startedHop(endpoints, { front, mid, back }, { server, hop, client });
    },
  };
}

export function nodeHopPath(dir: string, ca: CertificateAuthority, addr: BenchAddresses): PathSpec {
  return {
    name: NODE_HOP_PATH,
    kind: 'node-tls',
    l7Hop: true,
    unavailable: async () =>
      (await stat(NODE_TLS_PIPE).catch(() => undefined)) ? undefined : `${NODE_TLS_PIPE} not built`,
    open: async (targets) => {
      const at = loopbackPlacement(addr);
      const f = await writeCredentials(dir, ca, 'node-hop');
      const { front, mid, back, endpoints } = hopLayout(addr, targets, 16600);
      const server = nodeTlsProcess(dir, at, 'node-hop', 'server', f, routes(back, targets));
      const hop = nodeTlsProcess(
        dir,
        at,
        'node-hop',
        'hop',
        f,
        targets.map(
          (t, i) => `${t.name === 'http' ? '--http-route' : '--route'}=${hp(mid[i]!)}=${hp(back[i]!)}`,
        ),
      );
      const client = nodeTlsProcess(dir, at, 'node-hop', 'client', f, routes(front, mid));
      return startedHop(endpoints, { front, mid, back }, { server, hop, client });
    },
  };
}

/** The pair's layout, with the hop's listen addresses beside node-a. */
function hopLayout(addr: BenchAddresses, targets: Target[], base: number) {
  const pair = layout(loopbackPlacement(addr), targets, base);
  return { ...pair, mid: targets.map((_, i) => ({ host: addr.nodeA, port: base + 20 + i })) };
}

/** Up once all three listen; pids are server, hop, client (the hop's is `waypointPid`). */
async function startedHop(
  endpoints: Map<TargetName, Endpoint>,
  at: { front: Endpoint[]; mid: Endpoint[]; back: Endpoint[] },
  p: { server: ResultPromise; hop: ResultPromise; client: ResultPromise },
): Promise<OpenPath> {
  const path = await startedSides(endpoints, [
    [p.server, at.back],
    [p.hop, at.mid],
    [p.client, at.front],
  ]);
  return p.hop.pid ? { ...path, waypointPid: p.hop.pid } : path;
}

function haproxyGlobal(): string[] {
  return [
    'global',
    '  nbthread 1',
    '  maxconn 8000',
    'defaults',
    '  mode tcp',
    '  option tcp-smart-connect',
    '  timeout connect 5s',
    '  timeout client 1h',
    '  timeout server 1h',
  ];
}

/** The `node:tls` pipe program (node-tls-pipe.ts), beside this module in dist/. */
const NODE_TLS_PIPE = resolve(import.meta.dirname, 'node-tls-pipe.js');

/**
 * Two `node:tls` pipe processes (node-tls-pipe.ts): mTLS as Node does it, with nothing of
 * zmesh's on top. Not a peer zmesh is held against, but the floor under it: the gap
 * between the two is what zmesh's own code costs, the rest is Node's.
 */
export function nodeTlsPath(dir: string, ca: CertificateAuthority, addr: BenchAddresses): PathSpec {
  return {
    name: NODE_TLS_PATH,
    kind: 'node-tls',
    unavailable: async () =>
      (await stat(NODE_TLS_PIPE).catch(() => undefined)) ? undefined : `${NODE_TLS_PIPE} not built`,
    open: (targets) => openNodeTls(dir, ca, targets, loopbackPlacement(addr)),
  };
}

const NODE_TLS_PATH = 'node:tls pipe pair';

async function openNodeTls(
  dir: string,
  ca: CertificateAuthority,
  targets: Target[],
  at: Placement,
): Promise<OpenPath> {
  const f = await writeCredentials(dir, ca, 'node-tls');
  const { front, back, endpoints } = layout(at, targets, 16400);
  const s = nodeTlsProcess(dir, at, 'node-tls', 'server', f, routes(back, targets));
  const c = nodeTlsProcess(dir, at, 'node-tls', 'client', f, routes(front, back));
  return startedPair(endpoints, front, back, s, c);
}

const hp = (e: Endpoint) => `${e.host}:${e.port}`;

/** `--route=LISTEN=TO` for each pair of addresses. */
function routes(listen: Endpoint[], to: Endpoint[]): string[] {
  return listen.map((l, i) => `--route=${hp(l)}=${hp(to[i]!)}`);
}

function nodeTlsProcess(
  dir: string,
  at: Placement,
  tag: string,
  side: 'client' | 'server' | 'hop',
  f: Credentials,
  routeArgs: string[],
): ResultPromise {
  const log = join(dir, `${tag}-${side}.log`);
  const argv = [
    process.execPath,
    NODE_TLS_PIPE,
    '--side',
    side,
    '--cert',
    f.cert,
    '--key',
    f.key,
    '--ca',
    f.root,
  ];
  return at.spawn(side === 'client' ? 'client' : 'server', [...argv, ...routeArgs], log);
}

/** Up once the client side listens on `front` and the server side on `back`, each in its own namespace. */
function startedPair(
  endpoints: Map<TargetName, Endpoint>,
  front: Endpoint[],
  back: Endpoint[],
  server: ResultPromise,
  client: ResultPromise,
): Promise<OpenPath> {
  return startedSides(endpoints, [
    [server, back],
    [client, front],
  ]);
}

/** Up once each process listens on its addresses (read in its own namespace); pids in this order. */
function startedSides(
  endpoints: Map<TargetName, Endpoint>,
  sides: [ResultPromise, Endpoint[]][],
): Promise<OpenPath> {
  const listening = sides.flatMap(([p, at]) => at.map((e) => ({ ...e, pid: p.pid })));
  return started(
    endpoints,
    sides.map(([p]) => p),
    listening,
  );
}

function layout(at: Placement, targets: Target[], base: number) {
  const front = targets.map((_, i) => ({ host: at.front, port: base + i }));
  const back = targets.map((_, i) => ({ host: at.back, port: base + 10 + i }));
  const endpoints = new Map<TargetName, Endpoint>(targets.map((t, i) => [t.name, front[i]!]));
  return { front, back, endpoints };
}

async function writeCredentials(dir: string, ca: CertificateAuthority, name: string): Promise<Credentials> {
  const cred = await ca.issue(`spiffe://${ca.trustDomain}/ns/bench/sa/${name}`, 3600);
  // PEM blocks each end with a newline: haproxy will not read `-----END …----------BEGIN`.
  const pem = (block: string) => (block.endsWith('\n') ? block : `${block}\n`);
  const chain = cred.certChainPem.slice(0, -1).map(pem).join('');
  const files = {
    cert: join(dir, `${name}-cert.pem`),
    key: join(dir, `${name}-key.pem`),
    combined: join(dir, `${name}-combined.pem`),
    root: join(dir, `${name}-root.pem`),
  };
  await writeFile(files.cert, chain);
  await writeFile(files.key, cred.keyPem, { mode: 0o600 });
  await writeFile(files.combined, chain + pem(cred.keyPem), { mode: 0o600 });
  await writeFile(files.root, ca.rootPem);
  return files;
}
