import test from 'ava';
import { CertificateAuthority, generateCsr, TrustBundle } from '../index.js';
import { CaClient } from './ca-client.js';

const ID = 'spiffe://cluster.local/ns/team-a/sa/client';

async function setup(opts: { trustRootsFromCa?: boolean } = {}) {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const bundle = new TrustBundle('cluster.local', [ca.rootPem]);
  // Port 9 on loopback: verifyChain never dials.
  const client = new CaClient({ address: '127.0.0.1:9', token: () => 't', bundle, ...opts });
  const { csrPem } = await generateCsr(ID);
  return { ca, bundle, client, csrPem };
}

test('a chain for the asked identity, certifying our key, anchored in the bundle is accepted', async (t) => {
  const { ca, client, csrPem } = await setup();
  const chain = await ca.signCsr(csrPem, { identity: ID, ttlSeconds: 600 });
  t.true(client.verifyChain(chain, ID, csrPem).ok);
  client.close();
});

test('a chain for another identity is refused', async (t) => {
  const { ca, client, csrPem } = await setup();
  const other = 'spiffe://cluster.local/ns/team-b/sa/server';
  const chain = await ca.signCsr(csrPem, { identity: other, ttlSeconds: 600 });
  const r = client.verifyChain(chain, ID, csrPem);
  t.false(r.ok);
  t.regex(String(!r.ok && r.error), /asked spiffe:\/\/cluster.local\/ns\/team-a\/sa\/client/);
  client.close();
});

test('a leaf that certifies a key other than the CSR is refused', async (t) => {
  const { ca, client, csrPem } = await setup();
  const { csrPem: otherCsr } = await generateCsr(ID);
  const chain = await ca.signCsr(otherCsr, { identity: ID, ttlSeconds: 600 });
  const r = client.verifyChain(chain, ID, csrPem);
  t.false(r.ok);
  t.regex(String(!r.ok && r.error), /does not certify the key of the CSR/);
  client.close();
});

test('a chain from an unknown root is refused, and the root is not trusted', async (t) => {
  const { client, bundle, csrPem } = await setup();
  const rogue = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const chain = [...(await rogue.signCsr(csrPem, { identity: ID, ttlSeconds: 600 })), rogue.rootPem];
  const r = client.verifyChain(chain, ID, csrPem);
  t.false(r.ok);
  t.regex(String(!r.ok && r.error), /trusted root/);
  t.is(bundle.roots().length, 1);
  client.close();
});

test('with trustRootsFromCa, a new root at the end of the chain joins the bundle beside the old one', async (t) => {
  const { client, bundle, csrPem } = await setup({ trustRootsFromCa: true });
  const next = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const signed = await next.signCsr(csrPem, { identity: ID, ttlSeconds: 600 });
  const chain = signed.at(-1) === next.rootPem ? signed : [...signed, next.rootPem];
  t.true(client.verifyChain(chain, ID, csrPem).ok);
  t.is(bundle.roots().length, 2);
  client.close();
});

test('an unreachable CA fails within the timeout as ZM_ERR_CA_UNAVAILABLE', async (t) => {
  const { bundle, csrPem } = await setup();
  const client = new CaClient({ address: '127.0.0.1:9', token: () => 't', bundle, timeoutMs: 300 });
  const start = Date.now();
  const e = await t.throwsAsync(client.sign(csrPem, ID, 600));
  t.is((e as { code?: string }).code, 'ZM_ERR_CA_UNAVAILABLE');
  t.true(Date.now() - start < 2000);
  client.close();
});
