import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMesh } from '@zmesh/harness';
import {
  closeFds,
  encodeAck,
  encodeHello,
  encodeZdsRequest,
  MeshMetrics,
  type ReceivedPacket,
  SeqpacketServer,
  SeqpacketSocket,
  seqpacketUnavailableReason,
  ZdsServer,
} from '@zmesh/shared';
import {
  type AddWorkloadRequest,
  BpfCapture,
  netnsIdentity,
  type WorkloadHandler,
  ZdsClient,
} from '@zmesh/ztunnel';
import test, { type ExecutionContext } from 'ava';

/**
 * Istio's ZDS between the node agent (ZdsServer) and ztunnel's client (ZdsClient), over a
 * real SOCK_SEQPACKET socket with real netns fds and kubelet-style pod cgroups; each side
 * is also driven by a hostile peer written from zds.proto. ztunnel's handler here records;
 * the last test runs the real ztunnel (bin/zmesh, BPF capture) with LocalMesh as its agent.
 * Needs root (network namespaces, cgroups) and the seqpacket addon.
 */
const unavailable =
  process.getuid?.() !== 0 ? 'needs root (network namespaces and cgroups)' : seqpacketUnavailableReason();
const zdsTest = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`ZDS tests skipped: ${unavailable}`, () => {});
const bpfUnavailable = unavailable ?? (await BpfCapture.unavailableReason());

const newRegistry = () => new MeshMetrics({ defaultMetrics: false }).registry;

class RecordingHandler implements WorkloadHandler {
  readonly pods = new Map<string, { netns: string; cgroup: string; name?: string }>();
  readonly calls: string[] = [];
  async addWorkload(req: AddWorkloadRequest): Promise<void> {
    // The fd path is valid only during the call: keep its identity, as EnrolledPods does.
    this.pods.set(req.uid, { netns: netnsIdentity(req.netns), cgroup: req.cgroup, name: req.info?.name });
    this.calls.push(`add ${req.uid}`);
  }
  async delWorkload(uid: string): Promise<void> {
    this.pods.delete(uid);
    this.calls.push(`del ${uid}`);
  }
  async snapshot(uids: string[]): Promise<void> {
    for (const uid of this.pods.keys()) if (!uids.includes(uid)) await this.delWorkload(uid);
    this.calls.push(`snapshot ${[...uids].sort().join(',')}`);
  }
  has(uid: string): boolean {
    return this.pods.has(uid);
  }
}

interface Pod {
  uid: string;
  proc: ChildProcess;
  netnsPath: string;
  cgroup: string;
}

const cgroupMount = (() => {
  for (const line of readFileSync('/proc/mounts', 'utf8').split('\n')) {
    const [, dir, type] = line.split(' ');
    if (type === 'cgroup2' && dir) return dir;
  }
  return '/sys/fs/cgroup';
})();
// Not zm-*: the cluster harness removes zm-* cgroups that no live cluster accounts for.
const cgroupRoot = join(cgroupMount, `zmesh-zds-test-${process.pid}`);
const dir = mkdtempSync(join(tmpdir(), 'zm-zds-'));
const socketPath = join(dir, 'zds.sock');
const procs: ChildProcess[] = [];

/** A pod: a process in its own network namespace, in kubelet's besteffort pod<uid> cgroup. */
async function pod(uid: string, netnsOf?: Pod): Promise<Pod> {
  const proc = netnsOf
    ? spawn('nsenter', [`--net=${netnsOf.netnsPath}`, 'sleep', '60'], { stdio: 'ignore' })
    : spawn('unshare', ['--net', 'sleep', '60'], { stdio: 'ignore' });
  procs.push(proc);
  await new Promise((r) => setTimeout(r, 100)); // unshare/nsenter exec sleep in its namespace
  const cgroup = join(cgroupRoot, 'kubepods', 'besteffort', `pod${uid}`);
  mkdirSync(cgroup, { recursive: true });
  writeFileSync(join(cgroup, 'cgroup.procs'), String(proc.pid));
  return { uid, proc, netnsPath: `/proc/${proc.pid}/ns/net`, cgroup };
}

