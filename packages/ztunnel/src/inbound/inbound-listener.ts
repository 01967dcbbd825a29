import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import {
  type AccessLog,
  accessLogFields,
  type ConnectionGate,
  type Credential,
  canonicalIp,
  formatHostPort,
  H2ErrorCode,
  HboneServer,
  isZmeshError,
  type KeepaliveTiming,
  logger,
  type MeshMetrics,
  type PreauthLimiter,
  responseFlagOf,
  type StreamWindowMode,
  spiffeIdOf,
  type TrustBundle,
  type TunnelAccept,
  type TunnelRequest,
  type Workload,
  ZmeshError,
} from '@zmesh/shared';
import type { InboundAuthorizer } from '../authz/inbound-authorizer.js';
import type { ConnectionAttributes } from '../authz/policy-match.js';
import type { AppConnector } from '../forward/app-connector.js';
import type { ConnectionTable } from '../forward/connection-table.js';
import { recordClosed, recordOpened, tcpLabels } from '../forward/tcp-metrics.js';
import type { ProxyState } from '../state/proxy-state.js';
import { tenantOf } from '../tenancy/tenant-of.js';

const log = logger('inbound');

/** ztunnel's own ports: never a tunnel target, so a CONNECT cannot loop back into the proxy. */
export const RESERVED_PORTS = new Set([15000, 15001, 15006, 15008, 15020, 15021, 15053]);

export interface InboundInputs {
  workloadUid: string;
  credential: Credential;
  bundle: TrustBundle;
  /** The active state at the moment a tunnel arrives (swapped atomically elsewhere). */
  state: () => ProxyState;
  connectApp: AppConnector;
  metrics: MeshMetrics;
  authorizer: InboundAuthorizer;
  /** Tenant byte fairness for the inbound copy (docs/design.md §7); plain splice when absent. */
  copy?: (tenant: string, stream: Duplex, upstream: Duplex) => void;
  /** Uploads' HTTP/2 stream windows: one budget per session (tenancy) or fixed (`--fairness off`). */
  streamWindows: StreamWindowMode;
  /** One line per closed or refused tunnel, under the destination namespace's mode. */
  accessLog: AccessLog;
  /** The process's bound on unauthenticated connections, shared by every pod's listener. */
  preauth?: PreauthLimiter;
  /** The process's fd reserve: may refuse a new connection. */
  gate?: ConnectionGate;
  handshakeTimeoutMs?: number;
  /** Live connections, for the admin dump. */
  connections?: ConnectionTable;
  /** PING timing of inbound sessions (default DEFAULT_KEEPALIVE). */
  keepalive?: KeepaliveTiming;
}

/** Where one of the workload's 15008 sockets listens: an address, or a socket made elsewhere (in the pod's netns). */
export type ListenTarget = { host: string; port: number } | { fd: number };

/**
 * One workload's HBONE listener: 15008 on each of the workload's addresses, all served by
 * one server with the workload's identity. The authenticated peer identity comes from the
 * TLS handshake, never from headers.
 */
export class InboundListener {
  private readonly server: HboneServer;

  constructor(private readonly inputs: InboundInputs) {
    this.server = new HboneServer({
      credential: inputs.credential,
      bundle: inputs.bundle,
      metrics: inputs.metrics,
      name: inputs.workloadUid,
      onTunnel: (req) => this.onTunnel(req),
      streamWindows: inputs.streamWindows,
      ...(inputs.preauth ? { preauth: inputs.preauth } : {}),
      ...(inputs.gate ? { gate: inputs.gate } : {}),
      ...(inputs.handshakeTimeoutMs ? { handshakeTimeoutMs: inputs.handshakeTimeoutMs } : {}),
      ...(inputs.keepalive ? { keepalive: inputs.keepalive } : {}),
    });
  }

  async listen(targets: readonly ListenTarget[]): Promise<void> {
    for (const target of targets) await this.server.listen(target);
  }

