import type { Attempt, Outcome } from './attempt.js';
import { DROP_TIMEOUT_MS } from './attempts-direct.js';
import { FROM_OUTSIDER } from './attempts-hbone.js';
import { APP_PORT, type BypassLab, ID, VIPS } from './bypass-lab.js';
import { combine, judgeHbone, judgeProbes } from './judge.js';

const WAYPOINT_NOTE =
  'waypoint not merged yet: tested against the ztunnel-side rule (a waypoint GatewayRef in config)';

/**
 * Paths through the mesh that must not lead around it: an allowed client addressing a
 * waypoint-protected pod or service (only the waypoint may carry it; with none running,
 * it fails closed), and authorities that would make ztunnel tunnel into itself.
 */
export function meshPathAttempts(): Attempt[] {
  return [
    {
      id: 'waypoint/skip-from-enrolled-client',
      description:
        "an enrolled, policy-allowed client connecting straight to a waypoint-protected pod's address",
      expected: 'captured',
      run: (lab) => fromClient(lab, lab.pod('guarded').ipv4, APP_PORT),
    },
    {
      id: 'waypoint/service-vip-from-enrolled-client',
      description: 'an enrolled, policy-allowed client connecting to the VIP of a waypoint-protected service',
      expected: 'captured',
      run: (lab) => fromClient(lab, VIPS.guarded, 80),
    },
    {
      id: 'loop/connect-authority-ztunnel-port',
      description:
        "HBONE CONNECT (allowed identity) whose authority is one of ztunnel's ports on the pod's address",
      expected: 'denied',
      run: (lab) => {
        const ip = lab.pod('server').ipv4;
        return authorities(
          lab,
          [15008, 15001, 15006, 15000, 15020, 15021].map((p) => `${ip}:${p}`),
        );
      },
    },
    {
      id: 'loop/connect-authority-ztunnel-address',
      description:
        "HBONE CONNECT (allowed identity) whose authority is loopback, the node's or another pod's address",
      expected: 'denied',
      run: (lab) => {
        const b = lab.node('node-b');
        return authorities(lab, [
          `127.0.0.1:${APP_PORT}`,
          `[::1]:${APP_PORT}`,
          '127.0.0.1:15000',
          `${b.gateway4}:15000`,
          `${lab.pod('sink').ipv4}:${APP_PORT}`,
        ]);
      },
    },
    {
      id: 'loop/pod-to-own-15001',
      description:
        "an enrolled pod connecting straight to its own in-pod 15001 (ztunnel's outbound listener)",
      expected: 'captured',
      run: async (lab) => {
        const results = await lab.probe(lab.pod('attacker'), [
          { host: '127.0.0.1', port: 15001, send: 'hello\n' },
          { host: '::1', port: 15001, send: 'hello\n' },
        ]);
        return judgeProbes(results, await lab.moves(), 'node-a');
      },
    },
    {
      id: 'loop/pod-to-own-15008',
      description:
        "an enrolled pod connecting to its own address on 15008 (its own ztunnel's HBONE listener)",
      expected: 'captured',
      run: async (lab) => {
        const target = { host: lab.pod('attacker').ipv4, port: 15008, send: 'hello\n' };
        return judgeProbes(
          await lab.probe(lab.pod('attacker'), [target], DROP_TIMEOUT_MS),
          await lab.moves(),
          'node-a',
        );
      },
    },
  ];
}

async function fromClient(lab: BypassLab, host: string, port: number): Promise<Outcome> {
  const results = await lab.probe(lab.pod('client'), [{ host, port }], DROP_TIMEOUT_MS);
  const o = judgeProbes(results, await lab.moves(), 'node-a');
  o.evidence.push(WAYPOINT_NOTE);
  return o;
}

/** Each authority in its own tunnel, from the outsider pod with the allowed client's valid certificate. */
async function authorities(lab: BypassLab, list: string[]): Promise<Outcome> {
  const cred = await lab.mint(ID.client);
  const host = lab.pod('server').ipv4;
  const outcomes: Outcome[] = [];
  for (const authority of list) {
    outcomes.push(
      judgeHbone(
        `authority ${authority}`,
        await lab.hbone(lab.pod('outsider'), { host, authority, cred }),
        400,
      ),
    );
  }
  const o = combine(...outcomes);
  o.evidence.push(FROM_OUTSIDER);
  return o;
}
