import { readFileSync } from 'node:fs';
import type { LocalMesh } from '../mesh/local-mesh.js';
import { type OutageMetric, parseOutageMetrics } from './metrics-scraper.js';

const POLL_MS = 50;
/** Ancestors walked to tie a socket peer's pid to a node's ztunnel (a wrapper may exec or fork). */
const MAX_ANCESTORS = 4;

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `condition` every 50 ms; rejects naming `what` after `timeoutMs`. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(POLL_MS);
  }
}

/** The node whose ztunnel is `pid` or an ancestor of it. */
export function pidNode(mesh: LocalMesh, pid: number): string | undefined {
  const byPid = new Map(
    mesh.cluster.nodes.flatMap((n) => {
      const p = mesh.ztunnelPid(n.name);
      return p ? [[p, n.name] as const] : [];
    }),
  );
  let current: number | undefined = pid;
  for (let i = 0; i <= MAX_ANCESTORS && current; i++) {
    const node = byPid.get(current);
    if (node) return node;
    current = parentOf(current);
  }
  return undefined;
}

function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  }
}

/** What the drill asks every node's ztunnel: metrics, readiness, certificates. */
export class ProxyWatch {
  constructor(private readonly mesh: LocalMesh) {}

  private get nodes(): string[] {
    return this.mesh.cluster.nodes.map((n) => n.name);
  }

  async metric(node: string, name: OutageMetric): Promise<number | undefined> {
    const text = await this.mesh.metrics(node).catch(() => '');
    return parseOutageMetrics(text)[name];
  }

  /** Waits until `predicate` holds for `name` on every node; false on timeout. */
  async allMetric(
    name: OutageMetric,
    predicate: (v: number) => boolean,
    timeoutMs: number,
  ): Promise<boolean> {
    return waitFor(
      async () => {
        const values = await Promise.all(this.nodes.map((n) => this.metric(n, name)));
        return values.every((v) => v !== undefined && predicate(v));
      },
      timeoutMs,
      name,
    ).then(
      () => true,
      () => false,
    );
  }

  async metricsRows(): Promise<
    Array<{ node: string; connected?: number; disconnected: number; age: number }>
  > {
    return Promise.all(
      this.nodes.map(async (node) => {
        const v = parseOutageMetrics(await this.mesh.metrics(node).catch(() => ''));
        return {
          node,
          ...(v.zmesh_xds_connected === undefined ? {} : { connected: v.zmesh_xds_connected }),
          disconnected: round1(v.zmesh_xds_disconnected_seconds ?? 0),
          age: round1(v.zmesh_xds_snapshot_age_seconds ?? 0),
        };
      }),
    );
  }

  /** Wall-clock ms at which `node` first answered /healthz/ready 200, or undefined. */
  async readyAt(node: string, timeoutMs: number): Promise<number | undefined> {
    return waitFor(
      async () =>
        (await this.mesh.admin(node, 15021, '/healthz/ready').catch(() => undefined))?.status === 200,
      timeoutMs,
      `${node} ready`,
    ).then(
      () => Date.now(),
      () => undefined,
    );
  }

  async allReady(timeoutMs: number): Promise<number | undefined> {
    for (const node of this.nodes) if ((await this.readyAt(node, timeoutMs)) === undefined) return undefined;
    return Date.now();
  }

  /** not-after (wall ms) of a service account's certificate as its node's ztunnel holds it. */
  async notAfter(which: Record<string, string>): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const [node, sa] of Object.entries(which)) {
      const dump = JSON.parse((await this.mesh.admin(node, 15000, '/config_dump')).body) as {
        certificates: Array<{ identity: string; notAfter?: string }>;
      };
      const cert = dump.certificates.find((c) => c.identity.endsWith(`/sa/${sa}`));
      if (cert?.notAfter) out[sa] = Date.parse(cert.notAfter);
    }
    return out;
  }
}

const round1 = (v: number) => Math.round(v * 10) / 10;
