import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ADDRESS_TYPE_URL, encodeMessage, loadSnapshot, MeshMetrics, type NackEvent } from '@zmesh/shared';
import test from 'ava';
import { parse } from 'yaml';
import { compile } from './compiler.js';
import { ControlPlane } from './control-plane.js';
import { objectKey } from './k8s-objects.js';
import { parseObject } from './parse-object.js';
import {
  configDir,
  eventWhere,
  NAMESPACE_YAML,
  newClient,
  podYaml,
  removeDir,
  SERVICE_YAML,
  snapshotWhere,
  startControlPlane,
  until,
} from './testing/fixtures.js';

const UID_A = 'Kubernetes//Pod/ns1/a';
const UID_B = 'Kubernetes//Pod/ns1/b';

test('a Pod added, changed and removed in the YAML store reaches the client', async (t) => {
  const dir = await configDir({
    'ns.yaml': NAMESPACE_YAML,
    'svc.yaml': SERVICE_YAML,
    'a.yaml': podYaml('a', '10.1.0.1'),
  });
  const { cp, port } = await startControlPlane(dir);
  const client = newClient(port, cp.issueNodeToken('node-1'));
  t.teardown(async () => {
    await client.stop();
    await cp.stop();
    await removeDir(dir);
  });
  await client.start();
  const first = await snapshotWhere(client, (s) => s.workloads.has(UID_A));
  const a = first.workloads.get(UID_A)!;
  t.deepEqual(a.addresses, ['10.1.0.1']);
  t.is(a.tunnelProtocol, 'HBONE');
  t.deepEqual(a.services, { 'ns1/svc.ns1.svc.cluster.local': [{ servicePort: 80, targetPort: 8080 }] });
  t.true(first.services.has('ns1/svc.ns1.svc.cluster.local'));

  await writeFile(join(dir, 'b.yaml'), podYaml('b', '10.1.0.2'));
  t.true((await cp.store.reload()).ok);
  await snapshotWhere(client, (s) => s.workloads.get(UID_B)?.addresses[0] === '10.1.0.2');

  await writeFile(join(dir, 'b.yaml'), podYaml('b', '10.1.0.3'));
  await cp.store.reload();
  await snapshotWhere(client, (s) => s.workloads.get(UID_B)?.addresses[0] === '10.1.0.3');

  await writeFile(join(dir, 'b.yaml'), '');
  await cp.store.reload();
  const last = await snapshotWhere(client, (s) => !s.workloads.has(UID_B));
  t.true(last.workloads.has(UID_A));
  await until(() => cp.proxyStatus()[0]?.types[ADDRESS_TYPE_URL]?.state === 'SYNCED');
  t.is(cp.proxyStatus()[0]?.types[ADDRESS_TYPE_URL]?.pending.count, 0);
});

test('a malformed Address is NACKed with its reason, shown in proxy status; the active snapshot stays', async (t) => {
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, 'a.yaml': podYaml('a', '10.1.0.1') });
  const { cp, port } = await startControlPlane(dir);
  const registry = new MeshMetrics().registry;
  const client = newClient(port, cp.issueNodeToken('node-1'), { registry });
  t.teardown(async () => {
    await client.stop();
    await cp.stop();
    await removeDir(dir);
  });
  await client.start();
  // Both types in: the static STRICT policy (PeerAuthentication) may come in a later batch.
  const before = await snapshotWhere(client, (s) => s.workloads.has(UID_A) && s.authorizations.size > 0);
  const bad = encodeMessage('istio.workload.Address', {
    workload: {
      uid: 'Kubernetes//Pod/ns1/bad',
      name: 'bad',
      namespace: 'ns1',
      addresses: [new Uint8Array(5)],
    },
  });
  const nacked = eventWhere<NackEvent>(client, 'nack');
  cp.server.injectRawResource(ADDRESS_TYPE_URL, 'Kubernetes//Pod/ns1/bad', bad);
  const nack = await nacked;
  t.true(nack.reasons.includes('Kubernetes//Pod/ns1/bad: workload.addresses[0]: 5 bytes, want 4 or 16'));
  t.is(client.snapshot(), before, 'no swap for a response whose only resource was rejected');

  await until(() => cp.proxyStatus()[0]?.types[ADDRESS_TYPE_URL]?.nacked !== null);
  const report = cp.proxyStatus()[0]!.types[ADDRESS_TYPE_URL]!;
  t.is(report.state, 'NACKED');
  t.is(report.rejected[0]?.name, 'Kubernetes//Pod/ns1/bad');
  t.regex(report.rejected[0]!.reason, /5 bytes, want 4 or 16/);
  cp.collectMetrics();
  const metrics = await cp.metrics.registry.metrics();
  t.regex(metrics, /^zmesh_cp_xds_nacks_total\{type="Address"\} 1$/m);
  t.regex(metrics, /^zmesh_cp_xds_acks_total\{type="Address"\} [1-9]/m);
  t.regex(metrics, /^zmesh_cp_xds_pushes_total\{type="Address"\} [2-9]/m);
  t.regex(metrics, /^zmesh_cp_connected_proxies 1$/m);
  t.true(
    report.pending.names.includes('Kubernetes//Pod/ns1/bad'),
    'a rejected change is pending, never applied',
  );
  t.regex(await registry.metrics(), /zmesh_xds_nacks_total\{type="Address"\} 1/);
});

