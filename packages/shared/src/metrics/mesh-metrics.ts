import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/**
 * Labels are bounded: workload and namespace names, SPIFFE principals, a response flag
 * and a direction. Never addresses, paths or error messages.
 */
const TCP_LABELS = [
  'reporter',
  'source_workload',
  'source_workload_namespace',
  'source_principal',
  'destination_workload',
  'destination_workload_namespace',
  'destination_principal',
  'response_flags',
  'connection_security_policy',
] as const;

export type TcpLabels = Partial<Record<(typeof TCP_LABELS)[number], string>>;

/**
 * One registry per proxy instance (not the prom-client global), so that several proxies
 * in one test process keep separate counts.
 */
/** prom-client default metrics that aggregate every active handle, resource or request. */
/**
 * Sampling period of the event-loop delay histogram (nodejs_eventloop_lag_p99_seconds and
 * kin). prom-client's default, 10 ms, is a native timer that woke an idle proxy 100 times
 * a second (with ByteFairness's timer, ~1.5% of a core doing nothing). A stall still
 * shows: it delays the next sample by as long.
 */
export const EVENT_LOOP_SAMPLE_MS = 100;

const HANDLE_WALKING_METRICS = [
  'nodejs_active_handles',
  'nodejs_active_handles_total',
  'nodejs_active_resources',
  'nodejs_active_resources_total',
  'nodejs_active_requests',
  'nodejs_active_requests_total',
];

export class MeshMetrics {
  readonly registry: Registry;
  readonly tcpOpened: Counter<(typeof TCP_LABELS)[number]>;
  readonly tcpClosed: Counter<(typeof TCP_LABELS)[number]>;
  readonly tcpSent: Counter<(typeof TCP_LABELS)[number]>;
  readonly tcpReceived: Counter<(typeof TCP_LABELS)[number]>;
  readonly errors: Counter<'code' | 'flag'>;
  readonly hboneSessions: Gauge<'state'>;
  readonly hboneStreams: Gauge;
  readonly tunnelSetup: Histogram<'response_flags'>;

  constructor(
    options: { defaultMetrics?: boolean; prefixLabels?: Record<string, string>; registry?: Registry } = {},
  ) {
    this.registry = options.registry ?? new Registry();
    if (options.prefixLabels) this.registry.setDefaultLabels(options.prefixLabels);
    if (options.defaultMetrics) {
      collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
      // These walk every libuv handle on each scrape: with 8,000 open sockets a scrape held
      // the event loop 19 ms, 8 ms without them. Connections and streams have their own
      // gauges and counters below; process_open_fds stays (fd exhaustion is worth a scrape).
      for (const name of HANDLE_WALKING_METRICS) this.registry.removeSingleMetric(name);
    }
    const r = [this.registry];
    this.tcpOpened = new Counter({
      name: 'istio_tcp_connections_opened_total',
      help: 'TCP connections opened',
      labelNames: TCP_LABELS,
      registers: r,
    });
    this.tcpClosed = new Counter({
      name: 'istio_tcp_connections_closed_total',
      help: 'TCP connections closed',
      labelNames: TCP_LABELS,
      registers: r,
    });
    this.tcpSent = new Counter({
      name: 'istio_tcp_sent_bytes_total',
      help: 'Bytes sent to the destination of a TCP connection',
      labelNames: TCP_LABELS,
      registers: r,
    });
    this.tcpReceived = new Counter({
      name: 'istio_tcp_received_bytes_total',
      help: 'Bytes received from the destination of a TCP connection',
      labelNames: TCP_LABELS,
      registers: r,
    });
    this.errors = new Counter({
      name: 'zmesh_errors_total',
      help: 'Errors by stable code and response flag',
      labelNames: ['code', 'flag'],
      registers: r,
    });
    this.hboneSessions = new Gauge({
      name: 'zmesh_hbone_sessions',
      help: 'HBONE HTTP/2 sessions by state',
      labelNames: ['state'],
      registers: r,
    });
    this.hboneStreams = new Gauge({ name: 'zmesh_hbone_streams', help: 'Open HBONE streams', registers: r });
    this.tunnelSetup = new Histogram({
      name: 'zmesh_tunnel_setup_seconds',
      help: 'Time to establish an outbound tunnel',
      labelNames: ['response_flags'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: r,
    });
  }
}
