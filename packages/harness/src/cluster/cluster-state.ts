import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClusterSpec } from './cluster-spec.js';

/** Where live clusters are recorded, so that a later process can find and remove them. */
const STATE_DIR = process.env.ZMESH_HARNESS_STATE ?? '/run/zmesh-harness';

export interface ClusterState {
  runId: string;
  /** The process that owns the cluster; its death makes the cluster stale. */
  pid: number;
  /** Created by `zmesh cluster up`: outlives its process, removed by `zmesh cluster down`. */
  persistent: boolean;
  spec: ClusterSpec;
  cgroupMount: string;
  createdAt: string;
}

function statePath(runId: string): string {
  return join(STATE_DIR, `${runId}.json`);
}

export function writeState(state: ClusterState): void {
  mkdirSync(STATE_DIR, { recursive: true, mode: 0o700 });
  const tmp = `${statePath(state.runId)}.tmp`;
  writeFileSync(tmp, JSON.stringify(state, null, 2), { mode: 0o600 });
  renameSync(tmp, statePath(state.runId));
}

export function readState(runId: string): ClusterState | undefined {
  try {
    return JSON.parse(readFileSync(statePath(runId), 'utf8')) as ClusterState;
  } catch {
    return undefined;
  }
}

export function removeState(runId: string): void {
  rmSync(statePath(runId), { force: true });
}

export function listStates(): ClusterState[] {
  if (!existsSync(STATE_DIR)) return [];
  return readdirSync(STATE_DIR)
    .filter((f) => f.endsWith('.json'))
    .map((f) => readState(f.slice(0, -'.json'.length)))
    .filter((s): s is ClusterState => s !== undefined);
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
