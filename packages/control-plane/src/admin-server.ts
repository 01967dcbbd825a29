import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { listenServer, logger, ZmeshError } from '@zmesh/shared';
import type { ControlPlane } from './control-plane.js';
import { DEFAULT_ACK_TIMEOUT_MS, DEFAULT_WAYPOINT_NAME } from './namespace-waypoint.js';
import { isLoopback } from './xds-server.js';

const log = logger('cp-admin');

/** An apply body is YAML for a cluster; far larger is a mistake, not config. */
export const MAX_APPLY_BYTES = 16 * 1024 * 1024;
/** An operator waiting longer than this for ACKs wants proxy-status, not a hanging request. */
export const MAX_ACK_TIMEOUT_MS = 120_000;

/**
 * The control plane's operator endpoint, loopback only: `GET /proxy-status` (JSON),
 * `GET /objects` (the generation and every object's `Kind/namespace/name`),
 * `POST /apply` (multi-document YAML; 400 with every reason when refused) and
 * `POST /node-token?node=<name>` (bootstrap tokens for the harness). Whoever reaches it
 * can change config and mint node tokens, which is why it never binds beyond loopback.
 */
export async function startAdminServer(
  cp: ControlPlane,
  port = 0,
  host = '127.0.0.1',
): Promise<{ port: number; close: () => Promise<void> }> {
  if (!isLoopback(host))
    throw new ZmeshError('ZM_ERR_XDS_BIND_REFUSED', { service: 'control-plane admin', host });
  const server = createServer((req, res) => {
    handle(cp, req, res).catch((e: Error) => {
      log.error({ err: e.message }, 'admin request failed');
      reply(res, 500, { error: 'internal error' });
    });
  });
  await listenServer(
    server,
    { host, port },
    {
      name: 'control-plane admin',
      onError: (e) => log.warn({ err: e.message }, 'admin accept failed'),
    },
  );
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

async function handle(cp: ControlPlane, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://admin');
  if (req.method === 'GET' && url.pathname === '/proxy-status') return reply(res, 200, cp.proxyStatus());
  if (req.method === 'GET' && url.pathname === '/healthz') return reply(res, 200, { ok: true });
  if (req.method === 'GET' && url.pathname === '/objects') {
    const view = cp.store.view();
    return reply(res, 200, { generation: view.generation, objects: [...view.objects.keys()].sort() });
  }
  if (req.method === 'POST' && url.pathname === '/apply') {
    const body = await readBody(req);
    if (body === undefined)
      return reply(res, 413, { reasons: [`body larger than ${MAX_APPLY_BYTES} bytes`] });
    const result = cp.store.applyYaml(body, url.searchParams.get('source') ?? 'apply');
    return result.ok
      ? reply(res, 200, { generation: result.value.generation })
      : reply(res, 400, { reasons: result.error });
  }
  if (req.method === 'POST' && url.pathname === '/namespace-l7') return namespaceL7(cp, url, res);
  if (req.method === 'POST' && url.pathname === '/node-token') {
    const node = url.searchParams.get('node');
    if (!node) return reply(res, 400, { reasons: ['node query parameter is required'] });
    return reply(res, 200, { node, token: cp.issueNodeToken(node) });
  }
  reply(res, 404, { error: `no route ${req.method} ${url.pathname}` });
}

/**
 * `POST /namespace-l7?namespace=<ns>&state=on|off[&waypoint=<name>][&timeoutMs=<ms>]`:
 * 200 when every connected proxy ACKed, 504 naming those that did not.
 */
async function namespaceL7(cp: ControlPlane, url: URL, res: ServerResponse): Promise<void> {
  const namespace = url.searchParams.get('namespace') ?? '';
  const state = url.searchParams.get('state');
  const timeoutMs = Number(url.searchParams.get('timeoutMs') ?? DEFAULT_ACK_TIMEOUT_MS);
  if (namespace === '' || (state !== 'on' && state !== 'off'))
    return reply(res, 400, { reasons: ['namespace and state=on|off are required'] });
  if (!Number.isFinite(timeoutMs) || timeoutMs < 0 || timeoutMs > MAX_ACK_TIMEOUT_MS)
    return reply(res, 400, { reasons: [`timeoutMs must be in 0..${MAX_ACK_TIMEOUT_MS}`] });
  const waypoint = state === 'on' ? (url.searchParams.get('waypoint') ?? DEFAULT_WAYPOINT_NAME) : undefined;
  const result = await cp.setNamespaceL7(namespace, waypoint, timeoutMs);
  if (!result.ok) return reply(res, 400, { reasons: result.error });
  reply(res, result.value.notAcked.length === 0 ? 200 : 504, result.value);
}

async function readBody(req: IncomingMessage): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_APPLY_BYTES) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function reply(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(`${JSON.stringify(body, null, 2)}\n`);
}
