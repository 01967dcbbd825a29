import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { CertificateAuthority } from '@zmesh/shared';
import test from 'ava';
import { nodeTlsPath } from './tls-peers.js';

/*
 * The bench's node:tls pipe pair is the floor zmesh is read against, so it has to be a
 * real mTLS pair: bytes cross it both ways, and its server side takes no client without
 * a certificate from the CA.
 */

const ADDR = {
  nodeA: '127.0.79.2',
  nodeB: '127.0.79.3',
  client: '127.0.79.1',
  server: '127.0.79.4',
  fillerPrefix: '127.0.80',
};

function echoServer(): Promise<Server> {
  const server = createServer((s) => {
    s.on('error', () => {});
    s.pipe(s);
  });
  return new Promise((resolve) => server.listen(7007, ADDR.server, () => resolve(server)));
}

function exchange(host: string, port: number, payload: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const s = connect({ host, port });
    const got: Buffer[] = [];
    let n = 0;
    s.on('error', reject);
    s.on('data', (d: Buffer) => {
      got.push(d);
      n += d.length;
      if (n >= payload.length) {
        s.destroy();
        resolve(Buffer.concat(got));
      }
    });
    s.write(payload);
  });
}

test('the node:tls pipe pair carries bytes both ways and refuses a client without a certificate', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-node-tls-'));
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  const echo = await echoServer();
  const path = nodeTlsPath(dir, ca, ADDR);
  t.is(await path.unavailable(), undefined);
  const open = await path.open([{ name: 'echo', host: ADDR.server, port: 7007 }]);
  try {
    t.is(open.pids.length, 2);
    const front = open.endpoints.get('echo')!;
    const payload = Buffer.alloc(256 * 1024, 7);
    t.deepEqual(await exchange(front.host, front.port, payload), payload);
    // The server side listens beside node-b: straight to it with TLS but no client certificate.
    const refused = await new Promise<string>((resolve) => {
      const s = tlsConnect({ host: ADDR.nodeB, port: 16410, rejectUnauthorized: false });
      s.on('secureConnect', () => s.write('x'));
      s.on('data', () => resolve('data'));
      s.on('error', (e) => resolve(`error ${e.message}`));
      s.on('close', () => resolve('closed'));
    });
    t.not(refused, 'data', refused);
  } finally {
    await open.close();
    echo.close();
    await rm(dir, { recursive: true, force: true });
  }
});
