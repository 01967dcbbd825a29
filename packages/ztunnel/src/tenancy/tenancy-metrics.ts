import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/**
 * Several schedulers (connect, handshake, stream admission, certificates) and the quota
 * and memory components share one registry; each metric is created once per registry and
 * told apart by a `scheduler` label. Labels are bounded names: scheduler, tenant (a
 * namespace or a validated label value), a quota kind, a reason.
 */
export class SchedulerMetrics {
  readonly queueDepth: Gauge<'scheduler' | 'tenant'>;
  readonly admitted: Counter<'scheduler' | 'tenant'>;
  readonly refused: Counter<'scheduler' | 'tenant' | 'reason'>;
  readonly delay: Histogram<'scheduler' | 'tenant'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.queueDepth = reuse(
      registry,
      'zmesh_tenant_queue_depth',
      () =>
        new Gauge({
          name: 'zmesh_tenant_queue_depth',
          help: 'Work items queued per tenant in a fair scheduler',
          labelNames: ['scheduler', 'tenant'],
          registers,
        }),
    );
    this.admitted = reuse(
      registry,
      'zmesh_tenant_admitted_total',
      () =>
        new Counter({
          name: 'zmesh_tenant_admitted_total',
          help: 'Work items a fair scheduler started, per tenant',
          labelNames: ['scheduler', 'tenant'],
          registers,
        }),
    );
    this.refused = reuse(
      registry,
      'zmesh_tenant_refused_total',
      () =>
        new Counter({
          name: 'zmesh_tenant_refused_total',
          help: 'Work items a fair scheduler did not start (queue_full, aborted), per tenant',
          labelNames: ['scheduler', 'tenant', 'reason'],
          registers,
        }),
    );
    this.delay = reuse(
      registry,
      'zmesh_tenant_scheduler_delay_seconds',
      () =>
        new Histogram({
          name: 'zmesh_tenant_scheduler_delay_seconds',
          help: 'Seconds from enqueue to start in a fair scheduler',
          labelNames: ['scheduler', 'tenant'],
          buckets: [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
          registers,
        }),
    );
  }
}

export class QuotaMetrics {
  readonly refused: Counter<'tenant' | 'quota'>;

  constructor(registry: Registry) {
    this.refused = reuse(
      registry,
      'zmesh_tenant_quota_refused_total',
      () =>
        new Counter({
          name: 'zmesh_tenant_quota_refused_total',
          help: 'Work refused because a tenant was over one of its quotas',
          labelNames: ['tenant', 'quota'],
          registers: [registry],
        }),
    );
  }
}

/** What the memory gauges read when scraped. */
export interface BufferedBytesSource {
  used(): number;
  pressure(): number;
}

/** The source each registry's memory gauges report: the newest guard created on it. */
const bufferedSources = new WeakMap<Registry, BufferedBytesSource>();

export class MemoryMetrics {
  readonly shed: Counter<'tenant'>;

  /**
   * The buffered-bytes gauges are read from `source` at scrape time: the guard's count
   * changes on every chunk copied, and setting a gauge there cost ~1% of a bulk proxy.
   */
  constructor(registry: Registry, source: BufferedBytesSource) {
    const registers = [registry];
    bufferedSources.set(registry, source);
    reuse(
      registry,
      'zmesh_buffered_bytes',
      () =>
        new Gauge({
          name: 'zmesh_buffered_bytes',
          help: 'Bytes buffered by the node proxy for all tenants',
          registers,
          collect() {
            this.set(bufferedSources.get(registry)?.used() ?? 0);
          },
        }),
    );
    reuse(
      registry,
      'zmesh_memory_pressure',
      () =>
        new Gauge({
          name: 'zmesh_memory_pressure',
          help: 'Buffered bytes as a fraction of the node-wide cap (0..1)',
          registers,
          // Every worker reads the same node-wide figure: merged, it is one, not a sum.
          aggregator: 'max',
          collect() {
            this.set(bufferedSources.get(registry)?.pressure() ?? 0);
          },
        }),
    );
    this.shed = reuse(
      registry,
      'zmesh_tenant_shed_total',
      () =>
        new Counter({
          name: 'zmesh_tenant_shed_total',
          help: 'Buffer reservations refused because the tenant was the largest consumer under pressure',
          labelNames: ['tenant'],
          registers,
        }),
    );
  }
}

export class ByteFairnessMetrics {
  readonly pauses: Counter<'tenant' | 'reason'>;
  readonly lag: Gauge;

  constructor(registry: Registry) {
    const registers = [registry];
    this.pauses = reuse(
      registry,
      'zmesh_tenant_read_pauses_total',
      () =>
        new Counter({
          name: 'zmesh_tenant_read_pauses_total',
          help: 'Times a tenant had its reads paused (lag: event loop lag, buffer: buffered-bytes cap)',
          labelNames: ['tenant', 'reason'],
          registers,
        }),
    );
    this.lag = reuse(
      registry,
      'zmesh_event_loop_lag_seconds',
      () =>
        new Gauge({
          name: 'zmesh_event_loop_lag_seconds',
          help: 'Event loop lag seen by the byte-fairness probe at its last tick',
          registers,
        }),
    );
  }
}

function reuse<M>(registry: Registry, name: string, create: () => M): M {
  return (registry.getSingleMetric(name) as M | undefined) ?? create();
}
