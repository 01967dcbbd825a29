import type { PodInfo } from '../cluster/topology.js';

/** Bound on remembered target events; older ones are dropped first. */
export const MAX_TARGET_EVENTS = 4000;

export interface TargetEvent {
  target: string;
  seq: number;
  kind: 'tcp' | 'udp';
  peer: string;
}

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
      let record: { tcp?: string; udp?: string };
      try {
        record = JSON.parse(line) as { tcp?: string; udp?: string };
      } catch {
        continue;
      }
      const kind = record.tcp !== undefined ? 'tcp' : record.udp !== undefined ? 'udp' : undefined;
      if (kind) this.events.push({ target, seq: ++this.seq, kind, peer: String(record[kind]) });
    }
    if (this.events.length > MAX_TARGET_EVENTS) this.events = this.events.slice(-MAX_TARGET_EVENTS);
  }

  mark(): void {
    this.markSeq = this.seq;
  }

  sinceMark(): TargetEvent[] {
    return this.events.filter((e) => e.seq > this.markSeq);
  }

  /** Through ztunnel, the app's peer is inside its own pod: loopback or one of the pod's addresses. */
  cameAround(e: TargetEvent): boolean {
    const pod = this.pods.get(e.target);
    const peer = e.peer.replace(/^::ffff:/, '');
    const inside = peer === '::1' || peer.startsWith('127.') || peer === pod?.ipv4 || peer === pod?.ipv6;
    return e.kind === 'tcp' && !inside;
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
          : ' (from inside its pod: via ztunnel)';
    const key = `target ${e.target} saw ${e.kind} from ${e.peer}${how}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([k, n]) => (n > 1 ? `${k} (${n}×)` : k));
}
