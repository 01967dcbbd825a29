import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiServerDouble, Cluster, type KubeObject, type PodInfo } from '@zmesh/harness';
import { MeshMetrics, seqpacketUnavailableReason } from '@zmesh/shared';
import { type AddWorkloadRequest, netnsIdentity, type WorkloadHandler, ZdsClient } from '@zmesh/ztunnel';
import test from 'ava';
import { execa } from 'execa';

/**
 * `zmesh node-agent` (its own process, as the DaemonSet runs it) against the API-server
 * double and a harness netns cluster, with ztunnel's real ZDS client (kernel facts checked:
 * the pod cgroup from the uid, the processes' netns) recording what it is handed:
 * - a pod already running is found in /proc (its cgroup names its uid, kubelet's layout);
 * - the plugin is installed and chained into the node's CNI config;
 * - a new pod's netns comes from zmesh-cni, run exactly as a runtime runs it (env, stdin
 *   netconf with prevResult), which passes prevResult through, or fails when ztunnel refuses;
 * - a pod labelled `none` is left out; a deleted pod is removed (Del).
 */
const unavailable =
  process.getuid?.() !== 0 ? 'needs root (network namespaces and cgroups)' : seqpacketUnavailableReason();
const agentTest = unavailable ? test.serial.skip : test.serial;
const why = unavailable ? ` [skipped: ${unavailable}]` : '';
const ZMESH = join(import.meta.dirname, '..', '..', 'bin', 'zmesh');

class Ztunnel implements WorkloadHandler {
  readonly pods = new Map<string, { netns: string; name?: string }>();
  readonly refuse = new Set<string>();
  snapshots = 0;
  async addWorkload(req: AddWorkloadRequest): Promise<void> {
    if (this.refuse.has(req.uid)) throw new Error('refused by the test');
    this.pods.set(req.uid, { netns: netnsIdentity(req.netns), ...(req.info ? { name: req.info.name } : {}) });
  }
  async delWorkload(uid: string): Promise<void> {
    this.pods.delete(uid);
  }
  async snapshot(uids: string[]): Promise<void> {
    for (const uid of this.pods.keys()) if (!uids.includes(uid)) this.pods.delete(uid);
    this.snapshots++;
  }
  has(uid: string): boolean {
    return this.pods.has(uid);
  }
}

/** One POST on the agent's CNI socket, as a hostile local client sends it. */
function post(socketPath: string, body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path: '/cmdadd', method: 'POST' }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => {
        text += String(d);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const podObject = (p: PodInfo, labels: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: p.name, namespace: p.namespace, uid: p.uid, labels },
  spec: { nodeName: p.node, serviceAccountName: p.serviceAccount },
  status: { phase: 'Running' },
});

