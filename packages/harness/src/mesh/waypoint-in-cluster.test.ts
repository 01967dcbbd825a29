import { BpfCapture } from '@zmesh/ztunnel';
import test from 'ava';
import { L7_POLICY_YAML } from '../demo/l7-lab.js';
import { startMesh } from './mesh.js';
import { type MeshSpec, VIP_PREFIX } from './mesh-spec.js';
import { netnsHttp } from './netns-http.js';
import { METHOD_ECHO_SERVER, REQUESTS_CLIENT } from './pod-programs.js';

/*
 * A namespace waypoint running in its own pod on the netns cluster, configured over xDS:
 * captured traffic from another node reaches the namespace's service and its pod only
 * through it, and its L7 policy applies to both.
 */
const reason = await BpfCapture.unavailableReason();
const meshTest = reason ? test.serial.skip : test.serial;
const why = reason ? ` [skipped: needs root and BPF: ${reason}]` : '';

const VIP = `${VIP_PREFIX}40`;
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
  `a namespace waypoint in its own pod: service and pod traffic cross it, its L7 policy holds${why}`,
  async (t) => {
    t.timeout(90_000);
    const mesh = await startMesh({ run: 'cluster', spec: SPEC, controlPlane: true, ztunnelLog: 'error' });
    const web = mesh.cluster.runInPod(mesh.pod('web'), ['node', '-e', METHOD_ECHO_SERVER], {
      reject: false,
      stdin: 'ignore',
    });
    try {
      await new Promise<void>((resolve) => web.stdout?.once('data', () => resolve()));
      const frontend = mesh.pod('frontend');
      const podUrl = `http://${mesh.pod('web').ipv4}:8080`;
      const send = async (...requests: string[]) => {
        const r = await mesh.cluster.exec(frontend, ['node', '-e', REQUESTS_CLIENT, ...requests], {
          timeoutMs: 30_000,
        });
        return JSON.parse(r.stdout.trim() || '[]') as Array<number | string>;
      };
      t.deepEqual(
        await send(`GET http://${VIP}/`, `GET ${podUrl}/`),
        [200, 200],
        'service and pod reachable',
      );

      await mesh.controlPlane!.apply(L7_POLICY_YAML, 'policy.yaml');
      // The waypoint's xDS may take a moment: poll until the policy is in force.
      const deadline = Date.now() + 15_000;
      let denied: Array<number | string> = [];
      while (Date.now() < deadline) {
        denied = await send(`POST http://${VIP}/admin/x`, `POST ${podUrl}/admin/x`);
        if (denied.every((s) => s === 403)) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      t.deepEqual(
        denied,
        [403, 403],
        'the L7 policy applies to the service and to the pod addressed directly',
      );
      t.deepEqual(await send(`GET http://${VIP}/admin/x`), [200], 'what the policy allows still passes');

      const waypoint = mesh.pod('waypoint');
      const metrics = await netnsHttp(waypoint.netnsPath, 15020, '/metrics', 'GET', waypoint.ipv4);
      const requests = metrics.body
        .split('\n')
        .filter(
          (l) =>
            l.startsWith('istio_requests_total{') &&
            l.includes('source_workload="frontend"') &&
            l.includes('source_principal="spiffe://cluster.local/ns/front/sa/frontend"'),
        );
      t.true(requests.length > 0, 'the waypoint counted the frontend pod’s requests');
      t.true(
        requests.some((l) => l.includes('response_code="403"')),
        `denials counted: ${requests.join('\n')}`,
      );
    } finally {
      // The web server ends with its pod: the cluster's teardown kills the pods' cgroups.
      await mesh.down();
    }
  },
);
