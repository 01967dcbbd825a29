import { performance } from 'node:perf_hooks';
import * as grpc from '@grpc/grpc-js';
import { ControlPlane } from '@zmesh/control-plane';
import {
  ADDRESS_TYPE_URL,
  AUTHORIZATION_TYPE_URL,
  CertificateAuthority,
  type ConfigSnapshot,
  isScriptMain,
  TrustBundle,
  XdsClient,
} from '@zmesh/shared';
import { LocalCaSigner, XdsConfigSource, Ztunnel } from '@zmesh/ztunnel';
import { heapAfterGc, quantile, round } from './stats.js';

/**
 * xDS push latency: time from a store change (one pod's IP) until every proxy has the
 * change, p50/p99 over `changes` changes; plus heap per 1,000 workloads for the control
 * plane (store + compiled cache) and for one proxy. Two kinds of proxy:
 * - `client`: bare `XdsClient`s, done when the snapshot holds the change;
 * - `ztunnel`: real ztunnels (`XdsConfigSource` → `applyConfig`), done when each has
 *   applied it (ProxyState rebuilt, listeners reconciled). Their nodes have no workloads of
 *   their own, so no certificates or listeners are involved: the config path alone.
 * Server and proxies share this process and its cores, so latencies include the proxies'
 * decode work.
 * Run: `node --expose-gc packages/harness/dist/bench/push-bench.js [client|ztunnel] [workloads...]`
 * (both kinds, 1,000 and 10,000 workloads, by default).
 */
export interface PushBenchResult {
  proxy: PushProxyKind;
  workloads: number;
  proxies: number;
  changes: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  controlPlaneBytesPer1000: number | null;
  proxyBytesPer1000: number | null;
}

export type PushProxyKind = 'client' | 'ztunnel';

/** One proxy under measurement: resolves once it holds a snapshot satisfying the predicate. */
interface PushProxy {
  reached(predicate: (s: ConfigSnapshot) => boolean): Promise<void>;
  stop(): Promise<void>;
}

const NODES = 10;
const PODS_PER_SERVICE = 10;
/** Bench ztunnels listen for admin on these loopback addresses (127.79.0.x). */
const BENCH_BLOCK = 79;

export async function benchPush(
  kind: PushProxyKind,
  workloads: number,
  proxyCount = 3,
  changes = 100,
): Promise<PushBenchResult> {
  const heap0 = heapAfterGc();
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  const applied = cp.store.apply(clusterDocs(workloads));
  if (!applied.ok) throw new Error(applied.error.slice(0, 5).join('\n'));
  const heap1 = heapAfterGc();
  const port = await cp.start(0);
  const proxies: PushProxy[] = [];
  try {
    const ca =
      kind === 'ztunnel' ? await CertificateAuthority.create({ trustDomain: 'cluster.local' }) : undefined;
    for (let i = 0; i < proxyCount; i++) {
      proxies.push(ca ? await startZtunnel(cp, port, ca, i) : await startClient(cp, port, i));
    }
    await Promise.all(proxies.map((p) => p.reached((s) => s.workloads.size === workloads)));
    const heap2 = heapAfterGc();
    const latencies: number[] = [];
    for (let i = 0; i < changes; i++) {
      const pod = i % workloads;
      const ip = podIp(pod, 1 + (i % 2) + 1);
      const uid = `Kubernetes//Pod/bench-${Math.floor(pod / 1000)}/pod-${pod}`;
      const start = performance.now();
      const done = Promise.all(
        proxies.map((p) => p.reached((s) => s.workloads.get(uid)?.addresses[0] === ip)),
      );
      const r = cp.store.apply([podDoc(pod, ip)]);
      if (!r.ok) throw new Error(r.error.join('\n'));
      await done;
      latencies.push(performance.now() - start);
    }
    latencies.sort((a, b) => a - b);
    const per1000 = (a: number | null, b: number | null, n = 1) =>
      a === null || b === null ? null : Math.round(((b - a) / n / workloads) * 1000);
    return {
      proxy: kind,
      workloads,
      proxies: proxyCount,
      changes,
      p50Ms: round(quantile(latencies, 0.5)),
      p99Ms: round(quantile(latencies, 0.99)),
      maxMs: round(latencies[latencies.length - 1]!),
      controlPlaneBytesPer1000: per1000(heap0, heap1),
      proxyBytesPer1000: per1000(heap1, heap2, proxyCount),
    };
  } finally {
    for (const p of proxies) await p.stop();
    await cp.stop();
  }
}

/** Namespaces of 1,000 pods, a Service per 10 pods, pods spread over 10 nodes. */
function clusterDocs(workloads: number): unknown[] {
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

function podDoc(i: number, ip: string): unknown {
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
function podIp(i: number, generation: number): string {
  return `10.${generation * 10 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}`;
}

async function startClient(cp: ControlPlane, port: number, i: number): Promise<PushProxy> {
  const c = new XdsClient({
    address: `127.0.0.1:${port}`,
    node: { id: `ztunnel~bench-${i}` },
    token: cp.issueNodeToken(`node-${i}`),
    typeUrls: [ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL],
    credentials: grpc.credentials.createInsecure(),
    backoff: { initialMs: 50, maxMs: 1000 },
  });
  await c.start();
  return {
    reached: (predicate) => {
      if (predicate(c.snapshot())) return Promise.resolve();
      return new Promise((resolve) => {
        const on = (s: ConfigSnapshot) => {
          if (!predicate(s)) return;
          c.off('snapshot', on);
          resolve();
        };
        c.on('snapshot', on);
      });
    },
    stop: () => c.stop(),
  };
}

async function startZtunnel(
  cp: ControlPlane,
  port: number,
  ca: CertificateAuthority,
  i: number,
): Promise<PushProxy> {
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
  return {
    // Applied, not merely received.
    reached: (predicate) => {
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
    },
    stop: async () => {
      await source.stop();
      await z.stop();
    },
  };
}

/** One JSON line per proxy kind and workload count given as arguments. */
async function main(args: string[]): Promise<void> {
  const kinds = args.filter((a): a is PushProxyKind => a === 'client' || a === 'ztunnel');
  const sizes = args.map(Number).filter((n) => n > 0);
  for (const n of sizes.length > 0 ? sizes : [1000, 10_000]) {
    for (const kind of kinds.length > 0 ? kinds : (['client', 'ztunnel'] as const)) {
      process.stdout.write(`${JSON.stringify(await benchPush(kind, n))}\n`);
    }
  }
  if ((globalThis as { gc?: unknown }).gc === undefined) {
    process.stderr.write('memory figures need node --expose-gc\n');
  }
}

if (isScriptMain(import.meta.url, 'push-bench.js')) await main(process.argv.slice(2));