agentTest(
  `zmesh node-agent: running pods from /proc, new pods from zmesh-cni run as a runtime runs it, Dels when pods go${why}`,
  async (t) => {
    t.timeout(90_000);
    const cluster = await Cluster.up({
      nodes: ['node-a', 'node-b'],
      pods: [
        { name: 'web', namespace: 'shop', serviceAccount: 'web', node: 'node-a' },
        { name: 'late', namespace: 'shop', serviceAccount: 'late', node: 'node-a' },
        { name: 'bad', namespace: 'shop', serviceAccount: 'bad', node: 'node-a' },
        { name: 'plain', namespace: 'shop', serviceAccount: 'plain', node: 'node-a' },
        { name: 'other', namespace: 'shop', serviceAccount: 'other', node: 'node-b' },
      ],
    });
    const dir = mkdtempSync(join(tmpdir(), 'zm-node-agent-'));
    const api = new ApiServerDouble();
    await api.start();
    const procs: Array<ReturnType<typeof cluster.runInPod>> = [];
    let agent: ReturnType<typeof execa> | undefined;
    let client: ZdsClient | undefined;
    t.teardown(async () => {
      client?.close();
      agent?.kill('SIGTERM');
      await agent?.catch(() => undefined);
      await cluster.down(); // kills the pods' processes
      await Promise.all(procs.map((p) => p.catch(() => undefined)));
      await api.close();
      rmSync(dir, { recursive: true, force: true });
    });
    const pod = (name: string) => cluster.pod(name, 'shop');
    const netnsOf = (name: string) => `net:[${statSync(pod(name).netnsPath).ino}]`;
    // Already running when the agent starts: web (and other, on the other node).
    for (const name of ['web', 'other']) {
      const p = cluster.runInPod(pod(name), ['sleep', '120'], { reject: false, stdin: 'ignore' });
      procs.push(p);
    }
    api.put({
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: 'shop', labels: { 'istio.io/dataplane-mode': 'ambient' } },
    });
    api.put(podObject(pod('web')));
    api.put(podObject(pod('other')));
    // The node's CNI config, as a primary CNI leaves it: one plugin in a .conf.
    const binDir = join(dir, 'bin');
    const confDir = join(dir, 'net.d');
    mkdirSync(binDir);
    mkdirSync(confDir);
    writeFileSync(
      join(confDir, '10-bridge.conf'),
      JSON.stringify({ cniVersion: '1.0.0', name: 'podnet', type: 'bridge', bridge: 'cni0' }),
    );
    writeFileSync(join(dir, 'kubeconfig'), api.kubeconfig());
    const zdsSocket = join(dir, 'zds.sock');
    const cniSocket = join(dir, 'cni.sock');
    let said = '';
    const startAgent = () => {
      const child = execa(
        ZMESH,
        [
          'node-agent',
          ...['--node', 'node-a', '--kubeconfig', join(dir, 'kubeconfig')],
          ...['--zds-socket', zdsSocket, '--cni-socket', cniSocket],
          ...['--cni-bin-dir', binDir, '--cni-conf-dir', confDir, '--rescan', '0.2', '--port', '0'],
        ],
        {
          reject: false,
          stdin: 'ignore',
          stdout: 'ignore',
          env: { ZMESH_LOG: process.env.ZMESH_LOG ?? 'warn' },
        },
      );
      child.stderr?.on('data', (d: Buffer) => {
        said += String(d);
        process.stderr.write(`[node-agent] ${d}`);
      });
      return child;
    };
    agent = startAgent();
    const ztunnel = new Ztunnel();
    const registry = new MeshMetrics({ defaultMetrics: false }).registry;
    client = new ZdsClient(ztunnel, {
      path: zdsSocket,
      cgroupRoot: cluster.cgroupRoot,
      registry,
      reconnectMs: 50,
    });
    client.start();
    await until(() => ztunnel.pods.has(pod('web').uid), 'the running pod found in /proc and Added');
    t.is(ztunnel.pods.get(pod('web').uid)?.netns, netnsOf('web'), "Added with the web pod's own netns fd");
    t.is(ztunnel.pods.get(pod('web').uid)?.name, 'web', 'with its WorkloadInfo from the API');
    t.false(ztunnel.pods.has(pod('other').uid), "another node's pod is not this agent's");
    t.is(statSync(cniSocket).mode & 0o777, 0o600, 'the CNI socket is root-only');

    // Chained into the node's CNI config: the .conf became a .conflist ending in zmesh-cni.
    await until(() => {
      try {
        return readFileSync(join(confDir, '10-bridge.conflist'), 'utf8').includes('zmesh-cni');
      } catch {
        return false;
      }
    }, 'zmesh-cni chained');
    const list = JSON.parse(readFileSync(join(confDir, '10-bridge.conflist'), 'utf8')) as {
      cniVersion: string;
      name: string;
      plugins: Array<Record<string, unknown>>;
    };
    t.deepEqual(
      list.plugins.map((p) => p.type),
      ['bridge', 'zmesh-cni'],
    );
    // The runtime's call: the plugin's entry with the network's name and version, and the
    // result of the bridge before it.
    const prevResult = {
      cniVersion: '1.0.0',
      interfaces: [{ name: 'eth0', sandbox: 'x' }],
      ips: [{ address: '10.244.1.9/24', interface: 0 }],
    };
    const cni = (p: PodInfo, command = 'ADD', conf: object = { prevResult }) =>
      execa(join(binDir, 'zmesh-cni'), [], {
        reject: false,
        input: JSON.stringify({ cniVersion: list.cniVersion, name: list.name, ...list.plugins[1], ...conf }),
        env: {
          CNI_COMMAND: command,
          CNI_CONTAINERID: `sandbox-${p.name}`,
          CNI_NETNS: p.netnsPath,
          CNI_IFNAME: 'eth0',
          CNI_PATH: binDir,
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${p.namespace};K8S_POD_NAME=${p.name};K8S_POD_INFRA_CONTAINER_ID=sandbox-${p.name};K8S_POD_UID=${p.uid}`,
        },
      });

    // A new pod: in the API, then its sandbox's CNI ADD before any process runs in it.
    api.put(podObject(pod('late')));
    const added = await cni(pod('late'));
    t.is(added.exitCode, 0, `${added.stdout}${added.stderr}`);
    t.deepEqual(JSON.parse(added.stdout), prevResult, 'prevResult passed through unchanged');
    t.is(
      ztunnel.pods.get(pod('late').uid)?.netns,
      netnsOf('late'),
      'Added with CNI_NETNS before the ADD returned',
    );
    // Its containers start; then the agent restarts (an upgrade): the snapshot the new agent
    // sends names both pods, found in /proc before it serves ZDS, so ztunnel keeps them.
    procs.push(cluster.runInPod(pod('late'), ['sleep', '120'], { reject: false, stdin: 'ignore' }));
    const before = ztunnel.snapshots;
    agent.kill('SIGTERM');
    await agent;
    agent = startAgent();
    await until(() => ztunnel.snapshots > before, 'the restarted agent to send its snapshot', 20_000);
    t.deepEqual([...ztunnel.pods.keys()].sort(), [pod('late').uid, pod('web').uid].sort(), 'both kept');

    // ztunnel refuses: the ADD fails with a CNI error result, and the pod is not recorded.
    api.put(podObject(pod('bad')));
    ztunnel.refuse.add(pod('bad').uid);
    const refused = await cni(pod('bad'));
    t.is(refused.exitCode, 1);
    const error = JSON.parse(refused.stdout) as {
      cniVersion: string;
      code: number;
      msg: string;
      details: string;
    };
    t.is(error.code, 100);
    t.is(error.cniVersion, '1.0.0');
    t.regex(error.msg, /refused pod shop\/bad/);
    t.regex(error.details, /ZM_ERR_CNI_REFUSED.*refused by the test/);

    // A pod labelled none: the ADD passes, nothing is Added.
    api.put(podObject(pod('plain'), { 'istio.io/dataplane-mode': 'none' }));
    const plain = await cni(pod('plain'));
    t.is(plain.exitCode, 0);
    t.false(ztunnel.pods.has(pod('plain').uid));

    // What a runtime may also send: DEL has nothing to print; a missing prevResult, a version
    // it does not speak and no netns are CNI errors; VERSION lists what it speaks.
    t.like(await cni(pod('late'), 'DEL'), { exitCode: 0, stdout: '' });
    t.like(JSON.parse((await cni(pod('late'), 'ADD', { prevResult: undefined })).stdout), { code: 7 });
    t.like(JSON.parse((await cni(pod('late'), 'ADD', { cniVersion: '9.9.9', prevResult })).stdout), {
      code: 1,
    });
    const version = await cni(pod('late'), 'VERSION');
    t.true(
      (JSON.parse(version.stdout) as { supportedVersions: string[] }).supportedVersions.includes('1.0.0'),
    );
    const garbage = await post(cniSocket, '{"netns":1}');
    t.is(garbage.status, 400);
    t.regex(garbage.body, /ZM_ERR_CNI_REFUSED/, 'a malformed request on the socket is refused with the code');
    // ... and counted, as are the refused and enrolled ADDs (the restarted agent's since it started).
    const health = [...said.matchAll(/health on (127\.0\.0\.1:\d+)/g)].at(-1)?.[1];
    t.is((await fetch(`http://${health}/healthz/ready`)).status, 200);
    const metrics = await (await fetch(`http://${health}/metrics`)).text();
    t.regex(metrics, /^zmesh_node_agent_cni_bad_requests_total\{result="bad-request"\} 1$/m);
    t.regex(metrics, /^zmesh_node_agent_cni_requests_total\{result="refused"\} 1$/m);
    t.regex(metrics, /^zmesh_node_agent_cni_requests_total\{result="skipped"\} 1$/m);
    t.regex(metrics, /^zmesh_node_agent_enroll_failures_total\{source="cni"\} 1$/m);
    t.regex(metrics, /^zmesh_node_agent_pods_enrolled 2$/m);

    // The pod deleted in the API: Del. Labelled none later: Del too.
    api.remove(podObject(pod('web')));
    await until(() => !ztunnel.pods.has(pod('web').uid), 'Del after the pod is deleted');
    api.put(podObject(pod('late'), { 'istio.io/dataplane-mode': 'none' }));
    await until(() => !ztunnel.pods.has(pod('late').uid), 'Del after the pod is labelled none');
    t.deepEqual([...ztunnel.pods.keys()], [], 'nothing else enrolled');
  },
);
