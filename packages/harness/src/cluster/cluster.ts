import { existsSync, readdirSync, rmSync } from 'node:fs';
import { logger, type ZdsPod, ZmeshError } from '@zmesh/shared';
import type { Options, ResultPromise } from 'execa';
import { onExit } from '../local/exit-cleanup.js';
import { cgroup2Mount, createCgroup, removeCgroupTree } from './cgroups.js';
import { createNetwork, deleteNetwork, listNetns } from './cluster-network.js';
import { type ClusterSpec, parseClusterSpec, validateClusterSpec } from './cluster-spec.js';
import {
  type ClusterState,
  isAlive,
  listStates,
  readState,
  removeState,
  writeState,
} from './cluster-state.js';
import { type ExecResult, execInPod, runInNode, runInPod } from './pod-runner.js';
import {
  buildTopology,
  type NodeInfo,
  newRunId,
  type PodInfo,
  PREFIX,
  runGroup,
  type Topology,
} from './topology.js';

const log = logger('cluster');

export interface ClusterStatus {
  runId: string;
  persistent: boolean;
  nodes: { name: string; netns: string; present: boolean }[];
  pods: { name: string; namespace: string; node: string; ipv4: string; ipv6: string; present: boolean }[];
}

export interface UpOptions {
  /** Outlive this process (for `zmesh cluster up`); otherwise torn down on every exit path. */
  persistent?: boolean;
}

/** Clusters this process must tear down if it exits. */
const owned = new Set<Cluster>();

/**
 * A cluster of network namespaces on this machine (docs/design.md §10): nodes with a
 * bridge, routed to each other over a fabric namespace; pods with a veth to their
 * node, their own IPv4/IPv6 addresses, cgroup (v2) and Linux uid. Needs root.
 */
export class Cluster {
  readonly topology: Topology;
  readonly #state: ClusterState;
  #down = false;

  private constructor(state: ClusterState) {
    this.#state = state;
    this.topology = buildTopology(state.spec, state.runId, state.cgroupMount);
  }

  get runId(): string {
    return this.topology.runId;
  }

  get nodes(): readonly NodeInfo[] {
    return this.topology.nodes;
  }

  get pods(): readonly PodInfo[] {
    return this.topology.pods;
  }

  /** Creates a cluster, first removing leftovers of crashed runs. */
  static async up(spec: ClusterSpec | string, options: UpOptions = {}): Promise<Cluster> {
    const parsed = typeof spec === 'string' ? parseClusterSpec(spec) : validateClusterSpec(spec);
    if (!parsed.ok) throw new ZmeshError('ZM_ERR_CLUSTER_SPEC', { reason: parsed.error.join('; ') });
    await Cluster.cleanupStale();
    let runId = newRunId();
    while (readState(runId) !== undefined) runId = newRunId();
    const state: ClusterState = {
      runId,
      pid: process.pid,
      persistent: options.persistent === true,
      spec: parsed.value,
      cgroupMount: cgroup2Mount(),
      createdAt: new Date().toISOString(),
    };
    // The state file comes first, so a crash at any later point leaves a findable record.
    writeState(state);
    const cluster = new Cluster(state);
    if (!state.persistent) owned.add(cluster);
    onExit(Cluster.teardownOwned); // one registration however many clusters: a Set of tasks
    try {
      cluster.#createCgroups();
      await createNetwork(cluster.topology);
    } catch (e) {
      cluster.#teardown();
      throw e;
    }
    log.info(
      { runId: state.runId, nodes: state.spec.nodes.length, pods: state.spec.pods.length },
      'cluster up',
    );
    return cluster;
  }

  /** A cluster recorded by another process (e.g. `zmesh cluster up`). */
  static load(runId: string): Cluster | undefined {
    const state = readState(runId);
    return state && new Cluster(state);
  }

  static list(): ClusterState[] {
    return listStates();
  }

  /**
   * Removes what crashed runs left: clusters whose owner process is gone, and any
   * zm-* namespace or cgroup no live cluster accounts for. Persistent clusters stay.
   */
  static async cleanupStale(): Promise<string[]> {
    // Resources are listed before records are read: a run records itself before it
    // creates anything, so whatever is listed here is covered by the records read after.
    const mount = cgroup2Mount();
    const netns = (await listNetns()).filter((ns) => ns.startsWith(PREFIX));
    const cgroups = readdirSync(mount).filter((d) => d.startsWith(PREFIX));
    const live = new Set<string>();
    const removed: string[] = [];
    for (const s of listStates()) {
      if (s.persistent || isAlive(s.pid)) {
        live.add(s.runId);
        continue;
      }
      new Cluster(s).#teardown();
      removed.push(s.runId);
    }
    const orphans = netns.filter((ns) => !live.has(runIdOf(ns)) && !removed.includes(runIdOf(ns)));
    deleteNetwork(orphans);
    for (const dir of cgroups) {
      if (!live.has(dir.slice(PREFIX.length))) removeCgroupTree(`${mount}/${dir}`);
    }
    for (const scope of existsSync(BPF_PIN_ROOT) ? readdirSync(BPF_PIN_ROOT) : []) {
      const run = scope.split('-')[0] ?? '';
      if (RUN_SCOPE.test(scope) && !live.has(run))
        rmSync(`${BPF_PIN_ROOT}/${scope}`, { recursive: true, force: true });
    }
    if (removed.length > 0 || orphans.length > 0)
      log.warn({ runs: removed, orphans }, 'removed stale cluster');
    return removed;
  }

