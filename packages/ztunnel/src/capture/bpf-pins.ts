import { closeSync, existsSync, lstatSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { ZmeshError } from '@zmesh/shared';
import { exemptKey, HOOKS, MAPS, pinPaths } from './bpf-layout.js';
import { runTool } from './run-tool.js';
import * as sys from './sys.js';

/**
 * The pin directory of one pod: load with bpftool, attach with pinned cgroup links,
 * seed maps, remove. Each step either completes or throws; the caller removes the
 * directory on failure.
 */

export async function loadObject(bpftool: string, objectPath: string, dir: string): Promise<void> {
  const p = pinPaths(dir);
  mkdirSync(dir, { recursive: true });
  await runTool(bpftool, ['prog', 'loadall', objectPath, p.progDir, 'pinmaps', p.mapDir]);
}

export function linkAll(dir: string, cgroupPath: string): void {
  const p = pinPaths(dir);
  mkdirSync(p.linkDir, { recursive: true });
  const cgroupFd = openSync(cgroupPath, 'r');
  try {
    for (const hook of HOOKS) {
      const progFd = sys.bpfObjGet(p.prog(hook.prog));
      try {
        const linkFd = sys.bpfLinkCreate(progFd, cgroupFd, hook.attachType);
        try {
          sys.bpfObjPin(linkFd, p.link(hook.prog));
        } finally {
          sys.close(linkFd);
        }
      } finally {
        sys.close(progFd);
      }
    }
  } finally {
    closeSync(cgroupFd);
  }
}

export function seedExempt(dir: string, sources: string[]): void {
  if (sources.length === 0) return;
  const fd = sys.bpfObjGet(pinPaths(dir).map(MAPS.exempt));
  try {
    for (const source of sources) {
      const addr = sys.familyOf(source) === 4 ? sys.ipv4Bytes(source) : sys.ipv6Bytes(source);
      sys.bpfMapUpdate(fd, exemptKey(addr), Buffer.from([1]));
    }
  } finally {
    sys.close(fd);
  }
}

/** Unpins links in reverse attach order (each unpin detaches), then everything else. */
export function removePodDir(dir: string): void {
  if (!existsSync(dir)) return;
  const p = pinPaths(dir);
  for (const hook of [...HOOKS].reverse()) rmSync(p.link(hook.prog), { force: true });
  rmSync(dir, { recursive: true, force: true });
}

export async function ensureBpffs(root: string): Promise<void> {
  const mounts = readFileSync('/proc/mounts', 'utf8');
  if (!/^\S+ \/sys\/fs\/bpf bpf /m.test(mounts)) {
    try {
      mkdirSync('/sys/fs/bpf', { recursive: true });
      await runTool('mount', ['-t', 'bpf', 'bpf', '/sys/fs/bpf']);
    } catch (e) {
      throw new ZmeshError(
        'ZM_ERR_CAPTURE_UNAVAILABLE',
        { reason: `cannot mount bpffs: ${e}` },
        { cause: e },
      );
    }
  }
  mkdirSync(root, { recursive: true, mode: 0o755 });
  checkPinRoot(root);
}

/**
 * bpffs is often mounted world-writable (1777): a directory someone else made at our pin
 * root before us would let them rename our pod directories (and so confuse cleanup and
 * adoption). Ours must be a real directory, owned by us, writable by no one else.
 */
export function checkPinRoot(root: string): void {
  const st = lstatSync(root);
  const uid = process.getuid?.() ?? 0;
  if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o022) !== 0) {
    const mode = (st.mode & 0o7777).toString(8);
    throw new ZmeshError('ZM_ERR_CAPTURE_UNAVAILABLE', {
      reason: `${root} must be a directory owned by uid ${uid} and not group/world-writable (owner ${st.uid}, mode ${mode})`,
    });
  }
}

/** A pod's pin directory (as opposed to, say, another node's directory of pods). */
export function isPodDir(dir: string): boolean {
  const p = pinPaths(dir);
  return existsSync(p.progDir) || existsSync(p.mapDir) || existsSync(p.linkDir);
}
