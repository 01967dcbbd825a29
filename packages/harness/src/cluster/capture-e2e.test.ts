import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { MeshMetrics } from '@zmesh/shared';
import { BpfCapture, HOOKS, listenInNetns, type OriginalDestination, PIN_ROOT } from '@zmesh/ztunnel';
import test, { type ExecutionContext } from 'ava';
import { Cluster } from './cluster.js';
import { gridSpec } from './cluster-spec.js';
import { ECHO_SERVER, PROBE_CLIENT, parseProbe } from './test-programs.js';
import type { PodInfo } from './topology.js';

/*
 * Real capture on a real (namespaced) cluster: BPF programs on pod cgroups, ztunnel's
 * listeners created inside pod namespaces by this process, unprivileged pod processes.
 */
const reason = process.getuid?.() !== 0 ? 'not root' : await BpfCapture.unavailableReason();
/** Serial when capture works here; otherwise skipped, with the reason in the title. */
function capTest(title: string, fn: (t: ExecutionContext) => Promise<void>, why = reason): void {
  if (why === undefined) test.serial(title, fn);
  else test.serial.skip(`${title} [skipped: ${why}]`, fn);
}

let cluster: Cluster;
let capture: BpfCapture;
const registry = new MeshMetrics().registry;
const servers: Server[] = [];

test.before(async () => {
  if (reason !== undefined) return;
  cluster = await Cluster.up(gridSpec(2, 2));
  capture = new BpfCapture({ registry });
});

test.after.always(async () => {
  for (const s of servers) s.close();
  if (reason !== undefined) return;
  for (const p of cluster.pods) await capture.detach(p.uid);
  await cluster.down();
});

function attach(pod: PodInfo) {
  return capture.attach({ id: pod.uid, cgroupPath: pod.cgroupPath, netnsPath: pod.netnsPath });
}

function serve(fd: number, onConnection: (s: Socket) => void): Server {
  const server = createServer(onConnection);
  server.listen({ fd });
  servers.push(server);
  return server;
}

async function probe(from: PodInfo, hosts: string[], port: number, timeoutMs = 2000) {
  const r = await cluster.exec(from, [
    'node',
    '-e',
    PROBE_CLIENT,
    JSON.stringify(hosts),
    String(port),
    String(timeoutMs),
  ]);
  return parseProbe(r.stdout);
}

capTest(
  'connects to IPv4, IPv6 and IPv4-mapped addresses land on the in-pod listener with their original destination',
  async (t) => {
    const [a1, , , b2] = cluster.pods as PodInfo[];
    await attach(a1!);
    const seen: (OriginalDestination | undefined)[] = [];
    const onConnection = (s: Socket) => {
      const dst = capture.originalDestination(s);
      seen.push(dst);
      s.end(JSON.stringify(dst ?? null));
    };
    serve(listenInNetns(a1!.netnsPath, '127.0.0.1', 15001), onConnection);
    serve(listenInNetns(a1!.netnsPath, '::1', 15001), onConnection);
    const c = b2!;
    const probes = await probe(a1!, [c.ipv4, c.ipv6, `::ffff:${c.ipv4}`], 8080);
    t.deepEqual(seen, [
      { host: c.ipv4, port: 8080, family: 4 },
      { host: c.ipv6, port: 8080, family: 6 },
      { host: c.ipv4, port: 8080, family: 4 },
    ]);
    t.deepEqual(
      probes.map((p) => [p.ok, p.peer]),
      [
        [true, { address: c.ipv4, port: 8080 }],
        [true, { address: c.ipv6, port: 8080 }],
        [true, { address: `::ffff:${c.ipv4}`, port: 8080 }],
      ],
      'getpeername inside the pod shows the original peer',
    );
    t.deepEqual(capture.counters(a1!.uid), { inboundDrops: 0, captured: 3, rekeyFailures: 0, throttled: 0 });
    t.is(
      capture.originalDestination({ netnsCookie: capture.netnsCookie(a1!.uid)!, peerPort: 1, family: 4 }),
      undefined,
    );
  },
);

/** Other ways to open a TCP stream must not go around capture. */
const SIDE_DOORS = `
import socket, sys, signal
signal.alarm(5)
ip = sys.argv[1]
def mptcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
    s.connect((ip, 8080))
    return s.recv(200).decode()
def fastopen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.sendto(b'x', socket.MSG_FASTOPEN, (ip, 8080))
    return s.recv(200).decode()
for f in (mptcp, fastopen):
    try:
        print(f())
    except OSError as e:
        print('ERR', e.errno)
`;

// Runs after the first test, whose capture and 15001 listeners in pod A it reuses.
capTest(
  'MPTCP and TCP Fast Open connects are captured too',
  async (t) => {
    const [a1, , , b2] = cluster.pods as PodInfo[];
    const r = await cluster.exec(a1!, ['/usr/bin/python3', '-c', SIDE_DOORS, b2!.ipv4]);
    const expected = JSON.stringify({ host: b2!.ipv4, port: 8080, family: 4 });
    t.deepEqual(r.stdout.trim().split('\n'), [expected, expected], r.stderr);
  },
  reason ?? (existsSync('/usr/bin/python3') ? undefined : 'no /usr/bin/python3'),
);

