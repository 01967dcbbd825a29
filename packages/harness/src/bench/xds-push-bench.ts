import { performance } from 'node:perf_hooks';
import {
  benchMain,
  benchPodDoc,
  benchPodIp,
  ControlPlane,
  clusterDocs,
  heapAfterGc,
  quantile,
  round,
} from '@zmesh/control-plane';
import { CertificateAuthority, type ConfigSnapshot, isScriptMain, TrustBundle } from '@zmesh/shared';
import { LocalCaSigner, XdsConfigSource, Ztunnel } from '@zmesh/ztunnel';

/**
 * Push latency to real proxies: from a store change (one pod's IP) until every ztunnel has
 * applied it (`applyConfig` resolved: ProxyState rebuilt, listeners reconciled), p50/p99
 * over `changes` changes; plus heap per 1,000 workloads for the control plane and for one
 * ztunnel (XdsClient snapshot + ProxyState). The ztunnels run on nodes with no workloads of
 * their own, so no certificates or listeners are involved: this is the config path alone.
 * Everything shares this process and its cores.
 * Run: `node --expose-gc packages/harness/dist/bench/xds-push-bench.js [workloads...]`.
 */
export interface XdsPushBenchResult {
  workloads: number;
  ztunnels: number;
  changes: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  controlPlaneBytesPer1000: number | null;
  ztunnelBytesPer1000: number | null;
}

/** Bench proxies listen for admin on these loopback addresses (127.79.0.x). */
const BENCH_BLOCK = 79;

export async function benchXdsPush(
  workloads: number,
  ztunnels = 3,
  changes = 100,
): Promise<XdsPushBenchResult> {
  const heap0 = heapAfterGc();
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  const applied = cp.store.apply(clusterDocs(workloads));
  if (!applied.ok) throw new Error(applied.error.slice(0, 5).join('\n'));
  const heap1 = heapAfterGc();
  const port = await cp.start(0);
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const proxies = await Promise.all(Array.from({ length: ztunnels }, (_, i) => startProxy(cp, port, ca, i)));
  try {
    await Promise.all(proxies.map((p) => appliedWhere(p.source, (s) => s.workloads.size === workloads)));
    const heap2 = heapAfterGc();
    const latencies: number[] = [];
    for (let i = 0; i < changes; i++) {
      const pod = i % workloads;
      const ip = benchPodIp(pod, 1 + (i % 2) + 1);
      const uid = `Kubernetes//Pod/bench-${Math.floor(pod / 1000)}/pod-${pod}`;
      const start = performance.now();
      const done = Promise.all(
        proxies.map((p) => appliedWhere(p.source, (s) => s.workloads.get(uid)?.addresses[0] === ip)),
      );
      const r = cp.store.apply([benchPodDoc(pod, ip)]);
      if (!r.ok) throw new Error(r.error.join('\n'));
      await done;
      latencies.push(performance.now() - start);
    }
    latencies.sort((a, b) => a - b);
    const per1000 = (a: number | null, b: number | null, n = 1) =>
      a === null || b === null ? null : Math.round(((b - a) / n / workloads) * 1000);
    return {
      workloads,
      ztunnels,
      changes,
      p50Ms: round(quantile(latencies, 0.5)),
      p99Ms: round(quantile(latencies, 0.99)),
      maxMs: round(latencies[latencies.length - 1]!),
      controlPlaneBytesPer1000: per1000(heap0, heap1),
      ztunnelBytesPer1000: per1000(heap1, heap2, ztunnels),
    };
  } finally {
    for (const p of proxies) {
      await p.source.stop();
      await p.z.stop();
    }
    await cp.stop();
  }
}

async function startProxy(cp: ControlPlane, port: number, ca: CertificateAuthority, i: number) {
  const node = `bench-proxy-${i}`;
  const address = `127.${BENCH_BLOCK}.0.${i + 2}`;
  const z = new Ztunnel({
    node,
    address,
    bundle: new TrustBundle('cluster.local', [ca.rootPem]),
    signer: new LocalCaSigner(ca),
    defaultMetrics: false,
  });
  const source = new XdsConfigSource({
    ztunnel: z,
    address: `127.0.0.1:${port}`,
    node,
    proxyAddress: address,
    token: cp.issueNodeToken(node),
    backoff: { initialMs: 50, maxMs: 1000 },
  });
  await z.start();
  await source.start();
  return { z, source };
}

/** Resolves when the proxy has applied (not merely received) a snapshot satisfying `predicate`. */
function appliedWhere(source: XdsConfigSource, predicate: (s: ConfigSnapshot) => boolean): Promise<void> {
  const current = source.appliedSnapshot();
  if (current && predicate(current)) return Promise.resolve();
  return new Promise((resolve) => {
    const on = (_e: unknown, s: ConfigSnapshot) => {
      if (!predicate(s)) return;
      source.off('applied', on);
      resolve();
    };
    source.on('applied', on);
  });
}

if (isScriptMain(import.meta.url, 'xds-push-bench.js')) await benchMain((n) => benchXdsPush(n));
