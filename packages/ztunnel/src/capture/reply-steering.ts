import { readFileSync, writeFileSync } from 'node:fs';
import { logger } from '@zmesh/shared';
import { inNetns, type Netns } from './netns-listener.js';
import * as sys from './sys.js';

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
const REPLY_TABLE = 15008;
/** Before `main` (32766), after `local` (0): the pod's own addresses stay local as they are. */
const REPLY_RULE_PREF = 15008;

const FWMARK_ACCEPT = '/proc/sys/net/ipv4/tcp_fwmark_accept';

export type Family = 4 | 6;

/*
 * rtnetlink, straight from ztunnel (no `ip` process per pod: a 50-pod enrolment churn
 * spent over a minute spawning them). Message layouts from linux/netlink.h,
 * linux/fib_rules.h and linux/rtnetlink.h.
 */
const RTM = { newRoute: 24, delRoute: 25, newRule: 32, delRule: 33 } as const;
const NLM_F = { request: 0x1, ack: 0x4, replace: 0x100, excl: 0x200, create: 0x400 } as const;
const FRA = { priority: 6, fwmark: 10, table: 15 } as const;
const RTA = { oif: 4, table: 15 } as const;
const FR_ACT_TO_TBL = 1;
const RTPROT_BOOT = 3;
const RT_SCOPE_HOST = 254;
const RTN_LOCAL = 2;
/** lo is interface 1 in every network namespace. */
const LOOPBACK_IFINDEX = 1;
const AF = { 4: 2, 6: 10 } as const;
const EEXIST = 17;
const ENOENT = 2;
const ESRCH = 3;

function attr(type: number, value: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt16LE(8, 0);
  b.writeUInt16LE(type, 2);
  b.writeUInt32LE(value, 4);
  return b;
}

function message(type: number, flags: number, body: Buffer, attrs: Buffer[]): Buffer {
  const payload = Buffer.concat([body, ...attrs]);
  const hdr = Buffer.alloc(16);
  hdr.writeUInt32LE(16 + payload.length, 0);
  hdr.writeUInt16LE(type, 4);
  hdr.writeUInt16LE(NLM_F.request | NLM_F.ack | flags, 6);
  hdr.writeUInt32LE(1, 8);
  return Buffer.concat([hdr, payload]);
}

/** `ip -<family> rule add|del fwmark 0x15008 lookup 15008 pref 15008` as one rtnetlink message. */
export function ruleMessage(family: Family, op: 'add' | 'del'): Buffer {
  const hdr = Buffer.alloc(12); // struct fib_rule_hdr
  hdr.writeUInt8(AF[family], 0);
  hdr.writeUInt8(FR_ACT_TO_TBL, 7);
  return message(
    op === 'add' ? RTM.newRule : RTM.delRule,
    op === 'add' ? NLM_F.create | NLM_F.excl : 0,
    hdr,
    [attr(FRA.priority, REPLY_RULE_PREF), attr(FRA.fwmark, REPLY_MARK), attr(FRA.table, REPLY_TABLE)],
  );
}

/** `ip -<family> route replace|del local default dev lo table 15008` as one rtnetlink message. */
export function routeMessage(family: Family, op: 'add' | 'del'): Buffer {
  const rtm = Buffer.alloc(12); // struct rtmsg
  rtm.writeUInt8(AF[family], 0);
  rtm.writeUInt8(RTPROT_BOOT, 5);
  rtm.writeUInt8(RT_SCOPE_HOST, 6);
  rtm.writeUInt8(RTN_LOCAL, 7);
  return message(
    op === 'add' ? RTM.newRoute : RTM.delRoute,
    op === 'add' ? NLM_F.create | NLM_F.replace : 0,
    rtm,
    [attr(RTA.table, REPLY_TABLE), attr(RTA.oif, LOOPBACK_IFINDEX)],
  );
}

/**
 * Applies (`add`, idempotent: an existing rule is success) or removes (`del`, what is
 * already gone is success) one family's steering; undefined on success, else why not.
 */
