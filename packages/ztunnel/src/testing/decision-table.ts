import type { Action, Authorization, Match, Rule, Scope } from '@zmesh/shared';
import type { DecisionReason } from '../authz/authorization-store.js';

/**
 * The L4 decision table: each case is a policy set, a source and a destination port with
 * the expected decision. It is data, not a test, so that the same table can be run
 * through the evaluator (decision-table.test.ts) and through real HBONE tunnels by the
 * harness, whose pods must then carry these identities and addresses.
 */
export interface TableSource {
  /** Full SPIFFE URI; absent for a plaintext peer. */
  readonly principal?: string;
  readonly ip: string;
}

export interface TableDestination {
  readonly namespace: string;
  readonly policyNames: readonly string[];
  readonly ip: string;
  readonly port: number;
}

export interface DecisionCase {
  readonly name: string;
  readonly policies: readonly Authorization[];
  readonly source: TableSource;
  readonly destination: TableDestination;
  readonly expect: 'allow' | 'deny';
  readonly reason: DecisionReason;
  /** `namespace/name` of the deciding policy, when one decides. */
  readonly policy?: string;
}

export const TABLE_ROOT_NAMESPACE = 'istio-system';

/** Who connects: two identities in two namespaces, a plaintext peer, and IPv6 / mapped peers. */
export const TABLE_SOURCES = {
  web: { principal: 'spiffe://cluster.local/ns/frontend/sa/web', ip: '10.1.0.10' },
  job: { principal: 'spiffe://cluster.local/ns/batch/sa/job', ip: '10.1.0.20' },
  plain: { ip: '10.1.0.30' },
  web6: { principal: 'spiffe://cluster.local/ns/frontend/sa/web', ip: 'fd00:1::10' },
  webMapped: { principal: 'spiffe://cluster.local/ns/frontend/sa/web', ip: '::ffff:10.1.0.10' },
} as const satisfies Record<string, TableSource>;

/** The server pod in `backend`; it names its selector policy `backend/server-policy`. */
export const TABLE_SERVER = { namespace: 'backend', ip: '10.2.0.10', ip6: 'fd00:2::10' } as const;

function pol(
  name: string,
  action: Action,
  rules: Rule[],
  opts: { scope?: Scope; ns?: string; dryRun?: boolean } = {},
) {
  return {
    name,
    namespace: opts.ns ?? 'backend',
    scope: opts.scope ?? 'WORKLOAD_SELECTOR',
    action,
    rules,
    dryRun: opts.dryRun ?? false,
  } satisfies Authorization;
}

/** One rule whose clauses each hold the given matches (AND of ORs). */
const rule = (...clauses: Match[][]): Rule => ({ clauses: clauses.map((matches) => ({ matches })) });
const fromNs = (ns: string): Match => ({ namespaces: [{ exact: ns }] });
const port = (...p: number[]): Match => ({ destinationPorts: p });

const SELECTED = ['backend/server-policy'];
const S = TABLE_SOURCES;

type Row = [
  name: string,
  policies: Authorization[],
  source: TableSource,
  port: number,
  expect: 'allow' | 'deny',
  reason: DecisionReason,
  extra?: { policy?: string; names?: string[]; ip?: string },
];

/** The server's one selector policy. */
const sp = (action: Action, rules: Rule[], dryRun = false) => [
  pol('server-policy', action, rules, { dryRun }),
];

