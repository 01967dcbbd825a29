import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import {
  type AccessLog,
  accessLogFields,
  formatHostPort,
  isZmeshError,
  type MeshMetrics,
  newTraceparent,
  responseFlagOf,
  spiffeIdOf,
  type Workload,
  ZmeshError,
} from '@zmesh/shared';
import type { ConnectionTable } from '../forward/connection-table.js';
import { recordClosed, recordOpened, tcpLabels } from '../forward/tcp-metrics.js';
import type { HbonePool } from '../pool/hbone-pool.js';
import type { ProxyState, Route } from '../state/proxy-state.js';
import type { RefusalLog } from '../tenancy/refusal-log.js';
import type { ConnectBucket } from '../tenancy/tenant-quotas.js';
import type { TenantAdmission } from './tenant-admission.js';

export type PassthroughPolicy = 'allow' | 'deny';

export interface OutboundInputs {
  state: () => ProxyState;
  pool: HbonePool;
  metrics: MeshMetrics;
  /** Destinations outside the mesh: plain TCP, or refused. Counted either way. */
  passthrough: PassthroughPolicy;
  tenantOf: (workload: Workload) => string;
  /** Bind tunnels to the source workload's address (explicit mode: it is a local address). */
  bindSource: boolean;
  tenancy: TenantAdmission;
  /** Logs refused connections, at most once per interval per source workload and error code. */
  refusals: RefusalLog;
  /** One line per closed or refused connection, under the source namespace's mode. */
  accessLog: AccessLog;
  /** Live connections, for the admin dump (absent in tests that do not need it). */
  connections?: ConnectionTable;
}

/** Where a connection came from, when that can be told to slow down (a captured pod). */
export interface ConnectOrigin {
  /** The source was refused for its connection rate: `rate` per second with `burst`. */
  overConnectRate(rate: number, burst: number): void;
  /** The source's connect took a token: `bucket` is what its tenant has left. */
  tookConnectToken(bucket: ConnectBucket): void;
}

/**
 * Carries one accepted downstream connection of `source` (attributed by the listener
 * that accepted it, never by anything the client sent) to `destination`.
 */
export async function handleOutbound(
  inputs: OutboundInputs,
  downstream: Socket,
  source: Workload,
  destination: { host: string; port: number },
  origin?: ConnectOrigin,
): Promise<void> {
  const started = Date.now();
  const tenant = inputs.tenantOf(source);
  const admitted = inputs.tenancy.admit(tenant);
  if (!admitted.ok) {
    const limits = connectRateOf(admitted.error);
    if (limits !== undefined) origin?.overConnectRate(limits.rate, limits.burst);
    refuse(inputs, downstream, source, destination, admitted.error);
    return;
  }
  const admission = admitted.value;
  if (admission.bucket) origin?.tookConnectToken(admission.bucket);
  const route = inputs.state().resolve(destination.host, destination.port);
  let upstream: Duplex;
  try {
    if (route instanceof ZmeshError) throw route;
    upstream = await inputs.tenancy.setup(tenant, () => openUpstream(inputs, route, source));
  } catch (e) {
    admission.release();
    refuse(inputs, downstream, source, destination, e);
    return;
  } finally {
    admission.setupDone();
  }
  const target = route as Route;
  const labels = tcpLabels({
    reporter: 'source',
    source,
    destination: target.destination,
    flag: '-',
    mtls: target.kind === 'hbone',
  });
  recordOpened(inputs.metrics, labels);
  inputs.metrics.tunnelSetup.observe({ response_flags: '-' }, (Date.now() - started) / 1000);
  const closed = inputs.connections?.open({
    workload: `${source.namespace}/${source.name}`,
    direction: 'outbound',
    local: formatHostPort(downstream.remoteAddress ?? '', downstream.remotePort ?? 0),
    remote: formatHostPort(
      target.kind === 'hbone' ? target.dial.host : target.target.host,
      target.kind === 'hbone' ? target.dial.port : target.target.port,
    ),
    peer: target.kind === 'hbone' ? target.expectedIdentities.join(',') : '',
    protocol: target.kind === 'hbone' ? 'HBONE' : 'TCP',
    since: Date.now(),
  });
  const copy = await inputs.tenancy.copy(tenant, downstream, upstream).finally(() => closed?.());
  admission.release();
  recordClosed(inputs.metrics, labels, copy);
  const service = inputs.state().serviceByVip(destination.host);
  inputs.accessLog.record(source.namespace, {
    direction: 'outbound',
    src: { ...accessLogFields(source), address: downstream.remoteAddress },
    dst: {
      address: formatHostPort(destination.host, destination.port),
      ...(target.destination ? accessLogFields(target.destination) : {}),
      ...(service ? { service: service.hostname } : {}),
    },
    via: target.kind === 'hbone' ? (target.viaWaypoint ? 'waypoint' : 'hbone') : 'passthrough',
    bytesSent: copy.sent,
    bytesReceived: copy.received,
    durationMs: Date.now() - started,
    result: copy.error ? 'error' : 'ok',
    flag: copy.error ? responseFlagOf(copy.error) : '-',
    ...(copy.error && isZmeshError(copy.error) ? { code: copy.error.code } : {}),
  });
}