export type SteeringChange = (netns: Netns, family: Family, op: 'add' | 'del') => string | undefined;

const netlinkSteering: SteeringChange = (netns, family, op) => {
  const fd = inNetns(netns, () => sys.netlinkRouteSocket());
  try {
    const benign = op === 'add' ? [EEXIST] : [ENOENT, ESRCH];
    for (const [what, msg] of [
      ['rule', ruleMessage(family, op)],
      ['route', routeMessage(family, op)],
    ] as const) {
      const rc = sys.netlinkRequest(fd, msg);
      if (rc !== 0 && !benign.includes(-rc))
        return `${what} ${op} (IPv${family}): ${new sys.SysError('rtnetlink', -rc).code}`;
    }
    return undefined;
  } catch (e) {
    return (e as Error).message;
  } finally {
    sys.close(fd);
  }
};

/** Per family: undefined when steering is in place, else why not (the connector falls back). */
export type SteeringStatus = Record<Family, string | undefined>;

export interface SteeringInputs {
  /** The pod's namespace, held open by enrolment (ZDS passes it as an fd, not a path). */
  netns: Netns;
  /** For log lines. */
  pod: string;
  change?: SteeringChange;
  /** Reads and writes `tcp_fwmark_accept` inside the pod (tests replace it). */
  fwmarkAccept?: { get(netns: Netns): string; set(netns: Netns, value: string): void };
}

const procFwmarkAccept = {
  get: (netns: Netns) => inNetns(netns, () => readFileSync(FWMARK_ACCEPT, 'utf8').trim()),
  set: (netns: Netns, value: string) => inNetns(netns, () => writeFileSync(FWMARK_ACCEPT, value)),
};

/**
 * One pod's reply steering: installed at enrollment, removed when the pod is removed.
 * ztunnel stopping leaves it (harmless: only ztunnel's own connections carry the mark, and a
 * successor ztunnel may be using it). Installing twice is harmless (the rule is kept once,
 * the route replaced), so a restarted ztunnel adopts what the last one left.
 */
export class ReplySteering {
  #status: SteeringStatus = { 4: 'not installed', 6: 'not installed' };
  #savedFwmarkAccept: string | undefined;
  readonly #change: SteeringChange;
  readonly #sysctl: NonNullable<SteeringInputs['fwmarkAccept']>;

  constructor(private readonly inputs: SteeringInputs) {
    this.#change = inputs.change ?? netlinkSteering;
    this.#sysctl = inputs.fwmarkAccept ?? procFwmarkAccept;
  }

  get status(): SteeringStatus {
    return this.#status;
  }

  /** Why a transparent connect of `family` would leak its replies, or undefined when it would not. */
  unavailable(family: Family): string | undefined {
    return this.#status[family];
  }

  install(): SteeringStatus {
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
    for (const family of [4, 6] as const)
      this.#status[family] = sysctlError ?? this.#change(this.inputs.netns, family, 'add');
    const missing = ([4, 6] as const).filter((f) => this.#status[f] !== undefined);
    if (missing.length > 0)
      log.warn(
        { pod: this.inputs.pod, reasons: missing.map((f) => this.#status[f]) },
        'reply steering incomplete: the app sees ztunnel as the peer for these families',
      );
    return this.#status;
  }

  /** Removes the rule and the table, and puts `tcp_fwmark_accept` back; a vanished netns is fine. */
  remove(): void {
    this.#status = { 4: 'removed', 6: 'removed' };
    for (const family of [4, 6] as const) {
      const why = this.#change(this.inputs.netns, family, 'del');
      if (why !== undefined) log.debug({ pod: this.inputs.pod, family, err: why }, 'reply steering removal');
    }
    if (this.#savedFwmarkAccept === undefined) return;
    try {
      this.#sysctl.set(this.inputs.netns, this.#savedFwmarkAccept);
    } catch (e) {
      log.debug({ pod: this.inputs.pod, err: (e as Error).message }, 'tcp_fwmark_accept restore');
    }
  }
}
