import { createHash, randomBytes } from 'node:crypto';
import { connect, createServer, type Socket } from 'node:net';
import { type Mesh, startMesh, waitFor } from '@zmesh/harness';
import { connectHbone, isZmeshError, spiffeIdOf } from '@zmesh/shared';
import { openFds, settleFds } from '@zmesh/shared/testing';
import test from 'ava';
import { startEcho } from './helpers/probes.js';

let mesh: Mesh;
let closeServers: () => void;

test.before(async () => {
  mesh = await startMesh({
    run: 'in-process',
    block: 21,
    forwards: [
      { port: 18000, to: '127.21.2.1:7000' },
      { port: 18001, to: '127.21.96.10:80' },
      { port: 18002, to: '127.21.2.1:7001' },
      { port: 18003, to: '127.21.2.1:7002' },
    ],
  });
  const echo = await startEcho(mesh.ip.server, 7000);
  // 7001: the server speaks first and then half-closes, while still reading.
  const talker = createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    s.end(Buffer.alloc(3 * 1024 * 1024, 7));
    s.resume();
  });
  await new Promise<void>((r) => talker.listen({ host: mesh.ip.server, port: 7001 }, r));
  // 7002: answers with the peer address it sees.
  const peer = createServer((s) => {
    s.on('error', () => {});
    s.end(String(s.remoteAddress));
  });
  await new Promise<void>((r) => peer.listen({ host: mesh.ip.server, port: 7002 }, r));
  closeServers = () => {
    for (const s of echo.sockets) s.destroy();
    echo.close();
    talker.close();
    peer.close();
  };
});

test.after.always(async () => {
  closeServers?.();
  await mesh?.stop();
});

/** Sends `payload`, half-closes, and returns everything the peer sent until it ended. */
function roundTrip(host: string, port: number, payload: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, allowHalfOpen: true });
    const chunks: Buffer[] = [];
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.once('end', () => {
      socket.end();
      resolve(Buffer.concat(chunks));
    });
    socket.once('error', reject);
    socket.once('connect', () => socket.end(payload));
  });
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

for (const size of [1, 1024, 64 * 1024, 1024 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024]) {
  test.serial(`byte-exact echo of ${size} bytes through the ztunnel pair, with half-close`, async (t) => {
    const payload = randomBytes(size);
    const back = await roundTrip(mesh.ip.client, 18000, payload);
    t.is(back.length, size);
    t.is(sha(back), sha(payload));
  });
}

test.serial('a service VIP resolves to its endpoint through the tunnel', async (t) => {
  const payload = randomBytes(4096);
  const back = await roundTrip(mesh.ip.client, 18001, payload);
  t.is(sha(back), sha(payload));
});

test.serial('the server half-closes first and the client still delivers its own bytes', async (t) => {
  const back = await roundTrip(mesh.ip.client, 18002, Buffer.alloc(0));
  t.is(back.length, 3 * 1024 * 1024);
});

test.serial(
  "explicit mode: the app sees the client workload's address, an address of this host",
  async (t) => {
    const count = async (result: string) =>
      (await mesh.b.metrics.registry.metrics())
        .split('\n')
        .filter(
          (l) => l.startsWith('zmesh_inbound_source_address_total{') && l.includes(`result="${result}"`),
        )
        .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
    const before = await count('preserved');
    const answer = (await roundTrip(mesh.ip.client, 18003, Buffer.alloc(0))).toString();
    t.is(answer, mesh.ip.client, 'not ztunnel’s own address');
    t.is((await count('preserved')) - before, 1, 'counted as preserved');
  },
);

test.serial('the destination ztunnel saw the client SPIFFE identity', async (t) => {
  const text = await mesh.b.metrics.registry.metrics();
  const line = text
    .split('\n')
    .find((l) => l.startsWith('istio_tcp_connections_opened_total{') && l.includes('reporter="destination"'));
  t.truthy(line);
  t.true(line!.includes(`source_principal="${spiffeIdOf(mesh.client)}"`));
  t.true(line!.includes(`destination_principal="${spiffeIdOf(mesh.server)}"`));
});

test.serial(
  '200 concurrent connections for one key use exactly 2 HBONE connections of at most 100 streams',
  async (t) => {
    const sockets: Socket[] = [];
    await Promise.all(
      Array.from(
        { length: 200 },
        () =>
          new Promise<void>((resolve, reject) => {
            const s = connect({ host: mesh.ip.client, port: 18000 });
            sockets.push(s);
            s.once('error', reject);
            s.once('data', () => resolve());
            s.write('x');
          }),
      ),
    );
    const stats = mesh.a.pool.stats();
    const connections = stats.flatMap((k) => k.connections);
    t.is(stats.length, 1, 'one pool key');
    t.is(connections.length, 2);
    for (const c of connections) t.true(c.streams <= 100, `connection ${c.id} carries ${c.streams}`);
    t.is(
      connections.reduce((n, c) => n + c.streams, 0),
      200,
    );
    for (const s of sockets) s.destroy();
    await waitFor(
      () =>
        mesh.a.pool
          .stats()
          .flatMap((k) => k.connections)
          .every((c) => c.streams === 0),
      5000,
    );
  },
);

