import { resolve } from 'node:path';
import { execa, type ResultPromise } from 'execa';

export const ZMESH_BIN = resolve(import.meta.dirname, '../../../../bin/zmesh');

/** A `zmesh ztunnel` child process in explicit-proxy mode; stderr lines are prefixed with the node. */
export function startZtunnelProcess(opts: {
  config: string;
  caDir: string;
  node: string;
  address: string;
  cpu?: string;
  log?: string;
  quiet?: boolean;
  /** Another build's `bin/zmesh` (the bench's before/after comparison); default this one. */
  bin?: string;
  /** More `zmesh ztunnel` flags. */
  args?: readonly string[];
  /** bin/zmesh's environment on top of this process's (ZMESH_NODE, ZMESH_NODE_FLAGS). */
  env?: Readonly<Record<string, string>>;
}): ResultPromise {
  const argv = [
    'ztunnel',
    '--config',
    opts.config,
    '--node',
    opts.node,
    '--address',
    opts.address,
    '--ca-dir',
    opts.caDir,
    ...(opts.args ?? []),
  ];
  const bin = opts.bin ?? ZMESH_BIN;
  const [file, args] = opts.cpu ? ['taskset', ['-c', opts.cpu, bin, ...argv]] : [bin, argv];
  const child = execa(file, args, {
    reject: false,
    stdout: 'ignore',
    stderr: opts.quiet ? 'ignore' : 'pipe',
    env: { ...opts.env, ZMESH_LOG: opts.log ?? 'warn' },
  });
  child.stderr?.on('data', (d: Buffer) => process.stderr.write(`  [${opts.node}] ${d}`));
  return child;
}

/**
 * Polls a proxy's readiness endpoint until it answers 200: ztunnel's on 15021, the
 * waypoint's on its metrics port (15020).
 */
export async function waitReady(address: string, timeoutMs = 15_000, port = 15021): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const res = await fetch(`http://${address}:${port}/healthz/ready`).catch(() => undefined);
    if (res?.status === 200) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`proxy at ${address}:${port} not ready after ${timeoutMs} ms`);
}

/**
 * Ends a child we started, by its pid, and waits for it (SIGKILL after `graceMs`). ztunnel
 * drains on SIGTERM and stops at once on SIGINT: the harness's stops pass SIGINT.
 */
export async function stopChild(
  child: ResultPromise,
  graceMs = 3000,
  signal: 'SIGTERM' | 'SIGINT' = 'SIGTERM',
): Promise<void> {
  if (child.exitCode !== null) return;
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await child.catch(() => {});
  clearTimeout(timer);
}
