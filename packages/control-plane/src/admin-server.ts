import { timingSafeEqual } from 'node:crypto';
import { chmod, lstat, mkdir, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { dirname } from 'node:path';
import { bindError, listenServer, logger, ZmeshError } from '@zmesh/shared';
import type { ControlPlane } from './control-plane.js';
import { KINDS, type Kind, objectKey, resolveKind, type StoreObject } from './k8s-objects.js';
import { DEFAULT_ACK_TIMEOUT_MS, DEFAULT_WAYPOINT_NAME } from './namespace-waypoint.js';
import { isLoopback } from './xds-server.js';

const log = logger('cp-admin');

/** An apply body is YAML for a cluster; far larger is a mistake, not config. */
export const MAX_APPLY_BYTES = 16 * 1024 * 1024;
/** An operator waiting longer than this for ACKs wants proxy-status, not a hanging request. */
export const MAX_ACK_TIMEOUT_MS = 120_000;
/** Health and readiness answer without a token: an orchestrator probes them. */
const OPEN_PATHS = new Set(['/healthz', '/healthz/ready']);

/**
 * Where the admin API listens: a Unix socket (mode 0600: its owner only — the default), or
 * loopback TCP, which anyone on the host reaches and so requires a bearer token.
 */
export type AdminListen = { socket: string } | { host?: string; port?: number; token: string };

export interface AdminServer {
  /** The socket path, or `http://host:port`. */
  address: string;
  /** TCP port (0 on a socket). */
  port: number;
  close: () => Promise<void>;
}

/**
 * The control plane's operator API: `GET /proxy-status`, `GET /waypoint-status`,
 * `GET /route-status` (each route's Accepted and ResolvedRefs per parent), `GET
 * /explain/pod?namespace=&name=` (its PeerAuthentication mode, waypoints and L7 policies, why),
 * `GET /objects` (the generation and every object's `Kind/namespace/name`), `GET /events`
 * (`?object=Kind/namespace/name`: refused changes and waypoint bindings, oldest first),
 * `POST /apply` and `POST /delete` (multi-document YAML, or `?kind=&namespace=&name=`;
 * 400 with ZM_ERR_CONFIG_INVALID and every reason when refused), `POST /namespace-l7`,
 * `POST /node-token?node=<name>`, `GET /metrics` (Prometheus), `GET /healthz` and
 * `GET /healthz/ready`. Whoever reaches it can change config and mint node tokens: it
 * listens on a 0600 Unix socket, or on loopback TCP behind a bearer token (401
 * ZM_ERR_ADMIN_UNAUTHORIZED without it).
 */
export async function startAdminServer(cp: ControlPlane, listen: AdminListen): Promise<AdminServer> {
  const token = 'token' in listen ? Buffer.from(listen.token) : undefined;
  if (!('socket' in listen)) {
    const host = listen.host ?? '127.0.0.1';
    if (!isLoopback(host))
      throw new ZmeshError('ZM_ERR_XDS_BIND_REFUSED', { service: 'control-plane admin', host });
    if (!listen.token)
      throw new ZmeshError('ZM_ERR_ADMIN_TOKEN_FILE', {
        file: '(none)',
        reason: 'a TCP admin port needs --admin-token-file',
      });
  }
  const server = createServer((req, res) => {
    if (token && !OPEN_PATHS.has(pathOf(req)) && !authorized(req, token)) {
      cp.metrics.adminUnauthorized.inc();
      log.warn({ method: req.method, path: pathOf(req) }, 'admin request without a valid bearer token');
      return reply(res, 401, {
        code: 'ZM_ERR_ADMIN_UNAUTHORIZED',
        error: new ZmeshError('ZM_ERR_ADMIN_UNAUTHORIZED', { reason: 'missing or wrong bearer token' })
          .message,
      });
    }
    handle(cp, req, res).catch((e: Error) => {
      log.error({ err: e.message }, 'admin request failed');
      reply(res, 500, { error: 'internal error' });
    });
  });
  const onError = (e: Error) => log.warn({ err: e.message }, 'admin accept failed');
  if ('socket' in listen) {
    await prepareSocketPath(listen.socket);
    // The umask makes the socket 0600 from its creation, not only after the chmod.
    const umask = process.umask(0o177);
    try {
      await listenServer(server, { path: listen.socket }, { name: 'control-plane admin', onError });
    } finally {
      process.umask(umask);
    }
    await chmod(listen.socket, 0o600);
    return {
      address: listen.socket,
      port: 0,
      close: () =>
        new Promise((resolve) =>
          server.close(() => rm(listen.socket, { force: true }).then(() => resolve())),
        ),
    };
  }
  const host = listen.host ?? '127.0.0.1';
  await listenServer(server, { host, port: listen.port ?? 0 }, { name: 'control-plane admin', onError });
  const port = (server.address() as AddressInfo).port;
  return {
    address: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    port,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * Makes the socket's directory (0700) and clears a stale socket file, refusing (as a bind
 * failure) a directory that another user owns or others may write to (in a shared /tmp, who
 * controls the directory controls the socket), and a socket that still answers: another
 * control plane serves there, and taking its path would cut its operators off.
 */
async function prepareSocketPath(socket: string): Promise<void> {
  const dir = dirname(socket);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const target = { path: socket };
  const info = await lstat(dir);
  const uid = process.getuid?.();
  if ((uid !== undefined && info.uid !== uid) || (info.mode & 0o022) !== 0 || !info.isDirectory()) {
    const e = Object.assign(new Error(`${dir} must be a directory of this user, not writable by others`), {
      code: 'EPERM',
    });
    throw bindError('control-plane admin', target, e);
  }
  const answers = await new Promise<boolean>((resolve) => {
    const probe = connect(socket);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (answers) {
    const e = Object.assign(new Error('another process answers on this socket'), { code: 'EADDRINUSE' });
    throw bindError('control-plane admin', target, e);
  }
  await rm(socket, { force: true });
}

function pathOf(req: IncomingMessage): string {
  return new URL(req.url ?? '/', 'http://admin').pathname;
}

function authorized(req: IncomingMessage, token: Buffer): boolean {
  const m = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '');
  if (!m) return false;
  const given = Buffer.from(m[1] as string);
  return given.length === token.length && timingSafeEqual(given, token);
}

async function handle(cp: ControlPlane, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://admin');
  if (req.method === 'GET' && url.pathname === '/proxy-status') return reply(res, 200, cp.proxyStatus());
  if (req.method === 'GET' && url.pathname === '/waypoint-status')
    return reply(res, 200, cp.waypointStatus());
  if (req.method === 'GET' && url.pathname === '/not-served') return reply(res, 200, cp.notServed());
  if (req.method === 'GET' && url.pathname === '/route-status') return reply(res, 200, cp.routeStatus());
  if (req.method === 'GET' && url.pathname === '/explain/pod') {
    const [namespace, name] = [url.searchParams.get('namespace') ?? '', url.searchParams.get('name') ?? ''];
    const explained = cp.explainPod(namespace, name);
    return explained
      ? reply(res, 200, explained)
      : reply(res, 404, {
          code: 'ZM_ERR_CONFIG_INVALID',
          reasons: [`no Pod ${name} in namespace ${namespace}`],
        });
  }
  if (req.method === 'GET' && url.pathname === '/healthz') return reply(res, 200, { ok: true });
  if (req.method === 'GET' && url.pathname === '/objects') return objects(cp, url, res);
  if (req.method === 'GET' && url.pathname === '/events')
    return reply(res, 200, cp.events.list(url.searchParams.get('object') ?? undefined));
  if (req.method === 'GET' && url.pathname === '/healthz/ready') {
    const r = cp.readiness();
    return reply(res, r.ready ? 200 : 503, r);
  }
  if (req.method === 'GET' && url.pathname === '/metrics') {
    cp.collectMetrics();
    res.writeHead(200, { 'content-type': cp.metrics.registry.contentType });
    res.end(await cp.metrics.registry.metrics());
    return;
  }
  if (req.method === 'POST' && (url.pathname === '/apply' || url.pathname === '/delete')) {
    const source = url.searchParams.get('source') ?? url.pathname.slice(1);
    // Awaited: a shared store (etcd) commits asynchronously.
    let result: Awaited<ReturnType<typeof cp.store.submit>>;
    if (url.pathname === '/delete' && url.searchParams.has('kind')) {
      const key = deleteKey(url);
      if (typeof key !== 'string') return reply(res, 400, { code: 'ZM_ERR_CONFIG_INVALID', reasons: key });
      result = await cp.store.submit({ remove: [key] });
    } else {
      const body = await readBody(req);
      if (body === undefined)
        return reply(res, 413, { reasons: [`body larger than ${MAX_APPLY_BYTES} bytes`] });
      result = await cp.store.submit(
        url.pathname === '/apply' ? { applyYaml: body, source } : { removeYaml: body, source },
      );
    }
    // The store could not be written: nothing changed, and retrying later may succeed.
    if (!result.ok && 'unavailable' in result)
      return reply(res, 503, { code: 'ZM_ERR_STATE_STORE', reasons: result.error });
    return result.ok
      ? reply(res, 200, { generation: result.value.generation })
      : reply(res, 400, { code: 'ZM_ERR_CONFIG_INVALID', reasons: result.error });
  }
  if (req.method === 'POST' && url.pathname === '/namespace-l7') return namespaceL7(cp, url, res);
  if (req.method === 'POST' && url.pathname === '/node-token') {
    const node = url.searchParams.get('node');
    if (!node) return reply(res, 400, { reasons: ['node query parameter is required'] });
    log.info({ node }, 'node token issued');
    return reply(res, 200, { node, token: cp.issueNodeToken(node) });
  }
  reply(res, 404, { error: `no route ${req.method} ${url.pathname}` });
}

/**
 * `GET /objects`: the generation and every object's key. With `?full=1` the objects
 * themselves (as stored, sorted by key), narrowed by `kind` (`pod`, `pods`, `all`),
 * `namespace` and `name`; an unknown kind is 400 naming the kinds.
 */
function objects(cp: ControlPlane, url: URL, res: ServerResponse): void {
  const view = cp.store.view();
  const keys = [...view.objects.keys()].sort();
  if (url.searchParams.get('full') !== '1') {
    reply(res, 200, { generation: view.generation, objects: keys });
    return;
  }
  const asked = url.searchParams.get('kind') ?? 'all';
  const kind = resolveKind(asked);
  if (kind === undefined) {
    reply(res, 400, {
      code: 'ZM_ERR_CONFIG_INVALID',
      reasons: [`kind: ${JSON.stringify(asked)} is not one of ${KINDS.join(', ')} or all`],
    });
    return;
  }
  const namespace = url.searchParams.get('namespace');
  const name = url.searchParams.get('name');
  const picked = keys
    .map((k) => view.objects.get(k) as StoreObject)
    .filter(
      (o) =>
        (kind === 'all' || o.kind === kind) &&
        (namespace === null || o.kind === 'Namespace' || o.metadata.namespace === namespace) &&
        (name === null || o.metadata.name === name),
    );
  reply(res, 200, { generation: view.generation, objects: picked });
}

/** `?kind=Pod&namespace=ns&name=a` → the store key; kinds are matched case-insensitively. */
function deleteKey(url: URL): string | string[] {
  const asked = url.searchParams.get('kind') ?? '';
  const kind = KINDS.find((k) => k.toLowerCase() === asked.toLowerCase()) as Kind | undefined;
  const name = url.searchParams.get('name') ?? '';
  if (kind === undefined) return [`kind: ${JSON.stringify(asked)} is not one of ${KINDS.join(', ')}`];
  if (name === '') return ['name: required'];
  const namespace = kind === 'Namespace' ? '' : url.searchParams.get('namespace') || 'default';
  return objectKey({ kind, metadata: { namespace, name } });
}

/**
 * `POST /namespace-l7?namespace=<ns>&state=on|off[&waypoint=<name>][&timeoutMs=<ms>]`:
 * 200 when every connected proxy ACKed, 504 naming those that did not, 503 ZM_ERR_STATE_STORE
 * when the store cannot be written (nothing changed).
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
  if (!result.ok && 'unavailable' in result)
    return reply(res, 503, { code: 'ZM_ERR_STATE_STORE', reasons: result.error });
  if (!result.ok) return reply(res, 400, { code: 'ZM_ERR_CONFIG_INVALID', reasons: result.error });
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
