import type { PodExplanation } from '@zmesh/control-plane';
import {
  adminRequest,
  isPeerAuthenticationPolicy,
  isZmeshError,
  spiffeIdOf,
  type Workload,
} from '@zmesh/shared';
import { AuthorizationStore } from '@zmesh/ztunnel';
import { type AdminOptions, type ProxyRow, printRefusal, type Refusal, target } from './operator-commands.js';
import { age, structured, table } from './table.js';
import { type ConfigDump, podRef, readConfigDump, ztunnelAddress } from './ztunnel-config-command.js';

interface PodObj {
  kind: 'Pod';
  metadata: { name: string; namespace: string; labels?: Record<string, string> };
  spec: { nodeName: string; serviceAccountName: string };
}
interface PolicyObj {
  metadata: { name: string; namespace: string };
  raw?: { spec?: { selector?: { matchLabels?: Record<string, string> } } };
}

/** What `zmesh x describe pod` found (its -o json shape). */
export interface PodDescription {
  pod: string;
  node: string;
  ztunnel: { proxy: string | null; admin: string | null; connected: boolean; error?: string };
  identity: string | null;
  certificate: { state: string; notAfter: string | null } | null;
  waypoint: { name: string; ready: boolean; ackedBy: string[] } | null;
  /** PeerAuthentication: the mTLS mode in force for the pod's inbound, why, and ports that differ. */
  mtls: { mode: string; why: string; ports: Record<string, string> } | null;
  /** L4: the policies the pod's ztunnel evaluates for it (its own store's answer). */
  policies: Array<{ namespace: string; name: string; action: string; why: string }>;
  /** L7: the policies its waypoints enforce for its traffic (the control plane's compiled config). */
  l7Policies: PodExplanation['l7Policies'];
}

/**
 * `zmesh x describe pod NS/NAME`: which ztunnel serves the pod (its node's, from
 * proxy-status), the identity and certificate that ztunnel holds for it, its waypoint and
 * whether one is ready, the PeerAuthentication mode in force, the L4 policies that ztunnel
 * evaluates for it, each with why (the ztunnel's own policy store decides which apply, from
 * the policies the control plane's selectors named for the workload), and the L7 policies
 * its waypoints enforce, each with why (the control plane's `GET /explain/pod`: targetRef
 * to the waypoint's Gateway, or to a Service the pod backs).
 */
export async function runDescribePod(
  ref: string,
  opts: AdminOptions & { ztunnel?: string; output: 'text' | 'json' | 'yaml' },
): Promise<number> {
  const { namespace, name } = podRef(ref);
  const given = opts.ztunnel === undefined ? undefined : ztunnelAddress(opts.ztunnel);
  const t = await target(opts);
  const objects = async <T>(kind: string, extra: Record<string, string> = {}) => {
    const res = await adminRequest(
      t,
      `/objects?${new URLSearchParams({ full: '1', kind, namespace, ...extra })}`,
    );
    return { res, out: res.json<{ objects: T[] } & Refusal>() };
  };
  const { res, out } = await objects<PodObj>('Pod', { name });
  if (!res.ok) return printRefusal('x describe', 'refused', res.status, out);
  const pod = out.objects[0];
  if (pod === undefined) {
    console.error(`zmesh x describe: no Pod ${name} in namespace ${namespace}`);
    return 1;
  }
  const [proxies, waypoints, policies, explained] = await Promise.all([
    adminRequest(t, '/proxy-status').then((r) => r.json<ProxyRow[]>()),
    adminRequest(t, '/waypoint-status').then((r) =>
      r.json<Array<{ waypoint: string; ready: boolean; ackedBy: string[] }>>(),
    ),
    objects<PolicyObj>('AuthorizationPolicy').then((r) => r.out.objects ?? []),
    adminRequest(t, `/explain/pod?${new URLSearchParams({ namespace, name })}`).then((r) =>
      r.ok ? r.json<PodExplanation>() : undefined,
    ),
  ]);
  const z = proxies.find((p) => p.proxy.startsWith('ztunnel~') && p.node === pod.spec.nodeName);
  const admin = given ?? z?.admin ?? null;
  let dump: ConfigDump | undefined;
  let error: string | undefined;
  if (admin === null) error = `the control plane knows no ztunnel admin address on node ${pod.spec.nodeName}`;
  else
    dump = await readConfigDump(admin).catch((e: unknown) => {
      if (!isZmeshError(e)) throw e;
      error = `${e.code}: ${e.message}`;
      return undefined;
    });
  const d = describePod(pod, dump, policies, waypoints);
  d.mtls = explained?.peerAuthentication ?? null;
  d.l7Policies = explained?.l7Policies ?? [];
  d.ztunnel = {
    proxy: z?.proxy ?? null,
    admin,
    connected: z?.connected ?? false,
    ...(error ? { error } : {}),
  };
  if (opts.output === 'text') console.log(podDescriptionText(d));
  else console.log(structured(d, opts.output));
  if (error === undefined) return 0;
  console.error(`zmesh x describe: ztunnel of node ${pod.spec.nodeName}: ${error}`);
  return 1;
}

