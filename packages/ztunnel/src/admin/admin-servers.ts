import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { InspectorProfiles, listenServer, logger, logLevels, setLogLevel } from '@zmesh/shared';
import type { Registry } from 'prom-client';

const log = logger('admin');

export interface AdminInputs {
  host: string;
  ports: { admin: number; metrics: number; ready: number };
  configDump: () => unknown;
  registry: Registry;
  /** /metrics text when it is not `registry`'s alone (`--workers N`: merged from every worker). */
  metricsText?: () => Promise<string>;
  /** Readiness: complete config and valid certificates for every local workload. */
  readiness: () => Readiness | Promise<Readiness>;
  quit: () => void;
  /** `--workers N`: ends worker `index` as a crash would (it is restarted, its pods re-homed). */
  killWorker?: (index: number) => Promise<void>;
}

type Readiness = { ready: boolean; reasons: string[] };

type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void | Promise<void>;

/**
 * The three operator endpoints on separate ports (docs/design.md §3 Ports): admin (15000, loopback
 * of ztunnel's own namespace only: it can change log levels, stop the process and take heap
 * snapshots and CPU profiles),
 * metrics (15020, read-only) and health (15021). Liveness answers from the event loop
 * alone, so waiting for config never makes a healthy process look dead. Each port is bound
 * with SO_REUSEPORT so an upgrade's successor serves them beside a draining predecessor.
 */
export class AdminServers {
  private readonly servers = new Map<string, Server>();
  private readonly profiles = new InspectorProfiles();

  constructor(private readonly inputs: AdminInputs) {}

  async start(): Promise<void> {
    const { ports, host } = this.inputs;
    await this.serve('admin', host, ports.admin, {
      '/config_dump': async (_q, res) => json(res, 200, await this.inputs.configDump()),
      '/logging': (req, res, url) => this.logging(req, res, url),
      '/quitquitquit': (req, res) => {
        if (req.method !== 'POST') return json(res, 405, { error: 'POST only' });
        json(res, 200, { ok: true });
        setImmediate(this.inputs.quit);
      },
      '/debug/workers/kill': async (req, res, url) => {
        const kill = this.inputs.killWorker;
        if (!kill) return json(res, 404, { error: 'not running with --workers above 1' });
        if (req.method !== 'POST') return json(res, 405, { error: 'POST only' });
        const index = Number(url.searchParams.get('index'));
        if (!Number.isInteger(index)) return json(res, 400, { error: 'want ?index=<worker>' });
        await kill(index);
        json(res, 200, { killed: index });
      },
      '/debug/heap': (req, res, url) => this.profiles.handle(req, res, url),
      '/debug/cpu': (req, res, url) => this.profiles.handle(req, res, url),
    });
    await this.serve('metrics', host, ports.metrics, {
      '/metrics': async (_q, res) => {
        const text = await (this.inputs.metricsText?.() ?? this.inputs.registry.metrics());
        res.writeHead(200, { 'content-type': this.inputs.registry.contentType });
        res.end(text);
      },
    });
    await this.serve('readiness', host, ports.ready, {
      '/healthz/ready': async (_q, res) => {
        const r = await this.inputs.readiness();
        json(res, r.ready ? 200 : 503, r);
      },
      '/healthz/live': (_q, res) => json(res, 200, { live: true }),
    });
  }

  async stop(): Promise<void> {
    await Promise.all([...this.servers.keys()].map((name) => this.close(name)));
  }

  /**
   * A drain (docs/upgrade.md): the successor shares these ports (SO_REUSEPORT), so closing
   * admin and readiness here sends every probe and every operator call (a /quitquitquit
   * meant for the new process, say) to it. Metrics stay, read-only, so the drain's progress
   * (zmesh_drain_connections) can be watched until the process exits.
   */
  async handOver(): Promise<void> {
    await Promise.all([this.close('admin'), this.close('readiness')]);
  }

  private close(name: string): Promise<void> {
    const s = this.servers.get(name);
    this.servers.delete(name);
    if (!s) return Promise.resolve();
    s.closeAllConnections();
    return new Promise<void>((r) => s.close(() => r()));
  }

  private logging(req: IncomingMessage, res: ServerResponse, url: URL): void {
    if (req.method === 'POST') {
      const level = url.searchParams.get('level') ?? '';
      const scope = url.searchParams.get('scope') ?? '*';
      const set = setLogLevel(scope, level);
      if (!set.ok) {
        json(res, 400, { error: set.error });
        return;
      }
      log.info({ target: scope, to: level }, 'log level changed');
    }
    json(res, 200, logLevels());
  }

  private serve(name: string, host: string, port: number, routes: Record<string, Handler>): Promise<void> {
    const server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://admin');
      const handler = routes[url.pathname];
      if (!handler) return json(res, 404, { error: 'not found', paths: Object.keys(routes) });
      Promise.resolve(handler(req, res, url)).catch((e: unknown) =>
        json(res, 500, { error: (e as Error).message }),
      );
    });
    this.servers.set(name, server);
    return listenServer(
      server,
      // An upgrade's successor binds the same ports while this process drains (docs/upgrade.md).
      { host, port, reusePort: true },
      {
        name,
        onError: (e) => log.warn({ port, err: e.message }, 'admin accept failed'),
      },
    );
  }
}

function json(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(`${JSON.stringify(body, null, 2)}\n`);
}
