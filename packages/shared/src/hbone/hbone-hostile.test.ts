import * as http2 from 'node:http2';
import * as net from 'node:net';
import * as tls from 'node:tls';
import test, { type ExecutionContext } from 'ava';
import { isZmeshError } from '../errors/index.js';
import { CertificateAuthority } from '../identity/ca.js';
import { TrustBundle } from '../identity/trust-bundle.js';
import { FRAME, goawayCode, RawH2 } from '../testing/raw-h2.js';
import {
  makePki,
  metricValue,
  openFds,
  type Pki,
  sa,
  settleFds,
  startEcho,
  startHbone,
} from '../testing/transport-fixtures.js';
import { clientTlsOptions } from '../tls/mtls.js';
import { connectHbone } from './hbone-client.js';
import { MAX_HEADER_LIST_BYTES } from './hbone-settings.js';

/**
 * Hostile inputs (docs/design.md §8): each ends in a clear error, touches nothing else, and leaks
 * no file descriptor. Serial, because the fd count is process-wide.
 */
const pki: Pki = await makePki();
const echo = await startEcho();
const { server, port, metrics } = await startHbone(pki, echo.port);
const rawTls = clientTlsOptions(pki.client, pki.bundle, [pki.server.identity]);

test.after.always(async () => {
  await server.close();
  await echo.close();
});

/** Runs `body`, then waits for fds to return to where they were. */
async function noLeak(t: ExecutionContext, body: () => Promise<void>): Promise<void> {
  const before = openFds();
  await body();
  const after = await settleFds(before);
  t.true(after <= before, `fds before ${before}, after ${after}`);
  t.is(server.connectionCount(), 0, 'no session left on the server');
}

function connect(extra: Partial<Parameters<typeof connectHbone>[0]> = {}) {
  return connectHbone({
    host: '127.0.0.1',
    port,
    credential: pki.client,
    bundle: pki.bundle,
    expectedIdentities: [pki.server.identity],
    timeoutMs: 2000,
    ...extra,
  });
}

function socketEnd(socket: net.Socket): Promise<Error | undefined> {
  return new Promise((resolve) => {
    let error: Error | undefined;
    socket.on('error', (e) => {
      error = e;
    });
    socket.once('close', () => resolve(error));
  });
}

test.serial('a server whose identity is not the expected one is refused by the client', async (t) => {
  await noLeak(t, async () => {
    const e = await t.throwsAsync(connect({ expectedIdentities: [sa('someone-else')] }));
    t.true(isZmeshError(e, 'ZM_ERR_TLS_PEER_IDENTITY'), e?.message);
    t.regex(e!.message, /peer identity spiffe:\/\/zmesh\.test\/ns\/default\/sa\/server is not one of/);
  });
});

test.serial('a client without a certificate fails the handshake', async (t) => {
  await noLeak(t, async () => {
    const before = await metricValue(metrics, 'zmesh_hbone_handshake_failures_total', {
      reason: 'no_certificate',
    });
    const socket = tls.connect({
      host: '127.0.0.1',
      port,
      ca: pki.bundle.roots(),
      ALPNProtocols: ['h2'],
      checkServerIdentity: () => undefined,
    });
    const error = await socketEnd(socket);
    t.regex(String((error as { code?: string })?.code), /CERTIFICATE_REQUIRED|ECONNRESET/);
    t.is(
      await metricValue(metrics, 'zmesh_hbone_handshake_failures_total', { reason: 'no_certificate' }),
      before + 1,
    );
  });
});

test.serial('a TLS 1.2 client is refused', async (t) => {
  await noLeak(t, async () => {
    // Its own context: the shared client context (rawTls.secureContext) is TLS 1.3 only.
    const socket = tls.connect({
      ...rawTls,
      secureContext: tls.createSecureContext({
        key: pki.client.keyPem,
        cert: pki.client.certChainPem[0],
        ca: pki.bundle.roots(),
        minVersion: 'TLSv1.2',
        maxVersion: 'TLSv1.2',
      }),
      host: '127.0.0.1',
      port,
    });
    const error = await socketEnd(socket);
    t.regex(String((error as { code?: string })?.code), /PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL|ECONNRESET/);
    t.true((await metricValue(metrics, 'zmesh_hbone_handshake_failures_total', { reason: 'protocol' })) >= 1);
  });
});

