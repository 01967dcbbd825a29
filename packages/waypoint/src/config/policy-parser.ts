import type { FieldReader } from '@zmesh/shared';
import { type BackendPolicy, DEFAULT_CIRCUIT_BREAKER, DEFAULT_OUTLIER } from './waypoint-config.js';

export function readBackendPolicy(r: FieldReader, value: unknown, path: string): BackendPolicy | undefined {
  const o = r.object(value, path);
  if (!o) return undefined;
  r.onlyKeys(o, path, ['service', 'loadBalancer', 'circuitBreaker', 'outlierDetection']);
  const service = r.string(o.service, `${path}.service`, { pattern: /^[^/]+\/[^/]+$/ }) ?? '';
  const cb = r.optionalObject(o.circuitBreaker, `${path}.circuitBreaker`) ?? {};
  r.onlyKeys(cb, `${path}.circuitBreaker`, ['maxConnections', 'maxPendingRequests', 'maxRequests']);
  const od = r.optionalObject(o.outlierDetection, `${path}.outlierDetection`) ?? {};
  r.onlyKeys(od, `${path}.outlierDetection`, [
    'consecutive5xx',
    'interval',
    'baseEjectionTime',
    'maxEjectionTime',
    'maxEjectionPercent',
  ]);
  const big = 1_000_000;
  const d = DEFAULT_CIRCUIT_BREAKER;
  const e = DEFAULT_OUTLIER;
  return {
    service,
    loadBalancer: r.oneOf(
      o.loadBalancer,
      `${path}.loadBalancer`,
      ['ROUND_ROBIN', 'LEAST_REQUEST'] as const,
      'ROUND_ROBIN',
    ),
    circuitBreaker: {
      maxConnections:
        r.int(cb.maxConnections, `${path}.circuitBreaker.maxConnections`, 1, big, d.maxConnections) ?? 1,
      maxPendingRequests:
        r.int(
          cb.maxPendingRequests,
          `${path}.circuitBreaker.maxPendingRequests`,
          0,
          big,
          d.maxPendingRequests,
        ) ?? 0,
      maxRequests: r.int(cb.maxRequests, `${path}.circuitBreaker.maxRequests`, 1, big, d.maxRequests) ?? 1,
    },
    outlier: {
      consecutive5xx:
        r.int(od.consecutive5xx, `${path}.outlierDetection.consecutive5xx`, 0, big, e.consecutive5xx) ?? 0,
      intervalMs: r.duration(od.interval, `${path}.outlierDetection.interval`, e.intervalMs) ?? e.intervalMs,
      baseEjectionMs:
        r.duration(od.baseEjectionTime, `${path}.outlierDetection.baseEjectionTime`, e.baseEjectionMs) ?? 0,
      maxEjectionMs:
        r.duration(od.maxEjectionTime, `${path}.outlierDetection.maxEjectionTime`, e.maxEjectionMs) ?? 0,
      maxEjectionPercent:
        r.int(
          od.maxEjectionPercent,
          `${path}.outlierDetection.maxEjectionPercent`,
          0,
          100,
          e.maxEjectionPercent,
        ) ?? 0,
    },
  };
}
