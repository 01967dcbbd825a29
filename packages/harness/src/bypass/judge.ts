import type { Observed, Outcome } from './attempt.js';
import type { HboneResult, PrivilegeResult, ProbeResult } from './bypass-lab.js';
import { type Movement, moved } from './metric-deltas.js';

/** Worst first: one delivered part makes the whole attempt a bypass. */
const SEVERITY: readonly Observed[] = ['delivered', 'error', 'exempt', 'captured', 'denied'];

export function worst(...observed: Observed[]): Observed {
  return SEVERITY.find((o) => observed.includes(o)) ?? 'error';
}

export function combine(...outcomes: Outcome[]): Outcome {
  return {
    observed: worst(...outcomes.map((o) => o.observed)),
    evidence: outcomes.flatMap((o) => o.evidence),
  };
}

/** What the probe saw, in words: the answer is the peer address the target saw. */
export function describeProbe(r: ProbeResult): string {
  if (r.answer) return `${r.target}: target answered "${r.answer.slice(0, 80)}"`;
  const how = r.connected
    ? `connect() succeeded (peer ${r.peer ?? '?'}), then ${r.error ?? 'closed'}`
    : r.error;
  return `${r.target}: no answer; ${how ?? 'closed'}${r.ms === undefined ? '' : ` after ${r.ms} ms`}`;
}

/**
 * Probes from a source towards targets it must not reach. Any answer is a delivery; without
 * one, the attempt was captured if the source node's ztunnel handled it (it counted the
 * connection as source reporter or refused it), otherwise denied on the way.
 */
export function judgeProbes(results: ProbeResult[], moves: Movement[], sourceNode?: string): Outcome {
  const evidence = results.map(describeProbe);
  if (results.some((r) => r.answer)) return { observed: 'delivered', evidence };
  const atSource = sourceNode === undefined ? [] : moves.filter((m) => m.node === sourceNode);
  const captured =
    moved(atSource, 'istio_tcp_connections_opened_total', 'reporter="source"') > 0 ||
    moved(atSource, 'zmesh_capture_refused_total') > 0 ||
    moved(atSource, 'zmesh_capture_original_dst_misses_total') > 0;
  return { observed: captured ? 'captured' : 'denied', evidence };
}

function describeHbone(label: string, r: HboneResult): string {
  const parts = [`stage=${r.stage}`];
  if (r.status !== undefined) parts.push(`status=${r.status}`);
  if (r.zmeshError) parts.push(`x-zmesh-error=${r.zmeshError}`);
  if (r.goaway) parts.push(`goaway=${r.goaway.code}${r.goaway.data ? `:${r.goaway.data}` : ''}`);
  if (r.error) parts.push(`error=${r.error}`);
  if (r.answer) parts.push(`target answered "${r.answer.slice(0, 60)}"`);
  return `${label}: ${parts.join(' ')}`;
}

/** A tunnel accepted (200) or anything answered through it is a delivery. */
export function judgeHbone(label: string, r: HboneResult, expectStatus?: number): Outcome {
  const evidence = [describeHbone(label, r)];
  if (r.status === 200 || r.answer) return { observed: 'delivered', evidence };
  if (expectStatus !== undefined && r.status !== expectStatus)
    evidence.push(`(expected status ${expectStatus}; refused anyway)`);
  return { observed: 'denied', evidence };
}

/** Checks that only report (where the pod is, what it sees), judged by no one. */
const INFORMATIONAL = new Set(['own_cgroup', 'visible_pids']);

/** Privilege checks a pod must fail: any that succeeded is a delivery (the pod got a power it must not have). */
export function judgePrivileges(
  results: PrivilegeResult[],
  mustFail: (r: PrivilegeResult) => boolean,
): Outcome {
  const evidence = results.map((r) =>
    INFORMATIONAL.has(r.check)
      ? `${r.check}: ${r.detail.slice(0, 120)}`
      : `${r.check}${r.detail ? ` (${r.detail.slice(0, 100)})` : ''}: ${r.ok ? 'ALLOWED' : `refused ${r.errno ?? ''}`}`,
  );
  const escaped = results.some((r) => !INFORMATIONAL.has(r.check) && mustFail(r) && r.ok);
  return { observed: escaped ? 'delivered' : 'denied', evidence };
}
