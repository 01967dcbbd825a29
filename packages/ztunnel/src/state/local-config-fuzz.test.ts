import { replaceAt, valuePaths } from '@zmesh/shared/testing';
import test from 'ava';
import fc from 'fast-check';
import { parseLocalConfig } from './local-config.js';

/**
 * Property-based fuzzing of ztunnel's local YAML (issue 38): a valid file with one value
 * replaced by anything JSON can hold (JSON is YAML), or any text, is parsed or refused with
 * reasons, never thrown. Budget as in h2-fuzz.test.ts (ZMESH_FUZZ_RUNS, ZMESH_FUZZ_SEED).
 */
const RUNS = Number(process.env.ZMESH_FUZZ_RUNS ?? 300);
const params = { numRuns: RUNS, seed: Number(process.env.ZMESH_FUZZ_SEED ?? 38), endOnFailure: true };

const SEED = {
  workloads: [
    {
      name: 'a',
      namespace: 'ns1',
      serviceAccount: 'sa',
      addresses: ['127.0.1.1', '::ffff:127.0.1.2'],
      node: 'n1',
    },
  ],
  services: [
    {
      name: 's',
      namespace: 'ns1',
      addresses: ['127.96.0.1'],
      ports: [{ servicePort: 80, targetPort: 8080 }],
    },
  ],
  forwards: [{ workload: 'Kubernetes//Pod/ns1/a', listen: '127.0.1.1:9000', destination: '[fd00::1]:80' }],
};
const paths = valuePaths(SEED);

test('parseLocalConfig: a valid file with any one value replaced, or any text, is parsed or refused, never thrown', (t) => {
  t.true(parseLocalConfig(JSON.stringify(SEED), 'seed').ok, 'the seed parses');
  const mutated = fc
    .tuple(fc.nat(), fc.jsonValue({ maxDepth: 3 }))
    .map(([i, v]) => JSON.stringify(replaceAt(SEED, paths[i % paths.length]!, v)));
  fc.assert(
    fc.property(fc.oneof(mutated, fc.string({ maxLength: 200 })), (text) => {
      const r = parseLocalConfig(text, 'fuzz');
      if (!r.ok) t.true(r.error.length > 0, 'a refusal has reasons');
    }),
    params,
  );
});
