import { createHash } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { listenServer, logger, type Workload, ZmeshError } from '@zmesh/shared';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { BpfCapture } from '../capture/bpf-capture.js';
import { OUTBOUND_PORT, POD_ID_PATTERN } from '../capture/bpf-layout.js';
import { listenInNetns, NetnsHandle } from '../capture/netns-listener.js';
import type { AddWorkloadRequest, NodeAgentHandler } from '../capture/node-agent.js';
import { type ConnectOrigin, handleOutbound, type OutboundInputs } from '../outbound/outbound-handler.js';
import type { ProxyState } from '../state/proxy-state.js';
import { RefusalLog } from '../tenancy/refusal-log.js';

const log = logger('capture');

export interface EnrolledPod {
  uid: string;
  netnsPath: string;
  /** The namespace held open while the pod is enrolled (sockets made in it per connection). */
  netns: NetnsHandle;
  cgroupPath: string;
  /** 15001 on 127.0.0.1 and [::1] inside the pod: whatever arrives here is this pod's. */
  outbound: Server[];
  /** Arms the pod's kernel connect throttle when the pod is over its tenant's connect rate. */
  origin: ConnectOrigin;
}

/**
 * How long the kernel keeps throttling a pod's connects after ztunnel last refused it for
 * its connection rate. Meanwhile the connects within its rate and burst reach ztunnel and
 * the others fail with EPERM in the pod; after it, a storm that goes on meets one more
 * refusal in ztunnel, which arms it again.
 */
export const THROTTLE_HOLD_MS = 1000;

export interface CapturedPodsInputs {
  bpf: BpfCapture;
  outbound: OutboundInputs;
  state: () => ProxyState;
  /** True when the pod's workload has a valid certificate (its config is checked here). */
  hasCertificate: (workload: Workload) => boolean;
  /** Called after every enrollment change, so ztunnel reconciles inbound listeners. */
  onChange: () => void;
  registry: Registry;
  /** SO_SNDBUF of captured connections' sockets; kernel autotuning when absent. */
  sendBufferBytes?: number;
}

/**
 * Enrolled pods in capture mode (docs/design.md §6). Capture is attached first and fails closed:
 * from the acknowledgement on, every outbound connect of the pod lands on this pod's own
 * 15001 listener, which refuses it until the pod's configuration and certificate exist.
 * The listener that accepted a connection is the source attribution; the BPF map gives
 * only the original destination.
 */
export class CapturedPods implements NodeAgentHandler {
  private readonly pods = new Map<string, EnrolledPod>();
  private readonly refused: Counter<'reason'>;
  /** A pod connecting in a loop before its config or certificate exists logs once per interval. */
  private readonly refusals = new RefusalLog(undefined, undefined, log);

  constructor(private readonly inputs: CapturedPodsInputs) {
    this.refused = new Counter({
      name: 'zmesh_capture_refused_total',
      help: 'Captured outbound connections refused before any byte left the pod',
      labelNames: ['reason'],
      registers: [inputs.registry],
    });
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

  get(uid: string): EnrolledPod | undefined {
    return this.pods.get(uid);
  }

  uids(): string[] {
    return [...this.pods.keys()];
  }

  async addWorkload(req: AddWorkloadRequest): Promise<void> {
    const existing = this.pods.get(req.uid);
    if (existing && existing.netnsPath === req.netns && existing.cgroupPath === req.cgroup) return;
    if (existing) await this.delWorkload(req.uid);
    await this.inputs.bpf.attach({ id: pinIdOf(req.uid), cgroupPath: req.cgroup, netnsPath: req.netns });
    let pod: EnrolledPod | undefined;
    try {
      pod = {
        uid: req.uid,
        netnsPath: req.netns,
        netns: new NetnsHandle(req.netns),
        cgroupPath: req.cgroup,
        outbound: [],
        origin: {
          overConnectRate: (rate, burst) =>
            this.inputs.bpf.throttle(pinIdOf(req.uid), rate, burst, THROTTLE_HOLD_MS),
          tookConnectToken: ({ rate, burst, tokens }) =>
            this.inputs.bpf.throttle(pinIdOf(req.uid), rate, burst, THROTTLE_HOLD_MS, tokens),
        },
      };
      for (const host of ['127.0.0.1', '::1']) pod.outbound.push(await this.listenOutbound(pod, host));
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
    log.info({ pod: req.uid }, 'pod enrolled');
    this.inputs.onChange();
  }

  async delWorkload(uid: string): Promise<void> {
    const pod = this.pods.get(uid);
    if (!pod) throw new ZmeshError('ZM_ERR_AGENT_UNKNOWN_WORKLOAD', { uid });
    this.pods.delete(uid);
    // Closing stops the pod's accepts at once; its open connections carry on and end on
    // their own. (close()'s callback waits for them: a pod removed with a connection open
    // held the node agent's request until it timed out, and capture stayed attached.)
    for (const s of pod.outbound) s.close();
    pod.netns.close();
    await this.inputs.bpf.detach(pinIdOf(uid));
    log.info({ pod: uid }, 'pod removed');
    this.inputs.onChange();
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
    this.pods.clear();
  }

  private listenOutbound(pod: EnrolledPod, host: string): Promise<Server> {
    const fd = listenInNetns(pod.netns, host, OUTBOUND_PORT, {
      sendBufferBytes: this.inputs.sendBufferBytes,
    });
    const server = createServer({ allowHalfOpen: true, noDelay: true }, (socket) =>
      this.onCaptured(pod, socket),
    );
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

  private onCaptured(pod: EnrolledPod, socket: Socket): void {
    socket.on('error', () => {});
    const destination = this.inputs.bpf.originalDestination(socket);
    const workload = this.inputs.state().workload(pod.uid);
    const refusal = !destination
      ? 'no_original_dst'
      : !workload
        ? 'pending_config'
        : !this.inputs.hasCertificate(workload)
          ? 'pending_certificate'
          : undefined;
    if (refusal || !destination || !workload) {
      this.refuse(socket, pod, refusal ?? 'pending_config');
      return;
    }
    handleOutbound(this.inputs.outbound, socket, workload, destination, pod.origin).catch((e: unknown) => {
      log.error({ pod: pod.uid, err: (e as Error).message }, 'outbound handler failed');
      socket.destroy();
    });
  }

  private refuse(socket: Socket, pod: EnrolledPod, reason: string): void {
    this.refused.inc({ reason });
    this.refusals.refused(pod.uid, reason, { pod: pod.uid, reason }, 'captured connection refused');
    socket.resetAndDestroy();
  }
}

/**
 * The BPF pin name of a workload: its uid when that is a safe file name, else a digest. The
 * control plane's uids (`Kubernetes//Pod/ns/name`) hold slashes; the harness's do not.
 */
export function pinIdOf(uid: string): string {
  return POD_ID_PATTERN.test(uid) ? uid : `w-${createHash('sha256').update(uid).digest('hex').slice(0, 40)}`;
}
