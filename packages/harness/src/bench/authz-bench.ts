import { type Authorization, isScriptMain, type Rule } from '@zmesh/shared';
import { AuthorizationStore, type AuthzDestination, type ConnectionAttributes } from '@zmesh/ztunnel';

/**
 * Decision cost per connection with a small and a large policy store, when only a
 * handful of policies apply to the destination. The index must keep the two close: the
 * other policies live in other namespaces or are selector policies nobody here names.
 * Run: `pnpm exec tsc -b && node packages/harness/dist/bench/authz-bench.js`.
 */
export interface AuthzBenchResult {
  readonly policies: number;
  readonly applicable: number;
  readonly iterations: number;
  /** Wall clock, best round. */
  readonly nsPerDecision: number;
  /** Process CPU time, best round: on a shared machine this excludes time spent descheduled. */
  readonly cpuNsPerDecision: number;
  readonly applyMs: number;
}

const OTHER_NAMESPACES = 1000;
const ITERATIONS = 100_000;
/** Best of several rounds: on a shared machine the minimum is the least disturbed measurement. */
const ROUNDS = 3;
const WARMUP = 20_000;

function rule(ns: string, port: number): Rule {
  return {
    clauses: [
      {
        matches: [
          { principals: [{ prefix: `cluster.local/ns/${ns}/` }] },
          { namespaces: [{ exact: `${ns}-peer` }] },
        ],
      },
      { matches: [{ destinationPorts: [port, port + 1] }] },
      {
        matches: [
          {
            sourceIps: [
              { address: '10.0.0.0', length: 8 },
              { address: 'fd00::', length: 16 },
            ],
          },
        ],
      },
    ],
  };
}

function policy(name: string, ns: string, extra: Partial<Authorization> = {}): Authorization {
  return {
    name,
    namespace: ns,
    scope: 'NAMESPACE',
    action: 'ALLOW',
    rules: [rule('a', 80), rule('b', 443), rule(ns, 8080)],
    dryRun: false,
    ...extra,
  };
}

/** Six policies apply to `shop` workloads: one global DENY, three namespace-wide, two selected. */
function applicable(): Authorization[] {
  return [
    policy('no-legacy', 'istio-system', { scope: 'GLOBAL', action: 'DENY' }),
    policy('ns-a', 'shop'),
    policy('ns-b', 'shop'),
    policy('ns-deny', 'shop', { action: 'DENY', rules: [rule('evil', 22)] }),
    policy('sel-a', 'shop', { scope: 'WORKLOAD_SELECTOR' }),
    policy('sel-b', 'shop', { scope: 'WORKLOAD_SELECTOR', rules: [rule('web', 9090)] }),
  ];
}

function fillers(n: number): Authorization[] {
  const out: Authorization[] = [];
  for (let i = 0; i < n; i++) {
    const ns = `ns-${i % OTHER_NAMESPACES}`;
    out.push(policy(`p-${i}`, ns, { scope: i % 2 === 0 ? 'NAMESPACE' : 'WORKLOAD_SELECTOR' }));
  }
  return out;
}

/** A few distinct peers, so that no single branch is all the CPU ever sees. */
const CONNECTIONS: ConnectionAttributes[] = [
  {
    sourcePrincipal: 'spiffe://cluster.local/ns/web/sa/front',
    sourceIp: '10.1.0.10',
    destinationIp: '10.2.0.10',
    destinationPort: 9090,
  },
  {
    sourcePrincipal: 'spiffe://cluster.local/ns/batch/sa/job',
    sourceIp: '10.1.0.20',
    destinationIp: '10.2.0.10',
    destinationPort: 8080,
  },
  {
    sourcePrincipal: 'cluster.local/ns/b/sa/x',
    sourceIp: 'fd00::20',
    destinationIp: 'fd00::10',
    destinationPort: 443,
  },
  { sourceIp: '::ffff:10.1.0.30', destinationIp: '10.2.0.10', destinationPort: 80 },
];

export function benchOnce(total: number, iterations = ITERATIONS): AuthzBenchResult {
  const own = applicable();
  const store = new AuthorizationStore();
  const all = [...fillers(total - own.length), ...own];
  const t0 = process.hrtime.bigint();
  const applied = store.apply(all, []);
  const applyMs = Number(process.hrtime.bigint() - t0) / 1e6;
  if (!applied.ok) throw new Error(applied.error.join('; '));
  const dest: AuthzDestination = { namespace: 'shop', policyNames: ['shop/sel-a', 'shop/sel-b'] };
  let allowed = 0;
  for (let i = 0; i < WARMUP; i++) allowed += store.evaluate(CONNECTIONS[i & 3]!, dest).allowed ? 1 : 0;
  let ns = Number.POSITIVE_INFINITY;
  let cpuNs = Number.POSITIVE_INFINITY;
  for (let round = 0; round < ROUNDS; round++) {
    const cpu = process.cpuUsage();
    const start = process.hrtime.bigint();
    for (let i = 0; i < iterations; i++) allowed += store.evaluate(CONNECTIONS[i & 3]!, dest).allowed ? 1 : 0;
    ns = Math.min(ns, Number(process.hrtime.bigint() - start) / iterations);
    const used = process.cpuUsage(cpu);
    cpuNs = Math.min(cpuNs, ((used.user + used.system) * 1000) / iterations);
  }
  // Keeps the loop's result alive so the decisions cannot be optimised away.
  if (allowed < 0) throw new Error('unreachable');
  return {
    policies: total,
    applicable: own.length,
    iterations,
    nsPerDecision: Math.round(ns),
    cpuNsPerDecision: Math.round(cpuNs),
    applyMs: Math.round(applyMs),
  };
}

export function runAuthzBench(
  out: (line: string) => void = (l) => process.stdout.write(`${l}\n`),
): AuthzBenchResult[] {
  const results = [10, 10_000].map((n) => benchOnce(n));
  out('policies  applicable  ns/decision(wall)  ns/decision(cpu)  apply(ms)');
  for (const r of results) {
    const cells = [
      [r.policies, 8],
      [r.applicable, 10],
      [r.nsPerDecision, 17],
      [r.cpuNsPerDecision, 16],
      [r.applyMs, 9],
    ];
    out(cells.map(([v, w]) => String(v).padStart(w as number)).join('  '));
  }
  return results;
}

if (isScriptMain(import.meta.url, 'authz-bench.js')) runAuthzBench();