  updateCredential(cred: Credential): void {
    this.server.updateCredential(cred);
  }

  /** GOAWAY and stop accepting; open streams get `graceMs` (default DRAIN_GRACE_MS). */
  drain(graceMs?: number): Promise<void> {
    return this.server.drain(graceMs);
  }

  /** HBONE connections (sessions and handshakes) still open. */
  connectionCount(): number {
    return this.server.connectionCount();
  }

  close(): Promise<void> {
    return this.server.close();
  }

  private async onTunnel(req: TunnelRequest): Promise<TunnelAccept> {
    try {
      return await this.accept(req);
    } catch (e) {
      const workload = this.inputs.state().workload(this.inputs.workloadUid);
      const { host, port } = req.request.authority;
      this.inputs.accessLog.record(workload?.namespace, {
        direction: 'inbound',
        src: { identity: req.peerIdentity, address: req.stream.session?.socket?.remoteAddress },
        dst: { address: formatHostPort(host, port), ...(workload ? accessLogFields(workload) : {}) },
        bytesSent: 0,
        bytesReceived: 0,
        durationMs: 0,
        result: 'refused',
        flag: responseFlagOf(e),
        code: isZmeshError(e) ? e.code : 'ZM_ERR_INTERNAL_FAULT',
      });
      throw e;
    }
  }

  private async accept(req: TunnelRequest): Promise<TunnelAccept> {
    const { host, port } = req.request.authority;
    const workload = this.inputs.state().workload(this.inputs.workloadUid);
    const target = canonicalIp(host);
    if (
      !workload ||
      target === undefined ||
      !workload.addresses.includes(target) ||
      RESERVED_PORTS.has(port)
    ) {
      throw new ZmeshError('ZM_ERR_HBONE_UNKNOWN_DESTINATION', { authority: `${host}:${port}` });
    }
    if (workload.status !== 'HEALTHY')
      throw new ZmeshError('ZM_ERR_HBONE_NOT_SERVING', { workload: workload.uid });
    this.checkWaypoint(workload, req.peerIdentity);
    const attributes: ConnectionAttributes = {
      sourcePrincipal: req.peerIdentity,
      sourceIp: canonicalIp(req.stream.session?.socket?.remoteAddress ?? '') ?? '0.0.0.0',
      destinationIp: target,
      destinationPort: port,
    };
    const denial = this.inputs.authorizer.check(workload, attributes);
    if (denial) throw denial;
    const forwardedFor = this.originalSource(workload, req);
    let upstream: Socket;
    try {
      // The app sees the original client: the waypoint's `forwarded` when it is the
      // destination's own waypoint, else the tunnel's source address.
      upstream = await this.inputs.connectApp(
        workload,
        target,
        port,
        (forwardedFor === undefined ? undefined : forwardedAddress(forwardedFor)) ?? attributes.sourceIp,
      );
    } catch (e) {
      throw new ZmeshError(
        'ZM_ERR_HBONE_UPSTREAM_CONNECT',
        { target: `${host}:${port}`, reason: (e as Error).message },
        { cause: e },
      );
    }
    this.account(workload, req, upstream, forwardedFor);
    const release = this.inputs.authorizer.track(workload, attributes, () => {
      req.stream.close(H2ErrorCode.CANCEL);
      upstream.destroy();
    });
    upstream.on('close', release); // 'close' comes once: on() keeps no once() wrapper per tunnel
    const copy = this.inputs.copy;
    if (!copy) return { upstream };
    // The destination's tenant pays for the bytes delivered to it.
    const tenant = tenantOf(workload);
    return { upstream, copy: (stream, up) => copy(tenant, stream, up) };
  }

