import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** Istio's request metric labels; all bounded (names, principals, codes, flags), never paths. */
const REQUEST_LABELS = [
  'reporter',
  'source_workload',
  'source_workload_namespace',
  'source_principal',
  'destination_workload',
  'destination_workload_namespace',
  'destination_principal',
  'destination_service',
  'destination_service_name',
  'destination_service_namespace',
  'request_protocol',
  'response_code',
  'grpc_response_status',
  'response_flags',
] as const;

const MS_BUCKETS = [0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000];
const BYTE_BUCKETS = [1, 10, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000];

/** The waypoint's metrics, on the registry it is given (never prom-client's global one). */
export class WaypointMetrics {
  readonly requests: Counter<(typeof REQUEST_LABELS)[number]>;
  readonly duration: Histogram<(typeof REQUEST_LABELS)[number]>;
  readonly requestBytes: Histogram<(typeof REQUEST_LABELS)[number]>;
  readonly responseBytes: Histogram<(typeof REQUEST_LABELS)[number]>;
  readonly attempts: Counter<'destination_service' | 'outcome'>;
  readonly retries: Counter<'destination_service' | 'result'>;
  readonly ejections: Counter<'destination_service'>;
  readonly ejected: Gauge<'destination_service'>;
  readonly badRequests: Counter<'protocol' | 'reason'>;
  readonly tunnels: Counter<'protocol'>;
  readonly configApplied: Counter<'result'>;
  readonly jwt: Counter<'result'>;

  constructor(registry: Registry) {
    const registers = [registry];
    const labelNames = REQUEST_LABELS;
    this.requests = new Counter({
      name: 'istio_requests_total',
      help: 'Requests handled',
      labelNames,
      registers,
    });
    this.duration = new Histogram({
      name: 'istio_request_duration_milliseconds',
      help: 'Request duration',
      labelNames,
      buckets: MS_BUCKETS,
      registers,
    });
    this.requestBytes = new Histogram({
      name: 'istio_request_bytes',
      help: 'Request body bytes',
      labelNames,
      buckets: BYTE_BUCKETS,
      registers,
    });
    this.responseBytes = new Histogram({
      name: 'istio_response_bytes',
      help: 'Response body bytes',
      labelNames,
      buckets: BYTE_BUCKETS,
      registers,
    });
    this.jwt = new Counter({
      name: 'zmesh_waypoint_jwt_total',
      help: 'Requests under a RequestAuthentication, by token outcome: valid, invalid (401), missing',
      labelNames: ['result'],
      registers,
    });
    this.attempts = new Counter({
      name: 'zmesh_waypoint_upstream_attempts_total',
      help: 'Upstream attempts, first tries and retries, by outcome',
      labelNames: ['destination_service', 'outcome'],
      registers,
    });
    this.retries = new Counter({
      name: 'zmesh_waypoint_retries_total',
      help: 'Retry decisions: attempted, or refused by the budget',
      labelNames: ['destination_service', 'result'],
      registers,
    });
    this.ejections = new Counter({
      name: 'zmesh_waypoint_outlier_ejections_total',
      help: 'Hosts ejected',
      labelNames: ['destination_service'],
      registers,
    });
    this.ejected = new Gauge({
      name: 'zmesh_waypoint_outlier_ejected_hosts',
      help: 'Hosts ejected now',
      labelNames: ['destination_service'],
      registers,
    });
    this.badRequests = new Counter({
      name: 'zmesh_waypoint_bad_requests_total',
      help: 'Malformed or hostile HTTP refused',
      labelNames: ['protocol', 'reason'],
      registers,
    });
    this.tunnels = new Counter({
      name: 'zmesh_waypoint_tunnels_total',
      help: 'Tunnels accepted, by detected protocol',
      labelNames: ['protocol'],
      registers,
    });
    this.configApplied = new Counter({
      name: 'zmesh_waypoint_config_total',
      help: 'Config updates',
      labelNames: ['result'],
      registers,
    });
  }
}