async function rejectedStatus(authority: string): Promise<number | undefined> {
  const session = await connectHbone({
    host: mesh.ip.server,
    port: 15008,
    credential: await mesh.a.certs.fetch(spiffeIdOf(mesh.client)),
    bundle: mesh.bundle,
    expectedIdentities: [spiffeIdOf(mesh.server)],
  });
  try {
    await session.openTunnel({ authority });
    return 200;
  } catch (e) {
    return isZmeshError(e) ? Number(e.context.status) : undefined;
  } finally {
    session.close();
  }
}

test.serial(
  'an authority that is not a workload behind this listener gets 400, without leaking fds',
  async (t) => {
    const before = openFds();
    t.is(await rejectedStatus(`${mesh.ip.client}:7000`), 400);
    t.is(await rejectedStatus(`${mesh.ip.server}:15008`), 400, 'ztunnel ports are never a target');
    t.true((await settleFds(before)) <= before);
  },
);

test.serial('a known workload whose upstream refuses gets 503, without leaking fds', async (t) => {
  const before = openFds();
  t.is(await rejectedStatus(`${mesh.ip.server}:7999`), 503);
  t.true((await settleFds(before)) <= before);
});

test.serial(
  'admin, metrics and health endpoints answer on the ports of docs/design.md §3 at the ztunnel address',
  async (t) => {
    const base = (port: number) => `http://${mesh.ip.a}:${port}`;
    const dump = (await (await fetch(`${base(15000)}/config_dump`)).json()) as {
      node: string;
      local: Array<{ identity: string; inbound: boolean }>;
      certificates: Array<{ identity: string; notAfter?: string }>;
    };
    t.is(dump.node, 'node-a');
    t.deepEqual(dump.local, [
      {
        uid: 'Kubernetes//Pod/team-a/client',
        identity: spiffeIdOf(mesh.client),
        inbound: true,
        status: 'ready',
      },
    ]);
    t.truthy(dump.certificates.find((c) => c.identity === spiffeIdOf(mesh.client))?.notAfter);
    t.is((await fetch(`${base(15021)}/healthz/ready`)).status, 200);
    t.is((await fetch(`${base(15021)}/healthz/live`)).status, 200);
    const metrics = await (await fetch(`${base(15020)}/metrics`)).text();
    t.regex(metrics, /istio_tcp_connections_opened_total\{/);
    t.regex(metrics, /zmesh_cert_seconds_to_earliest_expiry \d/);
    const set = await fetch(`${base(15000)}/logging?scope=pool&level=debug`, { method: 'POST' });
    t.is(((await set.json()) as Record<string, string>).pool, 'debug');
    const bad = await fetch(`${base(15000)}/logging?scope=pool&level=loud`, { method: 'POST' });
    t.is(bad.status, 400);
    const unknown = await fetch(`${base(15000)}/logging?scope=nosuchscope&level=debug`, { method: 'POST' });
    t.is(unknown.status, 400, 'an unknown scope is refused');
    t.regex(
      ((await unknown.json()) as { error: string }).error,
      /unknown scope "nosuchscope"; scopes: .*pool/,
    );
    t.is((await fetch(`${base(15000)}/quitquitquit`)).status, 405, 'GET cannot stop the proxy');
    t.is((await fetch(`${base(15020)}/config_dump`)).status, 404, 'the metrics port serves nothing else');
  },
);

test.serial(
  'forwarded from a peer that is not the destination waypoint is ignored and counted',
  async (t) => {
    const metric = async () => {
      const text = await mesh.b.metrics.registry.metrics();
      const line = text
        .split('\n')
        .find((l) => l.startsWith('zmesh_errors_total{code="ZM_ERR_HBONE_FORWARDED_IGNORED"'));
      return Number(line?.split(' ').pop() ?? 0);
    };
    const before = await metric();
    const session = await connectHbone({
      host: mesh.ip.server,
      port: 15008,
      credential: await mesh.a.certs.fetch(spiffeIdOf(mesh.client)),
      bundle: mesh.bundle,
      expectedIdentities: [spiffeIdOf(mesh.server)],
    });
    const tunnel = await session.openTunnel({
      authority: `${mesh.ip.server}:7000`,
      forwardedFor: '10.9.9.9:1234',
    });
    tunnel.end('x');
    await new Promise((r) => tunnel.once('close', r).resume());
    session.close();
    t.is((await metric()) - before, 1);
  },
);
