import { Counter, Gauge, type Registry } from 'prom-client';
import type { ZmeshError } from '../errors/index.js';
import { responseFlagOf } from '../errors/index.js';
import type { MeshMetrics } from '../metrics/index.js';

/** Bounded reasons a TLS handshake on an HBONE listener failed. */
export type HandshakeFailure = 'no_certificate' | 'untrusted' | 'expired' | 'protocol' | 'timeout' | 'other';

/**
 * HBONE's own series. Registered once per Registry (a ztunnel has one HboneServer per
 * enrolled pod sharing one registry), hence `for()`.
 */
export class HboneMetrics {
  static readonly #byRegistry = new WeakMap<Registry, HboneMetrics>();
  readonly handshakeFailures: Counter<'reason'>;
  readonly inboundSessions: Gauge;
  readonly inboundStreams: Gauge;
  readonly refusedConnections: Counter<'reason'>;
  readonly preauthConnections: Gauge;
  readonly floods: Counter<'kind'>;

  private constructor(registry: Registry) {
    const registers = [registry];
    this.handshakeFailures = new Counter({
      name: 'zmesh_hbone_handshake_failures_total',
      help: 'TLS handshakes refused on HBONE listeners, by bounded reason',
      labelNames: ['reason'],
      registers,
    });
    this.inboundSessions = new Gauge({
      name: 'zmesh_hbone_inbound_sessions',
      help: 'Open HTTP/2 sessions on HBONE listeners',
      registers,
    });
    this.inboundStreams = new Gauge({
      name: 'zmesh_hbone_inbound_streams',
      help: 'Open CONNECT streams on HBONE listeners',
      registers,
    });
    this.refusedConnections = new Counter({
      name: 'zmesh_hbone_refused_connections_total',
      help: 'Connections to HBONE listeners closed before authentication: handshake_timeout, preauth_source, preauth_total, fd_reserve',
      labelNames: ['reason'],
      registers,
    });
    this.preauthConnections = new Gauge({
      name: 'zmesh_hbone_preauth_connections',
      help: 'Connections to HBONE listeners accepted and not yet authenticated (TLS, preface, first SETTINGS)',
      registers,
    });
    this.floods = new Counter({
      name: 'zmesh_hbone_floods_total',
      help: 'HTTP/2 sessions ended with GOAWAY ENHANCE_YOUR_CALM for exceeding a frame limit, by kind',
      labelNames: ['kind'],
      registers,
    });
  }

  static for(registry: Registry): HboneMetrics {
    let m = HboneMetrics.#byRegistry.get(registry);
    if (m === undefined) {
      m = new HboneMetrics(registry);
      HboneMetrics.#byRegistry.set(registry, m);
    }
    return m;
  }
}

/** Counts one error in zmesh_errors_total{code,flag}; a no-op without metrics. */
export function countError(metrics: MeshMetrics | undefined, error: ZmeshError): void {
  metrics?.errors.inc({ code: error.code, flag: responseFlagOf(error) });
}

/** Maps an OpenSSL/Node handshake error to a bounded label. */
export function handshakeFailureOf(error: unknown): HandshakeFailure {
  const e = error as { code?: string; message?: string } | undefined;
  const text = `${e?.code ?? ''} ${e?.message ?? ''}`;
  if (/PEER_DID_NOT_RETURN_A_CERTIFICATE|CERTIFICATE_REQUIRED/i.test(text)) return 'no_certificate';
  if (/EXPIRED/i.test(text)) return 'expired';
  if (/UNKNOWN_CA|VERIFY|SELF_SIGNED|UNABLE_TO_GET_ISSUER|BAD_CERTIFICATE|NOT_YET_VALID|CERT_/i.test(text)) {
    return 'untrusted';
  }
  if (/TIMEOUT|ETIMEDOUT/i.test(text)) return 'timeout';
  if (
    /WRONG_VERSION|UNSUPPORTED_PROTOCOL|HTTPS?_(PROXY_)?REQUEST|VERSION|NO_APPLICATION_PROTOCOL/i.test(text)
  )
    return 'protocol';
  return 'other';
}
