import type { AddressInfo } from 'node:net';
import * as tls from 'node:tls';
import test from 'ava';
import { isZmeshError } from '../errors/index.js';
import { CertificateAuthority } from '../identity/ca.js';
import { TrustBundle } from '../identity/trust-bundle.js';
import { makePki, sa } from '../testing/transport-fixtures.js';
import {
  CHECKED_PEERS_KEPT,
  checkedPeerCount,
  clientSecureContext,
  clientTlsOptions,
  peerIdentity,
  serverTlsOptions,
  verifyPeerIdentity,
} from './mtls.js';

const pki = await makePki();

/** One TLS handshake with the given client options; returns what each side saw. */
async function handshake(bundle: TrustBundle, clientOpts: tls.ConnectionOptions) {
  const server = tls.createServer(serverTlsOptions(pki.server, bundle));
  const accepted = new Promise<tls.TLSSocket>((resolve) => {
    server.once('secureConnection', resolve);
  });
  server.on('tlsClientError', () => {});
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = tls.connect({
    ...clientOpts,
    host: '127.0.0.1',
    port: (server.address() as AddressInfo).port,
  });
  const clientResult = new Promise<Error | tls.TLSSocket>((resolve) => {
    client.once('secureConnect', () => resolve(client));
    client.once('error', resolve);
  });
  const result = await clientResult;
  const serverSide = result instanceof Error ? undefined : await accepted;
  return {
    result,
    serverSide,
    close: () => {
      client.destroy();
      serverSide?.destroy();
      server.close();
    },
  };
}

test('server options: TLS 1.3 only, h2, client certificate required, bundle roots only', (t) => {
  const o = serverTlsOptions(pki.server, pki.bundle);
  t.like(o, { minVersion: 'TLSv1.3', maxVersion: 'TLSv1.3', requestCert: true, rejectUnauthorized: true });
  t.deepEqual(o.ALPNProtocols, ['h2']);
  t.deepEqual(o.ca, pki.bundle.roots());
  t.false(String(o.cert).includes(pki.ca.rootPem.trim()), 'the root is not presented');
});

test('each side learns the other one SPIFFE ID', async (t) => {
  const h = await handshake(pki.bundle, clientTlsOptions(pki.client, pki.bundle, [pki.server.identity]));
  t.false(h.result instanceof Error);
  t.deepEqual(peerIdentity(h.serverSide!, pki.ca.trustDomain), { ok: true, value: pki.client.identity });
  t.deepEqual(peerIdentity(h.result as tls.TLSSocket, pki.ca.trustDomain), {
    ok: true,
    value: pki.server.identity,
  });
  h.close();
});

test('the client refuses a server that is not one of the expected identities', async (t) => {
  const h = await handshake(pki.bundle, clientTlsOptions(pki.client, pki.bundle, [sa('db')]));
  t.true(isZmeshError(h.result, 'ZM_ERR_TLS_PEER_IDENTITY'));
  h.close();
});

test('a verified peer from another trust domain is named as such', async (t) => {
  const other = await CertificateAuthority.create({ trustDomain: 'other.test' });
  const stranger = await other.issue('spiffe://other.test/ns/x/sa/y', 600);
  const bundle = new TrustBundle(pki.ca.trustDomain, [pki.ca.rootPem, other.rootPem]);
  const h = await handshake(bundle, clientTlsOptions(stranger, bundle, [pki.server.identity]));
  const id = verifyPeerIdentity(h.serverSide!, pki.ca.trustDomain);
  t.true(!id.ok && isZmeshError(id.error, 'ZM_ERR_TLS_PEER_TRUST_DOMAIN'));
  const reasons = peerIdentity(h.serverSide!, pki.ca.trustDomain);
  t.true(!reasons.ok && /outside trust domain zmesh\.test/.test(reasons.error[0]!));
  h.close();
});

test('a remembered peer certificate keeps its verdict per trust domain, and the memory is bounded', async (t) => {
  const h = await handshake(pki.bundle, clientTlsOptions(pki.client, pki.bundle, [pki.server.identity]));
  const first = verifyPeerIdentity(h.serverSide!, pki.ca.trustDomain);
  t.deepEqual(
    verifyPeerIdentity(h.serverSide!, pki.ca.trustDomain),
    first,
    'the same answer when remembered',
  );
  const elsewhere = verifyPeerIdentity(h.serverSide!, 'other.test');
  t.true(
    !elsewhere.ok && isZmeshError(elsewhere.error, 'ZM_ERR_TLS_PEER_TRUST_DOMAIN'),
    'keyed by trust domain too',
  );
  t.deepEqual(verifyPeerIdentity(h.serverSide!, pki.ca.trustDomain), first);
  for (let i = 0; i < CHECKED_PEERS_KEPT + 10; i++) verifyPeerIdentity(h.serverSide!, `td${i}.test`);
  t.is(checkedPeerCount(), CHECKED_PEERS_KEPT);
  h.close();
});

test('connections dialled with one credential share one client TLS context, rebuilt when the roots change', async (t) => {
  const other = await CertificateAuthority.create({ trustDomain: pki.ca.trustDomain });
  const bundle = new TrustBundle(pki.ca.trustDomain, [pki.ca.rootPem]);
  const first = clientSecureContext(pki.client, bundle);
  t.is(clientSecureContext(pki.client, bundle), first, 'built once');
  t.is(clientTlsOptions(pki.client, bundle, [pki.server.identity]).secureContext, first);
  t.not(clientSecureContext(pki.server, bundle), first, 'another credential, another context');
  bundle.add(other.rootPem);
  const widened = clientSecureContext(pki.client, bundle);
  t.not(widened, first, 'a root added');
  t.is(clientSecureContext(pki.client, bundle), widened);
  bundle.remove(other.rootPem);
  t.not(clientSecureContext(pki.client, bundle), widened, 'a root removed');
});

test('a root removed from the bundle is no longer trusted by new connections of a cached context', async (t) => {
  const bundle = new TrustBundle(pki.ca.trustDomain, [pki.ca.rootPem]);
  const ok = await handshake(pki.bundle, clientTlsOptions(pki.client, bundle, [pki.server.identity]));
  t.false(ok.result instanceof Error, 'trusted while the root is in the bundle');
  ok.close();
  const next = await CertificateAuthority.create({ trustDomain: pki.ca.trustDomain });
  bundle.add(next.rootPem);
  bundle.remove(pki.ca.rootPem);
  const refused = await handshake(pki.bundle, clientTlsOptions(pki.client, bundle, [pki.server.identity]));
  t.true(refused.result instanceof Error, "the server's root is gone");
  refused.close();
});
