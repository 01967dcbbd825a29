import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import {
  type Credential,
  connectHbone,
  HboneServer,
  type HboneSession,
  logger,
  MeshMetrics,
  type TrustBundle,
  whenConnected,
  ZmeshError,
} from '@zmesh/shared';
import { decodeWaypointConfig } from './config/config-parser.js';
import type { WaypointConfig } from './config/waypoint-config.js';
import { Waypoint } from './waypoint.js';

const log = logger('waypoint');

/**
 * Requests a new waypoint sends through its own L7 path before it listens. A cold process
 * runs that path in V8's interpreter and baseline code at a fraction of its optimised
 * speed, and traffic that arrives then queues: in the L7 lab (`zmesh harness
 * waypoint-bench`), 1,000 req/s sent to a fresh waypoint queued for up to 0.6-0.9 s and
 * took 3-5 s to drain, where one that had already served the same load answered in 5-10 ms
 * from the first quarter second. In the bench's HTTP step (CPU 0 shared by the waypoint and
 * both ztunnels) a cold waypoint never caught up: 590-960 of the 1,000 req/s, 0.65-1.02
 * vCPU per 1,000 rps, against 900-1,000 req/s and 0.51-0.66 after this warm-up (6 runs
 * each). 2,000 requests take ~3 s of one CPU; the gain grows little beyond that.
 */
const DEFAULT_WARM_UP_REQUESTS = 2000;
/** Tunnels the warm-up's requests share, each a keep-alive HTTP/1.1 connection. */
const WARM_UP_TUNNELS = 32;
/** A warm-up that takes longer is cut short: it only speeds start-up, it never holds it. */
const WARM_UP_TIMEOUT_MS = 8_000;
const BODY = Buffer.alloc(1024, 'w');
const HOST = '127.0.0.1';
/** Never dialled: only the CONNECT authority the warm-up's service answers to. */
const SERVICE_VIP = '127.0.0.2';

export interface WarmUpOptions {
  credential: Credential;
  bundle: TrustBundle;
  /** The real config: the warm-up copies its name, namespace and service account. */
  config: WaypointConfig;
  requests?: number;
  timeoutMs?: number;
}

export interface WarmUpResult {
  requests: number;
  ms: number;
  /** Why it stopped early, if it did. */
  error?: string;
}

/**
 * Sends `requests` HTTP/1.1 requests over HBONE through a private Waypoint on loopback: a
 * route, an ALLOW policy, telemetry and the HBONE tunnel on to an endpoint, the code every
 * request of the real waypoint runs. The private one has its own metrics registry and a
 * silent access log; it, its endpoint and its app are closed before this returns.
 * Never throws: a warm-up that fails only leaves the waypoint cold.
 */
export async function warmUp(opts: WarmUpOptions): Promise<WarmUpResult> {
  const requests = opts.requests ?? DEFAULT_WARM_UP_REQUESTS;
  const started = performance.now();
  const closers: Array<() => unknown> = [];
  let done = 0;
  let timer: NodeJS.Timeout | undefined;
  try {
    const app = await listen(createServer((req, res) => req.resume().on('end', () => res.end(BODY))));
    closers.push(() => app.close());
    const appPort = (app.address() as { port: number }).port;
    const endpoint = new HboneServer({
      credential: opts.credential,
      bundle: opts.bundle,
      onTunnel: async (req) => {
        if (req.request.authority.port !== appPort) throw new ZmeshError('ZM_ERR_HBONE_UNKNOWN_DESTINATION');
        return { upstream: await whenConnected(connect({ host: HOST, port: appPort, noDelay: true })) };
      },
    });
    closers.push(() => endpoint.close());
    const endpointAt = await endpoint.listen({ host: HOST, port: 0 });
    const waypoint = new Waypoint({
      credential: opts.credential,
      bundle: opts.bundle,
      config: warmUpConfig(opts.config, appPort),
      host: HOST,
      port: 0,
      endpointHbonePort: endpointAt.port,
      metrics: new MeshMetrics(),
      accessLog: log.child({}, { level: 'silent' }),
    });
    closers.push(() => waypoint.stop());
    const at = await waypoint.start();
    const session = await connectHbone({
      host: HOST,
      port: at.port,
      credential: opts.credential,
      bundle: opts.bundle,
      expectedIdentities: [opts.credential.identity],
    });
    closers.push(() => session.destroy());
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('timed out')), opts.timeoutMs ?? WARM_UP_TIMEOUT_MS);
    });
    const share = Math.ceil(requests / WARM_UP_TUNNELS);
    const tunnels = Array.from({ length: WARM_UP_TUNNELS }, (_, i) =>
      drive(session, opts.config.namespace, Math.min(share, requests - i * share), () => done++),
    );
    await Promise.race([Promise.all(tunnels), deadline]);
    return { requests: done, ms: Math.round(performance.now() - started) };
  } catch (e) {
    return { requests: done, ms: Math.round(performance.now() - started), error: (e as Error).message };
  } finally {
    clearTimeout(timer);
    for (const close of closers.reverse()) await Promise.resolve(close()).catch(() => {});
  }
}

