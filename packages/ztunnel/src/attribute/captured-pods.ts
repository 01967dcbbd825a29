import type { Socket } from 'node:net';
import { logger, type Workload } from '@zmesh/shared';
import { Counter, type Registry } from 'prom-client';
import { type ConnectOrigin, handleOutbound, type OutboundInputs } from '../outbound/outbound-handler.js';
import type { ProxyState } from '../state/proxy-state.js';
import { RefusalLog } from '../tenancy/refusal-log.js';

const log = logger('capture');

/** A captured pod as attribution sees it; the capture stage enrolls it and says which pod accepted. */
export interface CapturedPod {
  uid: string;
  /** The uids its workload may have in the configuration, tried in order (the uid when absent). */
  workloadUids?: readonly string[];
  /** Arms the pod's kernel connect throttle when the pod is over its tenant's connect rate. */
  origin: ConnectOrigin;
}

/** The configuration's workload for a captured pod, by the first of its uids the state has. */
export function workloadOf(state: ProxyState, pod: CapturedPod): Workload | undefined {
  for (const uid of pod.workloadUids ?? [pod.uid]) {
    const w = state.workload(uid);
    if (w) return w;
  }
  return undefined;
}

/** Where a captured connection was going (the capture stage reads it from the BPF map). */
export interface CapturedDestination {
  host: string;
  port: number;
}

export interface CapturedPodsInputs {
  outbound: OutboundInputs;
  state: () => ProxyState;
  /**
   * True when the pod's workload holds no valid certificate and its requests for one are
   * failing (the CA is down or refusing): its connections are refused at once. While a
   * first request is under way they wait for it instead (the tunnel's dial does), bounded
   * by the CA client's deadline.
   */
  certificateFailing: (workload: Workload) => boolean;
  registry: Registry;
}

/**
 * Source attribution in capture mode (docs/design.md §6): the pod whose own 15001 listener
 * accepted a connection is its source; the BPF map gives only the original destination.
 * A connection is refused, before any byte leaves the pod, while the pod's configuration is
 * missing or its certificate cannot be had; one that arrives while the pod's first
 * certificate is being issued goes on and waits for it. A successor ztunnel binds a pod's
 * listener beside its predecessor's at once (an upgrade), so the kernel hands it connections
 * before its certificate is back: refusing those broke connections the old one would have
 * carried.
 */
export class CapturedPods {
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
  }

  /** A connection `pod`'s listener accepted, going to `destination` (undefined: not in the map). */
  accept(pod: CapturedPod, socket: Socket, destination: CapturedDestination | undefined): void {
    const state = this.inputs.state();
    const workload = workloadOf(state, pod);
    const refusal = !destination
      ? 'no_original_dst'
      : !workload
        ? 'pending_config'
        : this.inputs.certificateFailing(workload)
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

  private refuse(socket: Socket, pod: CapturedPod, reason: string): void {
    this.refused.inc({ reason });
    this.refusals.refused(pod.uid, reason, { pod: pod.uid, reason }, 'captured connection refused');
    socket.resetAndDestroy();
  }
}