async function openUpstream(inputs: OutboundInputs, route: Route, source: Workload): Promise<Duplex> {
  if (route.kind === 'passthrough') {
    if (inputs.passthrough === 'deny' || route.destination) {
      // A known workload that does not speak HBONE is still refused: zmesh never sends a
      // mesh workload's traffic in plaintext.
      throw new ZmeshError('ZM_ERR_ROUTE_NO_DESTINATION', {
        address: formatHostPort(route.target.host, route.target.port),
      });
    }
    return connectPlain(route.target);
  }
  return inputs.pool.openTunnel(
    {
      tenant: inputs.tenantOf(source),
      sourceIdentity: spiffeIdOf(source),
      destinationIdentity: route.expectedIdentities.join(','),
      destinationAddress: formatHostPort(route.dial.host, route.dial.port),
      sourceAddress: inputs.bindSource ? source.addresses[0] : undefined,
    },
    {
      authority: formatHostPort(route.authority.host, route.authority.port),
      // No `forwarded`: the tunnel leaves from the source's own address, and only a
      // waypoint's `forwarded` is believed by the destination.
      baggage: {
        'k8s.namespace.name': source.namespace,
        'k8s.workload.name': source.workloadName,
        'service.name': source.canonicalName,
      },
      traceparent: newTraceparent(),
    },
  );
}

function connectPlain(target: { host: string; port: number }): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: target.host, port: target.port, allowHalfOpen: true, noDelay: true });
    socket.once('connect', () => {
      socket.removeListener('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/** For a connection-rate refusal, the rate and burst that refused it. */
function connectRateOf(error: ZmeshError): { rate: number; burst: number } | undefined {
  const { quota, rate, burst } = error.context;
  if (error.code !== 'ZM_ERR_TENANT_QUOTA' || quota !== 'connect_rate') return undefined;
  if (typeof rate !== 'number' || typeof burst !== 'number') return undefined;
  return { rate, burst };
}

function refuse(
  inputs: OutboundInputs,
  downstream: Socket,
  source: Workload,
  destination: { host: string; port: number },
  error: unknown,
): void {
  const flag = responseFlagOf(error);
  const code = isZmeshError(error) ? error.code : 'ZM_ERR_HBONE_SESSION';
  inputs.metrics.errors.inc({ code, flag });
  inputs.metrics.tcpOpened.inc(tcpLabels({ reporter: 'source', source, flag, mtls: false }));
  inputs.metrics.tcpClosed.inc(tcpLabels({ reporter: 'source', source, flag, mtls: false }));
  const service = inputs.state().serviceByVip(destination.host);
  inputs.accessLog.record(source.namespace, {
    direction: 'outbound',
    src: { ...accessLogFields(source), address: downstream.remoteAddress },
    dst: {
      address: formatHostPort(destination.host, destination.port),
      ...(service ? { service: service.hostname } : {}),
    },
    bytesSent: 0,
    bytesReceived: 0,
    durationMs: 0,
    result: 'refused',
    flag,
    code,
  });
  inputs.refusals.refused(
    source.uid,
    code,
    {
      dir: 'outbound',
      src: spiffeIdOf(source),
      dst: formatHostPort(destination.host, destination.port),
      code,
      flag,
      err: (error as Error).message,
    },
    'connection refused',
  );
  // RST rather than FIN: the client must not mistake a refusal for an empty reply.
  if (!downstream.destroyed) downstream.resetAndDestroy();
}
