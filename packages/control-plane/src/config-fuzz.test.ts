import test from 'ava';
import fc from 'fast-check';
import { stringify } from 'yaml';
import { ConfigStore } from './config-store.js';

/**
 * Property-based fuzzing of the control plane's YAML reader (issue 38): what `zmesh apply -f`
 * and `zmesh delete -f` send, and what the config directory holds. Any text is applied or
 * refused with reasons, never thrown, and a refusal changes nothing. Budget as in
 * h2-fuzz.test.ts (ZMESH_FUZZ_RUNS, ZMESH_FUZZ_SEED).
 */
const RUNS = Number(process.env.ZMESH_FUZZ_RUNS ?? 300);
const params = { numRuns: RUNS, seed: Number(process.env.ZMESH_FUZZ_SEED ?? 38), endOnFailure: true };

/** Nine references to the level below, six levels deep: 9^6 strings once expanded (billion laughs). */
const ALIAS_BOMB = [
  'a: &a ["x","x","x","x","x","x","x","x","x"]',
  ...['b', 'c', 'd', 'e', 'f'].map((k, i) => {
    const below = 'abcde'[i];
    return `${k}: &${k} [${Array(9).fill(`*${below}`).join(',')}]`;
  }),
].join('\n');

/** Objects shaped like ours (kind, metadata, spec) with random values, as YAML; or any text. */
const yamlText = fc.oneof(
  fc.string({ maxLength: 200 }),
  fc.jsonValue({ maxDepth: 4 }).map((v) => stringify(v)),
  fc
    .record({
      kind: fc.constantFrom('Namespace', 'Pod', 'Service', 'AuthorizationPolicy', 'Gateway', 'Other'),
      metadata: fc.oneof(
        fc.jsonValue({ maxDepth: 2 }),
        fc.record({ name: fc.string(), namespace: fc.string() }),
      ),
      spec: fc.jsonValue({ maxDepth: 3 }),
    })
    .map((v) => stringify(v)),
);

test('ConfigStore.applyYaml and removeYaml: any text is applied or refused, never thrown', (t) => {
  const store = new ConfigStore();
  fc.assert(
    fc.property(yamlText, (text) => {
      store.applyYaml(text);
      store.removeYaml(text);
    }),
    params,
  );
  t.pass();
});

test('an alias bomb is refused with a reason, not thrown, and changes nothing', (t) => {
  const store = new ConfigStore();
  const before = store.view();
  for (const op of [() => store.applyYaml(ALIAS_BOMB), () => store.removeYaml(ALIAS_BOMB)]) {
    const r = op();
    t.false(r.ok);
    if (!r.ok) t.regex(r.error.join('\n'), /alias/i);
  }
  t.is(store.view(), before);
});