  /**
   * A workload behind a waypoint accepts tunnels only from that waypoint's identity
   * (docs/design.md §3): anyone else tunnelling straight here would skip L7 policy. An unresolved
   * waypoint fails closed.
   */
  private checkWaypoint(workload: Workload, peer: string): void {
    if (!workload.waypoint) return;
    const waypoint = this.inputs.state().waypointWorkload(workload.waypoint);
    const expected = waypoint ? spiffeIdOf(waypoint) : 'unresolved';
    if (peer !== expected) {
      throw new ZmeshError('ZM_ERR_AUTHZ_WAYPOINT_REQUIRED', {
        workload: workload.uid,
        waypoint: expected,
        peer,
      });
    }
  }

  /**
   * `forwarded` names the original source only when the destination's own waypoint says
   * so (docs/design.md §3); from any other peer it is ignored and counted, never believed.
   */
  private originalSource(workload: Workload, req: TunnelRequest): string | undefined {
    const claimed = req.request.forwardedFor;
    if (claimed === undefined) return undefined;
    const waypoint = workload.waypoint ? this.inputs.state().waypointWorkload(workload.waypoint) : undefined;
    if (waypoint && spiffeIdOf(waypoint) === req.peerIdentity) return claimed;
    this.inputs.metrics.errors.inc({ code: 'ZM_ERR_HBONE_FORWARDED_IGNORED', flag: '-' });
    log.debug(
      { peer: req.peerIdentity, claimed, dst: workload.uid },
      'forwarded from a non-waypoint peer ignored',
    );
    return undefined;
  }

  /** The HBONE server copies the bytes; the app socket's own counters give the totals. */
  private account(
    workload: Workload,
    req: TunnelRequest,
    upstream: Socket,
    forwardedFor: string | undefined,
  ): void {
    const source = this.inputs.state().workloadByIdentity(req.peerIdentity);
    const labels = tcpLabels({
      reporter: 'destination',
      sourcePrincipal: req.peerIdentity,
      source,
      destination: workload,
      flag: '-',
      mtls: true,
    });
    recordOpened(this.inputs.metrics, labels);
    const started = Date.now();
    const closed = this.inputs.connections?.open({
      workload: `${workload.namespace}/${workload.name}`,
      direction: 'inbound',
      local: formatHostPort(req.request.authority.host, req.request.authority.port),
      remote: formatHostPort(
        req.stream.session?.socket?.remoteAddress ?? '',
        req.stream.session?.socket?.remotePort ?? 0,
      ),
      peer: req.peerIdentity,
      protocol: 'HBONE',
      since: started,
    });
    upstream.on('close', () => {
      closed?.();
      const copy = { sent: upstream.bytesWritten, received: upstream.bytesRead };
      recordClosed(this.inputs.metrics, labels, copy);
      this.inputs.accessLog.record(workload.namespace, {
        direction: 'inbound',
        src: {
          identity: req.peerIdentity,
          address: req.stream.session?.socket?.remoteAddress,
          ...(source ? accessLogFields(source) : {}),
        },
        dst: {
          address: formatHostPort(req.request.authority.host, req.request.authority.port),
          ...accessLogFields(workload),
          service: Object.keys(workload.services ?? {})[0]
            ?.split('/')
            .pop(),
        },
        ...(forwardedFor
          ? { via: 'waypoint' as const, originalSource: forwardedFor }
          : { via: 'hbone' as const }),
        bytesSent: copy.sent,
        bytesReceived: copy.received,
        durationMs: Date.now() - started,
        result: 'ok',
        flag: '-',
      });
    });
  }
}

/**
 * The address in a `forwarded` `for=` node (RFC 7239 §6): `a.b.c.d`, `a.b.c.d:port`,
 * `[v6]` or `[v6]:port`; undefined for an obfuscated or unknown node.
 */
export function forwardedAddress(node: string): string | undefined {
  const v6 = /^\[([^\]]+)\](?::\d+)?$/.exec(node);
  if (v6) return canonicalIp(v6[1]!);
  return canonicalIp(node) ?? canonicalIp(node.replace(/:\d+$/, ''));
}
