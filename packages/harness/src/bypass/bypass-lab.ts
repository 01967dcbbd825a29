import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { CertificateAuthority, type Credential } from '@zmesh/shared';
import type { ResultPromise } from 'execa';
import { buildTopology, type NodeInfo, type PodInfo } from '../cluster/topology.js';
import type { LocalMesh } from '../mesh/local-mesh.js';
import { startMesh } from '../mesh/mesh.js';
import type { MeshSpec } from '../mesh/mesh-spec.js';
import { HBONE_PROBE, PRIVILEGE_PROBE, PROBE, TARGET_SERVER } from './bypass-programs.js';
import { L7Target } from './l7-target.js';
import { type Movement, movements, parseScrape, type Scrape } from './metric-deltas.js';
import { TargetWitness } from './target-witness.js';
import { ZtunnelLogs } from './ztunnel-logs.js';

/** koffi, for the targets' getsockopt(SO_MARK) (the checkout is world-readable). */
const KOFFI = createRequire(import.meta.url).resolve('koffi');

/** The application port every target listens on (TCP and UDP). */
export const APP_PORT = 8080;
export const TRUST_DOMAIN = 'cluster.local';
export const VIPS = { server: '10.244.250.10', guarded: '10.244.250.20' } as const;

/**
 * Who is who. node-a: the attacker (enrolled, team-x), the one legitimate client (team-a),
 * an outsider (never enrolled), a same-node target (team-b) and a late pod (enrolled and
 * removed by the lifecycle attempts, never configured). node-b: the target (team-b), a
 * waypoint-protected workload (team-w), that waypoint's workload (config only: waypoints
 * are never enrolled) and a sink that admits anyone (control for attribution).
 */
export const BYPASS_SPEC: MeshSpec = {
  nodes: ['node-a', 'node-b'],
  pods: [
    { name: 'attacker', namespace: 'team-x', serviceAccount: 'attacker', node: 'node-a' },
    { name: 'client', namespace: 'team-a', serviceAccount: 'client', node: 'node-a' },
    { name: 'outsider', namespace: 'team-x', serviceAccount: 'outsider', node: 'node-a' },
    { name: 'neighbor', namespace: 'team-b', serviceAccount: 'neighbor', node: 'node-a' },
    { name: 'late', namespace: 'team-x', serviceAccount: 'late', node: 'node-a' },
    { name: 'server', namespace: 'team-b', serviceAccount: 'server', node: 'node-b' },
    { name: 'guarded', namespace: 'team-w', serviceAccount: 'guarded', node: 'node-b' },
    { name: 'waypoint', namespace: 'team-w', serviceAccount: 'waypoint', node: 'node-b' },
    { name: 'sink', namespace: 'team-x', serviceAccount: 'sink', node: 'node-b' },
  ],
  services: [
    {
      name: 'server',
      namespace: 'team-b',
      vip: VIPS.server,
      ports: [{ port: 80, targetPort: APP_PORT }],
      pods: ['server'],
    },
    {
      name: 'guarded',
      namespace: 'team-w',
      vip: VIPS.guarded,
      ports: [{ port: 80, targetPort: APP_PORT }],
      pods: ['guarded'],
      waypoint: 'waypoint',
    },
  ],
  podWaypoints: { guarded: 'waypoint' },
};

export const ID = {
  attacker: `spiffe://${TRUST_DOMAIN}/ns/team-x/sa/attacker`,
  client: `spiffe://${TRUST_DOMAIN}/ns/team-a/sa/client`,
  waypoint: `spiffe://${TRUST_DOMAIN}/ns/team-w/sa/waypoint`,
  /** A waypoint identity, but of another namespace than the protected workload's. */
  otherWaypoint: `spiffe://${TRUST_DOMAIN}/ns/team-b/sa/waypoint`,
} as const;

/** team-b admits only the client: by identity, or by its pod address (so forged `forwarded` would matter). */
function policies(clientIpv4: string): unknown[] {
  const principal = (id: string) => ({ exact: id.replace('spiffe://', '') });
  const only = (ns: string, name: string, matches: unknown[]) => ({
    name,
    namespace: ns,
    scope: 'NAMESPACE',
    action: 'ALLOW',
    rules: matches.map((m) => ({ clauses: [{ matches: [m] }] })),
  });
  return [
    only('team-b', 'client-only', [
      { principals: [principal(ID.client)] },
      { sourceIps: [{ address: clientIpv4, length: 32 }] },
    ]),
    only('team-w', 'client-and-waypoint', [{ principals: [principal(ID.client), principal(ID.waypoint)] }]),
  ];
}

