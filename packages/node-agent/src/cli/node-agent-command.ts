import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { KubeConfig } from '@kubernetes/client-node';
import { logger, startFailure, ZdsServer, ZmeshError } from '@zmesh/shared';
import { Counter, Registry } from 'prom-client';
import { installCni } from '../cni/cni-install.js';
import { startCniServer } from '../cni/cni-server.js';
import { NodeAgent } from '../node-agent.js';

const log = logger('node-agent');

/** The flags of `zmesh node-agent` (command.ts), as commander hands them over. */
export interface NodeAgentCommandOptions {
  node?: string;
  kubeconfig?: string;
  zdsSocket: string;
  cniSocket: string;
  proc: string;
  cniBinDir?: string;
  cniConfDir?: string;
  cniNode?: string;
  rescan: string;
  host: string;
  port: string;
}

/** The plugin script, beside this module's package output (dist/cni/, also in the image). */
const PLUGIN_JS = fileURLToPath(new URL('../cni/zmesh-cni.js', import.meta.url));

/**
 * `zmesh node-agent`: the ZDS server ztunnel connects to, the CNI plugin's socket, the
 * informers and the /proc scan (NodeAgent), and a health and metrics port. Resolves with 0
 * once serving (SIGINT/SIGTERM stop it; enrolled pods stay captured in ztunnel), or 1 with
 * one `ZM_ERR_*` line when it cannot start.
 */
export async function runNodeAgent(o: NodeAgentCommandOptions): Promise<number> {
  // The flags and the kubeconfig's readability were checked before this module loaded (command.ts).
  const node = (o.node ?? process.env.NODE_NAME)!;
  const fail = (source: string, reason: string) =>
    new ZmeshError('ZM_ERR_CONFIG_INVALID', { source, reason });
  const registry = new Registry();
  const zds = new ZdsServer({ path: o.zdsSocket, registry });
  let agent: NodeAgent | undefined;
  let cni: Server | undefined;
  let health: Server | undefined;
  let cniTimer: NodeJS.Timeout | undefined;
  const stop = async () => {
    clearInterval(cniTimer);
    await agent?.stop();
    await new Promise((r) => (cni ? cni.close(r) : r(undefined)));
    health?.close();
    zds.close();
  };
  try {
    if (o.kubeconfig === undefined && !process.env.KUBERNETES_SERVICE_HOST)
      throw fail(
        'kubernetes',
        'not running in a cluster (KUBERNETES_SERVICE_HOST unset): pass --kubeconfig FILE',
      );
    const kc = new KubeConfig();
    try {
      if (o.kubeconfig === undefined) kc.loadFromCluster();
      else kc.loadFromFile(o.kubeconfig);
    } catch (e) {
      throw fail(o.kubeconfig ?? 'in-cluster config', (e as Error).message);
    }
    const rescanMs = Number(o.rescan) * 1000;
    agent = new NodeAgent({ kc, node, zds, proc: o.proc, rescanMs, registry });
    // Pods listed and the running ones found first: the snapshot a ztunnel gets on connect
    // names every pod it should keep.
    await agent.start();
    try {
      zds.listen();
    } catch (e) {
      throw fail('--zds-socket', (e as Error).message);
    }
    const started = agent;
    const cniRefused = new Counter({
      name: 'zmesh_node_agent_cni_bad_requests_total',
      help: 'Requests on the CNI socket that were not a well-formed ADD (ZM_ERR_CNI_REFUSED)',
      labelNames: ['result'],
      registers: [registry],
    });
    cni = await startCniServer(o.cniSocket, (add) => started.cniAdd(add), cniRefused).catch((e: Error) => {
      throw fail('--cni-socket', e.message);
    });
    if (o.cniBinDir !== undefined && o.cniConfDir !== undefined) {
      const install = {
        binDir: o.cniBinDir,
        confDir: o.cniConfDir,
        pluginJs: PLUGIN_JS,
        node: o.cniNode ?? process.execPath,
        agentSocket: o.cniSocket,
      };
      const chain = () => {
        try {
          if (!installCni(install))
            log.warn({ dir: install.confDir }, 'no CNI config yet; zmesh-cni not chained');
        } catch (e) {
          log.warn({ err: (e as Error).message }, 'installing zmesh-cni failed; retrying');
        }
      };
      chain();
      cniTimer = setInterval(chain, rescanMs);
      cniTimer.unref();
    }
    health = await startHealth(o.host, Number(o.port), registry, () => started.synced);
  } catch (e) {
    await stop();
    return startFailure('node-agent', e);
  }
  console.error(
    `node agent: node ${node}, ZDS on ${o.zdsSocket}, CNI on ${o.cniSocket}, health on ${o.host}:${(health.address() as AddressInfo).port}`,
  );
  const exit = async () => {
    await stop();
    process.exit(0);
  };
  process.once('SIGINT', exit);
  process.once('SIGTERM', exit);
  return 0;
}

/** `/healthz/live`, `/healthz/ready` (the informers have listed, ZDS is served) and `/metrics`. */
function startHealth(host: string, port: number, registry: Registry, ready: () => boolean): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.url === '/healthz/live') res.writeHead(200).end('ok\n');
    else if (req.url === '/healthz/ready')
      res.writeHead(ready() ? 200 : 503).end(ready() ? 'ok\n' : 'syncing\n');
    else if (req.url === '/metrics')
      void registry
        .metrics()
        .then((text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text));
    else res.writeHead(404).end();
  });
  return new Promise((resolve, reject) => {
    server.once('error', (e) =>
      reject(new ZmeshError('ZM_ERR_CONFIG_INVALID', { source: '--port', reason: e.message })),
    );
    server.listen(port, host, () => resolve(server));
  });
}
