import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ZdsServer } from '@zmesh/shared';
import { execa, type ResultPromise } from 'execa';
import type { ApiServerDouble } from '../kube-api/api-server-double.js';
import { ZMESH_BIN } from '../local/ztunnel-process.js';
import type { WaypointShape } from './mesh-objects.js';

/** What LocalMesh starts beside its ztunnels, and how it waits for them. */

/**
 * `zmesh node-agent` for a node, as its DaemonSet runs it: the API through `kubeconfig`, ZDS
 * at `zdsSocket` where the node's ztunnel connects, the host's /proc, and zmesh-cni installed
 * and chained into the node's CNI config (a bridge network's, made under `dir`). The child is
 * returned at once, for its owner to stop on every path; `ready` resolves once the agent says
 * it serves (after its first list) and rejects if it exits first.
 */
export async function spawnNodeAgent(opts: {
  node: string;
  dir: string;
  kubeconfig: string;
  zdsSocket: string;
  logLevel: string;
}): Promise<{ child: ResultPromise; ready: Promise<void> }> {
  const cni = join(opts.dir, 'cni');
  await mkdir(join(cni, 'bin'), { recursive: true });
  await mkdir(join(cni, 'net.d'), { recursive: true });
  await writeFile(
    join(cni, 'net.d', '10-podnet.conflist'),
    JSON.stringify({ cniVersion: '1.0.0', name: 'podnet', plugins: [{ type: 'bridge', bridge: 'cni0' }] }),
  );
  const args = [
    'node-agent',
    ...['--node', opts.node, '--kubeconfig', opts.kubeconfig],
    ...['--zds-socket', opts.zdsSocket, '--cni-socket', join(cni, 'cni.sock')],
    ...['--cni-bin-dir', join(cni, 'bin'), '--cni-conf-dir', join(cni, 'net.d')],
    ...['--rescan', '0.2', '--port', '0'],
  ];
  const child = execa(ZMESH_BIN, args, {
    reject: false,
    stdin: 'ignore',
    stdout: 'ignore',
    stderr: 'pipe',
    env: { ZMESH_LOG: opts.logLevel },
  });
  const ready = new Promise<void>((resolve, reject) => {
    let seen = '';
    const onData = (d: Buffer) => {
      seen += String(d);
      if (seen.includes('node agent: node')) {
        child.stderr?.off('data', onData);
        child.stderr?.on('data', (x: Buffer) => process.stderr.write(`[node-agent ${opts.node}] ${x}`));
        resolve();
      }
    };
    child.stderr?.on('data', onData);
    void child.then((r) =>
      reject(new Error(`node agent on ${opts.node} exited (${r.exitCode}): ${seen.trim()}`)),
    );
  });
  return { child, ready };
}

/** Polls until `n` ztunnels hold the node agent's snapshot (an upgrade's overlap). */
export async function waitSynced(agent: ZdsServer, n: number, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (agent.syncedClients < n) {
    if (Date.now() > deadline)
      throw new Error(`${n} ztunnels did not get the ZDS snapshot in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The args of the waypoint container of the Deployment the controller made for a Gateway,
 * as a kubelet would run them: `$(VAR)` from `env`, and the values of the flags that name
 * in-cluster paths and Services replaced with the harness's (`replace`). Waits for the
 * Deployment to appear.
 */
export async function deploymentArgs(
  api: ApiServerDouble,
  w: WaypointShape,
  env: Record<string, string>,
  replace: Record<string, string>,
  timeoutMs: number,
): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const d = api.get('apps', 'v1', 'deployments', w.namespace, w.name) as
      | { spec?: { template?: { spec?: { containers?: Array<{ args?: string[] }> } } } }
      | undefined;
    const args = d?.spec?.template?.spec?.containers?.[0]?.args;
    if (args) {
      const out = args.map((a) => a.replace(/\$\((\w+)\)/g, (m, v: string) => env[v] ?? m));
      for (const [flag, value] of Object.entries(replace)) {
        const i = out.indexOf(flag);
        if (i !== -1) out[i + 1] = value;
      }
      return out;
    }
    if (Date.now() > deadline)
      throw new Error(`no Deployment ${w.namespace}/${w.name} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
