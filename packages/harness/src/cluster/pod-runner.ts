import { execa, type Options, type ResultPromise } from 'execa';
import type { NodeInfo, PodInfo } from './topology.js';

/**
 * Joins a cgroup, then execs the rest of argv. The cgroup is joined first, from the
 * host's mount namespace: once inside a pod's namespaces the path may not be reachable
 * (`ip netns exec` remounts /sys, for one).
 */
const JOIN_CGROUP = 'echo $$ > "$0/cgroup.procs" && exec "$@"';

/**
 * argv that runs a command as an unprivileged container would: in the pod's cgroup and
 * network namespace, in a fresh PID namespace (with its own /proc), as the pod's own
 * uid/gid with no supplementary groups, no capabilities (inheritable, bounding) and
 * no_new_privs, so setuid binaries cannot give any back.
 */
export function podArgv(pod: PodInfo, argv: readonly string[]): string[] {
  return [
    '-c',
    JOIN_CGROUP,
    pod.cgroupPath,
    'nsenter',
    `--net=${pod.netnsPath}`,
    '--',
    'unshare',
    '--pid',
    '--fork',
    '--kill-child',
    '--mount-proc',
    'setpriv',
    `--reuid=${pod.linuxUid}`,
    `--regid=${pod.linuxUid}`,
    '--clear-groups',
    '--inh-caps=-all',
    '--bounding-set=-all',
    '--no-new-privs',
    '--',
    ...argv,
  ];
}

export function runInPod(pod: PodInfo, argv: readonly string[], opts: Options = {}): ResultPromise {
  return execa('sh', podArgv(pod, argv), { cwd: '/', ...opts });
}

/**
 * Runs a command as root in a node's network namespace and cgroup (e.g. that node's
 * ztunnel), or in a pod's, as a privileged pod would run it.
 */
export function runInNode(
  node: Pick<NodeInfo, 'cgroupPath' | 'netnsPath'>,
  argv: readonly string[],
  opts: Options = {},
): ResultPromise {
  return execa(
    'sh',
    ['-c', JOIN_CGROUP, node.cgroupPath, 'nsenter', `--net=${node.netnsPath}`, '--', ...argv],
    {
      cwd: '/',
      ...opts,
    },
  );
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number | undefined;
  timedOut: boolean;
}

/** Default bound on a short command in a pod. */
const EXEC_TIMEOUT_MS = 10_000;

/** Runs a short command in a pod and captures its output; never rejects on failure. */
export async function execInPod(
  pod: PodInfo,
  argv: readonly string[],
  opts: { timeoutMs?: number; input?: string } = {},
): Promise<ExecResult> {
  const r = await runInPod(pod, argv, {
    reject: false,
    timeout: opts.timeoutMs ?? EXEC_TIMEOUT_MS,
    ...(opts.input === undefined ? {} : { input: opts.input }),
  });
  return {
    stdout: String(r.stdout ?? ''),
    stderr: String(r.stderr ?? ''),
    exitCode: r.exitCode,
    timedOut: r.timedOut,
  };
}
