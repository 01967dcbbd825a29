import { readFileSync } from 'node:fs';

/** One line of /proc/mounts: where, what file system, its options. */
export interface Mount {
  dir: string;
  type: string;
  options: string[];
}

/** /proc/mounts (or its text), with the `\040` escapes of spaces in paths undone. */
export function readMounts(text?: string): Mount[] {
  let body = text;
  if (body === undefined) {
    try {
      body = readFileSync('/proc/mounts', 'utf8');
    } catch {
      return [];
    }
  }
  return body.split('\n').flatMap((line) => {
    const [, dir, type, options] = line.split(' ');
    return dir && type
      ? [{ dir: dir.replace(/\\040/g, ' '), type, options: (options ?? '').split(',') }]
      : [];
  });
}

/**
 * Where the cgroup v2 hierarchy is mounted, if it is. On hybrid machines it sits beside the
 * v1 controllers (e.g. /sys/fs/cgroup/unified), so it is read from the mount table.
 */
export function cgroup2MountOf(mounts: Mount[] = readMounts()): string | undefined {
  return mounts.find((m) => m.type === 'cgroup2')?.dir;
}
