import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import { execa } from 'execa';
import { parse } from 'yaml';
import { L7_POLICY_YAML } from '../demo/l7-lab.js';
import { ApiServerDouble, type KubeObject } from '../kube-api/api-server-double.js';
import { ZMESH_BIN } from '../local/ztunnel-process.js';
import { startMesh } from './mesh.js';
import { type MeshSpec, VIP_PREFIX } from './mesh-spec.js';
import { METHOD_ECHO_SERVER, REQUESTS_CLIENT } from './pod-programs.js';

/*
 * The netns cluster with the API-server double as its API: the control plane runs
 * `--kubernetes`, the mesh's Namespaces, Pods, Services and the waypoint Gateway are API
 * objects, the waypoint runs from the Deployment the controller made for the Gateway, and
 * the namespace's istio.io/use-waypoint label, changed through the API, decides whether
 * captured traffic crosses it (its L7 policy applies) or skips it.
 */
const reason = await BpfCapture.unavailableReason();
const meshTest = reason ? test.serial.skip : test.serial;
const why = reason ? ` [skipped: needs root and BPF: ${reason}]` : '';

const VIP = `${VIP_PREFIX}41`;
const SPEC: MeshSpec = {
  nodes: ['node-a', 'node-b'],
  pods: [
    { name: 'frontend', namespace: 'front', serviceAccount: 'frontend', node: 'node-a' },
    { name: 'web', namespace: 'shop', serviceAccount: 'web', node: 'node-b' },
    { name: 'waypoint', namespace: 'shop', serviceAccount: 'waypoint', node: 'node-b' },
  ],
  services: [
    { name: 'web', namespace: 'shop', vip: VIP, ports: [{ port: 80, targetPort: 8080 }], pods: ['web'] },
  ],
  waypoints: [{ name: 'waypoint', namespace: 'shop', pod: 'waypoint' }],
};

meshTest(
  `the netns cluster on the API double: waypoint from its Deployment, the namespace label through the API decides L7${why}`,
  async (t) => {
    t.timeout(120_000);
    const api = new ApiServerDouble({ host: '127.34.0.5' });
    await api.start();
    t.teardown(() => api.close());
    const mesh = await startMesh({
      run: 'cluster',
      spec: SPEC,
      controlPlane: { kubernetes: api },
      ztunnelLog: 'error',
    });
    const web = mesh.cluster.runInPod(mesh.pod('web'), ['node', '-e', METHOD_ECHO_SERVER], {
      reject: false,
      stdin: 'ignore',
    });
    try {
      await new Promise<void>((resolve) => web.stdout?.once('data', () => resolve()));
      const deployment = api.get('apps', 'v1', 'deployments', 'shop', 'waypoint');
      const gateway = api.get('gateway.networking.k8s.io', 'v1', 'gateways', 'shop', 'waypoint');
      t.is(
        deployment?.metadata.ownerReferences?.[0]?.uid,
        gateway?.metadata.uid,
        'the Gateway owns its Deployment',
      );
      const frontend = mesh.pod('frontend');
      const podUrl = `http://${mesh.pod('web').ipv4}:8080`;
      const send = async (...requests: string[]) => {
        const r = await mesh.cluster.exec(frontend, ['node', '-e', REQUESTS_CLIENT, ...requests], {
          timeoutMs: 30_000,
        });
        return JSON.parse(r.stdout.trim() || '[]') as Array<number | string>;
      };
      const until = async (want: Array<number | string>, ...requests: string[]) => {
        const deadline = Date.now() + 20_000;
        let got: Array<number | string> = [];
        while (Date.now() < deadline) {
          got = await send(...requests);
          if (JSON.stringify(got) === JSON.stringify(want)) break;
          await new Promise((r) => setTimeout(r, 200));
        }
        return got;
      };
      t.deepEqual(await send(`GET http://${VIP}/`, `GET ${podUrl}/`), [200, 200], 'the demo traffic flows');
      // The L7 policy is an API object too; through the waypoint it holds for service and pod.
      api.put(parse(L7_POLICY_YAML) as KubeObject);
      const admin = [`POST http://${VIP}/admin/x`, `POST ${podUrl}/admin/x`];
      t.deepEqual(await until([403, 403], ...admin), [403, 403], 'the namespace uses its waypoint');
      // The label removed through the API: traffic skips the waypoint, so its L7 policy too.
      api.put({
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name: 'shop', labels: { 'istio.io/dataplane-mode': 'ambient' } },
      });
      t.deepEqual(
        await until([200, 200], ...admin),
        [200, 200],
        'without the label, the waypoint is skipped',
      );
      // zmesh ns l7 on puts the label back through the API.
      const on = await execa(
        ZMESH_BIN,
        [
          'ns',
          'l7',
          'on',
          'shop',
          '--waypoint',
          'waypoint',
          '--admin',
          mesh.controlPlane?.adminSocket ?? '',
          '--timeout',
          '10',
        ],
        { reject: false },
      );
      t.is(on.exitCode, 0, `${on.stdout}${on.stderr}`);
      t.is(
        api.get('', 'v1', 'namespaces', '', 'shop')?.metadata.labels?.['istio.io/use-waypoint'],
        'waypoint',
      );
      t.deepEqual(await until([403, 403], ...admin), [403, 403], 'labelled again: through the waypoint');
      // The web Pod deleted in the API: its node's agent (watching spec.nodeName) removes its capture.
      t.regex(await mesh.metrics('node-b'), /^zmesh_pods_enrolled 1$/m);
      api.remove({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'web', namespace: 'shop' } });
      const deadline = Date.now() + 15_000;
      while (!/^zmesh_pods_enrolled 0$/m.test(await mesh.metrics('node-b')) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 100));
      t.regex(await mesh.metrics('node-b'), /^zmesh_pods_enrolled 0$/m, 'its capture removed');
    } finally {
      await mesh.down();
    }
  },
);
