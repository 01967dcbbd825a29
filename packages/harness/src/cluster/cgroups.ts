import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { cgroup2MountOf, readMounts, ZmeshError } from '@zmesh/shared';

/** Bound on waiting for killed processes to leave a cgroup before removing it. */
const EMPTY_WAIT_MS = 3_000;
const POLL_MS = 10;

/**
 * Where the cgroup v2 hierarchy is mounted. On hybrid machines it sits beside the v1
 * controllers (e.g. /sys/fs/cgroup/unified), so it is read from /proc/mounts.
 */
export function cgroup2Mount(mounts?: string): string {
  const dir = cgroup2MountOf(readMounts(mounts));
  if (dir !== undefined) return dir;
  throw new ZmeshError('ZM_ERR_CLUSTER_SETUP', {
    step: 'cgroup',
    reason: 'no cgroup2 mount in /proc/mounts',
  });
}

export function createCgroup(path: string): void {
  mkdirSync(path, { recursive: true });
}

/** Kills every process in the subtree (cgroup.kill, Linux 5.14+) and removes it, leaves first. */
export function removeCgroupTree(path: string): void {
  if (!existsSync(path)) return;
  try {
    writeFileSync(join(path, 'cgroup.kill'), '1');
  } catch {
    // Older kernels have no cgroup.kill; the rmdir below then fails loudly if busy.
  }
  waitUnpopulated(path);
  removeLeavesFirst(path);
}

function waitUnpopulated(path: string): void {
  const deadline = Date.now() + EMPTY_WAIT_MS;
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  while (Date.now() < deadline) {
    let events: string;
    try {
      events = readFileSync(join(path, 'cgroup.events'), 'utf8');
    } catch {
      return;
    }
    if (/^populated 0$/m.test(events)) return;
    // Synchronous on purpose: teardown also runs from process 'exit' handlers.
    Atomics.wait(sleeper, 0, 0, POLL_MS);
  }
}

function removeLeavesFirst(path: string): void {
  for (const entry of readdirSync(path)) {
    const child = join(path, entry);
    if (statSync(child).isDirectory()) removeLeavesFirst(child);
  }
  rmdirSync(path);
}
