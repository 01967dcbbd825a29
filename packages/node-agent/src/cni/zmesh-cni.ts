/**
 * zmesh-cni: the CNI plugin the node agent chains into the node's CNI config (docs/kubernetes.md,
 * "Node agent"). The container runtime runs it as the CNI spec says: the command in
 * CNI_COMMAND, the sandbox's netns in CNI_NETNS, its id in CNI_CONTAINERID, the pod in
 * CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID), the network config with the
 * previous plugin's result (prevResult) on stdin.
 *
 * ADD tells the node agent (HTTP on its Unix socket, `agent_socket` in the config) before
 * the pod's containers start and, when the agent enrolled or skipped the pod, prints
 * prevResult unchanged: this plugin adds no interface and no address. When the agent
 * refuses, or cannot be reached, it prints a CNI error result and exits 1, so the runtime
 * fails the sandbox and retries it: a pod of the mesh never starts uncaptured. DEL, CHECK,
 * GC and STATUS have nothing to do (the agent watches pods go in the API); VERSION says
 * which versions it speaks.
 *
 * Self-contained (Node's own modules only): it is copied into the CNI bin directory and run
 * by a small shell wrapper, without the rest of zmesh.
 */
import { request } from 'node:http';

const SUPPORTED = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];
const DEFAULT_SOCKET = '/var/run/zmesh/cni.sock';
/** The agent answers once ztunnel acknowledged (its Ack waits up to 10 s) or refused. */
const AGENT_TIMEOUT_MS = 30_000;
const MAX_STDIN = 1 << 20;

/** CNI's well-known error codes (spec, "Error"). */
const CODE = {
  incompatibleVersion: 1,
  invalidEnv: 4,
  ioFailure: 5,
  decode: 6,
  invalidConfig: 7,
  tryAgainLater: 11,
  /** Plugin-specific (100+): the node agent refused the pod. */
  refused: 100,
} as const;

interface NetConf {
  cniVersion?: unknown;
  name?: unknown;
  type?: unknown;
  agent_socket?: unknown;
  prevResult?: unknown;
}

class CniError extends Error {
  constructor(
    readonly code: number,
    msg: string,
    readonly details = '',
  ) {
    super(msg);
  }
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of process.stdin) {
    size += (c as Buffer).length;
    if (size > MAX_STDIN) throw new CniError(CODE.decode, 'network config on stdin is too long');
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function parseConf(text: string): NetConf {
  let conf: unknown;
  try {
    conf = JSON.parse(text);
  } catch (e) {
    throw new CniError(CODE.decode, 'network config on stdin is not JSON', (e as Error).message);
  }
  if (typeof conf !== 'object' || conf === null || Array.isArray(conf))
    throw new CniError(CODE.decode, 'network config on stdin is not a JSON object');
  const c = conf as NetConf;
  if (typeof c.cniVersion !== 'string') throw new CniError(CODE.invalidConfig, 'cniVersion missing');
  if (!SUPPORTED.includes(c.cniVersion))
    throw new CniError(
      CODE.incompatibleVersion,
      `cniVersion ${c.cniVersion} not supported`,
      SUPPORTED.join(','),
    );
  if (c.agent_socket !== undefined && typeof c.agent_socket !== 'string')
    throw new CniError(CODE.invalidConfig, 'agent_socket must be a path');
  return c;
}

/** CNI_ARGS: `K=V;K=V`. */
function cniArgs(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const pair of text.split(';')) {
    const i = pair.indexOf('=');
    if (i > 0) out.set(pair.slice(0, i), pair.slice(i + 1));
  }
  return out;
}

function askAgent(socketPath: string, body: object): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body);
    const req = request(
      {
        socketPath,
        path: '/cmdadd',
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
        timeout: AGENT_TIMEOUT_MS,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          text += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${AGENT_TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end(payload);
  });
}

async function add(conf: NetConf): Promise<string> {
  const env = process.env;
  const netns = env.CNI_NETNS ?? '';
  const containerId = env.CNI_CONTAINERID ?? '';
  if (netns === '' || containerId === '')
    throw new CniError(CODE.invalidEnv, 'ADD needs CNI_NETNS and CNI_CONTAINERID');
  if (conf.prevResult === undefined || typeof conf.prevResult !== 'object' || conf.prevResult === null)
    throw new CniError(CODE.invalidConfig, 'zmesh-cni is a chained plugin: no prevResult in the config');
  // The result of the chain so far, passed on unchanged in the config's version.
  const result = JSON.stringify({ ...(conf.prevResult as object), cniVersion: conf.cniVersion });
  const args = cniArgs(env.CNI_ARGS ?? '');
  const podName = args.get('K8S_POD_NAME');
  const podNamespace = args.get('K8S_POD_NAMESPACE');
  // Not a Kubernetes pod (no pod in CNI_ARGS): not the mesh's business.
  if (!podName || !podNamespace) return result;
  const podUid = args.get('K8S_POD_UID');
  const socket = typeof conf.agent_socket === 'string' ? conf.agent_socket : DEFAULT_SOCKET;
  let answer: { status: number; body: string };
  try {
    answer = await askAgent(socket, {
      netns,
      containerId,
      podName,
      podNamespace,
      ...(podUid ? { podUid } : {}),
    });
  } catch (e) {
    throw new CniError(CODE.tryAgainLater, `zmesh node agent unreachable at ${socket}`, (e as Error).message);
  }
  if (answer.status !== 200) {
    let reason = answer.body;
    try {
      reason = (JSON.parse(answer.body) as { error?: string }).error ?? answer.body;
    } catch {
      // Not JSON: the text as it came.
    }
    throw new CniError(CODE.refused, `zmesh node agent refused pod ${podNamespace}/${podName}`, reason);
  }
  return result;
}

async function main(): Promise<number> {
  const command = process.env.CNI_COMMAND ?? '';
  let version = '1.0.0';
  try {
    if (command === 'VERSION') {
      process.stdout.write(`${JSON.stringify({ cniVersion: '1.1.0', supportedVersions: SUPPORTED })}\n`);
      return 0;
    }
    if (!['ADD', 'DEL', 'CHECK', 'GC', 'STATUS'].includes(command))
      throw new CniError(CODE.invalidEnv, `CNI_COMMAND ${JSON.stringify(command)} unknown`);
    const conf = parseConf(await readStdin());
    version = conf.cniVersion as string;
    if (command === 'ADD') process.stdout.write(`${await add(conf)}\n`);
    return 0;
  } catch (e) {
    const err = e instanceof CniError ? e : new CniError(CODE.ioFailure, (e as Error).message ?? String(e));
    process.stdout.write(
      `${JSON.stringify({ cniVersion: version, code: err.code, msg: err.message, details: err.details })}\n`,
    );
    return 1;
  }
}

process.exitCode = await main();
