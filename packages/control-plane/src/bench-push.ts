import { performance } from 'node:perf_hooks';
import * as grpc from '@grpc/grpc-js';
import {
  ADDRESS_TYPE_URL,
  AUTHORIZATION_TYPE_URL,
  type ConfigSnapshot,
  isScriptMain,
  XdsClient,
} from '@zmesh/shared';
import { ControlPlane } from './control-plane.js';

/**
 * Push latency: time from a store change (one pod's IP) to every connected client having
 * activated it, p50/p99 over `changes` changes; plus memory per 1,000 workloads for the
 * control plane (store + compiled cache) and for one client's snapshot. Server and clients
 * share this process, so latencies include the clients' decode work on the same cores.
 * Run: `node --expose-gc packages/control-plane/dist/bench-push.js [workloads...]`.
 */
export interface PushBenchResult {
  workloads: number;
  clients: number;
  changes: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  controlPlaneBytesPer1000: number | null;
  clientSnapshotBytesPer1000: number | null;
}

const NODES = 10;
const PODS_PER_SERVICE = 10;

export async function benchPush(workloads: number, clients = 3, changes = 100): Promise<PushBenchResult> {
  const heap0 = heapAfterGc();
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  const applied = cp.store.apply(clusterDocs(workloads));
  if (!applied.ok) throw new Error(applied.error.slice(0, 5).join('\n'));
  const heap1 = heapAfterGc();
  const port = await cp.start(0);
  const proxies = Array.from({ length: clients }, (_, i) => client(port, cp.issueNodeToken(`node-${i}`), i));
  try {
    await Promise.all(proxies.map((c) => c.start()));
    await Promise.all(proxies.map((c) => until(c, (s) => s.workloads.size === workloads)));
    const heap2 = heapAfterGc();
    const latencies: number[] = [];
    for (let i = 0; i < changes; i++) {
      const pod = i % workloads;
      const ip = podIp(pod, 1 + (i % 2) + 1);
      const uid = `Kubernetes//Pod/bench-${Math.floor(pod / 1000)}/pod-${pod}`;
      const start = performance.now();
      const done = Promise.all(
        proxies.map((c) => until(c, (s) => s.workloads.get(uid)?.addresses[0] === ip)),
      );
      const r = cp.store.apply([podDoc(pod, ip)]);
      if (!r.ok) throw new Error(r.error.join('\n'));
      await done;
      latencies.push(performance.now() - start);
    }
    latencies.sort((a, b) => a - b);
    const per1000 = (bytes: number | null) =>
      bytes === null ? null : Math.round((bytes / workloads) * 1000);
    return {
      workloads,
      clients,
      changes,
      p50Ms: round(quantile(latencies, 0.5)),
      p99Ms: round(quantile(latencies, 0.99)),
      maxMs: round(latencies[latencies.length - 1]!),
      controlPlaneBytesPer1000: per1000(heap0 === null || heap1 === null ? null : heap1 - heap0),
      clientSnapshotBytesPer1000: per1000(
        heap1 === null || heap2 === null ? null : (heap2 - heap1) / clients,
      ),
    };
  } finally {
    await Promise.all(proxies.map((c) => c.stop()));
    await cp.stop();
  }
}

/** Namespaces of 1,000 pods, a Service per 10 pods, pods spread over 10 nodes. */
export function clusterDocs(workloads: number): unknown[] {
  const namespaces = Math.ceil(workloads / 1000);
  const docs: unknown[] = [];
  for (let n = 0; n < namespaces; n++) {
    docs.push({
      kind: 'Namespace',
      metadata: { name: `bench-${n}`, labels: { 'istio.io/dataplane-mode': 'ambient' } },
    });
  }
  for (let i = 0; i < workloads; i++) docs.push(podDoc(i, podIp(i, 1)));
  for (let s = 0; s < workloads / PODS_PER_SERVICE; s++) {
    const n = Math.floor((s * PODS_PER_SERVICE) / 1000);
    docs.push({
      kind: 'Service',
      metadata: { name: `svc-${s}`, namespace: `bench-${n}` },
      spec: {
        clusterIP: `10.96.${s >> 8}.${s & 0xff}`,
        selector: { svc: `svc-${s}` },
        ports: [{ port: 80, targetPort: 8080 }],
      },
    });
  }
  return docs;
}

export function podDoc(i: number, ip: string): unknown {
  return {
    kind: 'Pod',
    metadata: {
      name: `pod-${i}`,
      namespace: `bench-${Math.floor(i / 1000)}`,
      labels: { svc: `svc-${Math.floor(i / PODS_PER_SERVICE)}` },
    },
    spec: { serviceAccountName: `sa-${i % 50}`, nodeName: `node-${i % NODES}` },
    status: { podIP: ip },
  };
}

/** Distinct IPs per pod; `generation` picks a second octet so a change moves the pod. */
export function podIp(i: number, generation: number): string {
  return `10.${generation * 10 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}`;
}

function client(port: number, token: string, i: number): XdsClient {
  return new XdsClient({
    address: `127.0.0.1:${port}`,
    node: { id: `ztunnel~bench-${i}` },
    token,
    typeUrls: [ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL],
    credentials: grpc.credentials.createInsecure(),
    backoff: { initialMs: 50, maxMs: 1000 },
  });
}

function until(c: XdsClient, predicate: (s: ConfigSnapshot) => boolean): Promise<void> {
  if (predicate(c.snapshot())) return Promise.resolve();
  return new Promise((resolve) => {
    const on = (s: ConfigSnapshot) => {
      if (!predicate(s)) return;
      c.off('snapshot', on);
      resolve();
    };
    c.on('snapshot', on);
  });
}

export function heapAfterGc(): number | null {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) return null;
  gc();
  gc();
  return process.memoryUsage().heapUsed + process.memoryUsage().arrayBuffers;
}

export function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

export function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}

/**
 * The command-line runner both push benches share: one JSON line per workload count given
 * as arguments (default 1,000 and 10,000).
 */
export async function benchMain(run: (workloads: number) => Promise<unknown>): Promise<void> {
  const sizes = process.argv
    .slice(2)
    .map(Number)
    .filter((n) => n > 0);
  for (const n of sizes.length > 0 ? sizes : [1000, 10_000]) {
    process.stdout.write(`${JSON.stringify(await run(n))}\n`);
  }
  if ((globalThis as { gc?: unknown }).gc === undefined) {
    process.stderr.write('memory figures need node --expose-gc\n');
  }
}

if (isScriptMain(import.meta.url, 'bench-push.js')) await benchMain((n) => benchPush(n));
