import { createServer, type Server, type Socket } from 'node:net';
import { canonicalIp, logger } from '@zmesh/shared';
import { listenInNetns, type Netns } from './netns-listener.js';
import { runTool } from './run-tool.js';
import * as sys from './sys.js';

const log = logger('capture');

/** Istio's in-pod plaintext inbound port. */
const PLAINTEXT_PORT = 15006;
const CHAIN = 'ZMESH_PLAINTEXT';

export interface RedirectTarget {
  uid: string;
  netns: Netns;
  addresses: readonly string[];
}

interface Active {
  servers: Server[];
  netns: Netns;
  families: Set<4 | 6>;
  key: string;
}

/**
 * PERMISSIVE in capture mode (docs/peer-authentication.md): for a captured workload that is not
 * STRICT on every port, inbound TCP from outside the pod (not over lo, not to HBONE's 15008)
 * is redirected in the pod's netns to ztunnel's own 15006 listener there, which reads the
 * original destination (SO_ORIGINAL_DST) and hands the socket to PlaintextInbound. ztunnel's
 * listener is not in the pod's cgroup, so strict inbound (`zm_ingress`) keeps dropping
 * whatever reaches the pod's own sockets; a STRICT workload gets no rule and no listener.
 */
export class PlaintextRedirects {
  readonly #active = new Map<string, Active>();

  constructor(
    private readonly serve: (uid: string, socket: Socket, dst: { host: string; port: number }) => void,
  ) {}

  /** Makes the set of redirected workloads exactly `wanted`; failures are logged, never thrown. */
  async reconcile(wanted: readonly RedirectTarget[]): Promise<void> {
    const byUid = new Map(wanted.map((w) => [w.uid, w]));
    for (const [uid, a] of this.#active) {
      const w = byUid.get(uid);
      if (w && w.netns === a.netns && keyOf(w) === a.key) continue;
      await this.#remove(uid, a);
    }
    for (const w of wanted) if (!this.#active.has(w.uid)) await this.#add(w);
  }

  uids(): string[] {
    return [...this.#active.keys()];
  }

  /**
   * A drain: the listeners close (a successor's take the connections, SO_REUSEPORT) and the
   * redirect rules stay, since the successor relies on them.
   */
  stopAccepting(): void {
    for (const a of this.#active.values()) for (const s of a.servers) s.close();
  }

  async close(): Promise<void> {
    for (const [uid, a] of [...this.#active]) await this.#remove(uid, a);
  }

  async #add(w: RedirectTarget): Promise<void> {
    const active: Active = { servers: [], netns: w.netns, families: new Set(), key: keyOf(w) };
    this.#active.set(w.uid, active);
    try {
      // Wildcards: REDIRECT rewrites to the interface's first address, which for IPv6 may
      // be link-local; the original destination comes from SO_ORIGINAL_DST anyway.
      const families = new Set(w.addresses.map((a) => sys.familyOf(a)));
      for (const family of families) {
        const fd = listenInNetns(w.netns, family === 4 ? '0.0.0.0' : '::', PLAINTEXT_PORT);
        const server = createServer({ allowHalfOpen: false }, (s) => this.#accepted(w.uid, s, family));
        server.on('error', (e) => log.warn({ workload: w.uid, err: e.message }, 'plaintext listener error'));
        await new Promise<void>((resolve) => server.listen({ fd }, resolve));
        active.servers.push(server);
        active.families.add(family);
      }
      for (const family of active.families) await iptables(w.netns, family, 'add');
      log.info({ workload: w.uid }, 'plaintext redirect on (PeerAuthentication not STRICT)');
    } catch (e) {
      log.error(
        { workload: w.uid, err: (e as Error).message },
        'plaintext redirect failed; plaintext stays dropped',
      );
      await this.#remove(w.uid, active);
    }
  }

  async #remove(uid: string, a: Active): Promise<void> {
    this.#active.delete(uid);
    for (const family of a.families) await iptables(a.netns, family, 'delete').catch(() => {});
    for (const s of a.servers) s.close();
    log.info({ workload: uid }, 'plaintext redirect off');
  }

  #accepted(uid: string, socket: Socket, family: 4 | 6): void {
    const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    let dst: sys.SockAddr;
    try {
      if (fd === undefined || fd < 0) throw new Error('no descriptor');
      dst = sys.originalDestination(fd, family);
    } catch (e) {
      log.warn({ workload: uid, err: (e as Error).message }, 'plaintext without an original destination');
      socket.resetAndDestroy();
      return;
    }
    this.serve(uid, socket, { host: canonicalIp(dst.host) ?? dst.host, port: dst.port });
  }
}

function keyOf(w: RedirectTarget): string {
  return w.addresses.join(',');
}

/** The rules, added idempotently or removed; `nsenter` runs iptables in the pod's netns. */
async function iptables(netns: Netns, family: 4 | 6, op: 'add' | 'delete'): Promise<void> {
  const path = typeof netns === 'string' ? netns : `/proc/${process.pid}/fd/${netns.fd}`;
  const bin = family === 4 ? 'iptables' : 'ip6tables';
  const run = (args: string[]) => runTool('nsenter', [`--net=${path}`, bin, '-w', '-t', 'nat', ...args]);
  const jump = ['PREROUTING', '!', '-i', 'lo', '-p', 'tcp', '-j', CHAIN];
  if (op === 'delete') {
    await run(['-D', ...jump]).catch(() => {});
    await run(['-F', CHAIN]).catch(() => {});
    await run(['-X', CHAIN]).catch(() => {});
    return;
  }
  const rules = [
    ['-p', 'tcp', '--dport', '15008', '-j', 'RETURN'],
    ['-p', 'tcp', '-j', 'REDIRECT', '--to-ports', String(PLAINTEXT_PORT)],
  ];
  const present = async (rule: string[]) =>
    run(['-C', CHAIN, ...rule]).then(
      () => true,
      () => false,
    );
  // A successor taking over an upgrade finds the chain as it wants it: rewriting it would
  // leave a moment in which plaintext reaches the pod's own sockets (dropped, strict inbound).
  if (!(await present(rules[0]!)) || !(await present(rules[1]!))) {
    await run(['-N', CHAIN]).catch(() => {}); // exists from an earlier run: flushed next
    await run(['-F', CHAIN]);
    for (const rule of rules) await run(['-A', CHAIN, ...rule]);
  }
  await run(['-C', ...jump]).catch(() => run(['-I', ...jump]));
}
