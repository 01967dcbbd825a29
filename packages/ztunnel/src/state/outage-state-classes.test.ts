import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import {
  ADDRESS_TYPE_URL,
  AUTHORIZATION_TYPE_URL,
  buildSnapshot,
  CertificateAuthority,
  EMPTY_STATE,
  TrustBundle,
  validateSvid,
  type Workload,
  writeCurrentStamp,
  writeSnapshot,
  XdsClient,
} from '@zmesh/shared';
import test from 'ava';
import { Registry } from 'prom-client';
import { InboundAuthorizer } from '../authz/inbound-authorizer.js';
import { CertManager } from '../identity/cert-manager.js';
import { toCredential } from '../identity/credential.js';

/**
 * docs/design.md §5: each state class has its own validity through a control-plane outage. One test
 * per class, on an injected clock (nothing here waits for real time to pass).
 */

const conn = {
  sourcePrincipal: 'spiffe://cluster.local/ns/web/sa/front',
  sourceIp: '10.0.0.1',
  destinationIp: '10.0.0.2',
  destinationPort: 8080,
};
const workload = (namespace: string) =>
  ({ uid: `Kubernetes//Pod/${namespace}/w`, namespace, authorizationPolicies: [] }) as unknown as Workload;
const policy = (namespace: string, extra: object = {}) => ({
  name: 'allow-all',
  namespace,
  scope: 'NAMESPACE',
  action: 'ALLOW',
  rules: [{ clauses: [] }],
  dryRun: false,
  ...extra,
});

function xdsClient(now: () => number, extra: { snapshotPath?: string; maxSnapshotAgeMs?: number } = {}) {
  return new XdsClient({
    address: 'unix:/nonexistent/zmesh-test.sock',
    node: { id: 'ztunnel~127.0.0.1~ztunnel-n.istio-system~istio-system.svc.cluster.local' },
    token: 't',
    typeUrls: [ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL],
    credentials: grpc.credentials.createInsecure(),
    backoff: { initialMs: 1000, maxMs: 1000 },
    registry: new Registry(),
    now,
    ...extra,
  });
}

test('routing and workloads: last-known-good from disk with its age exported; too old a snapshot is refused', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-state-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'snapshot');
  const written = 1_000_000;
  await writeSnapshot(path, buildSnapshot(EMPTY_STATE, written));
  let clock = written + 90_000;
  const fresh = xdsClient(() => clock, { snapshotPath: path, maxSnapshotAgeMs: 120_000 });
  await fresh.start();
  t.true(fresh.complete, 'the on-disk snapshot is a complete config to serve from');
  t.false(fresh.connected);
  t.is(fresh.snapshotAgeMs(), 90_000);
  clock += 30_000;
  t.is(fresh.snapshotAgeMs(), 120_000, 'age keeps growing while disconnected');
  await fresh.stop();

  const failures: string[][] = [];
  const stale = xdsClient(() => written + 121_000, { snapshotPath: path, maxSnapshotAgeMs: 120_000 });
  stale.on('loadFailed', (r: string[]) => failures.push(r));
  await stale.start();
  t.false(stale.complete, 'a snapshot over the age bound is not served');
  t.regex(failures[0]?.[0] ?? '', /is 121 s old, over the 120 s bound/);
  await stale.stop();
});

test('a stable config is as fresh as its last-known-current stamp, not as old as its last change', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-state-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'snapshot');
  const day = 24 * 3600 * 1000;
  const now = 100 * day;
  // Config last changed ten days ago; the proxy was in sync with the control plane until a minute ago.
  await writeSnapshot(path, buildSnapshot(EMPTY_STATE, now - 10 * day));
  await writeCurrentStamp(path, now - 60_000);
  const client = xdsClient(() => now, { snapshotPath: path });
  await client.start();
  t.true(client.complete, 'not refused by the 7-day bound');
  t.is(client.snapshotAgeMs(), 60_000);
  await client.stop();
  // A stamp from the future is ignored, never trusted.
  await writeCurrentStamp(path, now + day);
  const skewed = xdsClient(() => now, { snapshotPath: path });
  await skewed.start();
  t.false(skewed.complete);
  await skewed.stop();
});

test('authorization: last-known-good up to the staleness bound, then new connections to enforced destinations fail closed', (t) => {
  let age = 0;
  const authz = new InboundAuthorizer(new Registry(), (uid) => workload(uid.split('/')[3]!));
  authz.replacePolicies([policy('shop'), policy('lab', { dryRun: true })]);
  authz.setStaleness({ ageMs: () => age, maxMs: () => 60_000 });
  t.is(authz.check(workload('shop'), conn), undefined, 'fresh: the ALLOW policy admits');
  age = 60_000;
  t.is(authz.check(workload('shop'), conn), undefined, 'at the bound: still last-known-good');
  age = 60_001;
  const denial = authz.check(workload('shop'), conn);
  t.is(denial?.code, 'ZM_ERR_AUTHZ_STALE');
  t.regex(denial?.message ?? '', /60 s stale, over 60 s/);
  t.is(authz.check(workload('open'), conn), undefined, 'no applicable policy: staleness does not matter');
  t.is(authz.check(workload('lab'), conn), undefined, 'dry-run policies are never enforced, stale or not');
  const closed: string[] = [];
  authz.track(workload('shop'), conn, (e) => closed.push(e.code));
  authz.reevaluate();
  t.deepEqual(closed, [], 'live connections are not cut for staleness alone');
});

test('certificates: valid only until not-after; an expired one is never handed out or adopted', async (t) => {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const id = 'spiffe://cluster.local/ns/shop/sa/w';
  let clock = Date.now();
  const registry = new Registry();
  const certs = new CertManager({
    signer: { sign: (csr, identity, ttl) => ca.signCsr(csr, { identity, ttlSeconds: ttl }) },
    ttlSeconds: 600,
    toCredential,
    registry,
    now: () => clock,
  });
  t.teardown(() => certs.stop());
  const cred = await certs.fetch(id);
  const gauge = async (name: string) =>
    (await registry.getSingleMetric(name)!.get()).values[0]?.value ?? Number.NaN;
  t.is(Math.round(await gauge('zmesh_cert_earliest_lifetime_seconds')), 600);
  clock = cred.notAfter.getTime() - 1;
  t.is(certs.get(id), cred, 'valid up to not-after');
  clock = cred.notAfter.getTime();
  t.is(certs.get(id), undefined, 'at not-after it is gone');
  t.true((await gauge('zmesh_cert_seconds_to_earliest_expiry')) <= 0);
  t.false(certs.adopt(cred), 'an expired persisted credential is not adopted');
});

test('trust bundle: several roots at once, so leaves of the old and the new root both verify during rotation', async (t) => {
  const oldCa = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const newCa = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const bundle = new TrustBundle('cluster.local', [oldCa.rootPem]);
  bundle.add(newCa.rootPem);
  const id = 'spiffe://cluster.local/ns/shop/sa/w';
  const oldLeaf = await oldCa.issue(id, 600);
  const newLeaf = await newCa.issue(id, 600);
  t.true(validateSvid(oldLeaf.certChainPem, { roots: bundle.roots() }).ok);
  t.true(validateSvid(newLeaf.certChainPem, { roots: bundle.roots() }).ok);
  bundle.remove(oldCa.rootPem);
  t.false(
    validateSvid(oldLeaf.certChainPem, { roots: bundle.roots() }).ok,
    'the retired root is no longer trusted',
  );
  t.true(validateSvid(newLeaf.certChainPem, { roots: bundle.roots() }).ok);
});
