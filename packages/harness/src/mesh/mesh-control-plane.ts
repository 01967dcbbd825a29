import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sqliteAvailable } from '@zmesh/control-plane';
import { type AdminTarget, adminRequest } from '@zmesh/shared';
import { execa, type ResultPromise } from 'execa';
import { stopChild, ZMESH_BIN } from '../local/ztunnel-process.js';
import { ControlPlaneLink } from './control-plane-link.js';

export interface MeshControlPlaneOptions {
  /** Upper bound on workload certificate lifetime (the drill compresses time with it). */
  maxCertTtlSeconds?: number;
  log?: string;
  /**
   * Where it keeps applied objects and its keys; a restart from it loses nothing. Default:
   * `<mesh dir>/control-plane/state` where this Node has node:sqlite, else in memory.
   */
  stateDir?: string | false;
  /** Controller mode (`--kubernetes`) against the API this kubeconfig names. */
  kubeconfig?: string;
}

/** How long the control plane may take to say where its admin endpoint is. */
const START_TIMEOUT_MS = 15_000;

/** Per proxy and type, what `zmesh proxy-status` reports (the fields the harness reads). */
export interface ProxyStatusRow {
  proxy: string;
  node: string;
  connected: boolean;
  types: Record<
    string,
    { state: 'SYNCED' | 'PENDING' | 'NACKED'; pending: { count: number; names: string[] } }
  >;
}

/**
 * `zmesh control-plane` as the harness runs it for a LocalMesh: in the host namespace, xDS
 * and the CA on a Unix socket (reached by ztunnels in node namespaces through the file
 * system, no route needed) behind a `ControlPlaneLink` the harness can cut, the admin
 * API on its own Unix socket (mode 0600) in the mesh directory. Roots and the CA key live in the mesh directory.
 */
export class MeshControlPlane {
  private constructor(
    private child: ResultPromise | undefined,
    readonly link: ControlPlaneLink,
    /** The admin API's Unix socket path (`zmesh apply --admin <path>`). */
    readonly adminSocket: string,
    readonly rootsFile: string,
    /** Where it keeps its state, or false when in memory (then a restart forgets). */
    readonly stateDir: string | false,
    private readonly spawnIt: () => ResultPromise,
  ) {}

  /** Where ztunnels connect: `unix:<link path>`. */
  get xdsAddress(): string {
    return `unix:${this.link.path}`;
  }

  static async start(dir: string, opts: MeshControlPlaneOptions = {}): Promise<MeshControlPlane> {
    const cpDir = join(dir, 'control-plane');
    await mkdir(cpDir, { recursive: true, mode: 0o700 });
    const socket = join(cpDir, 'xds.sock');
    const rootsFile = join(dir, 'roots.pem');
    const stateDir = opts.stateDir ?? (sqliteAvailable() ? join(cpDir, 'state') : false);
    const argv = [
      'control-plane',
      '--socket',
      socket,
      '--ca-dir',
      join(cpDir, 'ca'),
      '--roots-file',
      rootsFile,
      '--admin-socket',
      join(cpDir, 'admin.sock'),
      ...(stateDir === false ? ['--no-state-dir'] : ['--state-dir', stateDir]),
      ...(opts.maxCertTtlSeconds ? ['--max-cert-ttl', String(opts.maxCertTtlSeconds)] : []),
      ...(opts.kubeconfig
        ? [
            '--kubernetes',
            '--kubeconfig',
            opts.kubeconfig,
            '--pod-namespace',
            'zmesh-system',
            '--pod-name',
            'mesh-cp',
          ]
        : []),
    ];
    const spawnIt = () =>
      execa(ZMESH_BIN, argv, {
        reject: false,
        stdin: 'ignore',
        stdout: 'ignore',
        stderr: 'pipe',
        env: { ZMESH_LOG: opts.log ?? process.env.ZMESH_LOG ?? 'warn' },
      });
    const child = spawnIt();
    const adminSocket = await adminSocketOrStop(child);
    const link = new ControlPlaneLink(join(dir, 'cp.sock'), socket);
    await link.heal();
    return new MeshControlPlane(child, link, adminSocket, rootsFile, stateDir, spawnIt);
  }

