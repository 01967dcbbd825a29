import * as http from 'node:http';
import type { Duplex } from 'node:stream';
import { childTraceparent, type ResettableStream, spiffeIdOf, spliceTunnel, ZmeshError } from '@zmesh/shared';
import {
  type Exchange,
  forwardableHeaders,
  responseHeaders,
  type UpgradeRequest,
  upgradeProtocols,
} from '../http/http-exchange.js';
import type { HandlerDeps } from '../http/request-handler.js';
import type { RequestRecord } from '../http/request-record.js';
import { admit, type ForwardPlan, upstreamError } from './forwarder.js';
import { withSocketShims } from './upstream-set.js';

/**
 * An HTTP/1.1 Upgrade (WebSocket and the like) after routing and policy: the request goes to
 * one endpoint over its own HBONE tunnel, through Node's HTTP client, so that the app's answer
 * is parsed, not trusted:
 * - 101 naming a protocol the client asked for: the 101 goes to the client and from then on
 *   the bytes are spliced both ways, outside HTTP;
 * - anything else: an ordinary response, relayed framed, and the client's connection stays
 *   HTTP (`keepParsing`): its next request is read and judged like the first.
 * Never retried: the exchange may become a stream.
 */
export async function forwardUpgrade(
  deps: HandlerDeps,
  ex: Exchange,
  upgrade: UpgradeRequest,
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
  tunnel.once('close', release);
  const asked = upgradeProtocols(ex.header('upgrade'));
  const headers = forwardableHeaders(ex);
  headers.connection = 'upgrade';
  headers.upgrade = ex.header('upgrade') ?? '';
  headers.host = ex.authority;
  headers.traceparent = childTraceparent(ex.header('traceparent'), record.tunnel.traceparent);
  // No `agent`: with one (even `false`) Node ignores createConnection and dials the host itself.
  const up = http.request({
    createConnection: () => withSocketShims(tunnel) as import('node:net').Socket,
    method: ex.method,
    path: ex.target,
    headers,
    setHost: false,
  });
  await new Promise<void>((resolve, reject) => {
    up.once('error', (e) => {
      tunnel.destroy();
      plan.cluster.outlier.record(endpoint.key, true, plan.endpoints.length);
      reject(upstreamError(endpoint, e));
    });
    up.once('upgrade', (res: http.IncomingMessage, _socket: Duplex, bodyHead: Buffer) => {
      plan.cluster.outlier.record(endpoint.key, false, plan.endpoints.length);
      deps.metrics.attempts.inc({ destination_service: plan.serviceName, outcome: 'ok' });
      const offered = upgradeProtocols(res.headers.upgrade);
      if (offered.length === 0 || !offered.every((p) => asked.includes(p))) {
        tunnel.destroy();
        reject(
          new ZmeshError('ZM_ERR_WAYPOINT_UPSTREAM', {
            endpoint: endpoint.key,
            reason: `101 to an upgrade the client did not ask for (${offered.join(',') || 'none'})`,
          }),
        );
        return;
      }
      ex.res.statusCode = 101;
      const client = upgrade.socket;
      client.write(switchingHead(res));
      if (bodyHead.length > 0) client.write(bodyHead);
      if (upgrade.head.length > 0) tunnel.write(upgrade.head);
      client.resume();
      spliceTunnel(tunnel as ResettableStream, client);
      resolve();
    });
    up.once('response', (res: http.IncomingMessage) => {
      plan.cluster.outlier.record(endpoint.key, (res.statusCode ?? 502) >= 500, plan.endpoints.length);
      deps.metrics.attempts.inc({ destination_service: plan.serviceName, outcome: 'ok' });
      relay(ex, upgrade, res, tunnel, record);
      resolve();
    });
    up.end();
  });
}

/** The app's 101, status line and headers as it sent them. */
function switchingHead(res: http.IncomingMessage): string {
  const lines = [`HTTP/1.1 101 ${res.statusMessage || 'Switching Protocols'}`];
  for (let i = 0; i + 1 < res.rawHeaders.length; i += 2)
    lines.push(`${res.rawHeaders[i]}: ${res.rawHeaders[i + 1]}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** The app declined the upgrade: its response goes back framed, and the connection stays HTTP. */
function relay(
  ex: Exchange,
  upgrade: UpgradeRequest,
  res: http.IncomingMessage,
  tunnel: Duplex,
  record: RequestRecord,
): void {
  upgrade.keepParsing = true;
  const out = ex.res as http.ServerResponse;
  out.shouldKeepAlive = true;
  out.writeHead(res.statusCode ?? 502, responseHeaders(res.headers as Record<string, string | string[]>));
  let bytes = 0;
  res.on('data', (c: Buffer) => {
    bytes += c.length;
    if (!out.write(c)) {
      res.pause();
      out.once('drain', () => res.resume());
    }
  });
  res.once('end', () => {
    record.responseBytes = bytes;
    out.end();
    // The tunnel carried one exchange: it is not a pooled connection.
    tunnel.destroy();
  });
  res.once('error', () => {
    tunnel.destroy();
    out.destroy();
  });
}
