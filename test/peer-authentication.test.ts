import { connect, createServer, type Server } from 'node:net';
import { startMesh, waitFor, type XdsMesh } from '@zmesh/harness';
import test from 'ava';
import { echoes, startEcho } from './helpers/probes.js';

/**
 * PeerAuthentication end to end (docs/peer-authentication.md): YAML in the control plane, folded
 * into Authorization over workload xDS, decided in the destination ztunnel for a real plaintext
 * client from outside the mesh (a source address that is no workload's). Explicit-proxy mode
 * on loopback: the test's 15006 listener hands each plaintext socket to the ztunnel's
 * PlaintextInbound with its original destination, standing in for the capture redirect.
 */
/** 127.77.0.0/16 is this file's. */
const BLOCK = 77;
const ip = (s: string) => `127.${BLOCK}.${s}`;
const SERVER = 'Kubernetes//Pod/team-b/server';
const STRICT_KEY = 'istio-system/istio_converted_static_strict';
let mesh: XdsMesh;
let echo: Awaited<ReturnType<typeof startEcho>>;
let entry: Server;

const permissive = {
  apiVersion: 'security.istio.io/v1',
  kind: 'PeerAuthentication',
  metadata: { name: 'server-permissive', namespace: 'team-b' },
  spec: { selector: { matchLabels: { app: 'server' } }, mtls: { mode: 'PERMISSIVE' } },
};

test.before(async () => {
  mesh = await startMesh({
    run: 'in-process',
    block: BLOCK,
    forwards: [{ port: 18000, to: `${ip('2.1')}:7000` }],
    controlPlane: {},
  });
  echo = await startEcho(ip('2.1'), 7000);
  entry = createServer((s) => mesh.nodes.b.z.plaintext.serve(SERVER, s, { host: ip('2.1'), port: 7000 }));
  await new Promise<void>((r) => entry.listen({ host: ip('2.1'), port: 15006 }, r));
  await waitFor(() => policiesOf(SERVER)?.includes(STRICT_KEY) === true, 5000);
});

test.after.always(async () => {
  for (const s of echo?.sockets ?? []) s.destroy();
  echo?.close();
  entry?.close();
  await mesh?.stop();
});

function policiesOf(uid: string): string[] | undefined {
  const dump = mesh.nodes.b.z.configDump() as {
    workloads: Array<{ uid: string; authorizationPolicies: string[] }>;
  };
  return dump.workloads.find((w) => w.uid === uid)?.authorizationPolicies;
}

async function plaintextCount(result: string): Promise<number> {
  const text = await mesh.nodes.b.z.metrics.registry.getSingleMetricAsString('zmesh_inbound_plaintext_total');
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`zmesh_inbound_plaintext_total{result="${result}"}`));
  return line ? Number(line.split(' ').pop()) : 0;
}

/** A plaintext client from `from` (an address outside the mesh): true only if its probe echoes back. */
function plaintextEchoes(from: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = `probe-${Math.random()}`;
    const socket = connect({ host: ip('2.1'), port: 15006, localAddress: from });
    let got = '';
    const done = (v: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(false), 2000);
    socket.on('data', (d: Buffer) => {
      got += d.toString();
      if (got === probe) done(true);
    });
    socket.once('error', () => done(false));
    socket.once('close', () => done(false));
    socket.once('connect', () => socket.write(probe));
  });
}

test.serial(
  'STRICT (the default) refuses a plaintext client from outside the mesh; HBONE is served',
  async (t) => {
    const denied = await plaintextCount('denied');
    t.false(await plaintextEchoes(ip('9.9')), 'plaintext refused');
    t.is(await plaintextCount('denied'), denied + 1);
    t.true(await echoes(ip('1.1'), 18000), 'the mesh client through HBONE');
  },
);

test.serial('PERMISSIVE serves it, and back to STRICT refuses it again', async (t) => {
  t.true(mesh.cp.store.apply([permissive]).ok);
  await waitFor(() => policiesOf(SERVER)?.length === 0, 5000);
  const accepted = await plaintextCount('accepted');
  const log = mesh.nodes.b.z.accessLog;
  const records: Parameters<typeof log.record>[1][] = [];
  const record = log.record.bind(log);
  log.record = (ns, r) => {
    records.push(r);
    record(ns, r);
  };
  t.teardown(() => {
    log.record = record;
  });
  t.true(await plaintextEchoes(ip('9.9')), 'plaintext served');
  t.is(await plaintextCount('accepted'), accepted + 1);
  await waitFor(() => records.some((r) => r.via === 'plaintext' && r.result === 'ok'), 2000);
  const line = records.find((r) => r.via === 'plaintext' && r.result === 'ok')!;
  t.is(line.src.identity, undefined, 'no identity for a plaintext peer');
  t.regex(line.src.address ?? '', /127\.77\.9\.9$/);
  t.like(line, {
    direction: 'inbound',
    dst: { address: `${ip('2.1')}:7000`, workload: 'server', namespace: 'team-b' },
    flag: '-',
  });
  t.true(line.bytesSent > 0 && line.bytesReceived > 0, 'bytes each way');
  t.true(await echoes(ip('1.1'), 18000), 'HBONE still served');
  t.true(mesh.cp.store.remove(['PeerAuthentication/team-b/server-permissive']).ok);
  await waitFor(() => policiesOf(SERVER)?.includes(STRICT_KEY) === true, 5000);
  t.false(await plaintextEchoes(ip('9.9')), 'refused again');
});

test.serial('under PERMISSIVE, L4 ALLOW applies to plaintext on the source address only', async (t) => {
  const allow = {
    apiVersion: 'security.istio.io/v1',
    kind: 'AuthorizationPolicy',
    metadata: { name: 'allow-some', namespace: 'team-b' },
    spec: {
      selector: { matchLabels: { app: 'server' } },
      action: 'ALLOW',
      rules: [
        { from: [{ source: { namespaces: ['team-a'] } }] },
        { from: [{ source: { ipBlocks: [`${ip('9.0')}/24`] } }] },
      ],
    },
  };
  t.true(mesh.cp.store.apply([permissive, allow]).ok);
  await waitFor(() => policiesOf(SERVER)?.join() === 'team-b/allow-some', 5000);
  await waitFor(() => mesh.nodes.b.z.authorizer.store.list().some((p) => p.name === 'allow-some'), 5000);
  t.true(await plaintextEchoes(ip('9.9')), 'inside the ipBlock');
  t.false(
    await plaintextEchoes(ip('8.8')),
    'outside it: the namespace rule cannot match a peer without identity',
  );
  t.true(await echoes(ip('1.1'), 18000), 'the team-a client over HBONE by its namespace');
  t.true(
    mesh.cp.store.remove([
      'PeerAuthentication/team-b/server-permissive',
      'AuthorizationPolicy/team-b/allow-some',
    ]).ok,
  );
});