function warmUpConfig(real: WaypointConfig, appPort: number): WaypointConfig {
  const ns = real.namespace;
  const ports = [{ servicePort: 80, targetPort: appPort }];
  const decoded = decodeWaypointConfig(
    {
      waypoint: {
        name: real.name,
        namespace: ns,
        trustDomain: real.trustDomain,
        serviceAccount: real.serviceAccount,
      },
      // The endpoint is served with the waypoint's own certificate, so its workload has the
      // waypoint's identity.
      workloads: [
        {
          name: 'warm-up',
          namespace: ns,
          serviceAccount: real.serviceAccount,
          addresses: [HOST],
          services: { [`${ns}/warm-up.${ns}.svc.cluster.local`]: ports },
        },
      ],
      services: [{ name: 'warm-up', namespace: ns, addresses: [SERVICE_VIP], ports }],
      httpRoutes: [
        {
          name: 'warm-up',
          parentRefs: [{ name: 'warm-up', port: 80 }],
          rules: [
            {
              matches: [{ path: { type: 'PathPrefix', value: '/' } }],
              backendRefs: [{ name: 'warm-up', weight: 1 }],
            },
          ],
        },
      ],
      authorizationPolicies: [
        {
          name: 'warm-up',
          targetRefs: [{ kind: 'Gateway', name: real.name }],
          action: 'ALLOW',
          rules: [{ to: [{ operation: { methods: ['GET'], paths: ['/warm-up*'] } }] }],
        },
      ],
    },
    'warm-up',
  );
  if (!decoded.ok) throw new Error(`warm-up config: ${decoded.error.join('; ')}`);
  return decoded.value;
}

/** One tunnel to the warm-up service; `count` requests one after another on it. */
async function drive(
  session: HboneSession,
  ns: string,
  count: number,
  onResponse: () => void,
): Promise<void> {
  if (count <= 0) return;
  // What a source ztunnel sends with each tunnel (docs/design.md §3), so the same branches run.
  const tunnel = await session.openTunnel({
    authority: `${SERVICE_VIP}:80`,
    forwardedFor: HOST,
    baggage: { 'k8s.namespace.name': ns, 'k8s.workload.name': 'warm-up' },
    traceparent: `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`,
  });
  const reader = new ResponseReader(tunnel);
  try {
    for (let i = 0; i < count; i++) {
      tunnel.write(
        `GET /warm-up/${i % 16} HTTP/1.1\r\nHost: warm-up\r\nConnection: keep-alive\r\nUser-Agent: zmesh-warm-up\r\n\r\n`,
      );
      const status = await reader.next();
      if (status !== 200) throw new Error(`warm-up request answered ${status}`);
      onResponse();
    }
  } finally {
    tunnel.destroy();
  }
}

/**
 * Reads HTTP/1.1 responses with a Content-Length body, one at a time (no pipelining). Not
 * node:http's client over `TunnelAgent` (forward/upstream-set.ts): driven through it, the
 * same 2,000 requests took 4.1-5.0 s instead of 2.7-4.0 s, start-up time spent on the
 * driver rather than on the waypoint's own path.
 */
class ResponseReader {
  #buffered = Buffer.alloc(0);
  #waiting: { resolve: (status: number) => void; reject: (e: Error) => void } | undefined;
  #failed: Error | undefined;

  constructor(stream: Duplex) {
    stream.on('data', (chunk: Buffer) => {
      this.#buffered = Buffer.concat([this.#buffered, chunk]);
      this.#check();
    });
    const fail = (e: Error) => {
      this.#failed = e;
      this.#waiting?.reject(e);
      this.#waiting = undefined;
    };
    stream.on('error', fail);
    stream.on('close', () => fail(new Error('tunnel closed')));
  }

  next(): Promise<number> {
    return new Promise((resolve, reject) => {
      if (this.#failed) return reject(this.#failed);
      this.#waiting = { resolve, reject };
      this.#check();
    });
  }

  #check(): void {
    if (!this.#waiting) return;
    const end = this.#buffered.indexOf('\r\n\r\n');
    if (end < 0) return;
    const head = this.#buffered.subarray(0, end).toString('latin1');
    const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
    if (this.#buffered.length < end + 4 + length) return;
    this.#buffered = this.#buffered.subarray(end + 4 + length);
    const waiting = this.#waiting;
    this.#waiting = undefined;
    waiting.resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0));
  }
}

function listen(server: Server): Promise<Server> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, HOST, () => resolve(server));
  });
}

/** `--warm-up-requests` (checked by the CLI's usage rules), as warm-up options. */
export function warmUpCount(flag: string | undefined): { requests?: number } {
  return flag === undefined ? {} : { requests: Number(flag) };
}

/** Start-up's call: warms the L7 path (unless `requests` is 0) and logs what it did. */
export async function warmUpBeforeListening(opts: WarmUpOptions): Promise<void> {
  if (opts.requests === 0) return;
  const r = await warmUp(opts);
  if (r.error) log.warn(r, 'L7 warm-up stopped early; the waypoint starts cold');
  else log.info(r, 'L7 path warmed up');
}
