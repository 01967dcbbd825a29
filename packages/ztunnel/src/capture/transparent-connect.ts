import type { Socket } from 'node:net';
import { canonicalIp, ipFamily, logger } from '@zmesh/shared';
import type { Counter, Registry } from 'prom-client';
import { sourceAddressCounter } from '../forward/app-connector.js';
import { connectInNetns, type NetnsHandle } from './netns-listener.js';
import { REPLY_MARK, type ReplySteering } from './reply-steering.js';
import { SysError } from './sys.js';

const log = logger('inbound');

/** Bound on remembered (pod, reason) pairs already logged at warn; later ones log at debug. */
const MAX_WARNED = 1024;

export interface TransparentPod {
  uid: string;
  netns: NetnsHandle;
  steering: ReplySteering;
}

/**
 * The last hop to the app in a captured pod, from the original client's address: the app's
 * getpeername shows the client (or, through a waypoint, the client the waypoint names), as
 * Istio's ztunnel does. When that cannot be done safely (no reply steering for the family,
 * IP_TRANSPARENT refused, a source of the other family) the connection still goes, from the
 * pod's own address as before, and the fallback is logged and counted with its reason.
 */
export class TransparentConnector {
  readonly connections: Counter<'result' | 'reason'>;
  readonly #warned = new Set<string>();

  constructor(registry: Registry) {
    this.connections = sourceAddressCounter(registry);
  }

  connect(
    pod: TransparentPod,
    host: string,
    port: number,
    source: string | undefined,
    opts: { sendBufferBytes?: number } = {},
  ): Socket {
    const why = this.#refusal(pod, host, source);
    if (why === undefined) {
      try {
        const socket = connectInNetns(pod.netns, host, port, {
          ...opts,
          transparentSource: { host: canonicalIp(source!)!, mark: REPLY_MARK },
        });
        this.connections.inc({ result: 'preserved', reason: '-' });
        return socket;
      } catch (e) {
        this.#fallback(pod, e instanceof SysError ? e.code : 'error', (e as Error).message);
      }
    } else this.#fallback(pod, why.reason, why.detail);
    return connectInNetns(pod.netns, host, port, opts);
  }

  #refusal(
    pod: TransparentPod,
    host: string,
    source: string | undefined,
  ): { reason: string; detail: string } | undefined {
    const src = source === undefined ? undefined : canonicalIp(source);
    if (src === undefined || src === '0.0.0.0' || src === '::')
      return { reason: 'no_source', detail: `source ${source ?? 'unknown'}` };
    const target = canonicalIp(host);
    const family = target === undefined ? undefined : ipFamily(target);
    if (family === undefined || ipFamily(src) !== family)
      return { reason: 'family_mismatch', detail: `source ${src}, app ${host}` };
    const steering = pod.steering.unavailable(family);
    if (steering !== undefined) return { reason: 'no_reply_steering', detail: steering };
    return undefined;
  }

  #fallback(pod: TransparentPod, reason: string, detail: string): void {
    this.connections.inc({ result: 'fallback', reason });
    const key = `${pod.uid}|${reason}`;
    const first = !this.#warned.has(key) && this.#warned.size < MAX_WARNED;
    if (first) this.#warned.add(key);
    (first ? log.warn : log.debug).call(
      log,
      { pod: pod.uid, reason, detail },
      'source address not preserved: the app sees the pod address as the peer',
    );
  }
}
