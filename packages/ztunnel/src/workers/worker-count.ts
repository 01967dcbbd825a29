import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { cgroup2MountOf, readMounts } from '@zmesh/shared';

/**
 * `--workers auto` (the default) never picks more: past four, one main thread's control work
 * (config pushes, signing, merged metrics) and N isolates' memory grow for a data path that
 * scales only with cores actually free (docs/workers.md).
 */
const MAX_AUTO_WORKERS = 4;

/** What the choice reads; injected by tests. */
export interface CpuFacts {
  /** CPUs this process may run on (sched_getaffinity: `os.availableParallelism()`). */
  parallelism: number;
  /** /proc/self/cgroup */
  cgroups: string;
  /** /proc/mounts */
  mounts: string;
  /** A cgroup file's text, or undefined when it cannot be read. */
  read: (path: string) => string | undefined;
}

export interface WorkerChoice {
  workers: number;
  /** Why: the figures the choice took its minimum over. */
  parallelism: number;
  cpuQuota?: number;
}

/**
 * min(MAX_AUTO_WORKERS, the CPUs the process may run on, its cgroup's CPU quota rounded up).
 * A quota of 1.5 CPUs gives 2: a worker that gets half a core still takes load off the other.
 */
export function autoWorkers(facts: CpuFacts = hostCpuFacts()): WorkerChoice {
  const cpuQuota = cgroupCpuLimit(facts);
  const workers = Math.max(
    1,
    Math.min(MAX_AUTO_WORKERS, facts.parallelism, cpuQuota ?? Number.POSITIVE_INFINITY),
  );
  return { workers, parallelism: facts.parallelism, ...(cpuQuota !== undefined ? { cpuQuota } : {}) };
}

/**
 * The CPU quota of the process's cgroup and every ancestor (the tightest wins), in whole
 * CPUs rounded up: cgroup v2 `cpu.max` ("max 100000" or "200000 100000"), or v1
 * `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none). Undefined without a quota.
 */
export function cgroupCpuLimit(facts: Pick<CpuFacts, 'cgroups' | 'mounts' | 'read'>): number | undefined {
  let tightest: number | undefined;
  const take = (cpus: number | undefined) => {
    if (cpus !== undefined && (tightest === undefined || cpus < tightest)) tightest = cpus;
  };
  for (const { mount, path, v2 } of cpuHierarchies(facts.cgroups, facts.mounts)) {
    for (let dir = join(mount, path); ; dir = dirname(dir)) {
      take(v2 ? quotaV2(facts.read(join(dir, 'cpu.max'))) : quotaV1(facts, dir));
      if (dir === mount || !dir.startsWith(mount)) break;
    }
  }
  return tightest;
}

function quotaV2(text: string | undefined): number | undefined {
  const [quota, period] = (text ?? '').trim().split(/\s+/);
  return cpus(Number(quota), Number(period));
}

function quotaV1(facts: Pick<CpuFacts, 'read'>, dir: string): number | undefined {
  const quota = Number(facts.read(join(dir, 'cpu.cfs_quota_us'))?.trim());
  const period = Number(facts.read(join(dir, 'cpu.cfs_period_us'))?.trim());
  return cpus(quota, period);
}

function cpus(quota: number, period: number): number | undefined {
  if (!(Number.isFinite(quota) && quota > 0 && Number.isFinite(period) && period > 0)) return undefined;
  return Math.max(1, Math.ceil(quota / period));
}

/** The cgroup v2 hierarchy and the v1 one holding `cpu`, each with this process's path in it. */
function cpuHierarchies(
  cgroups: string,
  mounts: string,
): Array<{ mount: string; path: string; v2: boolean }> {
  const out: Array<{ mount: string; path: string; v2: boolean }> = [];
  const table = readMounts(mounts);
  for (const line of cgroups.split('\n')) {
    const [id, controllers, ...rest] = line.split(':');
    const path = rest.join(':');
    if (!path.startsWith('/')) continue;
    if (id === '0' && controllers === '') {
      const mount = cgroup2MountOf(table);
      if (mount) out.push({ mount, path, v2: true });
    } else if (controllers?.split(',').includes('cpu')) {
      const m = table.find((f) => f.type === 'cgroup' && f.options.includes('cpu'));
      if (m) out.push({ mount: m.dir, path, v2: false });
    }
  }
  return out;
}

function hostCpuFacts(): CpuFacts {
  const text = (path: string) => {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return undefined;
    }
  };
  return {
    parallelism: availableParallelism(),
    cgroups: text('/proc/self/cgroup') ?? '',
    mounts: text('/proc/mounts') ?? '',
    read: text,
  };
}
