import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import {
  CA_METHOD,
  CaClient,
  CertificateAuthority,
  type CertificateRequest,
  type CertificateResponse,
  certificateRequestCodec,
  certificateResponseCodec,
  csrUriSans,
  generateCsr,
  TokenFile,
  TrustBundle,
  toStruct,
} from '@zmesh/shared';
import test from 'ava';
import { IMPERSONATED_IDENTITY } from './ca-service.js';
import { testCsr } from './testing/csr.js';
import {
  configDir,
  eventWhere,
  NAMESPACE_YAML,
  newClient,
  podYaml,
  removeDir,
  startControlPlane,
} from './testing/fixtures.js';

const ID_A = 'spiffe://cluster.local/ns/ns1/sa/sa-a';
const ID_B = 'spiffe://cluster.local/ns/ns1/sa/sa-b';

interface Signed {
  csr: string;
  identity: string;
  ttlSeconds: number;
}

async function setup(t: import('ava').ExecutionContext) {
  const dir = await configDir({
    'ns.yaml': NAMESPACE_YAML,
    'a.yaml': podYaml('a', '10.1.0.1', 'node-1'),
    'b.yaml': podYaml('b', '10.1.0.2', 'node-2'),
  });
  const signed: Signed[] = [];
  const signCsr = async (csr: string, opts: { identity: string; ttlSeconds: number }) => {
    signed.push({ csr, ...opts });
    return ['LEAF', 'ROOT'];
  };
  const { cp, port } = await startControlPlane(dir, { signCsr });
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  t.teardown(async () => {
    client.close();
    await cp.stop();
    await removeDir(dir);
  });
  const call = (token: string, req: CertificateRequest) =>
    new Promise<{ error?: grpc.ServiceError; value?: CertificateResponse }>((resolve) => {
      const md = new grpc.Metadata();
      md.set('authorization', `Bearer ${token}`);
      client.makeUnaryRequest(
        CA_METHOD,
        certificateRequestCodec.serialize,
        certificateResponseCodec.deserialize,
        req,
        md,
        (error, value) => resolve(error ? { error } : { value: value! }),
      );
    });
  return { cp, port, signed, call };
}

test('the CSR reader verifies the self-signature and returns the URI SANs', (t) => {
  t.deepEqual(csrUriSans(testCsr([ID_A])), { ok: true, value: [ID_A] });
  t.deepEqual(csrUriSans(testCsr([])), { ok: true, value: [] });
  const pem = testCsr([ID_A]);
  const der = Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
  der.writeUInt8(der.readUInt8(40) ^ 1, 40); // inside the public key: the signature no longer verifies
  const tampered = `-----BEGIN CERTIFICATE REQUEST-----\n${der.toString('base64')}\n-----END CERTIFICATE REQUEST-----\n`;
  t.false(csrUriSans(tampered).ok);
  t.false(csrUriSans('not a csr').ok);
});

test('a node gets a certificate for a workload scheduled on it (URI SAN or ImpersonatedIdentity)', async (t) => {
  const { cp, signed, call } = await setup(t);
  const bySan = await call(cp.issueNodeToken('node-1'), { csr: testCsr([ID_A]), validityDuration: 3600 });
  t.deepEqual(bySan.value?.certChain, ['LEAF', 'ROOT']);
  t.like(signed[0], { identity: ID_A, ttlSeconds: 3600 });
  const byMetadata = await call(cp.issueNodeToken('node-1'), {
    csr: testCsr([]),
    metadata: toStruct({ [IMPERSONATED_IDENTITY]: ID_A }),
  });
  t.deepEqual(byMetadata.value?.certChain, ['LEAF', 'ROOT']);
  t.like(signed[1], { identity: ID_A, ttlSeconds: 24 * 3600 });
  t.regex(await cp.metrics.registry.metrics(), /^zmesh_cp_csrs_total\{outcome="signed"\} 2$/m);
});

test('the CA refuses identities of workloads on another node, and other nodes tokens', async (t) => {
  const { cp, signed, call } = await setup(t);
  const otherNodesWorkload = await call(cp.issueNodeToken('node-1'), { csr: testCsr([ID_B]) });
  t.is(otherNodesWorkload.error?.code, grpc.status.PERMISSION_DENIED);
  t.regex(otherNodesWorkload.error!.details, /not the identity of a workload scheduled on node node-1/);
  const otherNodesToken = await call(cp.issueNodeToken('node-2'), {
    csr: testCsr([]),
    metadata: toStruct({ [IMPERSONATED_IDENTITY]: ID_A }),
  });
  t.is(otherNodesToken.error?.code, grpc.status.PERMISSION_DENIED);
  const mismatch = await call(cp.issueNodeToken('node-1'), {
    csr: testCsr([ID_B]),
    metadata: toStruct({ [IMPERSONATED_IDENTITY]: ID_A }),
  });
  t.is(mismatch.error?.code, grpc.status.PERMISSION_DENIED);
  const forged = cp.issueNodeToken('node-1').replace(/\.[^.]+$/, '.AAAA');
  t.is((await call(forged, { csr: testCsr([ID_A]) })).error?.code, grpc.status.UNAUTHENTICATED);
  t.is(signed.length, 0, 'nothing was signed');
});

