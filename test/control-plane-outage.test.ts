import { copyFile, readFile, writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { startMesh, waitFor, type XdsMesh } from '@zmesh/harness';
import type { Credential } from '@zmesh/shared';
import test from 'ava';
import { echoes, startEcho, workloadUids } from './helpers/probes.js';

/** Certificates live this long, so rotation (at half-life) and expiry happen within the test. */
const TTL_SECONDS = 4;
const BLOCK = 71;
const ip = (s: string) => `127.${BLOCK}.${s}`;
const CLIENT_ID = 'spiffe://cluster.local/ns/team-a/sa/client';
let mesh: XdsMesh;
let echo: Awaited<ReturnType<typeof startEcho>>;
/** Connections the application saw: a refused tunnel must not add one (never plaintext). */
let appConnections = 0;

test.before(async () => {
  mesh = await startMesh({
    run: 'in-process',
    block: BLOCK,
    forwards: [{ port: 18000, to: `${ip('2.1')}:7000` }],
    controlPlane: { certTtlSeconds: TTL_SECONDS },
  });
  echo = await startEcho(ip('2.1'), 7000);
  echo.on('connection', () => {
    appConnections += 1;
  });
});

test.after.always(async () => {
  for (const s of echo?.sockets ?? []) s.destroy();
  echo?.close();
  await mesh?.stop();
});

/** Writes `text` on a long-lived socket and resolves when it has come back. */
function roundTrip(socket: Socket, text: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let got = '';
    const timer = setTimeout(() => reject(new Error(`no echo of ${text}`)), 2000);
    const on = (d: Buffer) => {
      got += d.toString();
      if (!got.includes(text)) return;
      clearTimeout(timer);
      socket.off('data', on);
      resolve();
    };
    socket.on('data', on);
    socket.write(text);
  });
}

test.serial(
  'certificates rotate at half-life and a long-lived tunnel outlives the certificate it began with',
  async (t) => {
    const socket = connect({ host: ip('1.1'), port: 18000 });
    await new Promise((r) => socket.once('connect', r));
    await roundTrip(socket, 'before');
    const first = mesh.nodes.a.z.certs.get(CLIENT_ID)!;
    const rotated = new Promise<[Credential, Credential]>((resolve) =>
      mesh.nodes.a.z.certs.on('rotated', (id: string, cred: Credential, previous?: Credential) => {
        if (id === CLIENT_ID && previous) resolve([cred, previous]);
      }),
    );
    const [next, previous] = await rotated;
    t.is(previous.notAfter.getTime(), first.notAfter.getTime());
    const lifetime = first.notAfter.getTime() - first.notBefore.getTime();
    t.true(Date.now() < first.notAfter.getTime(), 'rotated before expiry');
    t.true(Date.now() >= first.notBefore.getTime() + lifetime / 2 - 100, 'not before half-life');
    t.true(next.notAfter > first.notAfter);
    await waitFor(() => Date.now() > first.notAfter.getTime() + 200, 10_000);
    await roundTrip(socket, 'after-expiry-of-the-first-certificate');
    t.pass('the tunnel opened under the first certificate still carries bytes');
    socket.destroy();
    t.true(await echoes(ip('1.1'), 18000), 'new tunnels use the rotated certificate');
  },
);

test.serial(
  'with the CA down, valid certificates keep serving until expiry; then new tunnels are refused, never plaintext',
  async (t) => {
    await mesh.stopControlPlane();
    t.true(await echoes(ip('1.1'), 18000), 'still valid: traffic flows');
    const held = [mesh.nodes.a, mesh.nodes.b].flatMap((n) =>
      n.z.certs.identities().flatMap((c) => (c.notAfter ? [Date.parse(c.notAfter)] : [])),
    );
    const lastExpiry = Math.max(...held);
    t.true(lastExpiry - Date.now() < TTL_SECONDS * 1000 + 500);
    await waitFor(() => Date.now() > lastExpiry + 200, 10_000);
    const before = appConnections;
    t.false(await echoes(ip('1.1'), 18000, 1500), 'expired: the tunnel is refused');
    t.is(appConnections, before, 'nothing reached the application');
    t.false(mesh.nodes.a.z.readiness().ready, 'not ready without a valid certificate');
    t.true(
      workloadUids(mesh.nodes.a.z).includes('Kubernetes//Pod/team-b/server'),
      'config is last-known-good',
    );
    const metrics = await mesh.nodes.a.z.metrics.registry.metrics();
    const failures = /zmesh_cert_renewal_failures_total (\d+)/.exec(metrics);
    t.true(Number(failures?.[1]) > 0, 'renewal failures are counted');
    t.regex(metrics, /zmesh_xds_connected 0/);
  },
);

test.serial(
  'a ztunnel restarted during the outage loads the on-disk snapshot; a corrupted one is ignored',
  async (t) => {
    const good = join(mesh.dir, 'restart-good.snapshot');
    const bad = join(mesh.dir, 'restart-bad.snapshot');
    await copyFile(join(mesh.dir, 'node-a.snapshot'), good);
    const bytes = await readFile(good);
    const at = bytes.length - 10;
    bytes.writeUInt8(bytes.readUInt8(at) ^ 0x01, at);
    await writeFile(bad, bytes);

    const restarted = await mesh.startNode('node-a', ip('0.5'), { snapshotPath: good });
    t.true(
      workloadUids(restarted.z).includes('Kubernetes//Pod/team-b/server'),
      'born with the last-known-good config',
    );
    t.is(restarted.source.loadFailure, undefined);
    t.false(restarted.source.synced, 'not current: the control plane is down');

    const damaged = await mesh.startNode('node-a', ip('0.6'), { snapshotPath: bad });
    t.deepEqual(workloadUids(damaged.z), [], 'a damaged snapshot gives nothing, not garbage');
    t.regex(damaged.source.loadFailure?.join() ?? '', /checksum mismatch/);
    t.regex(JSON.stringify(damaged.source.status()), /snapshotLoadFailure/);
  },
);
