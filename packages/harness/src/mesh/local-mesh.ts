import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { KubernetesObject, ListWatch } from '@kubernetes/client-node';
import { CertificateAuthority, logger, ZdsServer } from '@zmesh/shared';
import { BpfCapture } from '@zmesh/ztunnel';
import { execa, type ResultPromise } from 'execa';
import { parseAllDocuments } from 'yaml';
import { Cluster } from '../cluster/cluster.js';
import type { NodeInfo, PodInfo } from '../cluster/topology.js';
import type { ApiServerDouble, KubeObject } from '../kube-api/api-server-double.js';
import { type TempDir, tempDir } from '../local/exit-cleanup.js';
import { stopChild, ZMESH_BIN } from '../local/ztunnel-process.js';
import { MeshControlPlane } from './mesh-control-plane.js';
import { controlPlaneUid, localConfigYaml, meshYaml, type WaypointShape } from './mesh-objects.js';
import { deploymentArgs, spawnNodeAgent, waitSynced } from './mesh-processes.js';
import type { ClusterMeshOptions, ControlPlaneMode, MeshSpec } from './mesh-spec.js';
import { netnsHttp } from './netns-http.js';

const log = logger('mesh');

/** Key persistence must be tmpfs (PersistedKeys refuses anything else). */
const KEYS_TMPFS = '/dev/shm';

/**
 * The mesh fixture's `cluster` runtime (`startMesh({ run: 'cluster', spec, ... })`, mesh.ts):
 * the local multi-node mesh of docs/design.md §10: a cluster of network namespaces, one ztunnel
 * per node (in the node's namespace and cgroup, capture mode), pods enrolled before any of
 * their processes start by the harness acting as each node's agent: a ZDS server
 * (docs/zds.md) the node's ztunnel connects to, handing over each pod's netns fd. (With
 * `controlPlane.nodeAgents`, `zmesh node-agent` is each node's agent instead.) Everything is torn
 * down on every exit path by `down()` and by the cluster's own exit hooks.
 */
export class LocalMesh {
  private readonly ztunnels = new Map<string, ResultPromise>();
  /** Old ztunnels left running (draining) by startSuccessor. */
  private readonly predecessors = new Set<ResultPromise>();
  /** Each node's agent side of ZDS (the harness is the node agent). */
  private readonly agents = new Map<string, ZdsServer>();
  /** Waypoint processes by their Gateway's `namespace/name`. */
  private readonly waypoints = new Map<string, ResultPromise>();
  private readonly enrolled = new Set<string>();
  /** Controller mode: each node's watch of its own Pods in the API. */
  private readonly podWatches: ListWatch<KubernetesObject>[] = [];
  /** Node-agent mode: each node's `zmesh node-agent`, and the pods' pause processes. */
  private readonly nodeAgents = new Map<string, ResultPromise>();
  private readonly pauses = new Map<string, ResultPromise>();
  /** Control-plane mode only. */
  controlPlane: MeshControlPlane | undefined;
  private readonly keysDirs = new Map<string, TempDir>();
  readonly dir: string;

  private constructor(
    readonly cluster: Cluster,
    private readonly temp: TempDir,
    readonly spec: MeshSpec,
    private readonly options: ClusterMeshOptions,
  ) {
    this.dir = temp.path;
  }