test('an xDS stream without a valid node token is refused UNAUTHENTICATED, and proxy-status lists it refused', async (t) => {
  const { cp, port } = await setup(t);
  const client = newClient(port, 'zmn1.bm9kZS0x.forged', { backoff: { initialMs: 5000, maxMs: 5000 } });
  const ended = eventWhere<{ code: number }>(client, 'disconnected');
  await client.start();
  t.is((await ended).code, grpc.status.UNAUTHENTICATED);
  await client.stop();
  // Not `[]`: the proxy that is being turned away is listed, by the id it claimed.
  const [row, ...more] = cp.proxyStatus();
  t.is(more.length, 0);
  t.is(row?.proxy, 'ztunnel~10.0.0.1~ztunnel-1.istio-system~istio-system.svc.cluster.local');
  t.false(row?.connected);
  t.is(row?.refused?.reason, 'missing or invalid node token');
  t.deepEqual(row?.types, {});
});

test('a proxy claiming another node than its token names is refused', async (t) => {
  const { cp, port } = await setup(t);
  const client = newClient(port, cp.issueNodeToken('node-1'), {
    node: { id: 'ztunnel~x', metadata: { NODE_NAME: 'node-2' } },
    backoff: { initialMs: 5000, maxMs: 5000 },
  });
  const ended = eventWhere<{ code: number }>(client, 'disconnected');
  await client.start();
  t.is((await ended).code, grpc.status.PERMISSION_DENIED);
  await client.stop();
  t.deepEqual(
    cp.proxyStatus().map((r) => [r.proxy, r.node, r.refused?.reason]),
    [['ztunnel~x', 'node-1', 'token is for node node-1, not node-2']],
  );
});

test('the CA client fails over past a dead address and re-reads a refused token once', async (t) => {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, 'a.yaml': podYaml('a', '10.1.0.1', 'node-1') });
  const { cp, port } = await startControlPlane(dir, { signCsr: (csr, o) => ca.signCsr(csr, o) });
  const dead = createServer();
  await new Promise<void>((resolve) => dead.listen(0, '127.0.0.1', resolve));
  const deadPort = (dead.address() as AddressInfo).port;
  await new Promise((resolve) => dead.close(resolve));
  let token = 'zmn1.stale.token';
  let refreshes = 0;
  const client = new CaClient({
    address: `127.0.0.1:${deadPort},127.0.0.1:${port}`,
    token: () => token,
    refreshToken: async () => {
      refreshes++;
      token = cp.issueNodeToken('node-1');
      return true;
    },
    bundle: new TrustBundle('cluster.local', [ca.rootPem]),
    timeoutMs: 2000,
  });
  t.teardown(async () => {
    client.close();
    await cp.stop();
    await removeDir(dir);
  });
  const { csrPem } = await generateCsr(ID_A);
  const chain = await client.sign(csrPem, ID_A, 600);
  t.true(chain.length >= 1);
  t.is(refreshes, 1);
  // A token the file cannot fix stays refused: one re-read, then ZM_ERR_CA_REFUSED.
  const refused = new CaClient({
    address: `127.0.0.1:${port}`,
    token: () => 'zmn1.bad.token',
    refreshToken: async () => false,
    bundle: new TrustBundle('cluster.local', [ca.rootPem]),
  });
  t.teardown(() => refused.close());
  const e = await t.throwsAsync(refused.sign(csrPem, ID_A, 600));
  t.regex(e.message, /UNAUTHENTICATED/);
});

test('a token rotated in the watched token file is used on the next CSR, with no refusal first (issue 33)', async (t) => {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const dir = await configDir({ 'ns.yaml': NAMESPACE_YAML, 'a.yaml': podYaml('a', '10.1.0.1', 'node-1') });
  const { cp, port } = await startControlPlane(dir, { signCsr: (csr, o) => ca.signCsr(csr, o) });
  const tokens = await mkdtemp(join(tmpdir(), 'zmesh-token-'));
  const path = join(tokens, 'node.token');
  await writeFile(path, 'zmn1.stale.token');
  const file = await TokenFile.read(path);
  file.watch();
  let refreshes = 0;
  const client = new CaClient({
    address: `127.0.0.1:${port}`,
    token: () => file.token,
    refreshToken: () => {
      refreshes++;
      return file.reread();
    },
    bundle: new TrustBundle('cluster.local', [ca.rootPem]),
    timeoutMs: 2000,
  });
  t.teardown(async () => {
    file.stop();
    client.close();
    await cp.stop();
    await removeDir(dir);
    await rm(tokens, { recursive: true, force: true });
  });
  // Rotated as a writer does it (a rename), with no request in between to be refused.
  const fresh = cp.issueNodeToken('node-1');
  await writeFile(`${path}.tmp`, fresh);
  await rename(`${path}.tmp`, path);
  const deadline = Date.now() + 5000;
  while (file.token !== fresh && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  t.is(file.token, fresh, 'the watch read the new token');
  const { csrPem } = await generateCsr(ID_A);
  const chain = await client.sign(csrPem, ID_A, 600);
  t.true(chain.length >= 1);
  t.is(refreshes, 0, 'signed at the first attempt: never refused');
});