  /**
   * A crash and a supervisor's restart: SIGKILL, then the same command line again (same
   * state dir, CA, sockets). The link stays: proxies reconnect through it to the new process.
   */
  async killAndRestart(): Promise<void> {
    const old = this.child;
    this.child = undefined;
    old?.kill('SIGKILL');
    await old;
    const child = this.spawnIt();
    await adminSocketOrStop(child);
    this.child = child;
  }

  /** The store's generation and every object key (`GET /objects`). */
  async objects(): Promise<{ generation: number; objects: string[] }> {
    return (await adminRequest(this.admin, '/objects')).json<{ generation: number; objects: string[] }>();
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Applies multi-document YAML the way `zmesh apply` does; a refusal throws with every reason. */
  async apply(yaml: string, source = 'harness'): Promise<number> {
    const res = await adminRequest(this.admin, `/apply?source=${encodeURIComponent(source)}`, {
      method: 'POST',
      body: yaml,
    });
    const out = res.json<{ generation?: number; reasons?: string[] }>();
    if (!res.ok) throw new Error(`control plane refused ${source}: ${(out.reasons ?? []).join('; ')}`);
    return out.generation ?? 0;
  }

  async proxyStatus(): Promise<ProxyStatusRow[]> {
    return (await adminRequest(this.admin, '/proxy-status')).json<ProxyStatusRow[]>();
  }

  get admin(): AdminTarget {
    return { admin: this.adminSocket };
  }

  /** Mints a node's bootstrap token and writes it (0600) for that node's ztunnel. */
  writeNodeToken(node: string, path: string): Promise<void> {
    return writeNodeToken(this.admin, node, path);
  }

  /** Freezes the control-plane process (SIGSTOP): stopped, state kept, answering nothing. */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  /** Lets a paused control plane run again (SIGCONT). */
  resume(): void {
    this.child?.kill('SIGCONT');
  }

  async stop(): Promise<void> {
    await this.link.cut();
    const child = this.child;
    this.child = undefined;
    // A paused process would hold SIGTERM until continued.
    child?.kill('SIGCONT');
    if (child) await stopChild(child);
  }
}

/** Mints a node's bootstrap token through a control plane's admin endpoint and writes it (0600) to `path`. */
export async function writeNodeToken(admin: AdminTarget, node: string, path: string): Promise<void> {
  const res = await adminRequest(admin, `/node-token?node=${encodeURIComponent(node)}`, { method: 'POST' });
  if (!res.ok) throw new Error(`node token for ${node}: HTTP ${res.status}`);
  const { token } = res.json<{ token: string }>();
  await writeFile(path, `${token}\n`, { mode: 0o600 });
}

/** The started child's admin socket; a child that does not say is stopped and the error thrown. */
async function adminSocketOrStop(child: ResultPromise): Promise<string> {
  try {
    const socket = await adminSocketOf(child);
    child.stderr?.on('data', (d: Buffer) => process.stderr.write(`[control-plane] ${d}`));
    return socket;
  } catch (e) {
    await stopChild(child);
    throw e;
  }
}

/** Reads the control plane's start line for its admin socket; fails if it exits first. */
function adminSocketOf(child: ResultPromise): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(
      () => reject(new Error(`control plane silent after ${START_TIMEOUT_MS} ms`)),
      START_TIMEOUT_MS,
    );
    const onData = (d: Buffer) => {
      seen += d.toString();
      const m = /admin on unix:(\S+?),? /.exec(seen);
      if (!m) return;
      clearTimeout(timer);
      child.stderr?.off('data', onData);
      resolve(m[1] as string);
    };
    child.stderr?.on('data', onData);
    void child.then((r) => {
      clearTimeout(timer);
      reject(new Error(`control plane exited (${r.exitCode}): ${seen.trim()}`));
    });
  });
}
