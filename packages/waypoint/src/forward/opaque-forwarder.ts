import type { Duplex } from 'node:stream';
import {
  logger,
  type ResettableStream,
  type Service,
  serviceKey,
  spiffeIdOf,
  spliceTunnel,
} from '@zmesh/shared';
import { authorize } from '../authz/l7-authorizer.js';
import { endpointOf } from '../config/config-view.js';
import type { HandlerDeps, TunnelContext } from '../http/request-handler.js';
import type { TunnelPool } from './tunnel-pool.js';

const log = logger('waypoint');

/**
 * A tunnel that is not HTTP: L4 rules only (AuthzMode 'tcp'), then the bytes go to one
 * endpoint, chosen by the service's load balancer, over HBONE with the waypoint's identity.
 */
export async function forwardOpaque(
  deps: HandlerDeps,
  tunnels: TunnelPool,
  hbonePort: number,
  ctx: TunnelContext,
  inner: Duplex,
  service: Service | undefined,
): Promise<void> {
  const view = deps.view();
  const { host, port } = ctx.authority;
  const dest = view.destination(host, port);
  const svc = dest?.service ?? service;
  const decision = authorize(
    view.policies,
    {
      principal: ctx.peerIdentity,
      port,
      ...(svc ? { service: `${svc.namespace}/${svc.name}` } : {}),
      ...(ctx.sourceIp ? { sourceIp: ctx.sourceIp } : {}),
      ...(ctx.destinationIp ? { destinationIp: ctx.destinationIp } : {}),
    },
    'tcp',
  );
  if (!dest || !decision.allowed) {
    log.info(
      {
        src: ctx.peerIdentity,
        dst: `${host}:${port}`,
        policy: decision.allowed ? undefined : decision.policy,
        ...(decision.audit ? { audit: decision.audit } : {}),
      },
      'tcp refused',
    );
    inner.destroy();
    return;
  }
  const key = svc ? serviceKey(svc) : `workload/${dest.kind === 'workload' ? dest.workload.uid : '?'}`;
  const cluster = deps.cluster(key, svc, view);
  const endpoints =
    dest.kind === 'workload'
      ? [endpointOf(dest.workload, dest.port)]
      : view.endpoints(dest.service, dest.port.servicePort);
  const endpoint = cluster.pick(endpoints);
  if (!endpoint) {
    inner.destroy();
    return;
  }
  const w = endpoint.workload;
  try {
    const tunnel = await tunnels.open(
      {
        address: endpoint.address,
        hbonePort,
        identity: spiffeIdOf(w),
      },
      {
        authority: endpoint.key,
        ...(ctx.forwardedFor ? { forwardedFor: ctx.forwardedFor } : {}),
        ...(ctx.traceparent ? { traceparent: ctx.traceparent } : {}),
      },
    );
    cluster.outlier.record(endpoint.key, false, endpoints.length);
    const started = deps.clock.now();
    spliceTunnel(tunnel as ResettableStream, inner, (stats) =>
      log.info(
        { src: ctx.peerIdentity, upstream: endpoint.key, ...stats, ms: deps.clock.now() - started },
        'tcp closed',
      ),
    );
  } catch (e) {
    cluster.outlier.record(endpoint.key, true, endpoints.length);
    log.info(
      { src: ctx.peerIdentity, upstream: endpoint.key, err: (e as Error).message },
      'tcp upstream failed',
    );
    inner.destroy();
  }
}