  pod(name: string, namespace = 'default'): PodInfo {
    const pod = this.pods.find((p) => p.name === name && p.namespace === namespace);
    if (pod === undefined)
      throw new ZmeshError('ZM_ERR_CLUSTER_SPEC', { reason: `no pod ${namespace}/${name}` });
    return pod;
  }

  node(name: string): NodeInfo {
    const node = this.nodes.find((n) => n.name === name);
    if (node === undefined) throw new ZmeshError('ZM_ERR_CLUSTER_SPEC', { reason: `no node ${name}` });
    return node;
  }

  /** What the node agent sends ztunnel to enroll a pod (docs/design.md §6). */
  /** The run's cgroup root: kubelet's `kubepods/…/pod<uid>` layout sits under it. */
  get cgroupRoot(): string {
    return this.topology.cgroupRoot;
  }

  /** A pod as the node agent hands it to ztunnel over ZDS (docs/zds.md). */
  zdsPod(pod: PodInfo): ZdsPod {
    return {
      uid: pod.uid,
      netnsPath: pod.netnsPath,
      info: { name: pod.name, namespace: pod.namespace, serviceAccount: pod.serviceAccount },
    };
  }

  /** Starts a process in a pod as an unprivileged container would run it. */
  runInPod(pod: PodInfo, argv: readonly string[], opts: Options = {}): ResultPromise {
    return runInPod(pod, argv, opts);
  }

  /** Runs a short command in a pod, capturing its output. */
  exec(
    pod: PodInfo,
    argv: readonly string[],
    opts: { timeoutMs?: number; input?: string } = {},
  ): Promise<ExecResult> {
    return execInPod(pod, argv, opts);
  }

  /** Runs a command as root in a node's namespace and node cgroup. */
  runInNode(node: NodeInfo, argv: readonly string[], opts: Options = {}): ResultPromise {
    return runInNode(node, argv, opts);
  }

  /**
   * Runs a command as root in a pod's namespace and cgroup, as a privileged pod: the
   * harness's waypoints, which read a node token and reach the control plane's socket
   * through the file system, as the ztunnels do.
   */
  runPrivilegedInPod(pod: PodInfo, argv: readonly string[], opts: Options = {}): ResultPromise {
    return runInNode(pod, argv, opts);
  }

  status(): ClusterStatus {
    const present = (ns: string) => existsSync(`/run/netns/${ns}`);
    return {
      runId: this.runId,
      persistent: this.#state.persistent,
      nodes: this.nodes.map((n) => ({ name: n.name, netns: n.netns, present: present(n.netns) })),
      pods: this.pods.map((p) => ({
        name: p.name,
        namespace: p.namespace,
        node: p.node,
        ipv4: p.ipv4,
        ipv6: p.ipv6,
        present: present(p.netns),
      })),
    };
  }

  /** Kills every process in the cluster and removes its namespaces, cgroups and record. */
  async down(): Promise<void> {
    this.#teardown();
  }

  #createCgroups(): void {
    for (const n of this.nodes) createCgroup(n.cgroupPath);
    for (const p of this.pods) createCgroup(p.cgroupPath);
  }

  /** Synchronous so that it can run from a process 'exit' handler. Idempotent. */
  #teardown(): void {
    if (this.#down) return;
    this.#down = true;
    owned.delete(this);
    const t = this.topology;
    const errors: unknown[] = [];
    const attempt = (fn: () => void) => {
      try {
        fn();
      } catch (e) {
        errors.push(e);
      }
    };
    attempt(() => removeCgroupTree(runGroup(this.#state.cgroupMount, t.runId)));
    // Before the namespaces go: removing the pins detaches the pods' BPF links.
    attempt(() => removeRunPins(t.runId));
    attempt(() =>
      deleteNetwork([...t.pods.map((p) => p.netns), ...t.nodes.map((n) => n.netns), t.fabricNetns]),
    );
    if (errors.length === 0) removeState(t.runId);
    else log.error({ runId: t.runId, errors: errors.map(String) }, 'cluster teardown incomplete');
  }

  /**
   * Internal: exit-path teardown of every cluster this process owns (registered with
   * `onExit`; a SIGKILLed run is cleaned by the next up()).
   */
  static teardownOwned(): void {
    for (const c of [...owned]) c.#teardown();
  }
}

/**
 * BPF pins of a harness run: ztunnels started by the harness pin under
 * <root>/<runId>-<node> (LocalMesh.captureScope), so a run's pins are found by its id.
 */
const BPF_PIN_ROOT = '/sys/fs/bpf/zmesh';
const RUN_SCOPE = /^[0-9a-f]{6}-[a-z0-9-]+$/;

function removeRunPins(runId: string): void {
  if (!existsSync(BPF_PIN_ROOT)) return;
  for (const scope of readdirSync(BPF_PIN_ROOT)) {
    if (scope.startsWith(`${runId}-`)) rmSync(`${BPF_PIN_ROOT}/${scope}`, { recursive: true, force: true });
  }
}

function runIdOf(netns: string): string {
  return netns.slice(PREFIX.length).split('-')[0] ?? '';
}