capTest('in-pod loopback is not captured', async (t) => {
  const a1 = cluster.pods[0]!;
  const server = cluster.runInPod(a1, ['node', '-e', ECHO_SERVER, '9090'], { reject: false });
  await new Promise((resolve) => server.stdout?.once('data', resolve));
  const probes = await probe(a1, ['127.0.0.1', '::1'], 9090);
  server.kill();
  t.deepEqual(
    probes.map((p) => [p.ok, p.data]),
    [
      [true, 'pong'],
      [true, 'pong'],
    ],
  );
});

capTest(
  'strict inbound: direct TCP from another pod is dropped and counted; loopback and 15008 pass',
  async (t) => {
    const [, a2, b1] = cluster.pods as PodInfo[];
    const c = b1!;
    await attach(c);
    const server = cluster.runInPod(c, ['node', '-e', ECHO_SERVER, '8080'], { reject: false });
    try {
      await new Promise((resolve) => server.stdout?.once('data', resolve));
      serve(listenInNetns(c.netnsPath, c.ipv4, 15008), (s) => s.end('hbone'));
      const direct = await probe(a2!, [c.ipv4, c.ipv6], 8080, 1000);
      t.deepEqual(
        direct.map((p) => [p.ok, p.err]),
        [
          [false, 'TIMEOUT'],
          [false, 'TIMEOUT'],
        ],
      );
      t.true(capture.dropCount(c.uid) >= 2, `drops: ${capture.dropCount(c.uid)}`);
      const local = await probe(c, ['127.0.0.1', '::1'], 8080);
      t.deepEqual(
        local.map((p) => [p.ok, p.data]),
        [
          [true, 'pong'],
          [true, 'pong'],
        ],
        'loopback inside the pod',
      );
      const hbone = await probe(a2!, [c.ipv4], 15008);
      t.deepEqual(
        hbone.map((p) => [p.ok, p.data]),
        [[true, 'hbone']],
      );
      await capture.detach(c.uid);
      const after = await probe(a2!, [c.ipv4], 8080, 1000);
      t.deepEqual(
        after.map((p) => [p.ok, p.data]),
        [[true, 'pong']],
        'after detach nothing is dropped',
      );
    } finally {
      server.kill();
    }
  },
);

function bpfCounts() {
  const count = (kind: 'prog' | 'map') =>
    (JSON.parse(execFileSync('bpftool', ['-j', kind, 'list']).toString()) as { name?: string }[]).filter(
      (o) => o.name?.startsWith('zm_'),
    ).length;
  return {
    progs: count('prog'),
    maps: count('map'),
    pins: existsSync(PIN_ROOT) ? readdirSync(PIN_ROOT).length : 0,
    fds: readdirSync('/proc/self/fd').length,
  };
}

capTest('attaching and detaching 50 pods 5 times leaks no program, map, pin or fd', async (t) => {
  const big = await Cluster.up(gridSpec(1, 50));
  try {
    const before = bpfCounts();
    t.log('before', before);
    for (let round = 0; round < 5; round++) {
      await Promise.all(
        big.pods.map((p) => capture.attach({ id: p.uid, cgroupPath: p.cgroupPath, netnsPath: p.netnsPath })),
      );
      if (round === 0) t.is(bpfCounts().progs - before.progs, 50 * HOOKS.length);
      await Promise.all(big.pods.map((p) => capture.detach(p.uid)));
    }
    // Programs and maps are freed after an RCU grace period: allow a moment.
    let after = bpfCounts();
    for (let i = 0; i < 40 && (after.progs > before.progs || after.maps > before.maps); i++) {
      await new Promise((r) => setTimeout(r, 50));
      after = bpfCounts();
    }
    t.deepEqual({ ...after, fds: 0 }, { ...before, fds: 0 });
    t.true(after.fds <= before.fds, `fds ${before.fds} -> ${after.fds}`);
  } finally {
    await big.down();
  }
});

