import { existsSync, readdirSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { checkoutPath, logger, ZmeshError } from '@zmesh/shared';
import type { Registry } from 'prom-client';
import {
  COUNTER,
  decodeValue,
  encodeKey,
  encodeThrottle,
  HOOKS,
  MAPS,
  type OriginalDestination,
  PIN_ROOT,
  POD_ID_PATTERN,
  pinPaths,
  podDir,
  VALUE_SIZE,
} from './bpf-layout.js';
import { ensureBpffs, isPodDir, linkAll, loadObject, removePodDir, seedExempt } from './bpf-pins.js';
import { CaptureMetrics } from './capture-metrics.js';
import { netnsCookieOf } from './netns-listener.js';
import { runTool } from './run-tool.js';
import { Semaphore } from './semaphore.js';
import * as sys from './sys.js';

const log = logger('capture');

/** Bound on bpftool loads at once: each is a process, and a node may have two cores. */
const MAX_CONCURRENT_LOADS = 4;

export interface CapturePod {
  /** Directory name under the pin root; [A-Za-z0-9_.-], at most 128 characters. */
  id: string;
  /** The pod's cgroup v2 directory. */
  cgroupPath: string;
  /** A file naming the pod's network namespace (/run/netns/x or /proc/<pid>/ns/net). */
  netnsPath: string;
  /** Source addresses allowed to reach the pod's sockets directly (kubelet probes). */
  exemptSources?: string[];
}

/** How ztunnel names an accepted connection when it has no fd at hand. */
export interface ConnectionKey {
  netnsCookie: bigint;
  peerPort: number;
  family: 4 | 6;
}

export interface CaptureCounters {
  inboundDrops: number;
  captured: number;
  rekeyFailures: number;
  /** Connects the kernel refused while the pod's connect throttle was armed. */
  throttled: number;
}

interface AttachedPod {
  readonly id: string;
  readonly netnsCookie: bigint;
  readonly origDstFd: number;
  readonly countersFd: number;
  /** Absent on a pin directory adopted from a build without the throttle. */
  readonly throttleFd: number | undefined;
  /** What the throttle was last armed with (monotonic ns; per second; tokens), to skip redundant writes. */
  throttleUntil: bigint;
  throttleRate: number;
  throttleBurst: number;
  /** The last arming started with tokens (from an admission), not empty (from a refusal). */
  throttleSeeded: boolean;
  throttleLoggedAt: bigint;
  /** The kernel's refusal count when the throttle was last logged. */
  throttleLoggedCount: number;
}

/** A pod's throttle episodes are logged at most this often. */
const THROTTLE_LOG_INTERVAL_NS = 10_000_000_000n;

export interface BpfCaptureOptions {
  objectPath?: string;
  /**
   * This ztunnel's node. Pins then live under <pinRoot>/<node>/<pod-id>, so that several
   * ztunnels on one machine (the harness) never clean up each other's pods.
   */
  node?: string;
  /** Default /sys/fs/bpf/zmesh. */
  pinRoot?: string;
  bpftool?: string;
  registry?: Registry;
}

/**
 * Installs and removes the capture programs of bpf/capture.bpf.c per pod, and answers
 * "where was this accepted connection going?" from their maps. Loading and pinning go
 * through bpftool; attaching uses BPF links pinned next to the programs, so removing a
 * pod's pin directory detaches everything even after a crash. Map reads on the
 * connection path use bpf(2) directly.
 */
export class BpfCapture {
  readonly #objectPath: string;
  readonly #root: string;
  readonly #bpftool: string;
  readonly #pods = new Map<string, AttachedPod>();
  readonly #byCookie = new Map<bigint, AttachedPod>();
  readonly #queues = new Map<string, Promise<unknown>>();
  readonly #metrics: CaptureMetrics | undefined;
  readonly #loads = new Semaphore(MAX_CONCURRENT_LOADS);

  constructor(options: BpfCaptureOptions = {}) {
    this.#objectPath = options.objectPath ?? process.env.ZMESH_BPF_OBJECT ?? defaultObjectPath();
    const root = options.pinRoot ?? PIN_ROOT;
    if (options.node !== undefined && !POD_ID_PATTERN.test(options.node)) {
      throw new ZmeshError('ZM_ERR_CAPTURE_UNAVAILABLE', { reason: `invalid node name ${options.node}` });
    }
    this.#root = options.node === undefined ? root : join(root, options.node);
    this.#bpftool = options.bpftool ?? 'bpftool';
    this.#metrics = options.registry && new CaptureMetrics(options.registry, this);
  }

  /** Why capture cannot work here, or undefined when it can (root, object, bpftool). */
  static async unavailableReason(objectPath = defaultObjectPath()): Promise<string | undefined> {
    if (process.getuid?.() !== 0) return 'not root';
    if (!existsSync(objectPath)) return `no BPF object at ${objectPath} (run make bpf)`;
    try {
      await runTool('bpftool', ['version']);
    } catch {
      return 'bpftool not found';
    }
    return undefined;
  }

  get podIds(): string[] {
    return [...this.#pods.keys()];
  }

  /** Installs capture for a pod; idempotent. On failure nothing of it is left behind. */
  attach(pod: CapturePod): Promise<void> {
    if (!POD_ID_PATTERN.test(pod.id)) {
      return Promise.reject(
        new ZmeshError('ZM_ERR_CAPTURE_ATTACH', { pod: pod.id, reason: 'invalid pod id' }),
      );
    }
    return this.#serial(pod.id, () => this.#attach(pod));
  }

  /** Removes every program, link, map and pin of a pod; a no-op for an unknown pod. */
  detach(podId: string): Promise<void> {
    if (!POD_ID_PATTERN.test(podId)) return Promise.resolve();
    return this.#serial(podId, async () => {
      this.#forget(podId);
      removePodDir(podDir(this.#root, podId));
    });
  }

  /** Removes pin directories of pods this instance does not hold and `keep` does not name. */
  async cleanupStale(keep: Iterable<string> = []): Promise<string[]> {
    const kept = new Set(keep);
    const removed: string[] = [];
    if (!existsSync(this.#root)) return removed;
    for (const name of readdirSync(this.#root)) {
      // Only pod directories: another node's directory under a shared root is not ours.
      if (this.#pods.has(name) || kept.has(name) || !isPodDir(podDir(this.#root, name))) continue;
      await this.#serial(name, async () => removePodDir(podDir(this.#root, name)));
      removed.push(name);
    }
    if (removed.length > 0) log.info({ pods: removed }, 'removed stale capture');
    return removed;
  }

  /**
   * The destination a captured connection was going to, looked up from the socket
   * ztunnel accepted (an fd, a net.Socket, or its key). Consumes the entry unless
   * `consume` is false. Undefined is a miss: the caller must refuse the connection.
   */
  originalDestination(
    from: number | Socket | ConnectionKey,
    options: { consume?: boolean } = {},
  ): OriginalDestination | undefined {
    const key = typeof from === 'object' && 'netnsCookie' in from ? from : safeKeyOfSocket(from);
    const pod = key && this.#byCookie.get(key.netnsCookie);
    const mapKey = key && encodeKey(key.netnsCookie, key.peerPort, key.family);
    const value = pod && mapKey && sys.bpfMapLookup(pod.origDstFd, mapKey, VALUE_SIZE);
    const dst = value && decodeValue(value);
    if (pod === undefined || mapKey === undefined || dst === undefined) {
      this.#metrics?.misses.inc();
      return undefined;
    }
    if (options.consume !== false) sys.bpfMapDelete(pod.origDstFd, mapKey);
    return dst;
  }

  /** Like originalDestination, but a miss is a ZM_ERR_CAPTURE_NO_ORIGINAL_DST error. */
  requireOriginalDestination(from: number | Socket | ConnectionKey): OriginalDestination {
    const dst = this.originalDestination(from);
    if (dst === undefined) {
      const key = typeof from === 'object' && 'netnsCookie' in from ? from : undefined;
      throw new ZmeshError('ZM_ERR_CAPTURE_NO_ORIGINAL_DST', {
        key: key ? `netns ${key.netnsCookie} port ${key.peerPort}` : 'accepted socket',
      });
    }
    return dst;
  }

  /**
   * Arms the pod's connect throttle (bpf/README.md): for `holdMs` from now the kernel keeps
   * a token bucket of `rate` per second and `burst` for the pod's captured connects,
   * starting with `tokens` (empty when absent), and refuses those without a token with EPERM.
   *
   * ztunnel calls it for every connect-rate token it takes (`tokens`: what the tenant has
   * left) and for every connect-rate refusal (no `tokens`). A pod's kernel bucket starts
   * equal to its tenant's, refills at the same rate and is spent only by the pod's own
   * connects, so it never holds fewer tokens than the tenant: the kernel refuses nothing
   * ztunnel would admit, and it refuses a burst's excess in `connect()` from the first
   * one, before those connects queue on the pod's listener.
   *
   * Writes are skipped while they would change nothing that matters: a token taken while
   * an arming has more than half its hold left, or any arming with other limits (a
   * contended rate is not loosened by an admission); a refusal while an arming with the
   * same limits, already from a refusal, has more than half its hold left. False when
   * the pod has no throttle (unknown, or adopted from an older build).
   */
  throttle(podId: string, rate: number, burst: number, holdMs: number, tokens?: number): boolean {
    const pod = this.#pods.get(podId);
    if (pod?.throttleFd === undefined || !(rate > 0) || !(burst > 0) || !(holdMs > 0)) return false;
    if (!Number.isFinite(rate) || !Number.isFinite(burst)) return false;
    if (tokens !== undefined && !Number.isFinite(tokens)) return false;
    const now = process.hrtime.bigint();
    const hold = BigInt(Math.ceil(holdMs * 1e6));
    const refusal = tokens === undefined;
    const armed = pod.throttleUntil > now;
    const fresh = pod.throttleUntil - now > hold / 2n;
    const same = pod.throttleRate === rate && pod.throttleBurst === burst;
    const skip = refusal ? same && fresh && !pod.throttleSeeded : armed && (fresh || !same);
    if (skip) return true;
    try {
      sys.bpfMapUpdate(pod.throttleFd, ZERO_KEY, encodeThrottle(now + hold, rate, burst, now, tokens));
    } catch (e) {
      // The refusal itself stands; only its cheaper repetition in the kernel is lost.
      log.warn({ pod: podId, err: String(e) }, 'connect throttle not armed');
      return false;
    }
    // Logged when ztunnel refused the pod, or when the kernel has refused it since the
    // last line: with the mirrored bucket a storm may never reach ztunnel at all.
    if (now - pod.throttleLoggedAt > THROTTLE_LOG_INTERVAL_NS) {
      const inKernel = this.#throttledCount(pod);
      if (refusal || inKernel > pod.throttleLoggedCount) {
        pod.throttleLoggedAt = now;
        pod.throttleLoggedCount = inKernel;
        log.warn(
          { pod: podId, rate, burst, holdMs, refusedInKernel: inKernel },
          'pod over its connection rate: the kernel refuses its connects beyond the rate',
        );
      }
    }
    pod.throttleUntil = now + hold;
    pod.throttleRate = rate;
    pod.throttleBurst = burst;
    pod.throttleSeeded = !refusal;
    return true;
  }

  #throttledCount(pod: AttachedPod): number {
    try {
      return readCounter(pod.countersFd, COUNTER.throttled);
    } catch {
      return 0; // only the log line's count is lost
    }
  }

  /** Pods whose throttle has ever been armed by this process (their counters matter). */
  get throttledPodIds(): string[] {
    return [...this.#pods.values()].filter((p) => p.throttleUntil > 0n).map((p) => p.id);
  }

  /** The netns cookie of an attached pod (what the pod's accepted sockets report). */
  netnsCookie(podId: string): bigint | undefined {
    return this.#pods.get(podId)?.netnsCookie;
  }

  dropCount(podId: string): number {
    return this.counters(podId)?.inboundDrops ?? 0;
  }

  counters(podId: string): CaptureCounters | undefined {
    const pod = this.#pods.get(podId);
    if (pod === undefined) return undefined;
    const read = (i: number) => readCounter(pod.countersFd, i);
    return {
      inboundDrops: read(COUNTER.inboundDrops),
      captured: read(COUNTER.captured),
      rekeyFailures: read(COUNTER.rekeyFailures),
      throttled: read(COUNTER.throttled),
    };
  }

  /** Forgets every pod without detaching (for a process handing capture to its successor). */
  close(): void {
    for (const id of [...this.#pods.keys()]) this.#forget(id);
  }

  async #attach(pod: CapturePod): Promise<void> {
    if (this.#pods.has(pod.id)) return;
    await ensureBpffs(this.#root);
    const dir = podDir(this.#root, pod.id);
    let cookie: bigint;
    try {
      cookie = netnsCookieOf(pod.netnsPath);
    } catch (e) {
      throw new ZmeshError('ZM_ERR_CAPTURE_NETNS', { netns: pod.netnsPath, reason: String(e) }, { cause: e });
    }
    if (this.#byCookie.has(cookie)) {
      throw new ZmeshError('ZM_ERR_CAPTURE_ATTACH', { pod: pod.id, reason: 'netns already enrolled' });
    }
    if (existsSync(dir) && this.#adopt(pod.id, dir, cookie)) return;
    removePodDir(dir);
    try {
      await this.#loads.run(() => loadObject(this.#bpftool, this.#objectPath, dir));
      seedExempt(dir, pod.exemptSources ?? []);
      this.#register(pod.id, dir, cookie);
      linkAll(dir, pod.cgroupPath);
    } catch (e) {
      this.#forget(pod.id);
      removePodDir(dir);
      throw new ZmeshError('ZM_ERR_CAPTURE_ATTACH', { pod: pod.id, reason: String(e) }, { cause: e });
    }
    log.info({ pod: pod.id, cgroup: pod.cgroupPath }, 'capture attached');
  }

  /** Takes over a complete pin directory left by a previous run (capture never lapsed). */
  #adopt(id: string, dir: string, cookie: bigint): boolean {
    const p = pinPaths(dir);
    // A hook newer than the pins (`since`) may be absent: the pod keeps the rest until it is
    // enrolled again, as it keeps working without a throttle map.
    if (!HOOKS.every((h) => h.since !== undefined || existsSync(p.link(h.prog)))) return false;
    try {
      this.#register(id, dir, cookie);
    } catch {
      this.#forget(id);
      return false;
    }
    log.info({ pod: id }, 'capture adopted');
    return true;
  }

  #register(id: string, dir: string, netnsCookie: bigint): void {
    const p = pinPaths(dir);
    const origDstFd = sys.bpfObjGet(p.map(MAPS.origDst));
    let countersFd: number;
    try {
      countersFd = sys.bpfObjGet(p.map(MAPS.counters));
    } catch (e) {
      sys.close(origDstFd);
      throw e;
    }
    const throttleFd = optionalMap(p.map(MAPS.throttle));
    const pod = {
      id,
      netnsCookie,
      origDstFd,
      countersFd,
      throttleFd,
      throttleUntil: 0n,
      throttleRate: 0,
      throttleBurst: 0,
      throttleSeeded: false,
      throttleLoggedAt: 0n,
      throttleLoggedCount: 0,
    };
    this.#pods.set(id, pod);
    this.#byCookie.set(netnsCookie, pod);
  }

  #forget(id: string): void {
    const pod = this.#pods.get(id);
    if (pod === undefined) return;
    this.#pods.delete(id);
    this.#byCookie.delete(pod.netnsCookie);
    sys.close(pod.origDstFd);
    sys.close(pod.countersFd);
    if (pod.throttleFd !== undefined) sys.close(pod.throttleFd);
  }

  /** Runs operations on one pod one at a time, in call order. */
  #serial<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#queues.get(id) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.#queues.set(id, tail);
    void tail.then(() => {
      if (this.#queues.get(id) === tail) this.#queues.delete(id);
    });
    return next;
  }
}

const ZERO_KEY = Buffer.alloc(4);

/** A map that a pin directory from an older build may lack: its fd, or undefined. */
function optionalMap(pin: string): number | undefined {
  try {
    return existsSync(pin) ? sys.bpfObjGet(pin) : undefined;
  } catch (e) {
    log.warn({ pin, err: String(e) }, 'optional BPF map unusable');
    return undefined;
  }
}

function defaultObjectPath(): string {
  return checkoutPath('bpf', 'build', 'capture.bpf.o');
}

/** The fd of a net.Socket (Node keeps it on the libuv handle) or a plain fd. */
export function fdOf(from: number | Socket): number {
  if (typeof from === 'number') return from;
  const fd = (from as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) {
    throw new ZmeshError('ZM_ERR_CAPTURE_NO_ORIGINAL_DST', { key: 'socket without fd' });
  }
  return fd;
}

/** One of a pod's zm_counters (u64, indexed by COUNTER). */
function readCounter(countersFd: number, index: number): number {
  const key = Buffer.alloc(4);
  key.writeUInt32LE(index);
  return Number(sys.bpfMapLookup(countersFd, key, 8)?.readBigUInt64LE(0) ?? 0n);
}

/** The key of an accepted socket; undefined when the socket is already gone (a miss). */
function safeKeyOfSocket(from: number | Socket): ConnectionKey | undefined {
  try {
    return keyOfSocket(fdOf(from));
  } catch (e) {
    log.debug({ err: e }, 'accepted socket has no key');
    return undefined;
  }
}

function keyOfSocket(fd: number): ConnectionKey {
  const peer = sys.getpeername(fd);
  const mapped = peer.family === 6 && peer.host.startsWith('::ffff:') && peer.host.includes('.');
  return { netnsCookie: sys.netnsCookie(fd), peerPort: peer.port, family: mapped ? 4 : peer.family };
}
