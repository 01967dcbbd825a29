import { Readable } from 'node:stream';
import { logger } from '@zmesh/shared';
import type { Endpoint } from '../config/config-view.js';
import { type Exchange, forwardableHeaders } from '../http/http-exchange.js';
import type { BackendCluster } from '../resilience/backend-cluster.js';
import { Cancel } from './cancel.js';
import { RequestBody } from './request-body.js';
import { attempt } from './upstream-attempt.js';
import type { UpstreamSet } from './upstream-set.js';

const log = logger('waypoint');

/** A mirrored request that has not answered by then is abandoned: mirrors never hold resources long. */
const MIRROR_TIMEOUT_MS = 10_000;

/** One RequestMirror target chosen for this request (its percent already drawn). */
export interface MirrorTarget {
  cluster: BackendCluster;
  endpoints: readonly Endpoint[];
  serviceName: string;
}

/**
 * Gateway API RequestMirror: a copy of the request (as the route sends it: rewritten path,
 * modified headers) goes to each mirror backend once the request body is complete; the
 * mirrors' answers are read and dropped, their failures only logged, and the client's
 * response never waits for them. A body larger than the replay buffer is not mirrored
 * (Envoy streams it; here the copy is made from the buffer that retries use).
 */
export function startMirrors(
  ex: Exchange,
  body: RequestBody,
  upstream: UpstreamSet,
  mirrors: readonly MirrorTarget[],
): void {
  const headers = forwardableHeaders(ex);
  const request = { protocol: ex.protocol, method: ex.method, path: ex.target, authority: ex.authority };
  const go = () => {
    const bytes = body.kept();
    if (bytes === undefined) {
      log.debug({ path: ex.path.slice(0, 256) }, 'request body over the replay buffer: not mirrored');
      return;
    }
    for (const m of mirrors) sendMirror(m, upstream, { ...request, headers }, bytes);
  };
  if (ex.req.readableEnded) go();
  else ex.req.once('end', go);
}

function sendMirror(
  m: MirrorTarget,
  upstream: UpstreamSet,
  req: Pick<Exchange, 'protocol' | 'method' | 'authority'> & {
    path: string;
    headers: Record<string, string | string[]>;
  },
  bytes: Buffer,
): void {
  const admission = m.cluster.admitRequest();
  if (!admission.ok) return;
  const endpoint = m.cluster.pick(m.endpoints);
  if (!endpoint) {
    admission.release();
    return;
  }
  const cancel = new Cancel();
  const timer = setTimeout(() => cancel.cancel(), MIRROR_TIMEOUT_MS);
  m.cluster.hostStarted(endpoint.key);
  const done = () => {
    clearTimeout(timer);
    m.cluster.hostEnded(endpoint.key);
    admission.release();
  };
  attempt(upstream, endpoint, {
    ...req,
    body: new RequestBody(Readable.from(bytes.length > 0 ? [bytes] : [])),
    cancel,
    cluster: m.cluster,
  }).then(
    (response) => {
      response.body.once('close', done);
      response.body.on('error', () => {});
      response.body.resume();
    },
    (e: unknown) => {
      done();
      log.debug({ mirror: m.serviceName, err: (e as Error).message }, 'mirrored request failed');
    },
  );
}
