import { Counter, Gauge, type Registry } from 'prom-client';

interface CaptureSource {
  readonly podIds: string[];
  readonly throttledPodIds: string[];
  dropCount(podId: string): number;
  counters(podId: string): { throttled: number } | undefined;
}

/** Capture metrics on the proxy's own registry. Pod ids are bounded names, never addresses. */
export class CaptureMetrics {
  readonly misses: Counter;

  constructor(registry: Registry, source: CaptureSource) {
    const registers = [registry];
    this.misses = new Counter({
      name: 'zmesh_capture_original_dst_misses_total',
      help: 'Captured connections refused because their original destination was not found',
      registers,
    });
    new Gauge({
      name: 'zmesh_capture_pods',
      help: 'Pods with capture programs attached',
      registers,
      collect() {
        this.set(source.podIds.length);
      },
    });
    new Gauge({
      name: 'zmesh_capture_inbound_drops',
      help: 'Packets from outside a pod dropped by strict inbound (since attach)',
      labelNames: ['pod'],
      registers,
      collect() {
        this.reset();
        for (const id of source.podIds) this.set({ pod: id }, source.dropCount(id));
      },
    });
    new Gauge({
      name: 'zmesh_capture_throttled_connects',
      help: "Connects refused in the kernel by the pod connect throttle, which mirrors its tenant's connection-rate bucket (since attach)",
      labelNames: ['pod'],
      registers,
      collect() {
        this.reset();
        for (const id of source.throttledPodIds) this.set({ pod: id }, source.counters(id)?.throttled ?? 0);
      },
    });
  }
}
