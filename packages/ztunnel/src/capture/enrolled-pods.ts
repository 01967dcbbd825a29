import { createHash } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { listenServer, logger, ZmeshError } from '@zmesh/shared';
import { Gauge, type Registry } from 'prom-client';
import type { CapturedPod } from '../attribute/captured-pods.js';
import type { BpfCapture } from './bpf-capture.js';
import { type OriginalDestination, OUTBOUND_PORT, POD_ID_PATTERN } from './bpf-layout.js';
import { enableRequestMigration, listenInNetns, NetnsHandle } from './netns-listener.js';
import { netnsIdentity } from './pod-cgroup.js';
import { ReplySteering, type SteeringChange } from './reply-steering.js';
import type { AddWorkloadRequest, WorkloadHandler } from './zds-client.js';

const log = logger('capture');

export interface EnrolledPod extends CapturedPod {
  /** The namespace's identity (`net:[inode]`): a re-Add naming the same one changes nothing. */
  netnsId: string;
  workloadUids: string[];
  /** The namespace held open while the pod is enrolled (sockets made in it per connection). */
  netns: NetnsHandle;
  cgroupPath: string;
  /** 15001 on 127.0.0.1 and [::1] inside the pod: whatever arrives here is this pod's. */
  outbound: Server[];
  /** Policy routing that keeps the app's replies to a preserved client address inside the pod. */
  steering: ReplySteering;
}

/**
 * How long the kernel keeps throttling a pod's connects after ztunnel last refused it for
 * its connection rate. Meanwhile the connects within its rate and burst reach ztunnel and
 * the others fail with EPERM in the pod; after it, a storm that goes on meets one more
 * refusal in ztunnel, which arms it again.
 */
const THROTTLE_HOLD_MS = 1000;

export interface EnrolledPodsInputs {
  bpf: BpfCapture;
  /**
   * Every connection a pod's 15001 listener accepts, with its original destination (from
   * the BPF map; undefined when the map has none): the attribute stage takes it from here.
   */
  onCaptured: (pod: EnrolledPod, socket: Socket, destination: OriginalDestination | undefined) => void;
  /** Called after every enrollment change, so ztunnel reconciles inbound listeners. */
  onChange: () => void;
  registry: Registry;
  /** SO_SNDBUF of captured connections' sockets; kernel autotuning when absent. */
  sendBufferBytes?: number;
  /** Changes a pod's reply-steering rule and route (tests replace it). */
  steeringChange?: SteeringChange;
}

/**
 * Enrolled pods in capture mode (docs/design.md §6), as the node agent adds and removes them.
 * Capture is attached first and fails closed: from the acknowledgement on, every outbound
 * connect of the pod lands on this pod's own 15001 listener, whose connections go to the
 * attribute stage (`onCaptured`), which refuses them until the pod's configuration and
 * certificate exist.
 */
export class EnrolledPods implements WorkloadHandler {
  private readonly pods = new Map<string, EnrolledPod>();
  /** Pods by the uid their workload has in the configuration, where that is another name. */
  private readonly byWorkload = new Map<string, EnrolledPod>();
  /** Captured connections still open (a drain waits for them). */
  private readonly live = new Set<Socket>();

  constructor(private readonly inputs: EnrolledPodsInputs) {
    const pods = this.pods;
    new Gauge({
      name: 'zmesh_pods_enrolled',
      help: 'Pods enrolled through the node agent',
      registers: [inputs.registry],
      collect() {
        this.set(pods.size);
      },
    });
  }

  /** A pod by its ZDS uid or by its workload's uid in the configuration. */
  get(uid: string): EnrolledPod | undefined {
    return this.pods.get(uid) ?? this.byWorkload.get(uid);
  }

  has(uid: string): boolean {
    return this.pods.has(uid);
  }

  list(): EnrolledPod[] {
    return [...this.pods.values()];
  }

  uids(): string[] {
    return [...this.pods.keys()];
  }

  async addWorkload(req: AddWorkloadRequest): Promise<void> {
    const existing = this.pods.get(req.uid);
    const netnsId = netnsIdentity(req.netns);
    if (existing && existing.netnsId === netnsId && existing.cgroupPath === req.cgroup) return;
    if (existing) await this.delWorkload(req.uid);
    await this.inputs.bpf.attach({ id: pinIdOf(req.uid), cgroupPath: req.cgroup, netnsPath: req.netns });
    let pod: EnrolledPod | undefined;
    try {
      const netns = new NetnsHandle(req.netns);
      pod = {
        uid: req.uid,
        workloadUids: workloadUidsOf(req),
        netnsId,
        netns,
        steering: new ReplySteering({
          netns,
          pod: req.uid,
          ...(this.inputs.steeringChange ? { change: this.inputs.steeringChange } : {}),
        }),
        cgroupPath: req.cgroup,
        outbound: [],
        origin: {
          overConnectRate: (rate, burst) =>
            this.inputs.bpf.throttle(pinIdOf(req.uid), rate, burst, THROTTLE_HOLD_MS),
          tookConnectToken: ({ rate, burst, tokens }) =>
            this.inputs.bpf.throttle(pinIdOf(req.uid), rate, burst, THROTTLE_HOLD_MS, tokens),
        },
      };
      // Before listening, so a drain that closes these listeners hands queued connects over.
      if (!enableRequestMigration(netns))
        log.warn({ pod: req.uid }, 'tcp_migrate_req unavailable: a drain may reset queued connects');
      for (const host of ['127.0.0.1', '::1']) pod.outbound.push(await this.listenOutbound(pod, host));
      // Not fatal: without it the app sees the pod's own address as the peer (counted).
      pod.steering.install();
    } catch (e) {
      for (const s of pod?.outbound ?? []) s.close();
      pod?.netns.close();
      // Capture stays attached: the pod is cut off (fail closed) rather than uncaptured.
      throw new ZmeshError(
        'ZM_ERR_CAPTURE_NETNS',
        { netns: req.netns, reason: (e as Error).message },
        { cause: e },
      );
    }
    this.pods.set(req.uid, pod);
    for (const w of pod.workloadUids) if (w !== req.uid) this.byWorkload.set(w, pod);
    log.info({ pod: req.uid }, 'pod enrolled');
    this.inputs.onChange();
  }

