import { stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { CertificateAuthority } from '@zmesh/shared';
import type { ResultPromise } from 'execa';

import {
  type BenchAddresses,
  type Endpoint,
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
  const tls = `crt ${f.combined} ca-file ${f.root} verify required ssl-min-ver TLSv1.3`;
  const server = targets.flatMap((t, i) => [
    `frontend in-${t.name}`,
    `  bind ${back[i]!.host}:${back[i]!.port} ssl ${tls}`,
    `  default_backend app-${t.name}`,
    `backend app-${t.name}`,
    `  server app ${t.host}:${t.port}`,
  ]);
  const client = targets.flatMap((t, i) => [
    `frontend out-${t.name}`,
    `  bind ${front[i]!.host}:${front[i]!.port}`,
    `  default_backend tunnel-${t.name}`,
    `backend tunnel-${t.name}`,
    `  server peer ${back[i]!.host}:${back[i]!.port} ssl ${tls}`,
  ]);
  await writeFile(join(dir, 'haproxy-server.cfg'), [...haproxyGlobal(), ...server, ''].join('\n'));
  await writeFile(join(dir, 'haproxy-client.cfg'), [...haproxyGlobal(), ...client, ''].join('\n'));
  const [s, c] = (['server', 'client'] as const).map((side) =>
    at.spawn(
      side,
      ['haproxy', '-db', '-f', join(dir, `haproxy-${side}.cfg`)],
      join(dir, `haproxy-${side}.log`),
    ),
  );
  return startedPair(endpoints, front, back, s!, c!);
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

export const NODE_TLS_PATH = 'node:tls pipe pair';

async function openNodeTls(
  dir: string,
  ca: CertificateAuthority,
  targets: Target[],
  at: Placement,
): Promise<OpenPath> {
  const f = await writeCredentials(dir, ca, 'node-tls');
  const { front, back, endpoints } = layout(at, targets, 16400);
  const hp = (e: Endpoint) => `${e.host}:${e.port}`;
  const side = (name: 'client' | 'server', routes: string[]) =>
    at.spawn(
      name,
      [
        process.execPath,
        NODE_TLS_PIPE,
        '--side',
        name,
        '--cert',
        f.cert,
        '--key',
        f.key,
        '--ca',
        f.root,
        ...routes.flatMap((r) => ['--route', r]),
      ],
      join(dir, `node-tls-${name}.log`),
    );
  const s = side(
    'server',
    targets.map((t, i) => `${hp(back[i]!)}=${hp(t)}`),
  );
  const c = side(
    'client',
    targets.map((_, i) => `${hp(front[i]!)}=${hp(back[i]!)}`),
  );
  return startedPair(endpoints, front, back, s, c);
}

/** Up once the client side listens on `front` and the server side on `back`, each in its own namespace. */
function startedPair(
  endpoints: Map<TargetName, Endpoint>,
  front: Endpoint[],
  back: Endpoint[],
  server: ResultPromise,
  client: ResultPromise,
): Promise<OpenPath> {
  const listening = [
    ...front.map((e) => ({ ...e, pid: client.pid })),
    ...back.map((e) => ({ ...e, pid: server.pid })),
  ];
  return started(endpoints, [server, client], listening);
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
