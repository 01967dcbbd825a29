import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type AdminTarget, adminRequest, listenServer } from '@zmesh/shared';
import { collectMesh } from './collect.js';

/**
 * The page's script, bundled by scripts/bundle.mjs into dist/dashboard/app.js; the path holds
 * from dist/dashboard/ and from the image's bundled dist/cli/ alike.
 */
const APP_JS = new URL('../dashboard/app.js', import.meta.url);

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>zmesh dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
</head><body><div id="app">loading…</div><script type="module" src="/app.js"></script></body></html>
`;

export interface DashboardOptions {
  host: string;
  port: number;
  admin: AdminTarget;
  /** Each node's ztunnel address (its admin 15000, metrics 15020, health 15021 ports). */
  ztunnels: string[];
  /** Waypoint addresses (their metrics on 15020): the requests each carried, as L7 edges. */
  waypoints?: string[];
  /** How often the feed is refreshed and pushed (ms). */
  intervalMs?: number;
}

export interface Dashboard {
  url: string;
  close(): Promise<void>;
}

/**
 * `zmesh dashboard`: one page and its feed, on loopback only. `GET /api/state` is one
 * snapshot of the mesh (control plane's admin API plus each ztunnel's endpoints),
 * `GET /api/events` pushes a snapshot per interval (SSE), `POST /api/ns-l7?namespace=&state=`
 * is the admin API's `/namespace-l7` (what `zmesh ns l7` calls), its answer passed through.
 */
export async function startDashboard(o: DashboardOptions): Promise<Dashboard> {
  const interval = o.intervalMs ?? 1000;
  const script = await readFile(APP_JS, 'utf8');
  const streams = new Set<ServerResponse>();
  let last: unknown;
  const refresh = async () => {
    last = await collectMesh(o.admin, o.ztunnels, o.waypoints);
    const frame = `data: ${JSON.stringify(last)}\n\n`;
    for (const s of streams) s.write(frame);
  };
  let timer: NodeJS.Timeout | undefined;
  const tick = () => {
    timer = setTimeout(
      () =>
        refresh()
          .catch(() => undefined)
          .finally(() => streams.size > 0 && tick()),
      interval,
    );
  };
  const server = createServer((req, res) => {
    handle(req, res).catch((e: Error) => send(res, 500, { error: e.message }));
  });
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://dashboard');
    if (req.method === 'GET' && url.pathname === '/') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      return void res.end(PAGE);
    }
    if (req.method === 'GET' && url.pathname === '/app.js') {
      res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' });
      return void res.end(script);
    }
    if (req.method === 'GET' && url.pathname === '/api/state')
      return send(res, 200, await collectMesh(o.admin, o.ztunnels, o.waypoints));
    if (req.method === 'GET' && url.pathname === '/api/events') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store' });
      streams.add(res);
      res.write(`data: ${JSON.stringify(last ?? (await collectMesh(o.admin, o.ztunnels, o.waypoints)))}\n\n`);
      if (streams.size === 1) tick();
      req.on('close', () => {
        streams.delete(res);
        if (streams.size === 0) clearTimeout(timer);
      });
      return;
    }
    if (req.method === 'POST' && url.pathname === '/api/ns-l7') {
      const namespace = url.searchParams.get('namespace') ?? '';
      const state = url.searchParams.get('state') ?? '';
      const query = new URLSearchParams({ namespace, state, timeoutMs: '5000' });
      if (state === 'on') query.set('waypoint', url.searchParams.get('waypoint') || 'waypoint');
      const r = await adminRequest(o.admin, `/namespace-l7?${query}`, { method: 'POST' });
      let body: unknown;
      try {
        body = r.json();
      } catch {
        body = { error: r.text };
      }
      await refresh().catch(() => undefined);
      return send(res, 200, { status: r.status, ok: r.ok, body });
    }
    send(res, 404, { error: `no route ${req.method} ${url.pathname}` });
  };
  // A port in use or an address not ours is ZM_ERR_LISTEN_BIND, one line at the CLI.
  await listenServer(server, { host: o.host, port: o.port }, { name: 'dashboard', onError: () => undefined });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${o.host}:${port}/`,
    close: () => {
      clearTimeout(timer);
      for (const s of streams) s.end();
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.end(`${JSON.stringify(body)}\n`);
}
