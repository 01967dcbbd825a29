import * as http from 'node:http';
import * as http2 from 'node:http2';
import { createServer, type Server, type Socket } from 'node:net';
import { startMesh } from '@zmesh/harness';
import type { CertificateAuthority, TrustBundle, Workload } from '@zmesh/shared';
import {
  type Clock,
  parseWaypointConfig,
  Waypoint,
  type WaypointConfig,
  type WaypointOptions,
} from '@zmesh/waypoint';
import type { ForwardConfig, Ztunnel } from '@zmesh/ztunnel';
import { startEcho } from './probes.js';

/**
 * The mesh fixture (`startMesh({ run: 'in-process' })`, harness/src/mesh/mesh.ts) with this
 * topology: a source ztunnel (node-a: clients), a destination ztunnel (node-b: server-v1,
 * server-v2, and server-v3 in another-namespace, a third backend that is no endpoint of
 * `server`, as the Gateway API suite's infra-backend-v3) and a waypoint for team-b between them, all on 127.<block>.x.x. The Service `server`
 * names the waypoint (GatewayRef by address), so the source ztunnel tunnels its traffic
 * there; the waypoint forwards to the pods over HBONE with its own identity.
 */
export interface WaypointMesh {
  ca: CertificateAuthority;
  bundle: TrustBundle;
  a: Ztunnel;
  b: Ztunnel;
  waypoint: Waypoint;
  apps: { v1: App; v2: App; v3: App };
  ip: {
    a: string;
    b: string;
    waypoint: string;
    client: string;
    intruder: string;
    v1: string;
    v2: string;
    v3: string;
    vip: string;
  };
  /** Forward listeners on node-a: `client` and `intruder` identities to the server VIP:80. */
  port: { client: number; intruder: number; clientTcp: number; intruderTcp: number };
  /** Builds a waypoint config from the base YAML plus extra top-level sections. */
  config(extraYaml?: string): WaypointConfig;
  /** A new Waypoint on the mesh's address (stop the running one first); `extra` overrides its options. */
  startWaypoint(
    config?: WaypointConfig,
    extra?: Pick<WaypointOptions, 'numTrustedProxies' | 'pathNormalization'>,
  ): Promise<Waypoint>;
  stop(): Promise<void>;
}

export interface App {
  name: string;
  hits: number;
  /** Answer every request with this status (0: normal). */
  failWith: number;
  last?: http.IncomingHttpHeaders;
  close(): void;
}