test.serial('plaintext bytes on the port are dropped without an HTTP answer', async (t) => {
  await noLeak(t, async () => {
    const before = await metricValue(metrics, 'zmesh_hbone_handshake_failures_total', { reason: 'protocol' });
    const socket = net.connect({ host: '127.0.0.1', port });
    const received: Buffer[] = [];
    socket.on('data', (c: Buffer) => received.push(c));
    socket.write('CONNECT 10.0.0.1:80 HTTP/1.1\r\nHost: 10.0.0.1:80\r\n\r\n');
    await socketEnd(socket);
    t.false(Buffer.concat(received).toString('latin1').includes('HTTP/1.1'));
    t.is(
      await metricValue(metrics, 'zmesh_hbone_handshake_failures_total', { reason: 'protocol' }),
      before + 1,
    );
  });
});

test.serial('a TLS 1.3 client that does not offer h2 is refused', async (t) => {
  await noLeak(t, async () => {
    const socket = tls.connect({ ...rawTls, host: '127.0.0.1', port, ALPNProtocols: ['http/1.1'] });
    socket.on('secureConnect', () => socket.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n'));
    const received: Buffer[] = [];
    socket.on('data', (c: Buffer) => received.push(c));
    await socketEnd(socket);
    t.is(Buffer.concat(received).length, 0, 'no HTTP/1.1 answer');
  });
});

test.serial('an expired client certificate fails the handshake', async (t) => {
  await noLeak(t, async () => {
    const expired = await pki.ca.issue(sa('client'), 1, { notBefore: new Date(Date.now() - 3600_000) });
    // connectHbone refuses to present it at all (fail closed, docs/design.md §8)...
    const local = await t.throwsAsync(connect({ credential: expired }));
    t.true(isZmeshError(local, 'ZM_ERR_CERT_EXPIRED'), local?.message);
    // ...so present it by hand: the server must refuse it too.
    const socket = tls.connect({
      ...clientTlsOptions(expired, pki.bundle, [pki.server.identity]),
      host: '127.0.0.1',
      port,
    });
    await socketEnd(socket);
    t.false(socket.authorized && socket.alpnProtocol === 'h2' && !socket.destroyed);
    t.is(await metricValue(metrics, 'zmesh_hbone_handshake_failures_total', { reason: 'expired' }), 1);
  });
});

test.serial('a certificate from another CA is refused by TLS', async (t) => {
  await noLeak(t, async () => {
    const other = await CertificateAuthority.create({ trustDomain: 'other.test' });
    const stranger = await other.issue('spiffe://other.test/ns/default/sa/client', 600);
    const e = await t.throwsAsync(connect({ credential: stranger }));
    t.true(isZmeshError(e, 'ZM_ERR_HBONE_SESSION'), e?.message);
    t.regex(e!.message, /during the handshake/);
    t.is(await metricValue(metrics, 'zmesh_hbone_handshake_failures_total', { reason: 'untrusted' }), 1);
  });
});

test.serial('another trust domain is refused even when its chain verifies', async (t) => {
  const other = await CertificateAuthority.create({ trustDomain: 'other.test' });
  const stranger = await other.issue('spiffe://other.test/ns/default/sa/client', 600);
  // A misconfigured bundle that holds a foreign root: TLS accepts, the trust-domain rule must not.
  pki.bundle.add(other.rootPem);
  try {
    await noLeak(t, async () => {
      const e = await t.throwsAsync(connect({ credential: stranger }));
      t.true(isZmeshError(e, 'ZM_ERR_HBONE_SESSION'), e?.message);
      t.regex(e!.message, /ZM_ERR_TLS_PEER_TRUST_DOMAIN/);
      t.is(await metricValue(metrics, 'zmesh_errors_total', { code: 'ZM_ERR_TLS_PEER_TRUST_DOMAIN' }), 1);
    });
  } finally {
    pki.bundle.remove(other.rootPem);
  }
});

test.serial('a method other than CONNECT gets 400 and onTunnel is not called', async (t) => {
  await noLeak(t, async () => {
    const session = http2.connect(`https://127.0.0.1:${port}`, {
      createConnection: () => tls.connect({ ...rawTls, host: '127.0.0.1', port }),
    });
    session.on('error', () => {});
    const req = session.request({ ':method': 'GET', ':path': '/', ':authority': `127.0.0.1:${echo.port}` });
    const headers = await new Promise<http2.IncomingHttpHeaders>((resolve) => req.once('response', resolve));
    t.is(Number(headers[':status']), 400);
    t.is(headers['x-zmesh-error'], 'ZM_ERR_HBONE_BAD_METHOD');
    req.close();
    session.close();
    await new Promise((resolve) => session.once('close', resolve));
  });
});

test.serial('a malformed authority gets 400 and the session stays usable', async (t) => {
  await noLeak(t, async () => {
    const session = await connect();
    for (const authority of ['db.example:5432', '010.0.0.1:80', '[fe80::1%eth0]:80', '10.0.0.1:0']) {
      const e = await t.throwsAsync(session.openTunnel({ authority }));
      t.like(
        (e as { context?: object }).context,
        { status: 400, code: 'ZM_ERR_HBONE_BAD_AUTHORITY' },
        authority,
      );
    }
    const tunnel = await session.openTunnel({ authority: '127.0.0.1:9' });
    tunnel.end('still fine');
    t.is((await tunnel.toArray()).join(''), 'still fine');
    session.close();
    await new Promise((resolve) => session.once('close', resolve));
  });
});

test.serial('an oversized header block is a stream error; the connection carries on', async (t) => {
  await noLeak(t, async () => {
    const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
    raw.headers(1, [
      [':method', 'CONNECT'],
      [':authority', '127.0.0.1:9'],
      ['x-padding', 'a'.repeat(MAX_HEADER_LIST_BYTES + 4096)],
    ]);
    const reset = await raw.waitFor(
      (f) =>
        (f.type === FRAME.RST_STREAM || f.type === FRAME.GOAWAY) &&
        (f.streamId === 1 || f.type === FRAME.GOAWAY),
    );
    t.is(reset?.type, FRAME.RST_STREAM, 'a stream reset, not a GOAWAY');
    t.is(reset?.payload.readUInt32BE(0), http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    raw.headers(3, [
      [':method', 'CONNECT'],
      [':authority', '127.0.0.1:9'],
    ]);
    const ok = await raw.waitFor((f) => f.type === FRAME.HEADERS && f.streamId === 3);
    t.truthy(ok, 'the next stream on the same connection is answered');
    raw.destroy();
    await raw.closed;
  });
});

test.serial('a burst of 1,000 resets closes that connection only', async (t) => {
  await noLeak(t, async () => {
    const bystander = await connect();
    const raw = await RawH2.connect({ ...rawTls, host: '127.0.0.1', port });
    for (let i = 0; i < 1000; i++) {
      const id = 2 * i + 1;
      if (
        !raw.headers(id, [
          [':method', 'CONNECT'],
          [':authority', '127.0.0.1:9'],
        ])
      )
        break;
      raw.rst(id, http2.constants.NGHTTP2_CANCEL);
    }
    const goaway = await raw.waitFor((f) => f.type === FRAME.GOAWAY);
    t.is(goaway && goawayCode(goaway), http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    t.is(goaway?.payload.subarray(8).toString(), 'ZM_ERR_HBONE_RAPID_RESET');
    await raw.closed;
    t.is(await metricValue(metrics, 'zmesh_errors_total', { code: 'ZM_ERR_HBONE_RAPID_RESET' }), 1);
    const tunnel = await bystander.openTunnel({ authority: `127.0.0.1:${echo.port}` });
    tunnel.end('bystander');
    t.is((await tunnel.toArray()).join(''), 'bystander');
    bystander.close();
    await new Promise((resolve) => bystander.once('close', resolve));
  });
});

test.serial('a trust bundle that drops a root refuses its leaves on new handshakes', async (t) => {
  const rotated = await CertificateAuthority.create({ trustDomain: pki.ca.trustDomain });
  const bundle = new TrustBundle(pki.ca.trustDomain, [pki.ca.rootPem, rotated.rootPem]);
  const newClient = await rotated.issue(sa('client'), 600);
  const s = await startHbone({ ...pki, bundle }, echo.port);
  const ok = await connectHbone({
    host: '127.0.0.1',
    port: s.port,
    credential: newClient,
    bundle,
    expectedIdentities: [pki.server.identity],
  });
  bundle.remove(rotated.rootPem);
  const e = await t.throwsAsync(
    connectHbone({
      host: '127.0.0.1',
      port: s.port,
      credential: newClient,
      bundle,
      expectedIdentities: [pki.server.identity],
    }),
  );
  t.true(isZmeshError(e, 'ZM_ERR_HBONE_SESSION'));
  const tunnel = await ok.openTunnel({ authority: '127.0.0.1:9' });
  tunnel.end('existing session untouched');
  t.is((await tunnel.toArray()).join(''), 'existing session untouched');
  ok.close();
  await s.server.close();
});

test.serial('TCP connections that never start TLS are closed at the handshake deadline', async (t) => {
  const idle = await startHbone(pki, echo.port, { handshakeTimeoutMs: 300 });
  try {
    const sockets = Array.from({ length: 50 }, () => net.connect({ host: '127.0.0.1', port: idle.port }));
    const ended = await Promise.race([
      Promise.all(sockets.map((s) => socketEnd(s))).then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), 3000)),
    ]);
    const open = sockets.filter((s) => !s.destroyed && !s.readableEnded).length;
    for (const s of sockets) s.destroy();
    t.true(ended, `${open} of 50 idle connections still open 3 s after a 300 ms deadline`);
  } finally {
    await idle.server.close();
  }
});