const NOT_ENROLLED = new Set(['outsider', 'late', 'waypoint']);
/**
 * Pods running the target program. The waypoint pod's copy is outside the mesh (not
 * enrolled, so no strict inbound): the tests' proof that a delivery would be seen.
 */
const TARGETS = ['server', 'neighbor', 'guarded', 'sink', 'waypoint'];
/** The distribution's python3 (APT_PACKAGES): a root-only shim earlier on PATH is not executable by pod uids. */
const SYSTEM_PYTHON = '/usr/bin/python3';
/** Bound on one in-pod program (probes carry their own, shorter, per-target timeouts). */
const PROGRAM_TIMEOUT_MS = 20_000;

export type ProbeTarget = { host: string; port: number; send?: string; udp?: boolean } | { unix: string };
export interface ProbeResult {
  target: string;
  connected?: boolean;
  peer?: string | null;
  answer: string;
  error: string | null;
  ms?: number;
}
export interface HboneResult {
  stage: 'connect' | 'tls' | 'settings' | 'response';
  status?: number;
  zmeshError?: string;
  goaway?: { code: number; data: string };
  answer?: string;
  error?: string;
}
export interface PrivilegeResult {
  check: string;
  ok: boolean;
  errno: string | null;
  detail: string;
}

/** The local mesh set up for bypass attempts, with the tools attempts share. */
export class BypassLab {
  private readonly servers: ResultPromise[] = [];
  /** What the targets themselves saw. */
  readonly witness: TargetWitness;
  private baseline = new Map<string, Scrape>();
  #l7: Promise<L7Target> | undefined;

  private constructor(
    readonly mesh: LocalMesh,
    /** The mesh's own CA (the harness holds its key): mints valid certificates for attacks. */
    readonly ca: CertificateAuthority,
    readonly rootKeyPem: string,
    /** Every ztunnel's log lines (bounded), for evidence. */
    readonly logs: ZtunnelLogs,
  ) {
    this.witness = new TargetWitness(new Map(TARGETS.map((n) => [n, mesh.pod(n)])));
  }

  static async up(): Promise<BypassLab> {
    // Addresses follow from the spec alone, so the policy can name the client's before the cluster exists.
    const clientIp = buildTopology(BYPASS_SPEC, 'policy', '').pods.find((p) => p.name === 'client')!.ipv4;
    const logs = new ZtunnelLogs();
    const mesh = await startMesh({
      run: 'cluster',
      spec: { ...BYPASS_SPEC, policies: policies(clientIp) },
      enroll: (p) => !NOT_ENROLLED.has(p.name),
      unconfigured: (p) => p.name === 'late',
      ztunnelLog: 'info',
      ztunnelEnv: { ZMESH_LOG_HBONE: 'debug' },
      ztunnelStderr: (node, chunk) => logs.add(node, chunk),
    });
    try {
      if (mesh.pod('client').ipv4 !== clientIp) throw new Error(`client address ${mesh.pod('client').ipv4}`);
      const keyPem = await readFile(join(mesh.dir, 'root-key.pem'), 'utf8');
      const certPem = await readFile(join(mesh.dir, 'root-cert.pem'), 'utf8');
      const ca = await CertificateAuthority.fromPem({ trustDomain: TRUST_DOMAIN, keyPem, certPem });
      const lab = new BypassLab(mesh, ca, keyPem, logs);
      for (const name of TARGETS) await lab.startTarget(mesh.pod(name));
      return lab;
    } catch (e) {
      await mesh.down();
      throw e;
    }
  }

  pod(name: string): PodInfo {
    return this.mesh.pod(name);
  }

  node(name: string): NodeInfo {
    return this.mesh.node(name);
  }

  /**
   * Host pid of a target's application: the runner execs down to `unshare --fork`, whose
   * one child is the pod's PID 1 (setpriv, exec'd into node).
   */
  appPid(name: string): number | undefined {
    const parent = this.servers[TARGETS.indexOf(name)]?.pid;
    if (parent === undefined) return undefined;
    try {
      const children = readFileSync(`/proc/${parent}/task/${parent}/children`, 'utf8').trim().split(' ');
      return Number(children[0]) || undefined;
    } catch {
      return undefined;
    }
  }

  /** The L7 attempts' mesh (explicit mode on loopback, with a waypoint), started at first use. */
  l7(): Promise<L7Target> {
    this.#l7 ??= L7Target.up();
    return this.#l7;
  }

  async down(): Promise<void> {
    const l7 = this.#l7;
    this.#l7 = undefined;
    await l7?.then(
      (t) => t.down(),
      () => {},
    );
    for (const s of this.servers) s.kill('SIGKILL');
    await this.mesh.down();
  }

