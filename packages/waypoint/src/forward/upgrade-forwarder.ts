import type { Duplex } from 'node:stream';
import { childTraceparent, type ResettableStream, spiffeIdOf, spliceTunnel } from '@zmesh/shared';
import type { Exchange } from '../http/http-exchange.js';
import type { HandlerDeps } from '../http/request-handler.js';
import type { RequestRecord } from '../http/request-record.js';
import { admit, type ForwardPlan, upstreamError } from './forwarder.js';

/** Request-head headers that belong to this hop's tunnel and are rewritten here. */
const REWRITTEN = new Set(['traceparent']);

/**
 * An HTTP/1.1 Upgrade (WebSocket and the like) after routing and policy: the request head is
 * written to one endpoint over a raw HBONE tunnel and from then on the bytes are spliced both
 * ways, the endpoint's own 101 (or refusal) included. Never retried: the exchange is a stream.
 */
export async function forwardUpgrade(
  deps: HandlerDeps,
  ex: Exchange,
  upgrade: { socket: Duplex; head: Buffer },
  plan: ForwardPlan,
  record: RequestRecord,
): Promise<void> {
  const admitted = admit(plan, undefined);
  if ('error' in admitted) throw admitted.error;
  const { endpoint, release } = admitted;
  record.endpoint = endpoint.key;
  const w = endpoint.workload;
  record.endpointWorkload = { name: w.workloadName, namespace: w.namespace, principal: spiffeIdOf(w) };
  record.attempts = 1;
  let tunnel: Duplex;
  try {
    tunnel = await record.tunnel.upstream.rawTunnel(endpoint, plan.cluster);
  } catch (e) {
    release();
    plan.cluster.outlier.record(endpoint.key, true, plan.endpoints.length);
    throw upstreamError(endpoint, e);
  }
  plan.cluster.outlier.record(endpoint.key, false, plan.endpoints.length);
  tunnel.write(requestHead(ex, childTraceparent(ex.header('traceparent'), record.tunnel.traceparent)));
  if (upgrade.head.length > 0) tunnel.write(upgrade.head);
  tunnel.once('data', (first: Buffer) => {
    // For the access log and metrics only: the status the endpoint answered the upgrade with.
    const m = /^HTTP\/1\.1 (\d{3}) /.exec(first.subarray(0, 16).toString('latin1'));
    if (m) ex.res.statusCode = Number(m[1]);
  });
  tunnel.once('close', release);
  upgrade.socket.resume();
  spliceTunnel(tunnel as ResettableStream, upgrade.socket);
  deps.metrics.attempts.inc({ destination_service: plan.serviceName, outcome: 'ok' });
}

/** The request line and every header as received (Connection and Upgrade must stay), plus ours. */
function requestHead(ex: Exchange, traceparent: string): string {
  const raw = ex.req.rawHeaders;
  const lines = [`${ex.method} ${ex.rawPath} HTTP/1.1`];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (!REWRITTEN.has(raw[i]!.toLowerCase())) lines.push(`${raw[i]}: ${raw[i + 1]}`);
  }
  lines.push(`traceparent: ${traceparent}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}