capTest(
  'from the AddWorkload acknowledgement on, nothing the pod sends leaves it until ztunnel listens',
  async (t) => {
    const [, a2, , b2] = cluster.pods as PodInfo[];
    const server = cluster.runInPod(b2!, ['node', '-e', ECHO_SERVER, '8081'], { reject: false });
    try {
      await new Promise((resolve) => server.stdout?.once('data', resolve));
      t.deepEqual(
        (await probe(a2!, [b2!.ipv4], 8081)).map((p) => p.data),
        ['pong'],
        'reachable before enrollment',
      );
      await capture.attach({ id: a2!.uid, cgroupPath: a2!.cgroupPath, netnsPath: a2!.netnsPath });
      const refused = await probe(a2!, [b2!.ipv4, b2!.ipv6, `::ffff:${b2!.ipv4}`], 8081);
      t.deepEqual(
        refused.map((p) => [p.ok, p.err]),
        [
          [false, 'ECONNREFUSED'],
          [false, 'ECONNREFUSED'],
          [false, 'ECONNREFUSED'],
        ],
      );
      await capture.detach(a2!.uid);
      t.deepEqual(
        (await probe(a2!, [b2!.ipv4], 8081)).map((p) => p.data),
        ['pong'],
        'reachable again after detach',
      );
      t.false(existsSync(join(PIN_ROOT, a2!.uid)));
    } finally {
      server.kill();
    }
  },
);

capTest(
  'a restarted ztunnel adopts the capture of pods it keeps, removes the rest, and never touches another node',
  async (t) => {
    const [a1, a2, b1] = cluster.pods as PodInfo[];
    const nodeA = `zmtest-a-${process.pid}`;
    const nodeB = `zmtest-b-${process.pid}`;
    const pod = (p: PodInfo) => ({ id: p.uid, cgroupPath: p.cgroupPath, netnsPath: p.netnsPath });
    const first = new BpfCapture({ node: nodeA });
    const other = new BpfCapture({ node: nodeB });
    try {
      await first.attach(pod(a1!));
      await first.attach(pod(a2!));
      await other.attach(pod(b1!));
      first.close(); // ztunnel dies; its pinned links keep capture in place
      const attachedTo = (p: PodInfo) => {
        const out = execFileSync('bpftool', ['-j', 'cgroup', 'show', p.cgroupPath]).toString().trim();
        return out === '' ? 0 : (JSON.parse(out) as unknown[]).length;
      };
      t.is(attachedTo(a1!), 2 * HOOKS.length, 'a1 still has the first test capture and this one');
      const second = new BpfCapture({ node: nodeA });
      const progsBefore = bpfCounts().progs;
      await second.attach(pod(a1!));
      t.is(bpfCounts().progs, progsBefore, 'adopted, not loaded again');
      t.deepEqual(await second.cleanupStale([a1!.uid]), [a2!.uid]);
      t.is(attachedTo(a2!), 0);
      t.is(attachedTo(b1!), HOOKS.length, 'the other node keeps its pod');
      await second.detach(a1!.uid);
    } finally {
      await other.detach(b1!.uid);
      await new BpfCapture({ node: nodeA }).cleanupStale();
      rmSync(join(PIN_ROOT, nodeA), { recursive: true, force: true });
      rmSync(join(PIN_ROOT, nodeB), { recursive: true, force: true });
    }
  },
);

capTest(
  'a throttle armed with tokens lets that many connects through; a refusal empties it; a looser admission leaves it',
  async (t) => {
    const [a1, , , b2] = cluster.pods as PodInfo[];
    const scope = `zmtest-t-${process.pid}`;
    const bpf = new BpfCapture({ node: scope });
    // Connects that pass the throttle go on to 15001 inside the pod, where nothing of this
    // capture listens (ECONNREFUSED, or an answer from an earlier test's listener); those
    // it refuses fail in connect() with EPERM.
    const refusedOf = async (count: number) => {
      const r = await probe(b2!, Array(count).fill(a1!.ipv4), 8080, 1000);
      return r.map((p) => p.err === 'EPERM');
    };
    try {
      await bpf.attach({ id: b2!.uid, cgroupPath: b2!.cgroupPath, netnsPath: b2!.netnsPath });
      // Rate 1/s: the probe's second of connects earns at most one token more.
      t.true(bpf.throttle(b2!.uid, 1, 10, 10_000, 3), 'armed from an admission, 3 tokens left');
      const seeded = await refusedOf(6);
      t.deepEqual(seeded.slice(0, 3), [false, false, false], 'the 3 tokens pass');
      t.true(seeded.slice(4).every(Boolean), `then connect() refuses (${JSON.stringify(seeded)})`);
      t.true(bpf.throttle(b2!.uid, 1, 10, 10_000, 8), 'an admission while armed changes nothing');
      t.true((await refusedOf(2)).every(Boolean), 'still refused: the admission did not refill it');
      t.true(bpf.throttle(b2!.uid, 1, 10, 10_000), 'a refusal');
      t.true(bpf.throttle(b2!.uid, 1000, 1000, 10_000, 999), 'an admission at looser limits');
      t.true((await refusedOf(2)).every(Boolean), 'a looser admission does not undo an arming');
      t.is(bpf.counters(b2!.uid)?.throttled, seeded.filter(Boolean).length + 4, 'every refusal counted');
      t.deepEqual(bpf.throttledPodIds, [b2!.uid]);
    } finally {
      await bpf.detach(b2!.uid);
      rmSync(join(PIN_ROOT, scope), { recursive: true, force: true });
    }
  },
);
