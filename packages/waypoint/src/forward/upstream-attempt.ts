import * as http from 'node:http';
import type { IncomingHttpHeaders } from 'node:http2';
import type { Readable } from 'node:stream';
import { isZmeshError } from '@zmesh/shared';
import type { Endpoint } from '../config/config-view.js';
import type { Cancel } from './cancel.js';
import type { RequestBody } from './request-body.js';
import type { ConnectionCounter, UpstreamSet } from './upstream-set.js';

/** `overflow`: refused locally by a breaker (no host was tried; never retried or held against a host). */
export type AttemptFailure = 'connect-failure' | 'reset' | 'timeout' | 'overflow';

export class AttemptError extends Error {
  constructor(
    readonly kind: AttemptFailure,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface AttemptRequest {
  protocol: 'h1' | 'h2';
  method: string;
  /** Path with query, as received. */
  path: string;
  authority: string;
  headers: Record<string, string | string[]>;
  body: RequestBody;
  /** Stops the attempt (downstream gone, or its time is up). */
  cancel: Cancel;
  cluster: ConnectionCounter;
}

export interface AttemptResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: Readable;
  /** Trailers, known once body has ended. */
  trailers(): Record<string, string | string[]> | undefined;
  abort(): void;
}

export function attempt(set: UpstreamSet, endpoint: Endpoint, req: AttemptRequest): Promise<AttemptResponse> {
  return req.protocol === 'h1' ? attemptH1(set, endpoint, req) : attemptH2(set, endpoint, req);
}

function attemptH1(set: UpstreamSet, endpoint: Endpoint, req: AttemptRequest): Promise<AttemptResponse> {
  return new Promise((resolve, reject) => {
    let connected = false;
    const up = http.request({
      agent: set.agent(endpoint, req.cluster),
      host: endpoint.address,
      port: endpoint.port,
      method: req.method,
      path: req.path,
      headers: { ...req.headers, host: req.authority },
      setHost: false,
    });
    const stopWatching = req.cancel.onCancel(() =>
      up.destroy(new AttemptError('timeout', 'attempt aborted')),
    );
    up.once('socket', () => {
      connected = true;
    });
    up.once('error', (e) => {
      req.body.detach(up);
      stopWatching();
      reject(e instanceof AttemptError ? e : attemptErrorOf(e, connected ? 'reset' : 'connect-failure'));
    });
    up.once('response', (res) => {
      stopWatching();
      resolve({
        status: res.statusCode ?? 502,
        headers: res.headers as Record<string, string | string[]>,
        body: res,
        trailers: () =>
          Object.keys(res.trailers).length > 0 ? (res.trailers as Record<string, string>) : undefined,
        abort: () => up.destroy(),
      });
    });
    req.body.attach(up);
  });
}

async function attemptH2(
  set: UpstreamSet,
  endpoint: Endpoint,
  req: AttemptRequest,
): Promise<AttemptResponse> {
  let lease: Awaited<ReturnType<UpstreamSet['h2Session']>>;
  try {
    lease = await set.h2Session(endpoint, req.cluster);
  } catch (e) {
    throw attemptErrorOf(e, 'connect-failure');
  }
  return new Promise((resolve, reject) => {
    const stream = lease.session.request(
      {
        ...req.headers,
        ':method': req.method,
        ':path': req.path,
        ':authority': req.authority,
        ':scheme': 'http',
      },
      { endStream: false },
    );
    let trailers: Record<string, string | string[]> | undefined;
    stream.once('close', lease.done);
    stream.once('trailers', (t: IncomingHttpHeaders) => {
      trailers = stripPseudo(t);
    });
    const stopWatching = req.cancel.onCancel(() =>
      stream.destroy(new AttemptError('timeout', 'attempt aborted')),
    );
    const fail = (e: Error) => {
      req.body.detach(stream);
      stopWatching();
      reject(e instanceof AttemptError ? e : new AttemptError('reset', e.message, { cause: e }));
    };
    stream.once('error', fail);
    const onEarlyClose = () =>
      fail(new AttemptError('reset', `stream closed before response (code ${stream.rstCode})`));
    stream.once('close', onEarlyClose);
    stream.once('response', (headers) => {
      stream.off('close', onEarlyClose).off('error', fail);
      stream.on('error', () => {});
      stopWatching();
      resolve({
        status: Number(headers[':status']),
        headers: stripPseudo(headers),
        body: stream,
        trailers: () => trailers,
        abort: () => stream.close(http2Cancel),
      });
    });
    req.body.attach(stream);
  });
}

const http2Cancel = 0x8;

function attemptErrorOf(e: unknown, kind: AttemptFailure): AttemptError {
  const overflow = isZmeshError(e, 'ZM_ERR_WAYPOINT_OVERFLOW');
  return new AttemptError(overflow ? 'overflow' : kind, (e as Error).message, { cause: e });
}

function stripPseudo(h: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h))
    if (!k.startsWith(':') && v !== undefined) out[k] = v as string | string[];
  return out;
}
