import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import test from 'ava';
import { ConfigStore, objectsOf } from './config-store.js';
import {
  configDir,
  eventWhere,
  NAMESPACE_YAML,
  podYaml,
  removeDir,
  SERVICE_YAML,
} from './testing/fixtures.js';

test('multi-document YAML loads every supported kind', async (t) => {
  const dir = await configDir({
    'all.yaml': [
      NAMESPACE_YAML,
      podYaml('a', '10.1.0.1'),
      SERVICE_YAML,
      'kind: ServiceAccount\nmetadata: { name: sa-a, namespace: ns1 }\n',
      'kind: AuthorizationPolicy\nmetadata: { name: p, namespace: ns1 }\nspec: { action: DENY }\n',
      'kind: HTTPRoute\nmetadata: { name: r, namespace: ns1 }\nspec: {}\n',
    ].join('---\n'),
  });
  t.teardown(() => removeDir(dir));
  const store = new ConfigStore({ dir });
  const loaded = await store.reload();
  t.true(loaded.ok);
  const view = store.view();
  t.is(view.objects.size, 6);
  t.deepEqual(objectsOf(view, 'Pod')[0]?.status.podIPs, ['10.1.0.1']);
  t.deepEqual(objectsOf(view, 'AuthorizationPolicy')[0]?.raw.spec, { action: 'DENY' });
});

test('an invalid file is refused with file, field and reason; the running config stays', async (t) => {
  const dir = await configDir({ 'a.yaml': podYaml('a', '10.1.0.1') });
  t.teardown(() => removeDir(dir));
  const store = new ConfigStore({ dir });
  await store.reload();
  const before = store.view();
  await writeFile(
    join(dir, 'b.yaml'),
    `kind: Pod
metadata: { name: b, namespace: Bad_NS }
spec: { nodeName: n1 }
status: { podIP: 10.1.0.999 }
---
kind: Service
metadata: { name: s, namespace: ns1 }
spec: { ports: [{ port: 0, targetPort: http }] }
`,
  );
  const result = await store.reload();
  t.false(result.ok);
  if (!result.ok) {
    const file = join(dir, 'b.yaml');
    t.deepEqual(result.error, [
      `${file}#0 (Pod Bad_NS/b): metadata.namespace: "Bad_NS" is not a DNS-1123 label`,
      `${file}#0 (Pod Bad_NS/b): status.podIP[0]: "10.1.0.999" is not an IP address`,
      `${file}#1 (Service ns1/s): spec.ports[0].port: 0 is not a port in 1..65535`,
      `${file}#1 (Service ns1/s): spec.ports[0].targetPort: named ports are not supported; use a number`,
    ]);
  }
  t.is(store.view(), before);
});

test('YAML syntax errors and duplicate pod IPs are refused as a whole', (t) => {
  const store = new ConfigStore();
  t.true(store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1')].join('---\n')).ok);
  const syntax = store.applyYaml('kind: Pod\nmetadata: [unclosed\n', 'x.yaml');
  t.false(syntax.ok);
  if (!syntax.ok) t.regex(syntax.error[0]!, /^x\.yaml#0: /);
  const dup = store.applyYaml(podYaml('b', '10.1.0.1'));
  t.false(dup.ok);
  if (!dup.ok) t.regex(dup.error[0]!, /10\.1\.0\.1 is also the IP of Pod\/ns1\/a/);
  t.is(store.view().objects.size, 2);
});

test('the watched directory reloads after a debounce', async (t) => {
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, 'a.yaml': podYaml('a', '10.1.0.1') });
  const store = new ConfigStore({ dir, debounceMs: 20 });
  t.teardown(async () => {
    store.close();
    await removeDir(dir);
  });
  await store.reload();
  store.watch();
  const changed = eventWhere(store, 'change');
  await writeFile(join(dir, 'b.yaml'), podYaml('b', '10.1.0.2'));
  await changed;
  t.is(objectsOf(store.view(), 'Pod').length, 2);
});
