import { readFileSync } from 'node:fs';
import { checked, numberOption, portOption, UsageError, withExamples, ZmeshError } from '@zmesh/shared/cli';
import { Command } from 'commander';
import type { NodeAgentCommandOptions } from './node-agent-command.js';

/**
 * `zmesh node-agent`: its flags and help. The entry (main.ts), the operator CLI's help and
 * `zmesh install`'s argument check use this definition; the daemon (node-agent-command.ts)
 * loads only when it runs.
 */
export function nodeAgentCommand(): Command {
  const cmd = new Command('node-agent')
    .description("run the node agent: enroll this node's pods (from the Kubernetes API) in ztunnel over ZDS")
    .option('--node <name>', '(required) this node name (default: $NODE_NAME)')
    .option('--kubeconfig <file>', 'kubeconfig to reach the API server (default: in-cluster config)')
    .option('--zds-socket <path>', 'serve ZDS to ztunnel here (mode 0600)', '/var/run/ztunnel/ztunnel.sock')
    .option(
      '--cni-socket <path>',
      'serve the CNI plugin here (HTTP on a Unix socket, mode 0600)',
      '/var/run/zmesh/cni.sock',
    )
    .option('--proc <dir>', "the host's /proc, scanned for running pods' processes", '/proc')
    .option('--cni-bin-dir <dir>', 'install the zmesh-cni plugin here (with --cni-conf-dir)')
    .option(
      '--cni-conf-dir <dir>',
      "chain zmesh-cni into the node's CNI config found here (with --cni-bin-dir)",
    )
    .option('--cni-node <path>', "the Node on the host that runs the plugin (default: this process's own)")
    .option(
      '--rescan <seconds>',
      "how often /proc is scanned for ambient pods without a netns yet (and the CNI config's chain checked)",
      checked(numberOption(0.05, 3600, 'seconds')),
      '2',
    )
    .option('--host <ip>', 'address of the health and metrics port', '127.0.0.1')
    .option(
      '--port <port>',
      'health (/healthz/live, /healthz/ready) and metrics (/metrics); 0 picks one',
      checked(portOption),
      '15022',
    );
  withExamples(
    cmd,
    'zmesh node-agent --node node-a --kubeconfig ~/.kube/config',
    'zmesh node-agent --proc /host/proc --cni-bin-dir /host/opt/cni/bin --cni-conf-dir /host/etc/cni/net.d',
  );
  cmd.action(async (opts: NodeAgentCommandOptions) => {
    preflight(opts);
    const { runNodeAgent } = await import('./node-agent-command.js');
    process.exitCode = await runNodeAgent(opts);
  });
  return cmd;
}

/**
 * What can be judged from the flags and the kubeconfig file alone, before the daemon's
 * modules load (the Kubernetes client among them, ~1,700 modules and a second of CPU): a
 * usage error (exit 2), or a kubeconfig that cannot be read (ZM_ERR_CONFIG_INVALID, exit 1).
 */
function preflight(o: NodeAgentCommandOptions): void {
  if (!(o.node ?? process.env.NODE_NAME))
    throw new UsageError('--node is required (or NODE_NAME in the environment)');
  if ((o.cniBinDir === undefined) !== (o.cniConfDir === undefined))
    throw new UsageError('--cni-bin-dir and --cni-conf-dir go together');
  if (o.kubeconfig === undefined) return;
  try {
    readFileSync(o.kubeconfig);
  } catch (e) {
    throw new ZmeshError('ZM_ERR_CONFIG_INVALID', { source: o.kubeconfig, reason: (e as Error).message });
  }
}