const ROWS: Row[] = [
  ['no policy at all allows', [], S.web, 8080, 'allow', 'no-allow-policies'],
  [
    'ALLOW from frontend: web',
    sp('ALLOW', [rule([fromNs('frontend')])]),
    S.web,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'ALLOW from frontend: job',
    sp('ALLOW', [rule([fromNs('frontend')])]),
    S.job,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'ALLOW from frontend: plaintext',
    sp('ALLOW', [rule([fromNs('frontend')])]),
    S.plain,
    8080,
    'deny',
    'allow-not-matched',
  ],
  ['ALLOW without rules denies all', sp('ALLOW', []), S.web, 8080, 'deny', 'allow-not-matched'],
  [
    'ALLOW with an empty rule allows all, even plaintext',
    sp('ALLOW', [rule()]),
    S.plain,
    8080,
    'allow',
    'allow-matched',
  ],
  ['DENY without rules matches nothing', sp('DENY', []), S.web, 8080, 'allow', 'no-allow-policies'],
  ['DENY with an empty rule denies all', sp('DENY', [rule()]), S.web, 8080, 'deny', 'deny-matched'],
  [
    'principal exact: web',
    sp('ALLOW', [rule([{ principals: [{ exact: 'cluster.local/ns/frontend/sa/web' }] }])]),
    S.web,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'principal exact: job',
    sp('ALLOW', [rule([{ principals: [{ exact: 'cluster.local/ns/frontend/sa/web' }] }])]),
    S.job,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'principal prefix',
    sp('ALLOW', [rule([{ principals: [{ prefix: 'cluster.local/ns/frontend/' }] }])]),
    S.web,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'principal suffix: job',
    sp('ALLOW', [rule([{ principals: [{ suffix: '/sa/job' }] }])]),
    S.job,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'principal suffix: web',
    sp('ALLOW', [rule([{ principals: [{ suffix: '/sa/job' }] }])]),
    S.web,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'principal presence: mTLS peer',
    sp('ALLOW', [rule([{ principals: [{ presence: {} }] }])]),
    S.web,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'principal presence: plaintext',
    sp('ALLOW', [rule([{ principals: [{ presence: {} }] }])]),
    S.plain,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'strict mTLS (DENY notPrincipals presence): plaintext',
    sp('DENY', [rule([{ notPrincipals: [{ presence: {} }] }])]),
    S.plain,
    8080,
    'deny',
    'deny-matched',
  ],
  [
    'strict mTLS (DENY notPrincipals presence): web',
    sp('DENY', [rule([{ notPrincipals: [{ presence: {} }] }])]),
    S.web,
    8080,
    'allow',
    'no-allow-policies',
  ],
  [
    'serviceAccounts: web',
    sp('ALLOW', [rule([{ serviceAccounts: [{ namespace: 'frontend', serviceAccount: 'web' }] }])]),
    S.web,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'serviceAccounts: job',
    sp('ALLOW', [rule([{ serviceAccounts: [{ namespace: 'frontend', serviceAccount: 'web' }] }])]),
    S.job,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'notServiceAccounts: job',
    sp('ALLOW', [rule([{ notServiceAccounts: [{ namespace: 'frontend', serviceAccount: 'web' }] }])]),
    S.job,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'notServiceAccounts matches plaintext (ztunnel semantics)',
    sp('ALLOW', [rule([{ notServiceAccounts: [{ namespace: 'frontend', serviceAccount: 'web' }] }])]),
    S.plain,
    8080,
    'allow',
    'allow-matched',
  ],
  ['ALLOW port 8080: 8080', sp('ALLOW', [rule([port(8080)])]), S.web, 8080, 'allow', 'allow-matched'],
  ['ALLOW port 8080: 9090', sp('ALLOW', [rule([port(8080)])]), S.web, 9090, 'deny', 'allow-not-matched'],
  [
    'ALLOW notDestinationPorts 9090: 8080',
    sp('ALLOW', [rule([{ notDestinationPorts: [9090] }])]),
    S.web,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'ALLOW notDestinationPorts 9090: 9090',
    sp('ALLOW', [rule([{ notDestinationPorts: [9090] }])]),
    S.web,
    9090,
    'deny',
    'allow-not-matched',
  ],
  ['DENY port 9090: 9090', sp('DENY', [rule([port(9090)])]), S.job, 9090, 'deny', 'deny-matched'],
  ['DENY port 9090: 8080', sp('DENY', [rule([port(9090)])]), S.job, 8080, 'allow', 'no-allow-policies'],
  [
    'sourceIps v4 /24: v4 peer',
    sp('ALLOW', [rule([{ sourceIps: [{ address: '10.1.0.0', length: 24 }] }])]),
    S.web,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'sourceIps v4 /24: v6 peer',
    sp('ALLOW', [rule([{ sourceIps: [{ address: '10.1.0.0', length: 24 }] }])]),
    S.web6,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'sourceIps v4 /32: IPv4-mapped v6 peer',
    sp('ALLOW', [rule([{ sourceIps: [{ address: '10.1.0.10', length: 32 }] }])]),
    S.webMapped,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'sourceIps v6 /64: v6 peer',
    sp('ALLOW', [rule([{ sourceIps: [{ address: 'fd00:1::', length: 64 }] }])]),
    S.web6,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'sourceIps v6 /64: v4 peer',
    sp('ALLOW', [rule([{ sourceIps: [{ address: 'fd00:1::', length: 64 }] }])]),
    S.web,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'DENY notSourceIps v4 /24: v6 peer',
    sp('DENY', [rule([{ notSourceIps: [{ address: '10.1.0.0', length: 24 }] }])]),
    S.web6,
    8080,
    'deny',
    'deny-matched',
  ],
  [
    'DENY notSourceIps v4 /24: v4 peer',
    sp('DENY', [rule([{ notSourceIps: [{ address: '10.1.0.0', length: 24 }] }])]),
    S.web,
    8080,
    'allow',
    'no-allow-policies',
  ],
  [
    'destinationIps: the v4 address',
    sp('ALLOW', [rule([{ destinationIps: [{ address: '10.2.0.10', length: 32 }] }])]),
    S.web,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'destinationIps: the v6 address',
    sp('ALLOW', [rule([{ destinationIps: [{ address: '10.2.0.10', length: 32 }] }])]),
    S.web6,
    8080,
    'deny',
    'allow-not-matched',
    { ip: TABLE_SERVER.ip6 },
  ],
  [
    'clauses AND: frontend and 8080',
    sp('ALLOW', [rule([fromNs('frontend')], [port(8080)])]),
    S.web,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'clauses AND: frontend but 9090',
    sp('ALLOW', [rule([fromNs('frontend')], [port(8080)])]),
    S.web,
    9090,
    'deny',
    'allow-not-matched',
  ],
  [
    'clauses AND: 8080 but batch',
    sp('ALLOW', [rule([fromNs('frontend')], [port(8080)])]),
    S.job,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'matches OR: frontend or batch',
    sp('ALLOW', [rule([fromNs('frontend'), fromNs('batch')])]),
    S.job,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'fields AND in one match: 9090',
    sp('ALLOW', [rule([{ ...fromNs('frontend'), ...port(8080) }])]),
    S.web,
    9090,
    'deny',
    'allow-not-matched',
  ],
  [
    'rules OR: second rule',
    sp('ALLOW', [rule([fromNs('frontend')], [port(8080)]), rule([fromNs('batch')], [port(9090)])]),
    S.job,
    9090,
    'allow',
    'allow-matched',
  ],
  [
    'rules OR: neither',
    sp('ALLOW', [rule([fromNs('frontend')], [port(8080)]), rule([fromNs('batch')], [port(9090)])]),
    S.job,
    8080,
    'deny',
    'allow-not-matched',
  ],
  ['an all-empty match never matches', sp('ALLOW', [rule([{}])]), S.web, 8080, 'deny', 'allow-not-matched'],
  [
    'notNamespaces frontend: job',
    sp('ALLOW', [rule([{ notNamespaces: [{ exact: 'frontend' }] }])]),
    S.job,
    8080,
    'allow',
    'allow-matched',
  ],
  [
    'notNamespaces frontend: web',
    sp('ALLOW', [rule([{ notNamespaces: [{ exact: 'frontend' }] }])]),
    S.web,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'namespace presence: plaintext has none',
    sp('ALLOW', [rule([{ namespaces: [{ presence: {} }] }])]),
    S.plain,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'DENY beats ALLOW',
    [
      pol('allow-all', 'ALLOW', [rule()], { scope: 'NAMESPACE' }),
      pol('no-batch', 'DENY', [rule([fromNs('batch')])], { scope: 'NAMESPACE' }),
    ],
    S.job,
    8080,
    'deny',
    'deny-matched',
    { policy: 'backend/no-batch' },
  ],
  [
    'DENY on 8080, ALLOW frontend: 9090 passes',
    [
      pol('no-8080', 'DENY', [rule([port(8080)])], { scope: 'NAMESPACE' }),
      pol('fe', 'ALLOW', [rule([fromNs('frontend')])], { scope: 'NAMESPACE' }),
    ],
    S.web,
    9090,
    'allow',
    'allow-matched',
    { policy: 'backend/fe' },
  ],
  [
    'second ALLOW policy decides',
    [
      pol('a', 'ALLOW', [rule([fromNs('x')])], { scope: 'NAMESPACE' }),
      pol('b', 'ALLOW', [rule([fromNs('batch')])], { scope: 'NAMESPACE' }),
    ],
    S.job,
    8080,
    'allow',
    'allow-matched',
    { policy: 'backend/b' },
  ],
  [
    "another namespace's policy does not apply",
    [pol('deny-all', 'ALLOW', [], { scope: 'NAMESPACE', ns: 'elsewhere' })],
    S.web,
    8080,
    'allow',
    'no-allow-policies',
  ],
  [
    'GLOBAL policy applies everywhere',
    [pol('no-batch', 'DENY', [rule([fromNs('batch')])], { scope: 'GLOBAL', ns: TABLE_ROOT_NAMESPACE })],
    S.job,
    8080,
    'deny',
    'deny-matched',
    { policy: 'istio-system/no-batch' },
  ],
  [
    'root-namespace policy is mesh-wide',
    [pol('deny-all', 'ALLOW', [], { scope: 'NAMESPACE', ns: TABLE_ROOT_NAMESPACE })],
    S.web,
    8080,
    'deny',
    'allow-not-matched',
  ],
  [
    'selector policy not named by the workload does not apply',
    sp('ALLOW', []),
    S.web,
    8080,
    'allow',
    'no-allow-policies',
    { names: [] },
  ],
  [
    'selector policy named but not received fails closed',
    [],
    S.web,
    8080,
    'deny',
    'policy-pending',
    { names: SELECTED },
  ],
  ['dry-run DENY all does not deny', sp('DENY', [rule()], true), S.web, 8080, 'allow', 'no-allow-policies'],
  ['dry-run ALLOW nothing does not deny', sp('ALLOW', [], true), S.web, 8080, 'allow', 'no-allow-policies'],
];

export const DECISION_TABLE: readonly DecisionCase[] = ROWS.map(
  ([name, policies, source, p, expect, reason, extra]) => {
    const decided = reason === 'deny-matched' || reason === 'allow-matched' || reason === 'policy-pending';
    const policy = extra?.policy ?? (decided ? 'backend/server-policy' : undefined);
    return {
      name,
      policies,
      source,
      destination: {
        namespace: TABLE_SERVER.namespace,
        policyNames: extra?.names ?? (policies.some((x) => x.name === 'server-policy') ? SELECTED : []),
        ip:
          extra?.ip ??
          (source.ip.includes(':') && !source.ip.startsWith('::ffff:') ? TABLE_SERVER.ip6 : TABLE_SERVER.ip),
        port: p,
      },
      expect,
      reason,
      ...(policy === undefined ? {} : { policy }),
    };
  },
);
