import type { PodInfo } from '../cluster/topology.js';

/** Bound on remembered target events; older ones are dropped first. */
const MAX_TARGET_EVENTS = 4000;

export interface TargetEvent {
  target: string;
  seq: number;
  kind: 'tcp' | 'udp';
  peer: string;
  /** SO_MARK of the accepted TCP socket (null when the target could not read it). */
  mark?: number | null;
}

/** The mark ztunnel's connections to an app carry (capture/reply-steering.ts, REPLY_MARK). */
export const ZTUNNEL_MARK = 0x15008;

/**
 * What the targets themselves saw (each prints one JSON line per peer): the second
 * witness beside the attacker's own view. A TCP connection whose peer is neither loopback
 * nor the target's own address came around ztunnel, whatever the attacker reported.
 */
export class TargetWitness {
  private events: TargetEvent[] = [];
  private partial = new Map<string, string>();
  private seq = 0;
  private markSeq = 0;

  constructor(private readonly pods: ReadonlyMap<string, PodInfo>) {}

  add(target: string, chunk: string): void {
    const text = (this.partial.get(target) ?? '') + chunk;
    const lines = text.split('\n');
    this.partial.set(target, lines.pop() ?? '');
    for (const line of lines) {
      let record: { tcp?: string; udp?: string; mark?: number | null };
      try {
        record = JSON.parse(line) as { tcp?: string; udp?: string; mark?: number | null };
      } catch {
        continue;
      }
      const kind = record.tcp !== undefined ? 'tcp' : record.udp !== undefined ? 'udp' : undefined;
      if (kind)
        this.events.push({
          target,
          seq: ++this.seq,
          kind,
          peer: String(record[kind]),
          ...(kind === 'tcp' ? { mark: typeof record.mark === 'number' ? record.mark : null } : {}),
        });
    }
    if (this.events.length > MAX_TARGET_EVENTS) this.events = this.events.slice(-MAX_TARGET_EVENTS);
  }

  mark(): void {
    this.markSeq = this.seq;
  }

  sinceMark(): TargetEvent[] {
    return this.events.filter((e) => e.seq > this.markSeq);
  }

  /**
   * Through ztunnel, the app's socket carries ztunnel's mark (source preserved), or the peer
   * is inside its own pod (loopback, or the pod's address when ztunnel fell back).
   */
  cameAround(e: TargetEvent): boolean {
    if (e.kind !== 'tcp' || e.mark === ZTUNNEL_MARK) return false;
    const pod = this.pods.get(e.target);
    const peer = e.peer.replace(/^::ffff:/, '');
    return !(peer === '::1' || peer.startsWith('127.') || peer === pod?.ipv4 || peer === pod?.ipv6);
  }
}

/** One evidence line per target and kind: who it saw, how often, and whether through ztunnel. */
export function describeTargetEvents(witness: TargetWitness, events: readonly TargetEvent[]): string[] {
  if (events.length === 0) return ['targets saw nothing (no connection, no datagram reached an application)'];
  const counts = new Map<string, number>();
  for (const e of events) {
    const how =
      e.kind === 'udp'
        ? ''
        : witness.cameAround(e)
          ? ' (from outside its pod)'
          : e.mark === ZTUNNEL_MARK
            ? ' (through ztunnel, client address preserved)'
            : ' (from inside its pod: via ztunnel)';
    const key = `target ${e.target} saw ${e.kind} from ${e.peer}${how}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([k, n]) => (n > 1 ? `${k} (${n}×)` : k));
}
