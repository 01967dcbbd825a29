import { readFileSync } from 'node:fs';
import { ZmeshError } from '@zmesh/shared/cli';
import type { Cluster, ClusterStatus } from '../cluster/cluster.js';
import { type ClusterSpec, gridSpec, parseClusterSpec } from '../cluster/cluster-spec.js';

export interface ClusterCommandOptions {
  /** YAML spec file (see ClusterSpec); without it, a grid of `nodes` × `pods`. */
  spec?: string;
  nodes?: string | number;
  pods?: string | number;
  /** `down`/`status`: one run id; default: every recorded cluster. */
  runId?: string;
  json?: boolean;
}

/**
 * `zmesh cluster up|down|status`. `up` creates a persistent cluster (it outlives this
 * command; `down` removes it) and prints its pods. Returns the process exit code.
 */
export async function runCluster(
  action: 'up' | 'down' | 'status',
  opts: ClusterCommandOptions = {},
): Promise<number> {
  if (process.getuid?.() !== 0) {
    process.stderr.write('zmesh cluster: needs root (network namespaces, cgroups)\n');
    return 1;
  }
  switch (action) {
    case 'up': {
      // The spec is judged before the cluster's modules load.
      const spec = specFrom(opts);
      const parsed = typeof spec === 'string' ? parseClusterSpec(spec) : undefined;
      if (parsed?.ok === false)
        throw new ZmeshError('ZM_ERR_CLUSTER_SPEC', { reason: parsed.error.join('; ') });
      const cluster = await (await clusters()).up(spec, { persistent: true });
      print([cluster.status()], opts.json === true);
      return 0;
    }
    case 'down': {
      // Without a run id, only clusters made by `cluster up`: a test's live cluster is its own.
      const removed = (await selected(opts.runId)).filter(
        (c) => opts.runId !== undefined || c.status().persistent,
      );
      for (const c of removed) await c.down();
      await (await clusters()).cleanupStale();
      process.stdout.write(`removed ${removed.length} cluster(s)\n`);
      return 0;
    }
    case 'status': {
      print(
        (await selected(opts.runId)).map((c) => c.status()),
        opts.json === true,
      );
      return 0;
    }
  }
}

function specFrom(opts: ClusterCommandOptions): ClusterSpec | string {
  if (opts.spec !== undefined) {
    try {
      return readFileSync(opts.spec, 'utf8');
    } catch (e) {
      const reason = (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message;
      throw new ZmeshError('ZM_ERR_CONFIG_INVALID', { source: `--spec ${opts.spec}`, reason });
    }
  }
  return gridSpec(Number(opts.nodes ?? 2), Number(opts.pods ?? 2));
}

/** The Cluster class, loaded when a command gets that far (network namespaces, cgroups, pods). */
async function clusters(): Promise<typeof Cluster> {
  return (await import('../cluster/cluster.js')).Cluster;
}

async function selected(runId: string | undefined): Promise<Cluster[]> {
  const loaded = await clusters();
  const ids = runId === undefined ? loaded.list().map((s) => s.runId) : [runId];
  return ids.map((id) => loaded.load(id)).filter((c): c is Cluster => c !== undefined);
}

function print(statuses: ClusterStatus[], json: boolean): void {
  if (json) {
    process.stdout.write(`${JSON.stringify(statuses, null, 2)}\n`);
    return;
  }
  if (statuses.length === 0) process.stdout.write('no clusters\n');
  for (const s of statuses) {
    process.stdout.write(`cluster ${s.runId}${s.persistent ? ' (persistent)' : ''}\n`);
    for (const p of s.pods) {
      const state = p.present ? '' : '  MISSING';
      process.stdout.write(`  ${p.namespace}/${p.name}  node=${p.node}  ${p.ipv4}  ${p.ipv6}${state}\n`);
    }
  }
}
