import type { FloodKind } from './mesh-peers.js';
import type { SoakSample, SoakSeries } from './verdict.js';

/** What `runSoak` reports, and the table `zmesh harness soak` prints. */
/** What the authenticated hostile peers (a valid mesh certificate) did and how ztunnel answered. */
export interface MeshPeerOutcome {
  /** Floods sent, per kind. */
  floods: Record<FloodKind, number>;
  /** Rapid-reset and CONTINUATION floods not answered by GOAWAY ENHANCE_YOUR_CALM. */
  unanswered: number;
  /** SETTINGS floods the server ended (its unread-answer bound) rather than absorbed. */
  settingsClosed: number;
  slowReaders: number;
  /** Slow readers ztunnel closed at their PING deadline, and the slowest close. */
  slowReadersClosed: number;
  slowestCloseMs: number;
  /** Slow readers still open after SLOW_READER_GIVE_UP_MS: a missing deadline. */
  slowReadersHeld: number;
}

/** The proxies the soak samples and judges across control-plane restarts. */
export type ProxyName = 'node-a' | 'node-b' | 'waypoint';
export const PROXIES: readonly ProxyName[] = ['node-a', 'node-b', 'waypoint'];

export interface ProxyTrend {
  samples: SoakSample[];
  series: SoakSeries[];
  /** xDS streams that ended over the run, by gRPC status (its zmesh_xds_stream_ends_total at the end). */
  xdsStreamEnds: Record<string, number>;
  /** Its xDS stream was up at the end (zmesh_xds_connected). */
  xdsConnected: boolean;
}

/** One control-plane restart: killed by pid, started again on the same state directory. */
export interface CpRestart {
  /** Seconds into the mix when the signal was sent. */
  atSeconds: number;
  signal: 'SIGTERM' | 'SIGKILL';
  /** Signal to the new process answering /healthz; null if it did not within CP_START_GIVE_UP_MS. */
  downSeconds: number | null;
  /**
   * Signal to each proxy's xDS stream being up again on a new stream (its stream-end count
   * past the one before the signal, and zmesh_xds_connected 1); null if not within
   * RECONNECT_GIVE_UP_MS.
   */
  reconnectSeconds: Record<ProxyName, number | null>;
  /** Good requests done, and failed, from the signal until every proxy was back (last-known-good serving). */
  requestsWhileDown: number;
  failedWhileDown: number;
}

/**
 * One control-plane process. Its memory starts over at each restart, so its series are
 * judged within the incarnation only, and only when it ran CP_JUDGE_MIN_SECONDS.
 */
export interface CpIncarnation {
  pid: number;
  /** Seconds into the mix it answered /healthz (0: the first) and it was signalled (or the run ended). */
  startedAt: number;
  endedAt: number;
  samples: SoakSample[];
  /** Absent when the incarnation was too short to judge. */
  series?: SoakSeries[];
}

export interface SoakReport {
  seconds: number;
  /** The two ztunnels (node-b takes the hostile peers, node-a the workloads) and the waypoint. */
  proxies: Record<ProxyName, ProxyTrend>;
  traffic: { requests: number; failed: number; firstFailure?: string };
  hostile: Record<string, number>;
  mesh: MeshPeerOutcome;
  controlPlane: {
    restarts: CpRestart[];
    /** Proxy reconnections seen after the restarts (at most restarts × proxies). */
    reconnects: number;
    incarnations: CpIncarnation[];
  };
  /** Which process died and how, if one did outside a restart. */
  died?: string;
  passed: boolean;
}

/** The report as a table and a verdict line. */
export function soakTable(r: SoakReport): string {
  const unit = (name: string, v: number) =>
    !Number.isFinite(v)
      ? 'not judged'
      : name === 'fds'
        ? v.toFixed(1)
        : name === 'loopDelay'
          ? `${(v * 1000).toFixed(1)} ms`
          : `${(v / 2 ** 20).toFixed(2)} MiB`;
  const row = (who: string, s: SoakSeries) =>
    `${who} ${s.name.padEnd(9)} first ${unit(s.name, s.first)}  last ${unit(s.name, s.last)}  max ${unit(s.name, s.max)}  slope ${unit(s.name, s.slopePerMinute)}/min (limit ${unit(s.name, s.limitPerMinute)})  ${s.passed ? 'ok' : 'GROWS'}`;
  const rows = PROXIES.flatMap((n) => r.proxies[n].series.map((s) => row(n.padEnd(8), s)));
  const cp = r.controlPlane;
  const incarnations = cp.incarnations.map((inc, i) =>
    inc.series
      ? inc.series.map((s) => row(`cp#${i}    `, s)).join('\n')
      : `cp#${i}     pid ${inc.pid}, ${inc.startedAt.toFixed(0)}-${inc.endedAt.toFixed(0)} s, ${inc.samples.length} samples: too short to judge`,
  );
  const restarts = cp.restarts.map(
    (x, i) =>
      `restart ${i + 1} at ${x.atSeconds.toFixed(0)} s (${x.signal}): healthz after ${x.downSeconds?.toFixed(1) ?? 'never'} s; reconnected ${PROXIES.map((n) => `${n} ${x.reconnectSeconds[n]?.toFixed(1) ?? 'never'} s`).join(', ')}; ${x.requestsWhileDown} good requests meanwhile, ${x.failedWhileDown} failed`,
  );
  const hostile = Object.entries(r.hostile)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  return [
    ...rows,
    `good requests ${r.traffic.requests}, failed ${r.traffic.failed}${r.traffic.firstFailure ? ` (first: ${r.traffic.firstFailure})` : ''}`,
    `hostile: ${hostile}`,
    `mesh peers: floods ${Object.entries(r.mesh.floods)
      .map(([k, v]) => `${k} ${v}`)
      .join(
        ', ',
      )} (${r.mesh.unanswered} not answered by GOAWAY, ${r.mesh.settingsClosed} SETTINGS floods cut); slow readers ${r.mesh.slowReaders}, ${r.mesh.slowReadersClosed} closed at their deadline (slowest ${(r.mesh.slowestCloseMs / 1000).toFixed(1)} s), ${r.mesh.slowReadersHeld} held`,
    ...incarnations,
    ...restarts,
    `control plane restarted ${cp.restarts.length} time(s), ${cp.reconnects} proxy reconnects`,
    r.died ? `died: ${r.died}` : 'proxies and control plane alive',
    `soak ${r.passed ? 'PASSED' : 'FAILED'} after ${r.seconds} s`,
  ].join('\n');
}
