import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The pod uid a cgroup path names, as kubelet lays pod cgroups out (the layouts ztunnel's
 * `kubeletPodCgroups` checks, docs/zds.md): `…/kubepods[/burstable|/besteffort]/pod<uid>[/…]`
 * (cgroupfs driver) or `…/kubepods[-qos]-pod<uid_>.slice[/…]` (systemd driver, `-` written `_`).
 */
export function podUidOfCgroup(path: string): string | undefined {
  const parts = path.split('/');
  for (let i = 1; i < parts.length; i++) {
    const seg = parts[i] ?? '';
    const parent = parts[i - 1] ?? '';
    const grand = parts[i - 2] ?? '';
    const underKubepods =
      parent === 'kubepods' || ((parent === 'burstable' || parent === 'besteffort') && grand === 'kubepods');
    if (underKubepods && seg.startsWith('pod') && UID.test(seg.slice(3))) return seg.slice(3);
    const slice = /^kubepods(?:-burstable|-besteffort)?-pod([A-Za-z0-9_.]+)\.slice$/.exec(seg);
    if (slice?.[1]) return slice[1].replaceAll('_', '-');
  }
  return undefined;
}

/** A pod uid in a cgroup name: what ZDS accepts (docs/zds.md), starting with a letter or digit. */
const UID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Bound on processes read per scan: a node's process table, not an unbounded walk. */
const MAX_PROCESSES = 65_536;

/** A pod found in /proc: one of its processes, and the network namespace they all share. */
export interface ScannedPod {
  pid: number;
  /** `<proc>/<pid>/ns/net`: the path ztunnel is handed an fd of. */
  netnsPath: string;
  /** The namespace's inode: what every process of the pod must agree on. */
  netnsInode: number;
}

/**
 * Scans `<proc>/*\/cgroup` for processes in kubelet pod cgroups: pod uid → its lowest pid and
 * network namespace. A pod whose processes disagree about their network namespace (one caught
 * between joining its cgroup and entering the pod's namespace), or that shares `ownNetns`
 * (the node's own: a pod that is not host-network never lives there), is left out of this
 * scan; the next one will find it settled. Host-network pods are never asked for.
 */
export function scanProc(proc: string, ownNetns: number | undefined): Map<string, ScannedPod> {
  const found = new Map<string, ScannedPod>();
  const unsettled = new Set<string>();
  let entries: string[];
  try {
    entries = readdirSync(proc);
  } catch {
    return found;
  }
  let read = 0;
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || read++ >= MAX_PROCESSES) continue;
    let text: string;
    try {
      text = readFileSync(join(proc, entry, 'cgroup'), 'utf8');
    } catch {
      continue; // Exited meanwhile.
    }
    let uid: string | undefined;
    for (const line of text.split('\n')) {
      // `hierarchy-id:controllers:path`; cgroup v2 is `0::/path`.
      const path = line.slice(line.indexOf(':', line.indexOf(':') + 1) + 1);
      uid = podUidOfCgroup(path);
      if (uid) break;
    }
    if (!uid || unsettled.has(uid)) continue;
    const netnsPath = join(proc, entry, 'ns', 'net');
    let inode: number;
    try {
      inode = statSync(netnsPath).ino;
    } catch {
      continue;
    }
    const pid = Number(entry);
    const seen = found.get(uid);
    if (inode === ownNetns || (seen && seen.netnsInode !== inode)) {
      found.delete(uid);
      unsettled.add(uid);
    } else if (!seen || pid < seen.pid) found.set(uid, { pid, netnsPath, netnsInode: inode });
  }
  return found;
}
