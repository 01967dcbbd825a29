import { readdirSync, readFileSync, statfsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ZmeshError } from '@zmesh/shared';

/**
 * Kernel facts about a pod, so that capture never rests on what the node agent claims alone
 * (docs/zds.md): the pod's cgroup is found from its uid the way kubelet lays cgroups out,
 * and every process already in it must live in the network namespace the agent passed.
 */

/** Where kubelet puts a pod's cgroup, for the cgroupfs and the systemd drivers, per QoS class. */
export function kubeletPodCgroups(root: string, uid: string): string[] {
  const u = uid.replaceAll('-', '_');
  return [
    `kubepods/pod${uid}`,
    `kubepods/burstable/pod${uid}`,
    `kubepods/besteffort/pod${uid}`,
    `kubepods.slice/kubepods-pod${u}.slice`,
    `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${u}.slice`,
    `kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${u}.slice`,
  ].map((p) => join(root, p));
}

/** The one pod cgroup under `root` that names `uid`. */
export function findPodCgroup(root: string, uid: string): string {
  const found = kubeletPodCgroups(root, uid).filter((p) => {
    try {
      return statSync(p).isDirectory();
    } catch {
      return false;
    }
  });
  if (found.length !== 1)
    throw new ZmeshError('ZM_ERR_ZDS_WORKLOAD', {
      uid,
      reason:
        found.length === 0
          ? `no kubelet pod cgroup for it under ${root}`
          : `several pod cgroups name it: ${found.join(', ')}`,
    });
  return found[0]!;
}

/** The nsfs filesystem's magic (statfs f_type): namespace files, bind-mounted or under /proc. */
const NSFS_MAGIC = 0x6e736673;

/**
 * A namespace's identity, `net:[<inode>]` (what /proc/<pid>/ns/net names), for a netns fd
 * (`/proc/self/fd/N`) or path; throws when it is not a namespace file. (setns with
 * CLONE_NEWNET, when capture attaches, then refuses any other kind of namespace.)
 */
export function netnsIdentity(path: string): string {
  if (statfsSync(path).type !== NSFS_MAGIC) throw new Error('not a namespace file (nsfs)');
  return `net:[${statSync(path).ino}]`;
}

/** Pids in a cgroup and its descendants (bounded: a pod has few processes). */
export function cgroupPids(dir: string, limit = 4096): number[] {
  const pids: number[] = [];
  const walk = (d: string): void => {
    if (pids.length >= limit) return;
    try {
      for (const line of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n'))
        if (line !== '' && pids.length < limit) pids.push(Number(line));
      for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
    } catch {
      // A cgroup removed while walked.
    }
  };
  walk(dir);
  return pids;
}

/**
 * Refuses when a process of the pod's cgroup is in another network namespace than
 * `netns`: the agent's fd and the kernel disagree about where the pod lives. An empty
 * cgroup (the CNI add, before the containers start) has nothing to disagree with.
 */
export function checkPodNetns(uid: string, cgroup: string, netns: string): void {
  for (const pid of cgroupPids(cgroup)) {
    let theirs: string;
    try {
      theirs = netnsIdentity(`/proc/${pid}/ns/net`);
    } catch {
      continue; // Exited meanwhile.
    }
    if (theirs !== netns)
      throw new ZmeshError('ZM_ERR_ZDS_WORKLOAD', {
        uid,
        reason: `process ${pid} of its cgroup is in ${theirs}, not in the passed ${netns}`,
      });
  }
}
