import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import { ApiServerDouble } from '../kube-api/api-server-double.js';
import { startMesh } from './mesh.js';
import { type MeshSpec, VIP_PREFIX } from './mesh-spec.js';
import { METHOD_ECHO_SERVER, REQUESTS_CLIENT } from './pod-programs.js';

/*
 * The netns cluster with the API-server double as its API and `zmesh node-agent` on each
 * node (not the harness) enrolling pods in the real ztunnels over ZDS with real netns fds:
 * pods running before the agent are found in /proc; a pod created later gets its netns from
 * the zmesh-cni plugin the agent chained into the node's CNI config, run as a runtime runs
 * it; captured traffic flows to both; a pod deleted in the API has its capture removed.
 */
const reason = await BpfCapture.unavailableReason();
const meshTest = reason ? test.serial.skip : test.serial;
const why = reason ? ` [skipped: needs root and BPF: ${reason}]` : '';

const VIP = `${VIP_PREFIX}42`;
const SPEC: MeshSpec = {
  nodes: ['node-a', 'node-b'],
  pods: [
    { name: 'frontend', namespace: 'front', serviceAccount: 'frontend', node: 'node-a' },
    { name: 'web', namespace: 'shop', serviceAccount: 'web', node: 'node-b' },
    { name: 'late', namespace: 'shop', serviceAccount: 'late', node: 'node-b' },
  ],
  services: [
    { name: 'web', namespace: 'shop', vip: VIP, ports: [{ port: 80, targetPort: 8080 }], pods: ['web'] },
  ],
};

meshTest(
  `zmesh node-agent on the netns cluster: /proc and CNI discovery, enrolled in ztunnel over ZDS, traffic, Del on delete${why}`,
  async (t) => {
    t.timeout(120_000);
    const api = new ApiServerDouble({ host: '127.34.0.6' });
    await api.start();
    t.teardown(() => api.close());
    const late = (p: { name: string }) => p.name === 'late';
    const mesh = await startMesh({
      run: 'cluster',
      spec: SPEC,
      controlPlane: { kubernetes: api, nodeAgents: true },
      // `late` is not in the API yet: its sandbox comes later, through the CNI plugin.
      enroll: (p) => !late(p),
      unconfigured: late,
      ztunnelLog: 'error',
    });
    try {
      const enrolled = async (node: string) =>
        Number(/^zmesh_pods_enrolled (\d+)$/m.exec(await mesh.metrics(node))?.[1] ?? -1);
      t.is(await enrolled('node-a'), 1, "node-a's agent found frontend in /proc");
      t.is(await enrolled('node-b'), 1, "node-b's agent found web in /proc");
      const serve = (name: string) => {
        const server = mesh.cluster.runInPod(mesh.pod(name), ['node', '-e', METHOD_ECHO_SERVER], {
          reject: false,
          stdin: 'ignore',
        });
        return new Promise<void>((resolve) => server.stdout?.once('data', () => resolve()));
      };
      await serve('web');
      const send = async (...requests: string[]) => {
        const r = await mesh.cluster.exec(
          mesh.pod('frontend'),
          ['node', '-e', REQUESTS_CLIENT, ...requests],
          {
            timeoutMs: 30_000,
          },
        );
        return JSON.parse(r.stdout.trim() || '[]') as Array<number | string>;
      };
      t.deepEqual(
        await send(`GET http://${VIP}/`, `GET http://${mesh.pod('web').ipv4}:8080/`),
        [200, 200],
        'captured traffic flows between pods the node agents enrolled',
      );

      // A new pod: Pod object, then its sandbox's CNI ADD, before its first process.
      const added = await mesh.cniAdd(mesh.pod('late'));
      t.is(added.exitCode, 0, added.stdout);
      t.like(
        JSON.parse(added.stdout),
        { ips: [{ address: `${mesh.pod('late').ipv4}/24` }] },
        'prevResult passed on',
      );
      t.is(await enrolled('node-b'), 2, 'enrolled before the ADD returned');
      await mesh.waitReady();
      await serve('late');
      t.deepEqual(await send(`GET http://${mesh.pod('late').ipv4}:8080/`), [200], 'and its traffic flows');

      // web deleted in the API: its node's agent sends Del, ztunnel removes its capture.
      api.remove({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'web', namespace: 'shop' } });
      const deadline = Date.now() + 15_000;
      while ((await enrolled('node-b')) !== 1 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 100));
      t.is(await enrolled('node-b'), 1, "web's capture removed, late's kept");
    } finally {
      await mesh.down();
    }
  },
);
