import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { CertificateAuthority } from '@zmesh/shared';
import test from 'ava';
import type { PathSpec } from './peer-paths.js';
import { haproxyHopPath, nodeHopPath } from './tls-peers.js';

/*
 * The waypoint's CPU is read against these peers, so they have to be what they say: an
 * mTLS pair with a proxy between that handles HTTP at L7 (the request is parsed and sent
 * again, so the backend sees it re-written) and other bytes at L4, and whose hop takes no
 * client without a certificate from the CA.
 */

const ADDR = {
  nodeA: '127.0.81.2',
  nodeB: '127.0.81.3',
  client: '127.0.81.1',
  server: '127.0.81.4',
  fillerPrefix: '127.0.82',
};

function listen(server: Server, port: number): Promise<Server> {
  return new Promise((resolve) => server.listen(port, ADDR.server, () => resolve(server)));
}

/** A raw HTTP/1.1 backend that keeps the bytes of each request head it is sent. */
function recordingBackend(heads: string[]): Server {
  return createServer((s) => {
    s.on('error', () => {});
    let buf = '';
    s.on('data', (d: Buffer) => {
      buf += d.toString('latin1');
      for (let end = buf.indexOf('\r\n\r\n'); end >= 0; end = buf.indexOf('\r\n\r\n')) {
        heads.push(buf.slice(0, end));
        buf = buf.slice(end + 4);
        s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
      }
    });
  });
}

function exchange(
  host: string,
  port: number,
  payload: Buffer,
  until: (got: Buffer) => boolean,
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const s: Socket = connect({ host, port });
    const got: Buffer[] = [];
    s.on('error', reject);
    s.on('data', (d: Buffer) => {
      got.push(d);
      const all = Buffer.concat(got);
      if (until(all)) {
        s.destroy();
        resolve(all);
      }
    });
    s.write(payload);
  });
}

function refusedWithoutCertificate(host: string, port: number): Promise<string> {
  return new Promise<string>((resolve) => {
    const s = tlsConnect({ host, port, rejectUnauthorized: false });
    s.on('secureConnect', () => s.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n'));
    s.on('data', () => resolve('data'));
    s.on('error', (e) => resolve(`error ${e.message}`));
    s.on('close', () => resolve('closed'));
  });
}

function haproxyInstalled(): boolean {
  try {
    execFileSync('which', ['haproxy'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const cases: [string, (dir: string, ca: CertificateAuthority) => PathSpec, number, boolean][] = [
  ['node:https hop', (dir, ca) => nodeHopPath(dir, ca, ADDR), 16600, true],
  ['haproxy HTTP hop', (dir, ca) => haproxyHopPath(dir, ca, ADDR), 16500, haproxyInstalled()],
];

for (const [name, pathOf, base, available] of cases) {
  const title = `the ${name} path carries HTTP at L7 and other bytes at L4; its hop refuses a client without a certificate`;
  if (!available) {
    test.skip(`${title} (skipped: haproxy not installed; scripts/bootstrap.sh installs it)`, () => {});
    continue;
  }
  test.serial(title, async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'zmesh-l7-hop-'));
    const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
    const heads: string[] = [];
    const http = await listen(recordingBackend(heads), 8080);
    const echo = await listen(
      createServer((s) => {
        s.on('error', () => {});
        s.pipe(s);
      }),
      7007,
    );
    const path = pathOf(dir, ca);
    t.is(await path.unavailable(), undefined);
    t.true(path.l7Hop);
    const open = await path.open([
      { name: 'http', host: ADDR.server, port: 8080 },
      { name: 'echo', host: ADDR.server, port: 7007 },
    ]);
    try {
      t.is(open.pids.length, 3);
      t.is(open.waypointPid, open.pids[1], 'the hop is the process whose CPU is reported');
      const front = open.endpoints.get('http')!;
      const reply = await exchange(
        front.host,
        front.port,
        Buffer.from('GET /x HTTP/1.1\r\nHost: bench\r\nX-Test:    a\r\n\r\n', 'latin1'),
        (got) => got.toString('latin1').endsWith('ok'),
      );
      t.regex(reply.toString('latin1'), /^HTTP\/1\.1 200/);
      t.is(heads.length, 1);
      // An L4 hop would pass the head on byte for byte; an L7 one writes it out again.
      t.regex(heads[0]!, /^GET \/x HTTP\/1\.1\r\n/);
      t.regex(heads[0]!, /\r\nx-test: a(\r\n|$)/);
      t.notRegex(heads[0]!, /X-Test: {4}a/);
      const e = open.endpoints.get('echo')!;
      const payload = Buffer.alloc(128 * 1024, 5);
      t.deepEqual(await exchange(e.host, e.port, payload, (got) => got.length >= payload.length), payload);
      // The hop listens on node-a (the HTTP target's port is the first): TLS without a certificate.
      const refused = await refusedWithoutCertificate(ADDR.nodeA, base + 20);
      t.not(refused, 'data', refused);
    } finally {
      await open.close();
      http.close();
      echo.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
}