export async function startWaypointMesh(
  block: number,
  opts: {
    extraYaml?: string;
    clock?: Clock;
    random?: () => number;
    /** Passed to the Waypoint as they are (an access log to read, JWKS cache timings). */
    waypoint?: Pick<WaypointOptions, 'accessLog' | 'jwks'>;
    /** Serves server-v1 and server-v2 on `host:port` instead of `startApp` (a gRPC server, say). */
    app?: (name: string, host: string, port: number) => Promise<App>;
  } = {},
): Promise<WaypointMesh> {
  const ip = {
    a: `127.${block}.0.2`,
    b: `127.${block}.0.3`,
    waypoint: `127.${block}.0.4`,
    client: `127.${block}.1.1`,
    intruder: `127.${block}.1.2`,
    v1: `127.${block}.2.1`,
    v2: `127.${block}.2.2`,
    v3: `127.${block}.2.3`,
    vip: `127.${block}.96.10`,
  };
  const svcPorts = '[{ servicePort: 80, targetPort: 7000 }]';
  const serverPorts =
    '[{ servicePort: 80, targetPort: 7000 }, { servicePort: 81, targetPort: 7001, appProtocol: TCP }]';
  const baseYaml = `
waypoint: { name: waypoint, namespace: team-b }
workloads:
  - name: server-v1
    namespace: team-b
    serviceAccount: server
    addresses: [${ip.v1}]
    node: node-b
    services: { team-b/server.team-b.svc.cluster.local: ${serverPorts}, team-b/server-v1.team-b.svc.cluster.local: ${svcPorts} }
  - name: server-v2
    namespace: team-b
    serviceAccount: server
    addresses: [${ip.v2}]
    node: node-b
    services: { team-b/server.team-b.svc.cluster.local: ${serverPorts}, team-b/server-v2.team-b.svc.cluster.local: ${svcPorts} }
  - name: server-v3
    namespace: another-namespace
    serviceAccount: server
    addresses: [${ip.v3}]
    node: node-b
    services: { another-namespace/server-v3.another-namespace.svc.cluster.local: ${svcPorts} }
services:
  - { name: server, namespace: team-b, addresses: [${ip.vip}], ports: ${serverPorts} }
  - { name: server-v1, namespace: team-b, addresses: [127.${block}.96.11], ports: ${svcPorts} }
  - { name: server-v2, namespace: team-b, addresses: [127.${block}.96.12], ports: ${svcPorts} }
  - { name: server-v3, namespace: another-namespace, addresses: [127.${block}.96.13], ports: ${svcPorts} }
`;
  const config = (extra = '') => {
    const r = parseWaypointConfig(baseYaml + extra, 'fixture');
    if (!r.ok) throw new Error(r.error.join('\n'));
    return r.value;
  };
  const base = config(opts.extraYaml);
  const clientWorkload = (name: string, addr: string): Workload => ({
    ...base.workloads[0]!,
    uid: `Kubernetes//Pod/team-a/${name}`,
    name,
    namespace: 'team-a',
    serviceAccount: name,
    addresses: [addr],
    node: 'node-a',
    services: {},
    canonicalName: name,
    workloadName: name,
  });
  const waypointWorkload: Workload = {
    ...clientWorkload('waypoint', ip.waypoint),
    uid: 'Kubernetes//Pod/team-b/waypoint',
    namespace: 'team-b',
    node: 'waypoint-node',
  };
  const workloads = [
    ...base.workloads,
    clientWorkload('client', ip.client),
    clientWorkload('intruder', ip.intruder),
    waypointWorkload,
  ];
  const services = base.services.map((s) =>
    s.name === 'server'
      ? { ...s, waypoint: { address: { network: '', address: ip.waypoint }, hbonePort: 15008 } }
      : s,
  );
  const port = { client: 18080, intruder: 18081, clientTcp: 18082, intruderTcp: 18083 };
  const forward = (who: 'client' | 'intruder', listen: number, servicePort: number): ForwardConfig => ({
    workloadUid: `Kubernetes//Pod/team-a/${who}`,
    listen: { host: ip[who], port: listen },
    destination: { host: ip.vip, port: servicePort },
  });
  const forwards = [
    forward('client', port.client, 80),
    forward('intruder', port.intruder, 80),
    forward('client', port.clientTcp, 81),
    forward('intruder', port.intruderTcp, 81),
  ];
  const ztunnels = await startMesh({
    run: 'in-process',
    block: block,
    forwards: [],
    config: { workloads, services, forwards },
  });
  const { ca, bundle, a, b } = ztunnels;
  const app = opts.app ?? startApp;
  const apps = {
    v1: await app('server-v1', ip.v1, 7000),
    v2: await app('server-v2', ip.v2, 7000),
    v3: await app('server-v3', ip.v3, 7000),
  };
  const echoes = [await startEcho(ip.v1, 7001), await startEcho(ip.v2, 7001)];
  const credential = await ca.issue('spiffe://cluster.local/ns/team-b/sa/waypoint', 3600);
  const startWaypoint = async (
    cfg: WaypointConfig = base,
    extra: Pick<WaypointOptions, 'numTrustedProxies' | 'pathNormalization'> = {},
  ) => {
    const w = new Waypoint({
      credential,
      bundle,
      config: cfg,
      host: ip.waypoint,
      ...(opts.clock ? { clock: opts.clock } : {}),
      ...(opts.random ? { random: opts.random } : {}),
      ...opts.waypoint,
      ...extra,
    });
    await w.start();
    return w;
  };
  const mesh: WaypointMesh = {
    ca,
    bundle,
    a,
    b,
    waypoint: await startWaypoint(),
    apps,
    ip,
    port,
    config,
    startWaypoint,
    stop: async () => {
      await mesh.waypoint.stop();
      apps.v1.close();
      apps.v2.close();
      apps.v3.close();
      for (const e of echoes) {
        for (const sock of e.sockets) sock.destroy();
        e.close();
      }
      await ztunnels.stop();
    },
  };
  return mesh;
}

/**
 * An app that speaks HTTP/1.1 and h2c on one port (it peeks at the HTTP/2 preface) and
 * answers with what it saw. `/status/<code>` answers that code; `/slow/<ms>` waits first;
 * `x-echo-set-header` names response headers to send back.
 */
