import { replaceAt, valuePaths } from '@zmesh/shared/testing';
import test from 'ava';
import fc from 'fast-check';
import { parseWaypointConfig } from './config-parser.js';

/**
 * Property-based fuzzing of the waypoint's config reader (issue 38): a valid config with one
 * value replaced by anything JSON can hold (JSON is YAML) is parsed or refused with reasons,
 * never thrown. Budget as in h2-fuzz.test.ts (ZMESH_FUZZ_RUNS, ZMESH_FUZZ_SEED).
 */
const RUNS = Number(process.env.ZMESH_FUZZ_RUNS ?? 300);
const params = { numRuns: RUNS, seed: Number(process.env.ZMESH_FUZZ_SEED ?? 38), endOnFailure: true };

const SEED = {
  waypoint: { name: 'waypoint', namespace: 'team-b' },
  workloads: [
    {
      name: 'v1',
      namespace: 'team-b',
      addresses: ['10.0.0.1'],
      services: { 'team-b/server.team-b.svc.cluster.local': [{ servicePort: 80, targetPort: 8080 }] },
    },
  ],
  services: [
    {
      name: 'server',
      namespace: 'team-b',
      addresses: ['10.96.0.1'],
      ports: [{ servicePort: 80, targetPort: 8080 }],
    },
  ],
  httpRoutes: [
    {
      name: 'r',
      parentRefs: [{ name: 'server', port: 80 }],
      rules: [
        {
          matches: [
            { path: { type: 'PathPrefix', value: '/api' }, headers: [{ name: 'X-Canary', value: '1' }] },
          ],
          backendRefs: [{ name: 'server', weight: 3 }],
          timeouts: { request: '1.5s' },
          retry: { attempts: 3, retryOn: '5xx,reset', perTryTimeout: '200ms' },
          rateLimit: { maxTokens: 10, fillInterval: '1s' },
          fault: { delay: { percent: 50, fixedDelay: '10ms' } },
        },
      ],
    },
  ],
  authorizationPolicies: [
    {
      name: 'p',
      targetRefs: [{ kind: 'Gateway', name: 'waypoint' }],
      action: 'DENY',
      rules: [
        {
          from: [{ source: { notPrincipals: ['a/b'] } }],
          to: [{ operation: { ports: ['80'] } }],
          when: [{ key: 'request.headers[X-User]', values: ['x'] }],
        },
      ],
    },
  ],
  backendPolicies: [
    {
      service: 'team-b/server.team-b.svc.cluster.local',
      loadBalancer: 'LEAST_REQUEST',
      circuitBreaker: { maxRequests: 5 },
      outlierDetection: { consecutive5xx: 3, baseEjectionTime: '10s' },
    },
  ],
};
const paths = valuePaths(SEED);

test('parseWaypointConfig: a valid config with any one value replaced is parsed or refused, never thrown', (t) => {
  t.true(parseWaypointConfig(JSON.stringify(SEED), 'seed').ok, 'the seed parses');
  const mutated = fc
    .tuple(fc.nat(), fc.jsonValue({ maxDepth: 3 }))
    .map(([i, v]) => JSON.stringify(replaceAt(SEED, paths[i % paths.length]!, v)));
  fc.assert(
    fc.property(mutated, (text) => {
      const r = parseWaypointConfig(text, 'fuzz');
      if (!r.ok) t.true(r.error.length > 0, 'a refusal has reasons');
    }),
    params,
  );
});
