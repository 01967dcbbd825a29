import type { Socket } from 'node:net';
import {
  type AccessLog,
  accessLogFields,
  canonicalIp,
  formatHostPort,
  isZmeshError,
  logger,
  pumpBytes,
  responseFlagOf,
  ZmeshError,
} from '@zmesh/shared';
import { Counter, type Registry } from 'prom-client';
import type { InboundAuthorizer } from '../authz/inbound-authorizer.js';
import type { ConnectionAttributes } from '../authz/policy-match.js';
import type { AppConnector } from '../forward/app-connector.js';
import type { ProxyState } from '../state/proxy-state.js';
import { RESERVED_PORTS } from './inbound-listener.js';

const log = logger('inbound');

type PlaintextResult = 'accepted' | 'denied' | 'refused' | 'upstream_error';

export interface PlaintextInputs {
  state: () => ProxyState;
  /** The last hop to the workload's app (over loopback inside the pod when captured). */
  connectApp: (workloadUid: string) => AppConnector;
  authorizer: InboundAuthorizer;
  accessLog: AccessLog;
  registry: Registry;
}

/**
 * Plaintext arriving at a workload from outside the mesh (not through HBONE), as Istio's
 * ztunnel takes it on 15006: decided by the same L4 authorization as a tunnel, with no peer
 * identity, so PeerAuthentication folded into Authorization decides (docs/peer-authentication.md):
 * STRICT (the static DENY of no identity, zmesh's default) refuses it; PERMISSIVE lets
 * AuthorizationPolicy decide on the source address alone, since no principal, namespace or
 * service-account rule can match a peer without identity. Admitted connections join the
 * authorizer's live set, so a policy change back to STRICT closes them.
 */
export class PlaintextInbound {
  readonly #inputs: PlaintextInputs;
  readonly #counter: Counter<'result'>;
  /** Admitted client sockets still open: a drain waits for them (docs/upgrade.md). */
  readonly #live = new Set<Socket>();

  constructor(inputs: PlaintextInputs) {
    this.#inputs = inputs;
    this.#counter = new Counter({
      name: 'zmesh_inbound_plaintext_total',
      help: 'Plaintext connections from outside the mesh to a workload, by result (PeerAuthentication)',
      labelNames: ['result'],
      registers: [inputs.registry],
    });
  }

  /** Plaintext connections admitted and still open. */
  liveConnections(): number {
    return this.#live.size;
  }

  /** Resets every admitted connection still open (a stop, or a drain's grace passed). */
  closeAll(): void {
    for (const socket of this.#live) socket.resetAndDestroy();
  }

  /** Serves one accepted plaintext socket whose original destination is `dst`; never throws. */
  serve(workloadUid: string, socket: Socket, dst: { host: string; port: number }): void {
    socket.on('error', () => {}); // a reset from the client is the copy's end, not a fault
    this.#serve(workloadUid, socket, dst).catch((e: unknown) => {
      const error = isZmeshError(e)
        ? e
        : new ZmeshError('ZM_ERR_INTERNAL_FAULT', { reason: (e as Error).message }, { cause: e });
      const result: PlaintextResult = error.code.startsWith('ZM_ERR_AUTHZ_')
        ? 'denied'
        : error.code === 'ZM_ERR_HBONE_UPSTREAM_CONNECT'
          ? 'upstream_error'
          : 'refused';
      this.#counter.inc({ result });
      const workload = this.#inputs.state().workload(workloadUid);
      log.debug({ dst: workloadUid, src: socket.remoteAddress, err: error.message }, 'plaintext refused');
      this.#inputs.accessLog.record(workload?.namespace, {
        direction: 'inbound',
        src: { address: socket.remoteAddress },
        dst: { address: formatHostPort(dst.host, dst.port), ...(workload ? accessLogFields(workload) : {}) },
        via: 'plaintext',
        bytesSent: 0,
        bytesReceived: 0,
        durationMs: 0,
        result: 'refused',
        flag: responseFlagOf(error),
        code: error.code,
      });
      socket.resetAndDestroy();
    });
  }

  async #serve(workloadUid: string, socket: Socket, dst: { host: string; port: number }): Promise<void> {
    const workload = this.#inputs.state().workload(workloadUid);
    const target = canonicalIp(dst.host);
    if (
      !workload ||
      target === undefined ||
      !workload.addresses.includes(target) ||
      RESERVED_PORTS.has(dst.port)
    )
      throw new ZmeshError('ZM_ERR_HBONE_UNKNOWN_DESTINATION', {
        authority: formatHostPort(dst.host, dst.port),
      });
    if (workload.status !== 'HEALTHY')
      throw new ZmeshError('ZM_ERR_HBONE_NOT_SERVING', { workload: workload.uid });
    // A workload behind a waypoint takes only the waypoint's tunnels: plaintext would skip L7 policy.
    if (workload.waypoint)
      throw new ZmeshError('ZM_ERR_AUTHZ_WAYPOINT_REQUIRED', {
        workload: workload.uid,
        waypoint: workload.waypoint.hostname?.hostname ?? workload.waypoint.address?.address ?? 'unresolved',
        peer: 'plaintext',
      });
    const attributes: ConnectionAttributes = {
      sourcePrincipal: '',
      sourceIp: canonicalIp(socket.remoteAddress ?? '') ?? '0.0.0.0',
      destinationIp: target,
      destinationPort: dst.port,
    };
    const denial = this.#inputs.authorizer.check(workload, attributes);
    if (denial) throw denial;
    // Also STRICT where the control plane never said otherwise (a local config has no PeerAuthentication).
    if (!this.#inputs.authorizer.acceptsPlaintext(workload)) {
      throw new ZmeshError('ZM_ERR_AUTHZ_DENIED', { policy: 'default STRICT peer authentication' });
    }
    let upstream: Socket;
    try {
      // The app sees the plaintext client's own address too (the redirected socket's peer).
      upstream = await this.#inputs.connectApp(workloadUid)(workload, target, dst.port, attributes.sourceIp);
    } catch (e) {
      throw new ZmeshError(
        'ZM_ERR_HBONE_UPSTREAM_CONNECT',
        { target: formatHostPort(target, dst.port), reason: (e as Error).message },
        { cause: e },
      );
    }
    if (socket.destroyed) {
      upstream.destroy();
      return;
    }
    this.#counter.inc({ result: 'accepted' });
    this.#live.add(socket);
    socket.once('close', () => this.#live.delete(socket));
    const started = Date.now();
    const release = this.#inputs.authorizer.track(workload, attributes, () => {
      socket.resetAndDestroy();
      upstream.destroy();
    });
    upstream.on('error', () => socket.resetAndDestroy());
    socket.on('close', () => upstream.destroy());
    upstream.on('close', () => {
      release();
      socket.destroy();
      this.#inputs.accessLog.record(workload.namespace, {
        direction: 'inbound',
        src: { address: socket.remoteAddress },
        dst: {
          address: formatHostPort(target, dst.port),
          ...accessLogFields(workload),
        },
        via: 'plaintext',
        bytesSent: upstream.bytesWritten,
        bytesReceived: upstream.bytesRead,
        durationMs: Date.now() - started,
        result: 'ok',
        flag: '-',
      });
    });
    pumpBytes(socket, upstream);
    pumpBytes(upstream, socket);
  }
}