  /** TCP/UDP/Unix probes from inside a pod, as the pod's uid, in its cgroup and namespaces. */
  async probe(pod: PodInfo, targets: ProbeTarget[], timeoutMs = 1000): Promise<ProbeResult[]> {
    const r = await this.mesh.cluster.exec(
      pod,
      ['node', '-e', PROBE, JSON.stringify({ timeoutMs, targets })],
      {
        timeoutMs: PROGRAM_TIMEOUT_MS,
      },
    );
    return parseJson<ProbeResult[]>(r.stdout, r.stderr);
  }

  /** The same probes from a node's own namespace (root, node cgroup, not a pod). */
  async probeFromNode(node: NodeInfo, targets: ProbeTarget[], timeoutMs = 1000): Promise<ProbeResult[]> {
    const r = await this.mesh.cluster.runInNode(
      node,
      ['node', '-e', PROBE, JSON.stringify({ timeoutMs, targets })],
      {
        reject: false,
        timeout: PROGRAM_TIMEOUT_MS,
      },
    );
    return parseJson<ProbeResult[]>(String(r.stdout), String(r.stderr));
  }

  /** An attacker-written HBONE client run inside `pod` (certificate material passed on stdin). */
  async hbone(
    pod: PodInfo,
    req: {
      host: string;
      port?: number;
      authority: string;
      cred?: { keyPem: string; certPem: string };
      headers?: Record<string, string>;
    },
    timeoutMs = 2500,
  ): Promise<HboneResult> {
    const input = JSON.stringify({
      host: req.host,
      port: req.port ?? 15008,
      authority: req.authority,
      headers: req.headers ?? {},
      timeoutMs,
      ...(req.cred ? { key: req.cred.keyPem, cert: req.cred.certPem } : {}),
    });
    const r = await this.mesh.cluster.exec(pod, ['node', '-e', HBONE_PROBE], {
      input,
      timeoutMs: PROGRAM_TIMEOUT_MS,
    });
    return parseJson<HboneResult>(r.stdout, r.stderr);
  }

  async privileges(pod: PodInfo, checks: Record<string, unknown>[]): Promise<PrivilegeResult[]> {
    const r = await this.mesh.cluster.exec(
      pod,
      [SYSTEM_PYTHON, '-c', PRIVILEGE_PROBE, JSON.stringify(checks)],
      {
        timeoutMs: PROGRAM_TIMEOUT_MS,
      },
    );
    return parseJson<PrivilegeResult[]>(r.stdout, r.stderr);
  }

  /** A leaf from the mesh CA: what a workload legitimately holding `identity` would have. */
  async mint(identity: string, opts: { ttlSeconds?: number; notBefore?: Date } = {}) {
    return leafOnly(await this.ca.issue(identity, opts.ttlSeconds ?? 3600, opts));
  }

  /** Starts the counter baseline for the next attempt. */
  async mark(): Promise<void> {
    this.baseline = await this.scrape();
    this.logs.mark();
    this.witness.mark();
  }

  /** Counters that moved since `mark()`, on every node. */
  async moves(): Promise<Movement[]> {
    const now = await this.scrape();
    return [...now].flatMap(([node, s]) => movements(node, this.baseline.get(node) ?? new Map(), s));
  }

  private async scrape(): Promise<Map<string, Scrape>> {
    const out = new Map<string, Scrape>();
    for (const node of this.mesh.cluster.nodes) {
      const text = await this.mesh.metrics(node.name).catch(() => '');
      out.set(node.name, parseScrape(text));
    }
    return out;
  }

  private async startTarget(pod: PodInfo): Promise<void> {
    // buffer: false — the stream is read here, line by line, for the life of the run.
    const proc = this.mesh.cluster.runInPod(pod, ['node', '-e', TARGET_SERVER, String(APP_PORT), KOFFI], {
      reject: false,
      stdout: 'pipe',
      buffer: false,
    });
    this.servers.push(proc);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`target ${pod.name} did not start`)), 10_000);
      proc.stdout?.once('data', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    proc.stdout?.on('data', (d: Buffer) => this.witness.add(pod.name, d.toString()));
  }
}

export function leafOnly(cred: Credential): { keyPem: string; certPem: string; identity: string } {
  return { keyPem: cred.keyPem, certPem: cred.certChainPem[0]!, identity: cred.identity };
}

function parseJson<T>(stdout: string, stderr: string): T {
  const line = stdout.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line) as T;
  } catch {
    throw new Error(`program gave no result: ${(stderr || stdout).trim().slice(0, 300) || 'no output'}`);
  }
}
