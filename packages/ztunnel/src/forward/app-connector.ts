import { connect, type Socket } from 'node:net';
import { canonicalIp, ipFamily, logger, type Workload, whenConnected } from '@zmesh/shared';
import { Counter, type Registry } from 'prom-client';

const log = logger('inbound');

/**
 * Opens the last hop to a local application. Explicit-proxy mode connects over the
 * host's network to the workload's own address (localSourceAppConnector); capture mode
 * replaces this with a socket created inside the pod's network namespace, from the source
 * address (TransparentConnector).
 */
export type AppConnector = (
  workload: Workload,
  host: string,
  port: number,
  /** The original client's address (the tunnel's source, or what the waypoint names). */
  source?: string,
) => Promise<Socket>;

export const loopbackAppConnector: AppConnector = (_workload, host, port) =>
  whenConnected(connect({ host, port, allowHalfOpen: true, noDelay: true }));

/** zmesh_inbound_source_address_total: whether the app saw the original client. One per registry. */
export function sourceAddressCounter(registry: Registry): Counter<'result' | 'reason'> {
  return new Counter({
    name: 'zmesh_inbound_source_address_total',
    help: 'Connections to local apps by whether the app saw the original client address (result=preserved) or ztunnel fell back to its own address (result=fallback, with the reason)',
    labelNames: ['result', 'reason'],
    registers: [registry],
  });
}

/**
 * Explicit-proxy mode (no capture, no pod netns): the app is reached over the host's own
 * network, so ztunnel can connect from the original client's address only where that
 * address is the host's own (a bind elsewhere fails with EADDRNOTAVAIL), as when the
 * client's workload runs on this host; replies then come back to ztunnel's socket with no
 * steering. Anywhere else the app sees ztunnel's address, counted as a fallback with the
 * reason. No IP_TRANSPARENT here: with no pod to hold them, the replies to a foreign
 * address would leave the host.
 */
export function localSourceAppConnector(counter: Counter<'result' | 'reason'>): AppConnector {
  return async (_workload, host, port, source) => {
    const src = source === undefined ? undefined : canonicalIp(source);
    const target = canonicalIp(host);
    let reason = 'no_source';
    if (src !== undefined && src !== '0.0.0.0' && src !== '::' && target !== undefined) {
      reason = 'family_mismatch';
      if (ipFamily(src) === ipFamily(target)) {
        try {
          const socket = await whenConnected(
            connect({ host, port, localAddress: src, allowHalfOpen: true, noDelay: true }),
          );
          counter.inc({ result: 'preserved', reason: '-' });
          return socket;
        } catch (e) {
          const code = (e as NodeJS.ErrnoException).code;
          if (code !== 'EADDRNOTAVAIL') throw e;
          reason = 'not_local';
          log.debug({ source: src, app: host }, 'source not an address of this host: the app sees ztunnel');
        }
      }
    }
    counter.inc({ result: 'fallback', reason });
    return loopbackAppConnector(_workload, host, port);
  };
}
