import { logger, type Workload } from '@zmesh/shared';
import test from 'ava';
import { Registry } from 'prom-client';
import { InboundAuthorizer, MAX_MISSING_POLICY_LABELS } from './inbound-authorizer.js';

const workload = (policies: string[]): Workload => ({
  uid: 'Kubernetes//Pod/ns1/server',
  name: 'server',
  namespace: 'ns1',
  addresses: ['10.1.0.1'],
  network: '',
  node: 'node-1',
  trustDomain: 'cluster.local',
  serviceAccount: 'server',
  tunnelProtocol: 'HBONE',
  services: {},
  authorizationPolicies: policies,
  status: 'HEALTHY',
  canonicalName: 'server',
  canonicalRevision: 'latest',
  workloadName: 'server',
  clusterId: 'Kubernetes',
});

const conn = {
  sourcePrincipal: 'spiffe://cluster.local/ns/ns1/sa/client',
  sourceIp: '10.1.0.2',
  destinationIp: '10.1.0.1',
  destinationPort: 8080,
};

test('a destination naming a policy this ztunnel lacks is denied, named in its log and a bounded metric label', async (t) => {
  const registry = new Registry();
  const authz = new InboundAuthorizer(registry, () => undefined);
  // The enforcing ztunnel's log line (the issue: it logged nothing, even at debug).
  const authzLog = logger('authz');
  const warn = authzLog.warn;
  const lines: Array<[Record<string, unknown>, string]> = [];
  authzLog.warn = ((fields: Record<string, unknown>, msg: string) => {
    lines.push([fields, msg]);
  }) as typeof warn;
  t.teardown(() => {
    authzLog.warn = warn;
  });
  const denial = authz.check(workload(['ns1/deny-typo']), conn);
  t.is(lines.length, 1);
  t.is(lines[0]?.[0].policy, 'ns1/deny-typo');
  t.regex(lines[0]?.[1] ?? '', /has not received/);
  t.is(denial?.code, 'ZM_ERR_AUTHZ_DENIED');
  t.regex(denial?.message ?? '', /ns1\/deny-typo/);
  for (let i = 0; i < MAX_MISSING_POLICY_LABELS + 10; i++) authz.check(workload([`ns1/p${i}`]), conn);
  const text = await registry.metrics();
  t.regex(text, /^zmesh_authz_missing_policy_denials_total\{policy="ns1\/deny-typo"\} 1$/m);
  t.regex(text, /^zmesh_authz_missing_policy_denials_total\{policy="other"\} 11$/m);
  const series = text.split('\n').filter((l) => l.startsWith('zmesh_authz_missing_policy_denials_total{'));
  t.is(series.length, MAX_MISSING_POLICY_LABELS + 1, 'bounded: 32 policies, then other');
  t.regex(text, /^zmesh_authz_decisions_total\{decision="deny",reason="policy-pending"\} 43$/m);
});
