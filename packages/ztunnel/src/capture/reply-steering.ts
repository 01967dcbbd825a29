import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { logger } from '@zmesh/shared';
import { inNetns, type Netns } from './netns-listener.js';

const log = logger('capture');

/**
 * Reply steering for source-address preservation (ARCHITECTURE "Decisions"). ztunnel
 * connects to the application from the original client's address (IP_TRANSPARENT) with
 * this fwmark. The application's listener takes the SYN's mark (`tcp_fwmark_accept`), so
 * every packet of the accepted connection carries it too, and this rule routes marked
 * packets to `local default dev lo`: the replies to the client's address come back to
 * ztunnel's socket inside the pod instead of leaving through the pod's interface.
 */
export const REPLY_MARK = 0x15008;
export const REPLY_TABLE = 15008;
/** Before `main` (32766), after `local` (0): the pod's own addresses stay local as they are. */
export const REPLY_RULE_PREF = 15008;

const FWMARK_ACCEPT = '/proc/sys/net/ipv4/tcp_fwmark_accept';
/** Bound on one `ip -batch` run. */
const IP_TIMEOUT_MS = 10_000;
/** Bound on what one `ip` run may print (stderr kept for the reason). */
const IP_OUTPUT_BYTES = 64 * 1024;

export type Family = 4 | 6;

/** The `ip -batch` lines that install (`add`) or remove (`del`) steering for one family. */
export function steeringCommands(op: 'add' | 'del'): string[] {
  const rule = `rule ${op} fwmark 0x${REPLY_MARK.toString(16)} lookup ${REPLY_TABLE} pref ${REPLY_RULE_PREF}`;
  return op === 'add'
    ? [rule, `route replace local default dev lo table ${REPLY_TABLE}`]
    : [rule, `route flush table ${REPLY_TABLE}`];
}

export interface IpResult {
  code: number | null;
  stderr: string;
}

/** Runs `ip -<family> -force -batch -` inside the namespace at `netnsPath`, with `lines` on stdin. */
export type IpBatch = (netnsPath: string, family: Family, lines: readonly string[]) => Promise<IpResult>;

export const ipBatch: IpBatch = (netnsPath, family, lines) =>
  new Promise((resolve) => {
    const child = spawn('nsenter', [`--net=${netnsPath}`, 'ip', `-${family}`, '-force', '-batch', '-'], {
      stdio: ['pipe', 'ignore', 'pipe'],
      timeout: IP_TIMEOUT_MS,
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      if (stderr.length < IP_OUTPUT_BYTES) stderr += d.toString();
    });
    child.on('error', (e) => resolve({ code: -1, stderr: e.message }));
    child.on('close', (code) => resolve({ code, stderr }));
    child.stdin.on('error', () => {});
    child.stdin.end(`${lines.join('\n')}\n`);
  });

/**
 * Whether an `ip -force -batch` run did what was asked. Adding is idempotent: a rule that
 * is already there ("File exists") is success. Removing tolerates what is already gone.
 */
export function batchSucceeded(op: 'add' | 'del', r: IpResult): boolean {
  if (r.code === 0) return true;
  if (r.code === -1 || r.code === null) return false;
  const errors = r.stderr
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0 && !/^Command failed/.test(l));
  if (errors.length === 0) return false;
  const benign = op === 'add' ? /File exists/ : /No such file or directory|No such process|Cannot find/;
  return errors.every((l) => benign.test(l));
}

/** Per family: undefined when steering is in place, else why not (the connector falls back). */
export type SteeringStatus = Record<Family, string | undefined>;

export interface SteeringInputs {
  netns: Netns;
  netnsPath: string;
  run?: IpBatch;
  /** Reads and writes `tcp_fwmark_accept` inside the pod (tests replace it). */
  fwmarkAccept?: { get(netns: Netns): string; set(netns: Netns, value: string): void };
}

const procFwmarkAccept = {
  get: (netns: Netns) => inNetns(netns, () => readFileSync(FWMARK_ACCEPT, 'utf8').trim()),
  set: (netns: Netns, value: string) => inNetns(netns, () => writeFileSync(FWMARK_ACCEPT, value)),
};

/**
 * One pod's reply steering: installed at enrollment, removed when the pod is removed or
 * ztunnel stops. Installing twice is harmless (the rule is kept once, the route replaced),
 * so a restarted ztunnel adopts what the last one left.
 */
export class ReplySteering {
  #status: SteeringStatus = { 4: 'not installed', 6: 'not installed' };
  #savedFwmarkAccept: string | undefined;
  readonly #run: IpBatch;
  readonly #sysctl: NonNullable<SteeringInputs['fwmarkAccept']>;

  constructor(private readonly inputs: SteeringInputs) {
    this.#run = inputs.run ?? ipBatch;
    this.#sysctl = inputs.fwmarkAccept ?? procFwmarkAccept;
  }

  get status(): SteeringStatus {
    return this.#status;
  }

  /** Why a transparent connect of `family` would leak its replies, or undefined when it would not. */
  unavailable(family: Family): string | undefined {
    return this.#status[family];
  }

  async install(): Promise<SteeringStatus> {
    let sysctlError: string | undefined;
    try {
      const was = this.#sysctl.get(this.inputs.netns);
      if (was !== '1') {
        this.#sysctl.set(this.inputs.netns, '1');
        this.#savedFwmarkAccept = was;
      }
    } catch (e) {
      sysctlError = `tcp_fwmark_accept: ${(e as Error).message}`;
    }
    for (const family of [4, 6] as const) {
      if (sysctlError) {
        this.#status[family] = sysctlError;
        continue;
      }
      const r = await this.#run(this.inputs.netnsPath, family, steeringCommands('add'));
      this.#status[family] = batchSucceeded('add', r) ? undefined : `ip -${family}: ${firstLine(r)}`;
    }
    const missing = ([4, 6] as const).filter((f) => this.#status[f] !== undefined);
    if (missing.length > 0)
      log.warn(
        { netns: this.inputs.netnsPath, reasons: missing.map((f) => this.#status[f]) },
        'reply steering incomplete: the app sees ztunnel as the peer for these families',
      );
    return this.#status;
  }

  /** Removes the rule and the table, and puts `tcp_fwmark_accept` back; a vanished netns is fine. */
  async remove(): Promise<void> {
    this.#status = { 4: 'removed', 6: 'removed' };
    for (const family of [4, 6] as const) {
      const r = await this.#run(this.inputs.netnsPath, family, steeringCommands('del'));
      if (!batchSucceeded('del', r))
        log.debug({ netns: this.inputs.netnsPath, family, err: firstLine(r) }, 'reply steering removal');
    }
    if (this.#savedFwmarkAccept === undefined) return;
    try {
      this.#sysctl.set(this.inputs.netnsPath, this.#savedFwmarkAccept);
    } catch (e) {
      log.debug({ netns: this.inputs.netnsPath, err: (e as Error).message }, 'tcp_fwmark_accept restore');
    }
  }
}

function firstLine(r: IpResult): string {
  return r.stderr.split('\n').find((l) => l.trim().length > 0) ?? `exit ${r.code}`;
}