async function startApp(name: string, host: string, port: number): Promise<App> {
  const sockets = new Set<Socket>();
  const app: App = { name, hits: 0, failWith: 0, close: () => {} };
  const handle = (
    req: http.IncomingMessage | http2.Http2ServerRequest,
    either: http.ServerResponse | http2.Http2ServerResponse,
  ) => {
    // The two classes' writeHead overloads differ (@types/node 24); both take (status, headers).
    const res: {
      writeHead(status: number, headers: http.OutgoingHttpHeaders): unknown;
      addTrailers(headers: http.OutgoingHttpHeaders): void;
      end(body: string): unknown;
    } = either;
    app.hits++;
    app.last = req.headers;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const url = req.url ?? '/';
      const slow = /^\/slow\/(\d+)/.exec(url);
      if (slow) await new Promise((r) => setTimeout(r, Number(slow[1])));
      const status = app.failWith || Number(/^\/status\/(\d{3})/.exec(url)?.[1] ?? 200);
      const body = JSON.stringify({
        app: name,
        method: req.method,
        url,
        bytes: Buffer.concat(chunks).length,
      });
      const grpc = String(req.headers['content-type'] ?? '').startsWith('application/grpc');
      if (grpc) {
        res.writeHead(200, { 'content-type': 'application/grpc', 'x-app': name });
        res.addTrailers({ 'grpc-status': '0', 'grpc-message': 'ok' });
        res.end(body);
        return;
      }
      res.writeHead(status, {
        ...echoSetHeaders(req.headers),
        'content-type': 'application/json',
        'x-app': name,
      });
      res.end(body);
    });
  };
  const h1 = http.createServer(handle);
  // Upgrade: echo: answers 101 and then echoes every byte (a stand-in for WebSocket).
  h1.on('upgrade', (req: http.IncomingMessage, socket: Socket, head: Buffer) => {
    app.hits++;
    app.last = req.headers;
    socket.on('error', () => {});
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\nx-app: ${name}\r\n\r\n`,
    );
    if (head.length > 0) socket.write(head);
    socket.pipe(socket);
  });
  const h2 = http2.createServer();
  h2.on('request', handle);
  h2.on('sessionError', () => {});
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.once('close', () => sockets.delete(s));
    s.once('readable', () => {
      const head = s.read(4) as Buffer | null;
      if (head) s.unshift(head);
      (head?.toString('latin1') === 'PRI ' ? h2 : h1).emit('connection', s);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => resolve());
  });
  app.close = () => {
    for (const s of sockets) s.destroy();
    server.close();
  };
  return app;
}

/**
 * Response headers the client asked the app for, as the Gateway API echo server does:
 * `x-echo-set-header: Name:value,Other:value` (for ResponseHeaderModifier cases).
 */
function echoSetHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const ask = headers['x-echo-set-header'];
  if (typeof ask !== 'string') return {};
  const out: Record<string, string> = {};
  for (const pair of ask.split(',')) {
    const colon = pair.indexOf(':');
    if (colon > 0) out[pair.slice(0, colon).trim().toLowerCase()] = pair.slice(colon + 1).trim();
  }
  return out;
}

/** One HTTP/1.1 request with a fresh connection; resolves with status, headers and body. */
export function h1Request(
  host: string,
  port: number,
  opts: {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string;
    agent?: http.Agent;
  } = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host,
        port,
        method: opts.method ?? 'GET',
        path: opts.path ?? '/',
        headers: { host: 'server.team-b.svc.cluster.local', ...opts.headers },
        agent: opts.agent ?? false,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** One request on an h2c session; resolves with status, headers, body and trailers. */
export function h2Request(
  session: http2.ClientHttp2Session,
  headers: Record<string, string>,
  body?: string,
): Promise<{
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: string;
  trailers?: http2.IncomingHttpHeaders;
}> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':path': '/', ':method': 'GET', ...headers });
    let out = '';
    let trailers: http2.IncomingHttpHeaders | undefined;
    let head: http2.IncomingHttpHeaders = {};
    stream.setEncoding('utf8');
    stream.on('response', (h) => {
      head = h;
    });
    stream.on('trailers', (t) => {
      trailers = t;
    });
    stream.on('data', (d: string) => {
      out += d;
    });
    stream.on('end', () =>
      resolve({
        status: Number(head[':status']),
        headers: head,
        body: out,
        ...(trailers ? { trailers } : {}),
      }),
    );
    stream.on('error', reject);
    stream.end(body);
  });
}

export { type Received, rawExchange, startRecordingApp, statusesOf } from '@zmesh/harness';