test('a workload naming an unknown waypoint is pending until the waypoint service arrives', async (t) => {
  const ns = NAMESPACE_YAML.replace('ambient\n', 'ambient\n    istio.io/use-waypoint: wp\n');
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, 'a.yaml': podYaml('a', '10.1.0.1') });
  const { cp, port } = await startControlPlane(dir);
  // Admission never lets the store hold a use-waypoint naming no Gateway, but a proxy can
  // still meet one (workloads pushed ahead of the service): serve it from below admission.
  const objects = new Map(cp.store.view().objects);
  const nsObject = parseObject(parse(ns), []);
  if (nsObject === undefined) return t.fail();
  objects.set(objectKey(nsObject), nsObject);
  cp.server.setConfig(compile({ generation: 99, objects }, { trustDomain: 'cluster.local' }));
  const registry = new MeshMetrics().registry;
  const client = newClient(port, cp.issueNodeToken('node-1'), { registry });
  t.teardown(async () => {
    await client.stop();
    await cp.stop();
    await removeDir(dir);
  });
  await client.start();
  const waiting = await snapshotWhere(client, (s) => s.pending.length > 0);
  t.deepEqual(client.pending(), [{ name: UID_A, missing: ['ns1/wp.ns1.svc.cluster.local'] }]);
  t.false(waiting.workloads.has(UID_A), 'a pending workload is not active: traffic to it fails closed');
  t.regex(await registry.metrics(), /zmesh_xds_pending_resources 1/);

  const applied = cp.store.applyYaml(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: wp, namespace: ns1 }
spec:
  gatewayClassName: istio-waypoint
  addresses: [{ type: IPAddress, value: 10.96.0.99 }]
