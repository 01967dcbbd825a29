import { statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Attempt, Outcome } from './attempt.js';
import { DROP_TIMEOUT_MS } from './attempts-direct.js';
import { APP_PORT, type BypassLab } from './bypass-lab.js';
import { combine, describeProbe, judgePrivileges, judgeProbes } from './judge.js';

const HTTP_GET = (path: string) => `GET ${path} HTTP/1.0\r\nHost: x\r\n\r\n`;

/** Ports and paths other than the application's TCP port: UDP, ztunnel's own ports, the node agent. */
export function portAttempts(): Attempt[] {
  return [
    {
      id: 'udp/app-port',
      description: `UDP from an enrolled pod to another pod's application port ${APP_PORT} (IPv4 and IPv6)`,
      expected: 'exempt',
      run: udpToAppPort,
    },
    {
      id: 'plaintext-15008/enrolled',
      description: "plaintext to another pod's 15008 (ztunnel's HBONE port) from an enrolled pod",
      expected: 'captured',
      run: async (lab) => {
        const target = { host: lab.pod('server').ipv4, port: 15008, send: HTTP_GET('/') };
        return judgeProbes(
          await lab.probe(lab.pod('attacker'), [target], DROP_TIMEOUT_MS),
          await lab.moves(),
          'node-a',
        );
      },
    },
    {
      id: 'plaintext-15008/non-enrolled',
      description: "plaintext (HTTP/1.1, no TLS) to another pod's 15008 from a pod outside the mesh",
      expected: 'denied',
      run: async (lab) => {
        const target = { host: lab.pod('server').ipv4, port: 15008, send: HTTP_GET('/') };
        return judgeProbes(
          await lab.probe(lab.pod('outsider'), [target], DROP_TIMEOUT_MS),
          await lab.moves(),
        );
      },
    },
    {
      id: 'plaintext-15006/strict',
      description:
        "plaintext to another pod's 15006 (permissive inbound) while strict, from outside the mesh and from an enrolled pod",
      expected: 'denied',
      alsoAccepted: ['captured'],
      run: async (lab) => {
        const target = { host: lab.pod('server').ipv4, port: 15006, send: 'hello\n' };
        const outside = judgeProbes(await lab.probe(lab.pod('outsider'), [target], DROP_TIMEOUT_MS), []);
        const inside = await lab.probe(lab.pod('attacker'), [target], DROP_TIMEOUT_MS);
        return combine(
          labelled('outsider', outside),
          labelled('attacker', judgeProbes(inside, await lab.moves(), 'node-a')),
        );
      },
    },
    {
      id: 'admin-15000/from-pod',
      description:
        "ztunnel's admin port 15000 from a pod: its own loopback, its node's addresses (outsider), and from an enrolled pod",
      expected: 'denied',
      alsoAccepted: ['captured'],
      run: adminFromPod,
    },
    {
      id: 'metrics-15020/from-pod',
      description:
        "ztunnel's metrics port 15020 from a pod (read-only; reachable by design where it is exposed)",
      expected: 'exempt',
      alsoAccepted: ['denied'],
      run: metricsFromPod,
    },
    {
      id: 'node-secrets/from-pod',
      description: "a pod reading the mesh CA's root key, the mesh config or ztunnel's environment",
      expected: 'denied',
      run: async (lab) => {
        const pid = lab.mesh.ztunnelPid('node-a');
        const r = await lab.privileges(lab.pod('attacker'), [
          { check: 'read', path: join(lab.mesh.dir, 'root-key.pem') },
          { check: 'read', path: join(lab.mesh.dir, 'mesh.yaml') },
          { check: 'read', path: `/proc/${pid}/environ` },
        ]);
        return judgePrivileges(r, () => true);
      },
    },
    {
      id: 'node-agent-socket/from-pod',
      description:
        "the node agent's ZDS socket (enroll/remove workloads) from a pod, on its own node and the other",
      expected: 'denied',
      run: agentSocketFromPod,
    },
  ];
}

function labelled(who: string, o: Outcome): Outcome {
  return { observed: o.observed, evidence: o.evidence.map((e) => `${who} ${e}`) };
}

/**
 * Capture and strict inbound are TCP-only (bpf/README.md; as in Istio ambient, where
 * ztunnel carries no UDP): a UDP datagram reaches the app. Exempt by configuration, not
 * a bypass of anything the mesh claims — but the row shows it, so nobody assumes otherwise.
 */
async function udpToAppPort(lab: BypassLab): Promise<Outcome> {
  const server = lab.pod('server');
  const results = await lab.probe(lab.pod('attacker'), [
    { host: server.ipv4, port: APP_PORT, udp: true },
    { host: server.ipv6, port: APP_PORT, udp: true },
  ]);
  const evidence = results.map(describeProbe);
  const reached = results.some((r) => r.answer);
  evidence.push('UDP is outside capture and strict inbound by configuration (bpf/README.md: TCP only)');
  return { observed: reached ? 'exempt' : 'denied', evidence };
}

async function adminFromPod(lab: BypassLab): Promise<Outcome> {
  const a = lab.node('node-a');
  const send = HTTP_GET('/config_dump');
  const outsider = await lab.probe(lab.pod('outsider'), [
    { host: '127.0.0.1', port: 15000, send },
    { host: a.gateway4, port: 15000, send },
    { host: a.gateway6, port: 15000, send },
    { host: a.fabric4, port: 15000, send },
  ]);
  const attacker = await lab.probe(lab.pod('attacker'), [{ host: a.gateway4, port: 15000, send }]);
  const moves = await lab.moves();
  return combine(
    labelled('outsider', judgeProbes(outsider, [])),
    labelled('attacker', judgeProbes(attacker, moves, 'node-a')),
  );
}

async function metricsFromPod(lab: BypassLab): Promise<Outcome> {
  const a = lab.node('node-a');
  const results = await lab.probe(lab.pod('outsider'), [
    { host: a.gateway4, port: 15020, send: HTTP_GET('/metrics') },
    { host: a.gateway4, port: 15020, send: 'POST /quitquitquit HTTP/1.0\r\nContent-Length: 0\r\n\r\n' },
  ]);
  const evidence = results.map(describeProbe);
  const quit = results[1]?.answer ?? '';
  if (quit && !/^HTTP\/1\.[01] 404/.test(quit))
    return { observed: 'delivered', evidence: [...evidence, 'metrics port accepted a write'] };
  evidence.push("in the harness ztunnel binds 15020 to its node's loopback (--address 127.0.0.1)");
  return { observed: results[0]?.answer ? 'exempt' : 'denied', evidence };
}

async function agentSocketFromPod(lab: BypassLab): Promise<Outcome> {
  const paths = ['node-a', 'node-b'].map((n) => lab.mesh.zdsSocket(n));
  const results = await lab.probe(
    lab.pod('attacker'),
    // Connecting is the whole question; nothing is sent (a Snapshot would remove pods).
    paths.map((unix) => ({ unix })),
  );
  const evidence = results.map(describeProbe);
  for (const p of paths) {
    const mode = (path: string) => (statSync(path).mode & 0o777).toString(8).padStart(3, '0');
    evidence.push(
      `${p}: socket mode ${mode(p)}, directory mode ${mode(dirname(p))}, owner uid ${statSync(p).uid}`,
    );
  }
  return { observed: results.some((r) => r.connected || r.answer) ? 'delivered' : 'denied', evidence };
}
