import type { Duplex } from 'node:stream';
import * as tls from 'node:tls';
import { isZmeshError, ZmeshError } from '../errors/index.js';
import type { Credential } from '../identity/credential.js';
import type { TrustBundle } from '../identity/trust-bundle.js';
import { formatHostPort } from '../net/ip.js';
import { clientTlsOptions, verifyPeerIdentity } from '../tls/mtls.js';
import { H2Connection } from './h2/h2-connection.js';
import { HboneSession } from './hbone-session.js';
import {
  CLIENT_MAX_STREAMS_PER_CONNECTION,
  CONNECTION_WINDOW_BYTES,
  DEFAULT_KEEPALIVE,
  HANDSHAKE_TIMEOUT_MS,
  type KeepaliveTiming,
  localSettings,
  type StreamWindowMode,
} from './hbone-settings.js';

export interface ConnectHboneOptions {
  host: string;
  port: number;
  credential: Credential;
  bundle: TrustBundle;
  /** The server's SVID must name one of these (docs/design.md §4). */
  expectedIdentities: string[];
  localAddress?: string;
  /**
   * Makes the TCP socket TLS runs over, instead of dialling host:port from this namespace.
   * Capture mode opens it inside the source pod's network namespace so the destination
   * sees the pod's own address (docs/design.md §3).
   */
  createSocket?: () => Duplex;
  signal?: AbortSignal;
  /** TLS handshake + the server's first SETTINGS; default HANDSHAKE_TIMEOUT_MS. */
  timeoutMs?: number;
  keepalive?: KeepaliveTiming;
  /** Streams this session carries at most; default CLIENT_MAX_STREAMS_PER_CONNECTION. */
  maxStreams?: number;
  /** How downloads' stream windows are sized; default `shared`. */
  streamWindows?: StreamWindowMode;
}

/**
 * Opens an HBONE session and resolves once the server has accepted us: TLS done, our
 * certificate taken (with TLS 1.3 the client finishes its handshake before the server has
 * judged its certificate, RFC 8446 §4.4.2), shown by the server's SETTINGS arriving.
 */
export function connectHbone(opts: ConnectHboneOptions): Promise<HboneSession> {
  const address = formatHostPort(opts.host, opts.port);
  const cred = opts.credential;
  // docs/design.md §8: an expired certificate refuses new tunnels locally (the server would only
  // drop the connection without saying why, see HboneServer#onHandshakeError).
  if (cred.notAfter.getTime() <= Date.now()) {
    const context = { identity: cred.identity, notAfter: cred.notAfter.toISOString() };
    return Promise.reject(new ZmeshError('ZM_ERR_CERT_EXPIRED', context));
  }
  if (opts.signal?.aborted) {
    return Promise.reject(new ZmeshError('ZM_ERR_HBONE_SESSION', { address, reason: 'aborted' }));
  }
  return awaitAccepted(dial(opts), opts, address);
}

interface Dialed {
  session: H2Connection;
  socket: tls.TLSSocket;
  /** The last error the TLS socket saw: the only trace of a server that closed on us. */
  socketError(): Error | undefined;
}

function dial(opts: ConnectHboneOptions): Dialed {
  let socketError: Error | undefined;
  const tlsOpts = clientTlsOptions(opts.credential, opts.bundle, opts.expectedIdentities);
  const socket = tls
    .connect({
      ...tlsOpts,
      host: opts.host,
      port: opts.port,
      ...(opts.localAddress === undefined ? {} : { localAddress: opts.localAddress }),
      ...(opts.createSocket === undefined ? {} : { socket: opts.createSocket() }),
    })
    .setNoDelay(true) // many streams' small frames share it: no Nagle wait behind an ACK
    .on('error', (e) => {
      socketError = e;
    });
  // The preface and SETTINGS wait in the TLS socket until its handshake is done.
  const session = new H2Connection(socket, {
    role: 'client',
    settings: localSettings(0),
    connectionWindow: CONNECTION_WINDOW_BYTES,
  });
  return { session, socket, socketError: () => socketError };
}

function awaitAccepted(dialed: Dialed, opts: ConnectHboneOptions, address: string): Promise<HboneSession> {
  const { session } = dialed;
  return new Promise((resolve, reject) => {
    const fail = (reason: string, cause?: unknown) => {
      cleanup();
      session.on('error', () => {}); // late socket errors of a session we gave up on
      session.destroy();
      reject(
        isZmeshError(cause) ? cause : new ZmeshError('ZM_ERR_HBONE_SESSION', { address, reason }, { cause }),
      );
    };
    const onError = (e: Error) => fail((e as { code?: string }).code ?? e.message, e);
    const onGoaway = (code: number, _last: number, data?: Buffer) =>
      fail(`server sent GOAWAY ${code}${data?.length ? ` ${data.toString('latin1')}` : ''}`);
    const onClose = () => fail(closeReason(dialed.socketError()), dialed.socketError());
    const onAbort = () => fail('aborted');
    const timer = setTimeout(() => fail('timeout'), opts.timeoutMs ?? HANDSHAKE_TIMEOUT_MS);
    const cleanup = () => {
      clearTimeout(timer);
      session
        .off('error', onError)
        .off('goaway', onGoaway)
        .off('close', onClose)
        .off('remoteSettings', onSettings);
      opts.signal?.removeEventListener('abort', onAbort);
    };
    // A refusing server sends SETTINGS then GOAWAY in one flight: look once more.
    const onSettings = () => setImmediate(accept);
    const accept = () => {
      if (session.destroyed) return;
      if (dialed.socket.alpnProtocol !== 'h2') return fail('server did not select ALPN h2');
      const id = verifyPeerIdentity(dialed.socket, opts.bundle.trustDomain);
      if (!id.ok) return fail(id.error.message, id.error);
      cleanup();
      const keepalive = opts.keepalive ?? DEFAULT_KEEPALIVE;
      const maxStreams = opts.maxStreams ?? CLIENT_MAX_STREAMS_PER_CONNECTION;
      const streamWindows = opts.streamWindows ?? 'shared';
      resolve(
        new HboneSession(session, { peerIdentity: id.value, address, keepalive, maxStreams, streamWindows }),
      );
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    session
      .on('error', onError)
      .on('goaway', onGoaway)
      .on('close', onClose)
      .once('remoteSettings', onSettings);
  });
}

/** With TLS 1.3 a server that refuses our certificate may just close: say so. */
function closeReason(socketError: Error | undefined): string {
  if (socketError === undefined)
    return 'server closed the connection during the handshake (our certificate refused?)';
  return `${(socketError as { code?: string }).code ?? socketError.message} during the handshake`;
}