---
${ns}`);
  t.true(applied.ok);
  const resolved = await snapshotWhere(client, (s) => s.workloads.has(UID_A));
  t.deepEqual(resolved.pending, []);
  // The store served pod a direct before; no waypoint has ACKed ns1/wp, so the control plane
  // keeps it on that path (waypoint-hold.ts) rather than cut it.
  t.is(resolved.workloads.get(UID_A)?.waypoint, undefined);
  t.deepEqual(
    cp.heldUsers().map((h) => [h.object, h.waypoint, h.keptOn]),
    [['Pod/ns1/a', 'ns1/wp', undefined]],
  );
  t.deepEqual(resolved.services.get('ns1/wp.ns1.svc.cluster.local')?.addresses, [
    { network: '', address: '10.96.0.99' },
  ]);
});

test('after a control-plane restart the client resumes with initial_resource_versions and gets only the delta', async (t) => {
  const pods = Object.fromEntries(
    Array.from({ length: 5 }, (_, i) => [`p${i}.yaml`, podYaml(`p${i}`, `10.1.0.${i + 1}`)]),
  );
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, ...pods });
  const first = await startControlPlane(dir);
  const registry = new MeshMetrics().registry;
  const client = newClient(first.port, first.cp.issueNodeToken('node-1'), { registry });
  let second: Awaited<ReturnType<typeof startControlPlane>> | undefined;
  t.teardown(async () => {
    await client.stop();
    await first.cp.stop();
    await second?.cp.stop();
    await removeDir(dir);
  });
  await client.start();
  await snapshotWhere(client, (s) => s.workloads.size === 5);
  const disconnected = eventWhere(client, 'disconnected');
  await first.cp.stop();
  await disconnected;
  t.false(client.connected);
  // Let the clock move: read at once, "seconds disconnected" can still be 0.000.
  await new Promise((r) => setTimeout(r, 20));
  const outage = await registry.metrics();
  t.regex(outage, /zmesh_xds_connected 0/);
  t.regex(outage, /zmesh_xds_disconnected_seconds 0\.\d*[1-9]/);
  t.regex(outage, /zmesh_xds_snapshot_age_seconds 0\.\d*[1-9]/);
  t.is(client.snapshot().workloads.size, 5, 'keeps serving the active snapshot through the outage');

  await writeFile(join(dir, 'p1.yaml'), podYaml('p1', '10.1.0.101'));
  await writeFile(join(dir, 'p4.yaml'), '');
  const response = eventWhere<{ typeUrl: string; names: string[]; removed: string[] }>(
    client,
    'response',
    (r) => r.typeUrl === ADDRESS_TYPE_URL,
  );
  second = await startControlPlane(dir, {}, first.port);
  const delta = await response;
  t.deepEqual(delta.names, ['Kubernetes//Pod/ns1/p1']);
  t.deepEqual(delta.removed, ['Kubernetes//Pod/ns1/p4']);
  const after = await snapshotWhere(client, (s) => s.workloads.size === 4);
  t.deepEqual(after.workloads.get('Kubernetes//Pod/ns1/p1')?.addresses, ['10.1.0.101']);
  if (!client.synced) await eventWhere(client, 'synced');
  const healthy = await registry.metrics();
  t.regex(healthy, /zmesh_xds_connected 1/);
  t.regex(healthy, /zmesh_xds_snapshot_age_seconds 0\n/);
  t.regex(healthy, /zmesh_xds_disconnected_seconds 0\n/);
});

test('a change made while a proxy is away is pending in proxy status, never applied', async (t) => {
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, 'a.yaml': podYaml('a', '10.1.0.1') });
  const { cp, port } = await startControlPlane(dir);
  const client = newClient(port, cp.issueNodeToken('node-1'));
  t.teardown(async () => {
    await cp.stop();
    await removeDir(dir);
  });
  await client.start();
  await snapshotWhere(client, (s) => s.workloads.has(UID_A));
  await until(() => cp.proxyStatus()[0]?.types[ADDRESS_TYPE_URL]?.state === 'SYNCED');
  await client.stop();
  cp.store.applyYaml(podYaml('b', '10.1.0.2'));
  await new Promise((r) => setTimeout(r, 50));
  const report = cp.proxyStatus()[0]!;
  t.false(report.connected);
  t.deepEqual(report.types[ADDRESS_TYPE_URL]?.pending, { count: 1, names: [UID_B] });
  t.is(report.types[ADDRESS_TYPE_URL]?.state, 'PENDING');
});

test('the on-disk snapshot round-trips, and a corrupted one is detected with a clear reason', async (t) => {
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, 'a.yaml': podYaml('a', '10.1.0.1') });
  const { cp, port } = await startControlPlane(dir);
  const snapshotPath = join(dir, 'snapshot.bin');
  const client = newClient(port, cp.issueNodeToken('node-1'), { snapshotPath });
  t.teardown(async () => {
    await cp.stop();
    await removeDir(dir);
  });
  await client.start();
  await snapshotWhere(client, (s) => s.workloads.has(UID_A));
  await client.stop();
  const loaded = await loadSnapshot(snapshotPath);
  t.true(loaded.ok);
  if (loaded.ok) t.deepEqual(loaded.value.workloads.get(UID_A), client.snapshot().workloads.get(UID_A));

  const raw = await readFile(snapshotPath);
  raw.writeUInt8(raw.readUInt8(raw.length - 10) ^ 0x01, raw.length - 10);
  await writeFile(snapshotPath, raw);
  const corrupted = await loadSnapshot(snapshotPath);
  t.false(corrupted.ok);
  if (!corrupted.ok) t.regex(corrupted.error[0]!, /checksum mismatch .* file is corrupted/);

  // A proxy restarting on a corrupted file starts empty rather than trusting it.
  const restarted = newClient(1, 'unused', { snapshotPath });
  const failed = eventWhere<string[]>(restarted, 'loadFailed');
  await restarted.start();
  t.regex((await failed)[0]!, /checksum mismatch/);
  t.is(restarted.snapshot().workloads.size, 0);
  await restarted.stop();
});

test('a restarted proxy is born with its on-disk snapshot before any connection', async (t) => {
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, 'a.yaml': podYaml('a', '10.1.0.1') });
  const { cp, port } = await startControlPlane(dir);
  const snapshotPath = join(dir, 'snapshot.bin');
  const client = newClient(port, cp.issueNodeToken('node-1'), { snapshotPath });
  t.teardown(async () => {
    await cp.stop();
    await removeDir(dir);
  });
  await client.start();
  await snapshotWhere(client, (s) => s.workloads.has(UID_A));
  await client.stop();
  const offline = newClient(1, 'unused', { snapshotPath, backoff: { initialMs: 1000, maxMs: 1000 } });
  await offline.start();
  t.true(offline.snapshot().workloads.has(UID_A));
  await offline.stop();
});

test('in one response, valid resources are applied and only the malformed one is rejected', async (t) => {
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, 'a.yaml': podYaml('a', '10.1.0.1') });
  const { cp, port } = await startControlPlane(dir);
  const client = newClient(port, cp.issueNodeToken('node-1'));
  t.teardown(async () => {
    await client.stop();
    await cp.stop();
    await removeDir(dir);
  });
  await client.start();
  await snapshotWhere(client, (s) => s.workloads.has(UID_A));
  await until(() => cp.proxyStatus()[0]?.types[ADDRESS_TYPE_URL]?.state === 'SYNCED');
  const bad = encodeMessage('istio.workload.Address', {
    workload: {
      uid: 'Kubernetes//Pod/ns1/bad',
      name: 'bad',
      namespace: 'ns1',
      trustDomain: 'td',
      serviceAccount: 'NO',
    },
  });
  // The first change goes out at once; the next two wait for its ACK and coalesce into one response.
  const nacked = eventWhere<NackEvent>(client, 'nack');
  cp.store.applyYaml(podYaml('b', '10.1.0.2'));
  cp.store.applyYaml(podYaml('c', '10.1.0.3'));
  cp.server.injectRawResource(ADDRESS_TYPE_URL, 'Kubernetes//Pod/ns1/bad', bad);
  const response = await eventWhere<{ names: string[] }>(client, 'response', (r) => r.names.length === 2);
  t.deepEqual(response.names.sort(), ['Kubernetes//Pod/ns1/bad', 'Kubernetes//Pod/ns1/c']);
  const nack = await nacked;
  t.deepEqual(nack.reasons, [
    'Kubernetes//Pod/ns1/bad: workload.service_account: "NO" is not a DNS-1123 subdomain',
  ]);
  t.true(client.snapshot().workloads.has('Kubernetes//Pod/ns1/c'));
  t.false(client.snapshot().workloads.has('Kubernetes//Pod/ns1/bad'));
  await until(() => cp.proxyStatus()[0]?.types[ADDRESS_TYPE_URL]?.state === 'NACKED');
  const report = cp.proxyStatus()[0]!.types[ADDRESS_TYPE_URL]!;
  t.deepEqual(report.pending, { count: 1, names: ['Kubernetes//Pod/ns1/bad'] });
  t.deepEqual(
    report.rejected.map((r) => r.name),
    ['Kubernetes//Pod/ns1/bad'],
  );
});

test('nothing is pushed before the first config, so a resuming proxy is never emptied', async (t) => {
  const cp = new ControlPlane({ trustDomain: 'cluster.local' });
  const port = await cp.start(0);
  const client = newClient(port, cp.issueNodeToken('node-1'));
  t.teardown(async () => {
    await client.stop();
    await cp.stop();
  });
  const responses: unknown[] = [];
  client.on('response', (r) => responses.push(r));
  await client.start();
  await eventWhere(client, 'connected');
  await new Promise((r) => setTimeout(r, 100));
  t.is(responses.length, 0);
  t.false(client.synced);
  t.true(cp.store.applyYaml([NAMESPACE_YAML, podYaml('a', '10.1.0.1')].join('---\n')).ok);
  await eventWhere(client, 'synced');
  t.true(client.snapshot().workloads.has(UID_A));
});

test('a control plane whose config directory is refused does not start', async (t) => {
  const dir = await configDir({ 'bad.yaml': 'kind: Pod\nmetadata: { name: x }\n' });
  t.teardown(() => removeDir(dir));
  const cp = new ControlPlane({ trustDomain: 'cluster.local', configDir: dir });
  await t.throwsAsync(cp.start(0), { code: 'ZM_ERR_CONFIG_INVALID' });
  await cp.stop();
});