  async delWorkload(uid: string): Promise<void> {
    const pod = this.pods.get(uid);
    if (!pod) throw new ZmeshError('ZM_ERR_AGENT_UNKNOWN_WORKLOAD', { uid });
    this.pods.delete(uid);
    for (const w of pod.workloadUids) if (this.byWorkload.get(w) === pod) this.byWorkload.delete(w);
    // Closing stops the pod's accepts at once; its open connections carry on and end on
    // their own. (close()'s callback waits for them: a pod removed with a connection open
    // held the node agent's request until it timed out, and capture stayed attached.)
    for (const s of pod.outbound) s.close();
    pod.steering.remove(); // while the namespace is still held open
    pod.netns.close();
    await this.inputs.bpf.detach(pinIdOf(uid));
    log.info({ pod: uid }, 'pod removed');
    this.inputs.onChange();
  }

  /** Captured connections still open. */
  liveConnections(): number {
    return this.live.size;
  }

  /**
   * A drain's first step: the pods' 15001 listeners close, so the kernel sends new connects
   * to the successor's listeners (SO_REUSEPORT) and migrates queued ones; open connections,
   * capture and the namespaces stay until close().
   */
  stopAccepting(): void {
    for (const pod of this.pods.values()) for (const s of pod.outbound) s.close();
  }

  /** The agent's full list: pods not in it are removed. */
  async snapshot(uids: string[]): Promise<void> {
    const keep = new Set(uids);
    for (const uid of this.uids()) if (!keep.has(uid)) await this.delWorkload(uid);
  }

  /**
   * Closes ztunnel's listeners but leaves capture attached: while no ztunnel runs, the
   * pods' connects are refused (nothing listens on 15001), never sent uncaptured. A new
   * ztunnel adopts the attachments.
   */
  async close(): Promise<void> {
    for (const pod of this.pods.values()) {
      for (const s of pod.outbound) s.close();
      pod.netns.close();
    }
    // Reply steering stays, like capture: it routes only packets carrying ztunnel's mark,
    // which no pod can set, and a successor ztunnel already serving these pods (an
    // upgrade's overlap) relies on it. It goes when the pod is removed.
    this.pods.clear();
    this.byWorkload.clear();
  }

  private listenOutbound(pod: EnrolledPod, host: string): Promise<Server> {
    const fd = listenInNetns(pod.netns, host, OUTBOUND_PORT, {
      sendBufferBytes: this.inputs.sendBufferBytes,
    });
    const server = createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
      socket.on('error', () => {});
      this.live.add(socket);
      socket.once('close', () => this.live.delete(socket));
      this.inputs.onCaptured(pod, socket, this.inputs.bpf.originalDestination(socket));
    });
    // A listen that fails rejects (the pod's enrolment fails closed) instead of never resolving.
    return listenServer(
      server,
      { fd },
      {
        name: `captured outbound (${pod.uid}, ${host}:${OUTBOUND_PORT})`,
        onError: (e) => log.error({ pod: pod.uid, err: e.message }, 'outbound listener error'),
      },
    ).then(() => server);
  }
}

/**
 * The uids the pod's workload may have in the configuration: the ZDS uid itself (the
 * harness's config file), then Istio's `Kubernetes//Pod/<ns>/<name>` from the WorkloadInfo
 * the agent sent (the control plane's).
 */
function workloadUidsOf(req: AddWorkloadRequest): string[] {
  const info = req.info;
  return info?.name && info.namespace
    ? [req.uid, `Kubernetes//Pod/${info.namespace}/${info.name}`]
    : [req.uid];
}

/**
 * The BPF pin name of a workload: its uid when that is a safe file name, else a digest. The
 * control plane's uids (`Kubernetes//Pod/ns/name`) hold slashes; the harness's do not.
 */
function pinIdOf(uid: string): string {
  return POD_ID_PATTERN.test(uid) ? uid : `w-${createHash('sha256').update(uid).digest('hex').slice(0, 40)}`;
}