  /** Through `startMesh({ run: 'cluster', spec, ...options })` (mesh.ts). */
  static async up(spec: MeshSpec, options: ClusterMeshOptions = {}): Promise<LocalMesh> {
    const reason = await BpfCapture.unavailableReason();
    if (reason) throw new Error(`capture unavailable: ${reason}`);
    const cluster = await Cluster.up(spec);
    const mesh = new LocalMesh(cluster, tempDir(`zmesh-mesh-${cluster.runId}-`), spec, options);
    try {
      if (options.controlPlane) await mesh.startControlPlane();
      else if (spec.waypoints?.length)
        throw new Error('waypoints need the control plane (controlPlane: true)');
      else {
        const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
        await writeFile(join(mesh.dir, 'root-cert.pem'), ca.rootPem);
        await writeFile(join(mesh.dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
        await mesh.writeConfig();
      }
      for (const node of cluster.nodes) await mesh.startZtunnel(node);
      // Waypoints' pods are never enrolled (docs/design.md §3): their traffic is HBONE already.
      const runsWaypoint = (pod: PodInfo) =>
        spec.waypoints?.some((w) => w.namespace === pod.namespace && w.pod === pod.name) ?? false;
      for (const pod of cluster.pods)
        if ((options.enroll?.(pod) ?? true) && !runsWaypoint(pod)) await mesh.enroll(pod);
      await mesh.waitReady();
      if (mesh.cpMode?.kubernetes && !mesh.cpMode.nodeAgents)
        await mesh.watchPodsFromApi(mesh.cpMode.kubernetes);
      for (const w of spec.waypoints ?? []) await mesh.startWaypoint(w);
      return mesh;
    } catch (e) {
      await mesh.down();
      throw e;
    }
  }

  /** BPF pins of this run's node live under /sys/fs/bpf/zmesh/<scope>: runs never touch each other's. */
  captureScope(node: string): string {
    return `${this.cluster.runId}-${node}`;
  }

  /** The node agent's ZDS socket that the node's ztunnel connects to. */
  zdsSocket(node: string): string {
    return join(this.dir, node, 'zds.sock');
  }

  pod(name: string, namespace?: string): PodInfo {
    return namespace ? this.cluster.pod(name, namespace) : this.cluster.pods.find((p) => p.name === name)!;
  }

  node(name: string): NodeInfo {
    return this.cluster.node(name);
  }

  /** The uid ztunnel knows a pod by: the control plane's in control-plane mode, else the harness's. */
  workloadUid(pod: PodInfo): string {
    return this.options.controlPlane ? controlPlaneUid(pod) : pod.uid;
  }

  /** Kubernetes-shaped YAML registering `pods` (and the spec's services) with the control plane. */
  objectsYaml(pods: readonly PodInfo[]): string {
    return meshYaml(pods, this.spec.services ?? [], this.spec.waypoints, this.cluster.pods);
  }

  /**
   * Enrolls a pod over ZDS (AddWorkload with its netns fd); resolves once its node's ztunnel
   * acknowledged, that is once capture and listeners are in place.
   */
  async enroll(pod: PodInfo): Promise<void> {
    if (this.cpMode?.nodeAgents) {
      // The node agent finds the pod in /proc by its first process, as on a node where it ran first.
      const pause = this.cluster.runInPod(pod, ['sleep', 'infinity'], { reject: false, stdin: 'ignore' });
      this.pauses.set(pod.uid, pause);
    } else await this.agent(pod.node).addPod(this.cluster.zdsPod(pod));
    this.enrolled.add(pod.uid);
  }

  /**
   * Node-agent mode: a new pod's sandbox, as a runtime sets it up: its Pod object in the API,
   * then the CNI ADD (the zmesh-cni plugin the node's agent chained into its CNI config, run
   * with the CNI environment and the network config on stdin), then its first process.
   * Resolves with the plugin's result; ready once ztunnel reports it so.
   */
  async cniAdd(pod: PodInfo): Promise<{ exitCode: number | undefined; stdout: string }> {
    const api = this.cpMode?.kubernetes;
    if (!api || !this.cpMode?.nodeAgents) throw new Error('cniAdd needs controlPlane.nodeAgents');
    for (const doc of parseAllDocuments(this.objectsYaml([pod])))
      api.put(withUid(doc.toJS() as KubeObject, this.cluster.pods));
    const cni = join(this.dir, pod.node, 'cni');
    const list = JSON.parse(await readFile(join(cni, 'net.d', '10-podnet.conflist'), 'utf8')) as {
      cniVersion: string;
      name: string;
      plugins: object[];
    };
    const prevResult = { cniVersion: list.cniVersion, ips: [{ address: `${pod.ipv4}/24` }] };
    const r = await execa(join(cni, 'bin', 'zmesh-cni'), [], {
      reject: false,
      input: JSON.stringify({
        cniVersion: list.cniVersion,
        name: list.name,
        ...list.plugins.at(-1),
        prevResult,
      }),
      env: {
        CNI_COMMAND: 'ADD',
        CNI_CONTAINERID: `sandbox-${pod.uid}`,
        CNI_NETNS: pod.netnsPath,
        CNI_IFNAME: 'eth0',
        CNI_PATH: join(cni, 'bin'),
        CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod.namespace};K8S_POD_NAME=${pod.name};K8S_POD_UID=${pod.uid}`,
      },
    });
    if (r.exitCode === 0) await this.enroll(pod);
    return { exitCode: r.exitCode, stdout: String(r.stdout) };
  }

  async unenroll(pod: PodInfo): Promise<void> {
    await this.agent(pod.node).removePod(pod.uid);
    this.enrolled.delete(pod.uid);
  }

  /**
   * Controller mode: each node's agent watches the Pods scheduled on its node (a field
   * selector on spec.nodeName, as a node agent does) and removes a deleted Pod's capture over
   * ZDS (DelWorkload). Enrolment itself stays the harness's, from its own pod list.
   */
  private async watchPodsFromApi(api: ApiServerDouble): Promise<void> {
    // Loaded here only: the harness's other commands start without the client.
    const { CoreV1Api, KubeConfig, ListWatch, Watch } = await import('@kubernetes/client-node');
    const kc = new KubeConfig();
    kc.loadFromString(api.kubeconfig());
    const core = kc.makeApiClient(CoreV1Api);
    for (const node of this.cluster.nodes) {
      const fieldSelector = `spec.nodeName=${node.name}`;
      const watch = new ListWatch<KubernetesObject>(
        '/api/v1/pods',
        new Watch(kc),
        () => core.listPodForAllNamespaces({ fieldSelector }),
        false,
        undefined,
        fieldSelector,
      );
      watch.on('delete', (o) => {
        const pod = this.cluster.pods.find(
          (p) => p.node === node.name && p.name === o.metadata?.name && p.namespace === o.metadata?.namespace,
        );
        if (pod && this.enrolled.has(pod.uid))
          void this.unenroll(pod).catch((e: unknown) =>
            log.warn({ pod: pod.name, err: (e as Error).message }, 'unenroll after API delete failed'),
          );
      });
      await watch.start();
      this.podWatches.push(watch);
    }
  }

  /** A node's agent side of ZDS (tests stop it, or stand a hostile agent in its place). */
  zdsAgent(node: string): ZdsServer {
    return this.agent(node);
  }

  private agent(node: string): ZdsServer {
    const agent = this.agents.get(node);
    if (!agent) throw new Error(`no node agent on ${node}`);
    return agent;
  }

  /** The pid of a node's ztunnel process (the harness's own child). */
  ztunnelPid(node: string): number | undefined {
    return this.ztunnels.get(node)?.pid;
  }

  /** The pid of a waypoint's process (the harness's own child), by its Gateway's `namespace/name`. */
  waypointPid(gateway: string): number | undefined {
    return this.waypoints.get(gateway)?.pid;
  }

  /** GET (or another method) on a node's ztunnel admin, metrics or health port. */
  admin(node: string, port: number, path: string, method = 'GET') {
    return netnsHttp(this.node(node).netnsPath, port, path, method);
  }

  async metrics(node: string): Promise<string> {
    return (await this.admin(node, this.portsOf(node).metrics, '/metrics')).body;
  }

  /**
   * During an upgrade's overlap two ztunnels answer a node's metrics port (SO_REUSEPORT):
   * their bodies by process_start_time_seconds, from up to `tries` new connections (each of
   * which the kernel hashes to one of the listeners), stopping once two have answered.
   */
  async metricsOfEach(node: string, tries = 24): Promise<Map<string, string>> {
    const seen = new Map<string, string>();
    for (let i = 0; i < tries && seen.size < 2; i++) {
      const r = await this.admin(node, this.portsOf(node).metrics, '/metrics').catch(() => undefined);
      const started = /^process_start_time_seconds (\S+)/m.exec(r?.body ?? '')?.[1];
      if (r && started) seen.set(started, r.body);
    }
    return seen;
  }

  /**
   * Waits until every enrolled, configured pod is ready on its node's ztunnel
   * (certificate and listeners up). Pods left unconfigured stay pending by design.
   */
  async waitReady(timeoutMs = 20_000, notPid?: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (const node of this.cluster.nodes) {
      const want = this.cluster.pods.filter(
        (p) => p.node === node.name && this.enrolled.has(p.uid) && !(this.options.unconfigured?.(p) ?? false),
      );
      for (;;) {
        const r = await this.admin(node.name, this.portsOf(node.name).admin, '/config_dump').catch(
          () => undefined,
        );
        const dump =
          r?.status === 200
            ? (JSON.parse(r.body) as { pid: number; local: Array<{ uid: string; status: string }> })
            : undefined;
        // During an upgrade's overlap the old process answers the shared port too: not its word.
        const local = dump && dump.pid !== notPid ? dump.local : [];
        const ready = new Set(local.filter((l) => l.status === 'ready').map((l) => l.uid));
        if (want.every((p) => ready.has(this.workloadUid(p)))) break;
        if (Date.now() > deadline)
          throw new Error(`ztunnel on ${node.name} not ready: ${r?.body ?? 'no answer'}`);
        await new Promise((res) => setTimeout(res, 100));
      }
    }
  }

  /** Stops a node's ztunnel (capture stays attached: its pods are cut off, not uncaptured). */
  async stopZtunnel(node: string): Promise<void> {
    const child = this.ztunnels.get(node);
    this.ztunnels.delete(node);
    // At once, as before drains existed: an outage drill wants the process gone.
    if (child) await stopChild(child, 3000, 'SIGINT');
  }

  /**
   * An upgrade's first half (docs/upgrade.md): starts a successor ztunnel on `node` beside the
   * running one, on the same ports (admin, metrics and ready as much as the pods' own:
   * SO_REUSEPORT), and resolves once the node agent has handed it every pod (its snapshot)
   * and it reports them ready.
   * The successor becomes the node's ztunnel; the old process is returned (wrapped: a
   * process is thenable), still running, for the caller to SIGTERM (a drain). down() ends
   * it too if it is left.
   */
  async startSuccessor(node: string): Promise<{ old: ResultPromise; oldPid: number }> {
    const old = this.ztunnels.get(node);
    if (!old) throw new Error(`no ztunnel running on ${node}`);
    const oldPid = (await this.configDump(node)).pid;
    this.predecessors.add(old);
    void old.finally(() => this.predecessors.delete(old));
    await this.startZtunnel(this.node(node), 2);
    // Ready means the successor's own word, its listeners up beside the old one's.
    await this.waitReady(20_000, oldPid);
    return { old, oldPid };
  }

  /**
   * A node's ztunnel config_dump; with `notPid`, one from any other process (during an
   * upgrade's overlap both answer the shared admin port), polled for up to 5 s.
   */
  async configDump(node: string, notPid?: number): Promise<{ pid: number } & Record<string, unknown>> {
    const deadline = Date.now() + 5000;
    for (;;) {
      const r = await this.admin(node, this.portsOf(node).admin, '/config_dump').catch(() => undefined);
      const dump = r?.status === 200 ? (JSON.parse(r.body) as { pid: number }) : undefined;
      if (dump && dump.pid !== notPid) return dump;
      if (Date.now() > deadline)
        throw new Error(`no config_dump on ${node} from a process other than ${notPid}`);
      await new Promise((res) => setTimeout(res, 50));
    }
  }

  /** A node's ztunnel admin, metrics and readiness ports. */
  portsOf(_node: string): { admin: number; metrics: number; ready: number } {
    return { admin: 15000, metrics: 15020, ready: 15021 };
  }

  /** Starts a node's ztunnel again; the node agent re-enrolls its pods with the ZDS snapshot. */
  async restartZtunnel(node: string): Promise<void> {
    await this.stopZtunnel(node);
    await this.startZtunnel(this.node(node));
  }

  async down(): Promise<void> {
    await Promise.all(this.podWatches.map((w) => w.stop()));
    this.podWatches.length = 0;
    await Promise.all([...this.nodeAgents.values()].map((a) => stopChild(a)));
    this.nodeAgents.clear();
    await Promise.all([...this.waypoints.values()].map((w) => stopChild(w)));
    this.waypoints.clear();
    await Promise.all([...this.ztunnels.keys()].map((n) => this.stopZtunnel(n)));
    await Promise.all([...this.predecessors].map((c) => stopChild(c, 3000, 'SIGINT')));
    for (const agent of this.agents.values()) agent.close();
    this.agents.clear();
    for (const node of this.cluster.nodes) {
      await new BpfCapture({ node: this.captureScope(node.name) }).cleanupStale([]).catch((e: unknown) => {
        log.warn({ node: node.name, err: (e as Error).message }, 'BPF cleanup failed');
      });
    }
    await this.controlPlane?.stop();
    await this.cluster.down(); // ends the pause processes too
    await Promise.all([...this.pauses.values()].map((p) => p.catch(() => undefined)));
    this.temp.remove();
    for (const d of this.keysDirs.values()) d.remove();
  }

  private get cpMode(): ControlPlaneMode | undefined {
    const cp = this.options.controlPlane;
    return cp === true ? {} : cp || undefined;
  }

  /** Starts the control plane, registers the configured pods and services, mints node tokens. */
  private async startControlPlane(): Promise<void> {
    const mode = this.cpMode ?? {};
    const configured = this.cluster.pods.filter((p) => !(this.options.unconfigured?.(p) ?? false));
    const api = mode.kubernetes;
    let kubeconfig: string | undefined;
    if (api) {
      // The API holds the mesh before the control plane lists it, as a cluster would.
      kubeconfig = join(this.dir, 'kubeconfig');
      await writeFile(kubeconfig, api.kubeconfig(), { mode: 0o600 });
      api.put({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: MESH_CP_NAMESPACE } });
      for (const doc of parseAllDocuments(this.objectsYaml(configured)))
        api.put(withUid(doc.toJS() as KubeObject, this.cluster.pods));
    }
    this.controlPlane = await MeshControlPlane.start(this.dir, {
      ...(mode.maxCertTtlSeconds ? { maxCertTtlSeconds: mode.maxCertTtlSeconds } : {}),
      ...(kubeconfig ? { kubeconfig, stateDir: false as const } : {}),
    });
    if (!api) await this.controlPlane.apply(this.objectsYaml(configured), 'mesh.yaml');
    for (const node of this.cluster.nodes) {
      await mkdir(join(this.dir, node.name), { recursive: true, mode: 0o700 });
      await this.controlPlane.writeNodeToken(node.name, join(this.dir, node.name, 'token'));
      const persist = typeof mode.persistKeys === 'function' ? mode.persistKeys(node.name) : mode.persistKeys;
      if (persist) this.keysDirs.set(node.name, tempDir(`zmesh-keys-${this.cluster.runId}-`, KEYS_TMPFS));
    }
  }

  /** The ztunnel flags of control-plane mode: xDS and CA through the link, token, roots, snapshot. */
  private controlPlaneArgs(node: string): string[] {
    const mode = this.cpMode;
    const cp = this.controlPlane;
    if (!mode || !cp) return [];
    const keys = this.keysDirs.get(node)?.path;
    return [
      '--xds',
      cp.xdsAddress,
      '--token-file',
      join(this.dir, node, 'token'),
      '--roots-file',
      cp.rootsFile,
      '--snapshot',
      join(this.dir, node, 'snapshot.json'),
      ...(keys ? ['--persist-keys', keys] : []),
      ...(mode.xdsBackoff ? ['--xds-backoff', mode.xdsBackoff] : []),
      ...(mode.authzMaxStalenessSeconds
        ? ['--authz-max-staleness', String(mode.authzMaxStalenessSeconds)]
        : []),
    ];
  }

  /**
   * Starts a namespace's waypoint in its pod, as root there (see Cluster.runPrivilegedInPod):
   * xDS and its certificate from the control plane with its node's token, listening on the
   * pod's address. Resolves once it reports ready (config and certificate in hand).
   */
  private async startWaypoint(w: WaypointShape, timeoutMs = 20_000): Promise<void> {
    const cp = this.controlPlane;
    if (!cp) throw new Error('waypoints need the control plane (controlPlane: true)');
    const pod = this.pod(w.pod, w.namespace);
    const gateway = `${w.namespace}/${w.name}`;
    const token = join(this.dir, `waypoint-${w.namespace}-${w.name}.token`);
    await cp.writeNodeToken(pod.node, token);
    const api = this.cpMode?.kubernetes;
    const argv = api
      ? [
          ZMESH_BIN,
          ...(await deploymentArgs(
            api,
            w,
            { POD_IP: pod.ipv4 },
            {
              '--xds': cp.xdsAddress,
              '--token-file': token,
              '--roots-file': cp.rootsFile,
            },
            timeoutMs,
          )),
        ]
      : [
          ZMESH_BIN,
          'waypoint',
          ...['--xds', cp.xdsAddress, '--token-file', token, '--roots-file', cp.rootsFile],
          ...['--gateway', gateway, '--address', pod.ipv4],
        ];
    if (this.options.waypointCpus) argv.unshift('taskset', '-c', this.options.waypointCpus);
    const child = this.cluster.runPrivilegedInPod(pod, argv, {
      reject: false,
      stdin: 'ignore',
      stdout: 'ignore',
      stderr: 'pipe',
      env: { ZMESH_LOG: this.options.ztunnelLog ?? process.env.ZMESH_LOG ?? 'warn' },
    });
    child.stderr?.on('data', (d: Buffer) => process.stderr.write(`[waypoint ${gateway}] ${d}`));
    this.waypoints.set(gateway, child);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const r = await netnsHttp(pod.netnsPath, 15020, '/healthz/ready', 'GET', pod.ipv4).catch(
        () => undefined,
      );
      if (r?.status === 200) return;
      if (child.exitCode !== null) throw new Error(`waypoint ${gateway} exited with ${child.exitCode}`);
      if (Date.now() > deadline) throw new Error(`waypoint ${gateway} not ready after ${timeoutMs} ms`);
      await new Promise((res) => setTimeout(res, 100));
    }
  }

  /** Starts the node's ztunnel; resolves once `synced` ztunnels (itself included) have their snapshot. */
  private async startZtunnel(node: NodeInfo, synced = 1): Promise<void> {
    await mkdir(join(this.dir, node.name), { recursive: true, mode: 0o700 });
    if (this.cpMode?.nodeAgents && !this.nodeAgents.has(node.name)) await this.startNodeAgent(node);
    let agent = this.agents.get(node.name);
    if (!agent && !this.cpMode?.nodeAgents) {
      agent = new ZdsServer({ path: this.zdsSocket(node.name) });
      agent.listen();
      this.agents.set(node.name, agent);
    }
    // Through bin/zmesh, as an operator runs it: the node proxy's heap flags live there.
    const argv = [
      ZMESH_BIN,
      'ztunnel',
      ...(this.controlPlane
        ? this.controlPlaneArgs(node.name)
        : ['--config', join(this.dir, 'mesh.yaml'), '--ca-dir', this.dir]),
      '--node',
      node.name,
      '--address',
      '127.0.0.1',
      '--zds-socket',
      this.zdsSocket(node.name),
      '--cgroup-root',
      this.cluster.cgroupRoot,
      '--capture-scope',
      this.captureScope(node.name),
      ...(this.options.ztunnelArgs ?? []),
    ];
    const cpus = this.options.ztunnelCpus;
    const pin = typeof cpus === 'string' ? cpus : cpus?.[node.name];
    if (pin) argv.unshift('taskset', '-c', pin);
    const child = this.cluster.runInNode(node, argv, {
      reject: false,
      stdin: 'ignore',
      stdout: 'ignore',
      stderr: 'pipe',
      env: {
        ...this.options.ztunnelEnv,
        ZMESH_LOG: this.options.ztunnelLog ?? process.env.ZMESH_LOG ?? 'warn',
      },
    });
    const sink = this.options.ztunnelStderr;
    child.stderr?.on('data', (d: Buffer) =>
      sink ? sink(node.name, d.toString()) : process.stderr.write(`[ztunnel ${node.name}] ${d}`),
    );
    this.ztunnels.set(node.name, child);
    // Connected over ZDS, with the snapshot (the node's enrolled pods, after a restart) acknowledged.
    const exited = child.then(
      (r) => Promise.reject(new Error(`ztunnel on ${node.name} exited with ${r.exitCode}`)),
      (e: unknown) => Promise.reject(e),
    );
    exited.catch(() => {});
    // With node agents, waitReady sees the pods the agent handed over.
    if (agent)
      await Promise.race([synced > 1 ? waitSynced(agent, synced) : agent.waitForClient(15_000), exited]);
  }

  /** `zmesh node-agent` for a node (mesh-processes.ts); resolves once it serves. */
  private async startNodeAgent(node: NodeInfo): Promise<void> {
    const { child, ready } = await spawnNodeAgent({
      node: node.name,
      dir: join(this.dir, node.name),
      kubeconfig: join(this.dir, 'kubeconfig'),
      zdsSocket: this.zdsSocket(node.name),
      logLevel: this.options.ztunnelLog ?? process.env.ZMESH_LOG ?? 'warn',
    });
    this.nodeAgents.set(node.name, child);
    await ready;
  }

  private async writeConfig(): Promise<void> {
    const configured = this.cluster.pods.filter((p) => !(this.options.unconfigured?.(p) ?? false));
    await writeFile(join(this.dir, 'mesh.yaml'), localConfigYaml(configured, this.cluster.pods, this.spec));
  }
}

/** A harness Pod object with the uid its kubelet-style cgroup is named by (`pod<uid>`). */
function withUid(o: KubeObject, pods: readonly PodInfo[]): KubeObject {
  if (o.kind !== 'Pod') return o;
  const pod = pods.find((p) => p.name === o.metadata.name && p.namespace === o.metadata.namespace);
  return pod ? { ...o, metadata: { ...o.metadata, uid: pod.uid } } : o;
}

/** Where the harness's control plane keeps its Lease in controller mode. */
const MESH_CP_NAMESPACE = 'zmesh-system';