/** The description from the pod, its ztunnel's dump (if read), the applied policies and waypoint status. */
function describePod(
  pod: PodObj,
  dump: ConfigDump | undefined,
  policyObjects: PolicyObj[],
  waypoints: Array<{ waypoint: string; ready: boolean; ackedBy: string[] }>,
  now = Date.now(),
): PodDescription {
  const { namespace, name } = pod.metadata;
  const workload = dump?.workloads.find((w) => w.namespace === namespace && w.name === name) as
    | (ConfigDump['workloads'][number] & Workload)
    | undefined;
  const identity = workload ? spiffeIdOf(workload) : null;
  const cert = identity ? dump?.certificates.find((c) => c.identity === identity) : undefined;
  const wp = workload?.waypoint?.hostname;
  const wpName = wp ? `${wp.namespace}/${wp.hostname.split('.')[0]}` : undefined;
  const wpStatus = waypoints.find((w) => w.waypoint === wpName);
  return {
    pod: `${namespace}/${name}`,
    node: pod.spec.nodeName,
    ztunnel: { proxy: null, admin: null, connected: false },
    identity,
    certificate: cert
      ? {
          state:
            cert.notAfter === undefined ? 'Pending' : Date.parse(cert.notAfter) <= now ? 'Expired' : 'Valid',
          notAfter: cert.notAfter ?? null,
        }
      : null,
    waypoint: wpName
      ? { name: wpName, ready: wpStatus?.ready ?? false, ackedBy: wpStatus?.ackedBy ?? [] }
      : null,
    mtls: null,
    policies: workload && dump ? applicablePolicies(workload, dump, policyObjects) : [],
    l7Policies: [],
  };
}

/** The ztunnel's own store says which of its policies it evaluates for the workload; each gets why. */
function applicablePolicies(
  workload: ConfigDump['workloads'][number],
  dump: ConfigDump,
  policyObjects: PolicyObj[],
): PodDescription['policies'] {
  const store = new AuthorizationStore();
  const applied = store.apply(dump.policies?.items ?? []);
  if (!applied.ok) return [];
  const labelsOf = (n: string) =>
    Object.entries(
      policyObjects.find((p) => `${p.metadata.namespace}/${p.metadata.name}` === n)?.raw?.spec?.selector
        ?.matchLabels ?? {},
    )
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
  return store
    .applicable({ namespace: workload.namespace, policyNames: workload.authorizationPolicies ?? [] })
    .map(({ key, why, policy }) => {
      const [ns = '', policyName = key] = key.split('/');
      const action = policy ? `${policy.action}${policy.dryRun ? ' (dry-run)' : ''}` : '-';
      const reason =
        why === 'global'
          ? policy?.scope === 'GLOBAL'
            ? 'scope GLOBAL: every workload in the mesh'
            : `no selector, in the root namespace ${ns}: every workload in the mesh`
          : why === 'namespace'
            ? `no selector: every workload in namespace ${ns}`
            : why === 'pending'
              ? 'named for the workload but not received by this ztunnel: its traffic fails closed'
              : isPeerAuthenticationPolicy(policyName)
                ? 'PeerAuthentication, folded in as Istio does'
                : `its selector matches the pod's labels${labelsOf(key) ? ` (${labelsOf(key)})` : ''}`;
      return { namespace: ns, name: policyName, action, why: reason };
    });
}

/** kubectl describe's layout (exported for golden tests). */
export function podDescriptionText(d: PodDescription, now = Date.now()): string {
  const z = d.ztunnel;
  const cert = d.certificate;
  const lines = [
    ['Pod:', d.pod],
    ['Node:', d.node],
    [
      'Ztunnel:',
      z.proxy === null
        ? `none known on node ${d.node}`
        : `${z.proxy}${z.admin ? ` (admin ${z.admin})` : ''}, ${z.connected ? 'connected' : 'DISCONNECTED'}`,
    ],
    ['Identity:', d.identity ?? 'unknown (ztunnel not read)'],
    [
      'Certificate:',
      cert === null
        ? d.identity
          ? 'none held by the ztunnel'
          : 'unknown (ztunnel not read)'
        : cert.notAfter === null
          ? cert.state
          : `${cert.state}, not after ${cert.notAfter} (${
              cert.state === 'Expired' ? 'expired' : `in ${age((Date.parse(cert.notAfter) - now) / 1000)}`
            })`,
    ],
    [
      'Waypoint:',
      d.waypoint === null
        ? 'none'
        : `${d.waypoint.name}, ${d.waypoint.ready ? `ready (${d.waypoint.ackedBy.join(', ')})` : 'NOT READY: no connected waypoint has ACKed its config; traffic to the pod fails closed'}`,
    ],
    [
      'mTLS:',
      d.mtls === null
        ? 'unknown (the control plane did not say)'
        : `${d.mtls.mode}: ${d.mtls.why}${Object.entries(d.mtls.ports)
            .map(([port, mode]) => `; port ${port} ${mode}`)
            .join('')}`,
    ],
  ].map(([k, v]) => `${(k as string).padEnd(14)}${v}`);
  const indent = (s: string) => s.split('\n').map((l) => `  ${l}`);
  const policies =
    d.policies.length === 0
      ? ['L4 policies:  none at the ztunnel (every connection allowed at L4)']
      : [
          'L4 policies (the ztunnel):',
          ...indent(
            table(
              ['NAMESPACE', 'NAME', 'ACTION', 'WHY'],
              d.policies.map((p) => [p.namespace, p.name, p.action, p.why]),
            ),
          ),
        ];
  const l7 =
    d.l7Policies.length === 0
      ? [`L7 policies:  none${d.waypoint === null ? ' (no waypoint)' : ` at ${d.waypoint.name}`}`]
      : [
          'L7 policies (the waypoint):',
          ...indent(
            table(
              ['WAYPOINT', 'KIND', 'NAMESPACE', 'NAME', 'ACTION', 'WHY'],
              d.l7Policies.map((p) => [p.waypoint, p.kind, p.namespace, p.name, p.action, p.why]),
            ),
          ),
        ];
  return [...lines, ...policies, ...l7].join('\n');
}
