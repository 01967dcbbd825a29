import { Counter, Gauge, type Registry } from 'prom-client';

/** xDS client health for the SRE (docs/design.md §8, §9): connection, config age, ACK/NACK, pending. */
export class XdsMetrics {
  readonly connected: Gauge;
  readonly disconnectedSeconds: Gauge;
  readonly snapshotAgeSeconds: Gauge;
  readonly acks: Counter<'type'>;
  readonly nacks: Counter<'type'>;
  readonly pendingResources: Gauge;
  readonly streamEnds: Counter<'code'>;
  readonly tlsRefusals: Counter;

  constructor(registry: Registry, sample: { disconnectedSeconds(): number; snapshotAgeSeconds(): number }) {
    const registers = [registry];
    this.connected = new Gauge({
      name: 'zmesh_xds_connected',
      help: '1 while the xDS stream is up',
      registers,
    });
    this.disconnectedSeconds = new Gauge({
      name: 'zmesh_xds_disconnected_seconds',
      help: 'Seconds since the xDS stream went down; 0 while connected',
      registers,
      collect() {
        this.set(sample.disconnectedSeconds());
      },
    });
    this.snapshotAgeSeconds = new Gauge({
      name: 'zmesh_xds_snapshot_age_seconds',
      help: 'Seconds since the active config was last known current (0 while connected)',
      registers,
      collect() {
        this.set(sample.snapshotAgeSeconds());
      },
    });
    this.acks = new Counter({
      name: 'zmesh_xds_acks_total',
      help: 'Responses ACKed',
      labelNames: ['type'],
      registers,
    });
    this.nacks = new Counter({
      name: 'zmesh_xds_nacks_total',
      help: 'Responses NACKed (some resource rejected)',
      labelNames: ['type'],
      registers,
    });
    this.streamEnds = new Counter({
      name: 'zmesh_xds_stream_ends_total',
      help: 'xDS streams ended, by gRPC status name (UNAVAILABLE: control plane unreachable; UNAUTHENTICATED: node token refused)',
      labelNames: ['code'],
      registers,
    });
    this.tlsRefusals = new Counter({
      name: 'zmesh_xds_tls_refusals_total',
      help: 'Control-plane connections refused because its TLS could not be verified (unknown root, wrong name, plaintext server): ZM_ERR_XDS_TLS_REFUSED',
      registers,
    });
    this.pendingResources = new Gauge({
      name: 'zmesh_xds_pending_resources',
      help: 'Accepted resources waiting for a reference (e.g. a waypoint) to arrive',
      registers,
    });
  }
}

/** Bounded metric label for a type URL. */
export function typeLabel(typeUrl: string): string {
  return typeUrl.slice(typeUrl.lastIndexOf('.') + 1);
}
