import { type LocalMesh, startMesh } from '@zmesh/harness';
import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import { execa } from 'execa';

/**
 * Issue 38: transports the connect hooks cannot see must not be made at all by an enrolled
 * pod. UDP-Lite's connect() never ran the cgroup connect hook. Capture refuses every inet
 * socket but TCP, MPTCP, UDP and ICMP at creation (`cgroup/sock_create`, bpf/README.md).
 * AF_VSOCK has no netns and no inet hook: capture cannot refuse it, and the test holds the docs
 * to that. Sockets are only created here,
 * never connected (no vsock connect ever), by root in the pod (a privileged pod: raw sockets
 * need CAP_NET_RAW). Needs root and BPF.
 */
const unavailable = await BpfCapture.unavailableReason();
const meshTest = unavailable ? test.serial.skip : test.serial;
if (unavailable) test.skip(`transport tests skipped: ${unavailable}`, () => {});

/** Creates one socket of each kind and closes it; prints {kind: 0 | errno name}. */
const PROBE = `
import errno, json, socket
out = {}
def probe(name, family, kind, proto):
    try:
        socket.socket(family, kind, proto).close(); out[name] = 0
    except OSError as e: out[name] = errno.errorcode.get(e.errno, str(e.errno))
probe('tcp', socket.AF_INET, socket.SOCK_STREAM, 0)
probe('tcp6', socket.AF_INET6, socket.SOCK_STREAM, 0)
probe('udp', socket.AF_INET, socket.SOCK_DGRAM, 0)
probe('udp6', socket.AF_INET6, socket.SOCK_DGRAM, 0)
probe('mptcp', socket.AF_INET, socket.SOCK_STREAM, 262)
probe('unix', socket.AF_UNIX, socket.SOCK_STREAM, 0)
probe('ping', socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
probe('raw-icmp', socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
probe('udplite', socket.AF_INET, socket.SOCK_DGRAM, 136)
probe('udplite6', socket.AF_INET6, socket.SOCK_DGRAM, 136)
probe('sctp', socket.AF_INET, socket.SOCK_STREAM, 132)
probe('raw-tcp', socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
probe('raw-udp6', socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_UDP)
probe('vsock', 40, socket.SOCK_STREAM, 0)
print(json.dumps(out))
`;

const ALLOWED = ['tcp', 'tcp6', 'udp', 'udp6', 'mptcp', 'unix', 'ping', 'raw-icmp'];
const REFUSED = ['udplite', 'udplite6', 'sctp', 'raw-tcp', 'raw-udp6'];

let mesh: LocalMesh;

if (!unavailable) {
  test.before(async () => {
    mesh = await startMesh({
      run: 'cluster',
      spec: {
        nodes: ['node-a'],
        pods: [{ name: 'prober', namespace: 'transports', serviceAccount: 'prober', node: 'node-a' }],
      },
    });
  });
  test.after.always(async () => {
    await mesh?.down();
  });
}

meshTest(
  'an enrolled pod cannot create UDP-Lite, SCTP or raw IP sockets; TCP, UDP and MPTCP still work',
  async (t) => {
    // What this kernel supports at all, from outside any pod.
    const host = JSON.parse((await execa('python3', ['-c', PROBE])).stdout) as Record<string, string | 0>;
    // As root in the pod's cgroup and netns (a privileged pod): raw sockets need CAP_NET_RAW.
    const run = await mesh.cluster.runPrivilegedInPod(mesh.pod('prober'), ['python3', '-c', PROBE], {
      reject: false,
    });
    t.is(run.exitCode, 0, String(run.stderr));
    const pod = JSON.parse(String(run.stdout)) as Record<string, string | 0>;
    t.log(`outside a pod: ${JSON.stringify(host)}`);
    t.log(`enrolled pod:  ${JSON.stringify(pod)}`);
    for (const kind of ALLOWED) t.is(pod[kind], host[kind], `${kind}: as outside the mesh`);
    for (const kind of REFUSED) {
      if (host[kind] !== 0) {
        t.log(`${kind}: this kernel cannot make one at all (${host[kind]}); not judged`);
        continue;
      }
      t.is(pod[kind], 'EPERM', `${kind}: refused at creation`);
    }
    t.is(host.udplite, 0, 'UDP-Lite exists on this kernel: the case the issue found is judged');
    // AF_VSOCK: cgroup/sock_create runs for inet sockets only, so capture cannot refuse it
    // (bpf/README.md, "Socket creation": the pod's seccomp profile must). zm_sock_create
    // would refuse a stream socket of protocol 0 if it saw one; vsock (and unix, above) made
    // in the pod show it never does. What the docs say is checked here: if capture ever
    // refuses vsock, this fails and they must change.
    t.log(`AF_VSOCK in the pod: ${pod.vsock === 0 ? 'created (capture cannot refuse it)' : pod.vsock}`);
    if (host.vsock === 0) t.is(pod.vsock, 0, 'AF_VSOCK is not refused in the pod, as documented');
    else t.log(`vsock: this kernel cannot make one at all (${host.vsock}); not judged`);
  },
);
