import { X509Certificate } from 'node:crypto';
import { connect } from 'node:tls';
import { CertificateAuthority } from '@zmesh/shared';
import test from 'ava';
import { NodeTokens } from './node-tokens.js';
import { ServingCredentials } from './serving-cert.js';
import { XdsServer } from './xds-server.js';

/** The certificate a fresh TLS handshake with 127.0.0.1:port is given, verified against `root`. */
function served(port: number, root: string, servername: string): Promise<X509Certificate> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, ca: root, servername, ALPNProtocols: ['h2'] }, () => {
      const raw = s.getPeerCertificate().raw;
      s.destroy();
      resolve(new X509Certificate(raw));
    });
    s.on('error', reject);
  });
}

test('a renewed serving certificate is what the next handshake gets; the bound server keeps serving', async (t) => {
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const creds = await ServingCredentials.start(ca, { dnsNames: ['cp.zmesh-system.svc'], ips: ['127.0.0.1'] });
  const server = new XdsServer({ tokens: new NodeTokens() });
  t.teardown(async () => {
    creds.close();
    await server.close();
  });
  // TLS on loopback too when it is given (the refusal is only of plaintext elsewhere).
  const port = await server.listen(0, '127.0.0.1', creds);
  const first = await served(port, ca.rootPem, 'cp.zmesh-system.svc');
  t.regex(first.subjectAltName ?? '', /DNS:cp\.zmesh-system\.svc/);
  t.is(creds.issued, 1);
  await creds.renew();
  const second = await served(port, ca.rootPem, 'cp.zmesh-system.svc');
  t.is(creds.issued, 2);
  t.not(second.serialNumber, first.serialNumber);
  t.true(new Date(creds.notAfter).getTime() > Date.now() + 23 * 3600_000);
  const other = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  await t.throwsAsync(() => served(port, other.rootPem, 'cp.zmesh-system.svc'), { message: /certificate/ });
});

test('a plaintext listen on a non-loopback address is refused', async (t) => {
  const server = new XdsServer({ tokens: new NodeTokens() });
  t.teardown(() => server.close());
  await t.throwsAsync(() => server.listen(0, '10.255.0.1'), {
    message: /ZM_ERR_XDS_BIND_REFUSED|plaintext binds loopback only/,
  });
});