function start(t: ExecutionContext, handler = new RecordingHandler()) {
  const registry = newRegistry();
  const agent = new ZdsServer({ path: socketPath, ackTimeoutMs: 2000, helloTimeoutMs: 1000 });
  agent.listen();
  const client = new ZdsClient(handler, { path: socketPath, cgroupRoot, registry, reconnectMs: 50 });
  t.teardown(() => {
    client.close();
    agent.close();
  });
  return { agent, client, handler, registry };
}

async function waitFor(cond: () => boolean, what: string, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

let a: Pod;
let b: Pod;
let c: Pod;

test.before(async () => {
  if (unavailable) return;
  a = await pod('0d7c4a8e-1111-4c1e-9a43-0c9d2b7c1e11');
  b = await pod('0d7c4a8e-2222-4c1e-9a43-0c9d2b7c1e11');
  // c's cgroup holds a process that lives in a's network namespace.
  c = await pod('0d7c4a8e-3333-4c1e-9a43-0c9d2b7c1e11', a);
});

test.after.always(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => (p.exitCode === null ? new Promise((r) => p.once('exit', r)) : null)));
  for (const p of [a, b, c]) if (p) rmdirSync(p.cgroup, { recursive: false });
  for (const d of ['kubepods/besteffort', 'kubepods', '']) {
    try {
      rmdirSync(join(cgroupRoot, d));
    } catch {
      // Never created.
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

zdsTest(
  'Hello, snapshot, Add with the netns fd, Del, and a reconnect whose snapshot drops a pod',
  async (t) => {
    const { agent, client, handler } = start(t);
    client.start();
    await agent.waitForClient(3000);
    t.deepEqual(handler.calls, ['snapshot '], 'an empty snapshot first');

    await agent.addPod({
      uid: a.uid,
      netnsPath: a.netnsPath,
      info: { name: 'web-0', namespace: 'shop', serviceAccount: 'web' },
    });
    await agent.addPod({ uid: b.uid, netnsPath: b.netnsPath });
    t.deepEqual(handler.pods.get(a.uid), {
      netns: netnsIdentity(a.netnsPath),
      cgroup: a.cgroup,
      name: 'web-0',
    });
    t.is(handler.pods.get(b.uid)?.netns, netnsIdentity(b.netnsPath), 'the fd ztunnel got is b’s namespace');
    await agent.removePod(b.uid);
    t.false(handler.has(b.uid));
    await agent.removePod('never-added');

    // ztunnel goes away; meanwhile b is added again and a removed from the agent.
    client.close();
    await waitFor(() => agent.clients === 0, 'the agent to notice');
    await agent.addPod({ uid: b.uid, netnsPath: b.netnsPath });
    await agent.removePod(a.uid);
    t.true(handler.has(a.uid), 'ztunnel keeps its pods while disconnected');
    const again = new ZdsClient(handler, {
      path: socketPath,
      cgroupRoot,
      registry: newRegistry(),
      reconnectMs: 50,
    });
    t.teardown(() => again.close());
    handler.calls.length = 0;
    again.start();
    await agent.waitForClient(3000);
    await waitFor(() => handler.calls.some((x) => x.startsWith('snapshot')), 'the snapshot');
    t.deepEqual(handler.calls, [`add ${b.uid}`, `del ${a.uid}`, `snapshot ${b.uid}`]);
    t.deepEqual([...handler.pods.keys()], [b.uid]);
  },
);

zdsTest('kernel facts win over the agent: wrong netns for the cgroup, no cgroup for the uid', async (t) => {
  const { agent, client, handler } = start(t);
  client.start();
  await agent.waitForClient(3000);
  const mismatch = await t.throwsAsync(agent.addPod({ uid: c.uid, netnsPath: b.netnsPath }));
  t.regex(mismatch?.message ?? '', /ZM_ERR_ZDS_WORKLOAD.*process \d+ of its cgroup is in net:\[\d+\]/);
  const unknown = await t.throwsAsync(agent.addPod({ uid: 'no-such-pod', netnsPath: b.netnsPath }));
  t.regex(unknown?.message ?? '', /no kubelet pod cgroup/);
  t.is(handler.pods.size, 0, 'nothing enrolled');
  await agent.addPod({ uid: c.uid, netnsPath: a.netnsPath });
  t.true(handler.has(c.uid), 'the namespace its processes are in is accepted');
  t.true(client.connected, 'refusals are Acks, the connection stays');
});

zdsTest('ztunnel drops a connection on a message zds.proto does not allow, state unchanged', async (t) => {
  const handler = new RecordingHandler();
  handler.pods.set('kept', { netns: 'net:[1]', cgroup: '/x' });
  // A hostile node agent, written from zds.proto: one bad message per connection.
  const cases: Array<(s: SeqpacketSocket) => void> = [
    (s) => s.send(Buffer.from([0xff, 0xff, 0xff, 0xff])), // undecodable
    (s) => s.send(Buffer.alloc(2000, 0x0a)), // longer than ZDS's 1 KiB: MSG_TRUNC
    (s) => s.send(encodeZdsRequest({ kind: 'add', uid: a.uid })), // Add without its fd
    (s) => s.send(encodeZdsRequest({ kind: 'del', uid: 'kept' }), 0), // an fd on a Del
  ];
  const hellos: Buffer[] = [];
  let hangups = 0;
  const server = new SeqpacketServer(socketPath, (fd) => {
    const send = cases[hellos.length];
    const s: SeqpacketSocket = new SeqpacketSocket(fd, 4096, (p) => {
      hellos.push(Buffer.from(p.data));
      if (send) send(s);
    });
    s.onClose(() => hangups++);
  });
  t.teardown(() => server.close());
  const registry = newRegistry();
  const client = new ZdsClient(handler, { path: socketPath, cgroupRoot, registry, reconnectMs: 20 });
  t.teardown(() => client.close());
  client.start();
  await waitFor(() => hangups >= cases.length, 'ztunnel to hang up on each', 5000);
  client.close();
  for (const h of hellos) t.deepEqual(h, Buffer.from(encodeHello()), 'ztunnel says ZdsHello first');
  t.deepEqual([...handler.pods.keys()], ['kept'], 'no enrolment changed');
  t.deepEqual(handler.calls, []);
  const metrics = await registry.metrics();
  t.regex(metrics, /zmesh_zds_transport_errors_total\{reason="decode"\} 1/);
  t.regex(metrics, /zmesh_zds_transport_errors_total\{reason="truncated"\} 1/);
  t.regex(metrics, /zmesh_zds_transport_errors_total\{reason="fds"\} 2/);
});

zdsTest(
  'the node agent drops a client that does not say Hello first or sends garbage, and serves the next',
  async (t) => {
    const registry = newRegistry();
    const agent = new ZdsServer({ path: socketPath, ackTimeoutMs: 2000, helloTimeoutMs: 300, registry });
    agent.listen();
    t.teardown(() => agent.close());
    await agent.addPod({ uid: a.uid, netnsPath: a.netnsPath });
    const hangups: string[] = [];
    const raw = (first?: Uint8Array) => {
      const got: ReceivedPacket[] = [];
      const s = SeqpacketSocket.connect(socketPath, 4096, (p) => got.push(p));
      s.onClose(() => hangups.push('x'));
      if (first) s.send(first);
      return { s, got };
    };
    raw(encodeAck('')); // an Ack where the Hello belongs
    raw(Buffer.alloc(3000, 1)); // truncated
    raw(Uint8Array.from([0x08, 0x07])); // version 7
    raw(); // silent: the Hello timeout
    await waitFor(() => hangups.length === 4, 'four hang-ups', 3000);
    t.regex(await registry.metrics(), /zmesh_zds_transport_errors_total\{side="node-agent"\} 4/);

    // What Istio's ztunnel sends: Hello, then an Ack per request. The snapshot still has a.
    const { s, got } = raw(encodeHello());
    t.teardown(() => s.close());
    await waitFor(() => got.length === 1, 'the first snapshot entry');
    t.is(got[0]?.fds.length, 1, 'AddWorkload carries one fd');
    t.is(netnsIdentity(`/proc/self/fd/${got[0]?.fds[0]}`), netnsIdentity(a.netnsPath));
    s.send(encodeAck());
    await waitFor(() => got.length === 2, 'SnapshotSent');
    t.deepEqual(Buffer.from(got[1]?.data ?? []), Buffer.from(encodeZdsRequest({ kind: 'snapshotSent' })));
    t.is(got[1]?.fds.length, 0);
    s.send(encodeAck());
    await agent.waitForClient(1000);
    t.is(agent.clients, 1);
    closeFds(got.flatMap((p) => p.fds));
  },
);

zdsTest(
  'with two ztunnels connected (a rolling update), Adds go to the newest and Deletes to all',
  async (t) => {
    const { agent, client: old, handler: oldPods } = start(t);
    old.start();
    await agent.waitForClient(3000);
    await agent.addPod({ uid: a.uid, netnsPath: a.netnsPath });
    const newPods = new RecordingHandler();
    const next = new ZdsClient(newPods, {
      path: socketPath,
      cgroupRoot,
      registry: newRegistry(),
      reconnectMs: 50,
    });
    t.teardown(() => next.close());
    next.start();
    await waitFor(() => newPods.calls.some((x) => x.startsWith('snapshot')), 'the new ztunnel’s snapshot');
    t.is(agent.clients, 2);
    t.true(newPods.has(a.uid), 'the snapshot carries the agent’s pods');
    await agent.addPod({ uid: b.uid, netnsPath: b.netnsPath });
    t.true(newPods.has(b.uid), 'the newest ztunnel gets the Add');
    t.false(oldPods.has(b.uid), 'the old one does not');
    await agent.removePod(a.uid);
    t.false(newPods.has(a.uid));
    t.false(oldPods.has(a.uid), 'a Delete reaches every ztunnel');
  },
);

// The real ztunnel (bin/zmesh, capture mode) in a netns cluster, LocalMesh as the node agent.
(bpfUnavailable ? test.serial.skip : test.serial)(
  bpfUnavailable
    ? `real ztunnel over ZDS skipped: ${bpfUnavailable}`
    : 'a real ztunnel keeps its pods through a hostile agent, then takes the snapshot of the real one',
  async (t) => {
    const mesh = await startMesh({
      run: 'cluster',
      spec: {
        nodes: ['node-a'],
        pods: [
          { name: 'client', namespace: 'zds', serviceAccount: 'client', node: 'node-a' },
          { name: 'server', namespace: 'zds', serviceAccount: 'server', node: 'node-a' },
        ],
      },
    });
    t.teardown(() => mesh.down());
    const metric = async (name: string) =>
      (await mesh.metrics('node-a')).match(new RegExp(`^${name} (\\d+)`, 'm'))?.[1];
    t.is(await metric('zmesh_pods_enrolled'), '2');
    t.is(await metric('zmesh_zds_connected'), '1');

    // The agent goes; a hostile one answers ztunnel's Hello with garbage.
    const agent = mesh.zdsAgent('node-a');
    agent.close();
    let hellos = 0;
    const hostile = new SeqpacketServer(mesh.zdsSocket('node-a'), (fd) => {
      const s: SeqpacketSocket = new SeqpacketSocket(fd, 4096, () => {
        hellos++;
        s.send(Buffer.from('not a WorkloadRequest'));
      });
    });
    await waitFor(() => hellos >= 1, 'ztunnel to reconnect to the hostile agent', 5000);
    // ztunnel dropped it: counted, and (reconnecting) it says Hello again.
    await waitFor(() => hellos >= 2, 'ztunnel to hang up and retry', 5000);
    hostile.close();
    t.regex(await mesh.metrics('node-a'), /^zmesh_zds_transport_errors_total\{reason="decode"\} [1-9]/m);
    t.is(await metric('zmesh_pods_enrolled'), '2', 'garbage changes no enrolment');

    // The real agent is back, without "server": its snapshot removes it.
    await agent.removePod(mesh.pod('server').uid);
    agent.listen();
    await agent.waitForClient(5000);
    t.is(await metric('zmesh_pods_enrolled'), '1');
    t.is(await metric('zmesh_zds_connected'), '1');
  },
);
