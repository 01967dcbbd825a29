import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ExecutionContext } from 'ava';
import { execa, type ResultPromise } from 'execa';

/**
 * Two network namespaces of one test joined by a veth pair: the control plane's side at
 * {@link CP_IP} and the proxy's at {@link PX_IP} (the harness's fabric range, routed nowhere
 * else), for tests of the control plane off loopback. The test's teardown ends the processes
 * it registered in `started` (by pid, SIGTERM), deletes both namespaces and the temp dir.
 */
export const CP_IP = '10.255.0.1';
export const PX_IP = '10.255.0.2';

/** Why the pair cannot be made here (not root, no iproute2), or undefined. */
export function netnsPairUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces)';
  try {
    execFileSync('ip', ['-V'], { stdio: 'ignore' });
  } catch {
    return 'needs iproute2 (ip)';
  }
  return undefined;
}

export interface NetnsPair {
  /** The control plane's namespace ({@link CP_IP}). */
  readonly cpNs: string;
  /** The proxy's namespace ({@link PX_IP}). */
  readonly pxNs: string;
  /** A temp dir, removed at teardown. */
  readonly dir: string;
  /** Processes the test started; each is sent SIGTERM and awaited at teardown. */
  readonly started: ResultPromise[];
}

/** Makes the pair; `tag` (a few letters) names the namespaces and links so leftovers are traceable. */
export async function createNetnsPair(t: ExecutionContext, tag: string): Promise<NetnsPair> {
  const id = randomBytes(3).toString('hex');
  const cpNs = `zm-${tag}${id}-cp`;
  const pxNs = `zm-${tag}${id}-px`;
  const dir = await mkdtemp(join(tmpdir(), `zmesh-${tag}-`));
  const started: ResultPromise[] = [];
  t.teardown(async () => {
    for (const p of started) p.kill('SIGTERM');
    await Promise.allSettled(started);
    execFileSync('ip', ['-force', '-batch', '-'], {
      input: `netns del ${cpNs}\nnetns del ${pxNs}\n`,
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    await rm(dir, { recursive: true, force: true });
  });
  const [a, b] = [`zm${tag}${id}a`, `zm${tag}${id}b`];
  execFileSync('ip', ['-batch', '-'], {
    input: [
      `netns add ${cpNs}`,
      `netns add ${pxNs}`,
      `link add ${a} netns ${cpNs} type veth peer name ${b} netns ${pxNs}`,
    ].join('\n'),
  });
  for (const [ns, dev, ip] of [
    [cpNs, a, CP_IP],
    [pxNs, b, PX_IP],
  ] as const)
    execFileSync('ip', ['-n', ns, '-batch', '-'], {
      input: [`addr add ${ip}/24 dev ${dev}`, `link set ${dev} up`, 'link set lo up'].join('\n'),
    });
  return { cpNs, pxNs, dir, started };
}

/** GET in a namespace (the test process stays in its own); the body, or undefined on any failure. */
export async function getIn(netns: string, url: string): Promise<string | undefined> {
  const r = await execa(
    'ip',
    [
      'netns',
      'exec',
      netns,
      process.execPath,
      '-e',
      `fetch(${JSON.stringify(url)}).then(r=>r.text()).then(t=>process.stdout.write(t),()=>process.exit(1))`,
    ],
    { reject: false },
  );
  return r.exitCode === 0 ? r.stdout : undefined;
}
