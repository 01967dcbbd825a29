import { parentPort, threadId, workerData } from 'node:worker_threads';
import { logger, TrustBundle } from '@zmesh/shared';
import { Registry } from 'prom-client';
import { BpfCapture } from '../capture/bpf-capture.js';
import type { AddWorkloadRequest } from '../capture/zds-client.js';
import { drainOnCertChange } from '../identity/cert-drain.js';
import { keysDirError, PersistedKeys } from '../identity/persisted-keys.js';
import { Ztunnel } from '../ztunnel.js';
import { Channel } from './channel.js';
import type { ConfigPush, SignRequest, WorkerDump, WorkerInit } from './worker-protocol.js';

/**
 * One ztunnel worker thread (`--workers N`): a `Ztunnel` serving only the pods the main thread
 * shards to it: their in-pod listeners (made from this thread, whose setns is its own), their
 * HBONE pool, tunnels and authorization. No admin ports, no ZDS, no xDS, no CA connection:
 * config pushes, enrolments and certificate signing cross the channel to the main thread;
 * workload keys are made here and never leave this thread.
 */
const log = logger('worker');
const init = workerData as WorkerInit;
const port = parentPort;
if (!port) throw new Error('worker-entry runs only as a worker thread');
// Awaited before the channel listens: calls posted meanwhile wait in the port, not at a handler-less channel.
const kept = init.persistKeys ? await PersistedKeys.open(init.persistKeys) : undefined;
if (kept && !kept.ok)
  log.error({ err: keysDirError(init.persistKeys!, kept.error).message }, 'keys not persisted');
const channel = new Channel(port);
const bundle = new TrustBundle(init.trustDomain, init.roots);
const registry = new Registry();
let assigned: Set<string> | undefined;
let version = 0;
const ztunnel = new Ztunnel({
  node: init.node,
  address: init.address,
  bundle,
  signer: {
    sign: (csrPem, identity, ttlSeconds) =>
      channel.call<string[]>('sign', { csrPem, identity, ttlSeconds } satisfies SignRequest),
  },
  ...(kept?.ok ? { persistedKeys: kept.value } : {}),
  passthrough: init.passthrough,
  tenancy: { ...init.tenancy, worker: init.index },
  registry,
  // Process-wide facts (CPU, heap, fds) are the main thread's to report, once.
  defaultMetrics: false,
  ...(init.certTtlSeconds ? { certTtlSeconds: init.certTtlSeconds } : {}),
  ...(init.certBackoff ? { certBackoff: init.certBackoff } : {}),
  ...(init.accessLog ? { accessLog: init.accessLog } : {}),
  ...(init.inboundLimits ? { inboundLimits: init.inboundLimits } : {}),
  ...(init.pool ? { pool: init.pool } : {}),
  ...(init.capture
    ? {
        capture: {
          bpf: new BpfCapture({ node: init.capture.scope, registry }),
          zdsSocket: '',
          cgroupRoot: init.capture.cgroupRoot,
          external: true,
        },
      }
    : { serves: (uid: string) => assigned?.has(uid) === true }),
});
const undrain = drainOnCertChange(ztunnel.certs, ztunnel.pool);

channel.handle('config', async (push: ConfigPush) => {
  if (push.assigned) assigned = new Set(push.assigned);
  // applyConfig swaps policies and state in one turn, before its first await.
  const applied = await ztunnel.applyConfig(push.update);
  if (!applied.ok) return { ok: false, reasons: applied.error };
  version = push.version;
  return { ok: true, version };
});
channel.handle('add', (req: AddWorkloadRequest) => enrolment().addWorkload(req));
channel.handle('del', (uid: string) => enrolment().delWorkload(uid));
channel.handle('metrics', () => registry.getMetricsAsJSON());
channel.handle(
  'dump',
  (): WorkerDump => ({
    index: init.index,
    threadId,
    version,
    readiness: ztunnel.readiness(),
    configDump: ztunnel.configDump(),
  }),
);
channel.handle('roots', (roots: string[]) => {
  for (const pem of roots) bundle.add(pem);
  const keep = new Set(new TrustBundle(init.trustDomain, roots).roots());
  for (const pem of bundle.roots()) if (!keep.has(pem)) bundle.remove(pem);
});
let staleness: { ageMs: number; maxMs: number; at: number } | undefined;
ztunnel.authorizer.setStaleness({
  ageMs: () => (staleness ? staleness.ageMs + (performance.now() - staleness.at) : 0),
  maxMs: () => staleness?.maxMs ?? Number.POSITIVE_INFINITY,
});
channel.handle('staleness', (s: { ageMs: number; maxMs: number } | null) => {
  staleness = s ? { ...s, at: performance.now() } : undefined;
});
channel.handle('stop', async (drainMs?: number) => {
  undrain();
  if (drainMs !== undefined) await ztunnel.drain(drainMs);
  else await ztunnel.stop();
  // Answered first; the loop then ends on its own once nothing is left on it.
  setImmediate(() => port.close());
});

function enrolment() {
  const handler = ztunnel.enrolment();
  if (!handler) throw new Error('this worker is not in capture mode');
  return handler;
}

log.info({ worker: init.index, generation: init.generation, threadId }, 'ztunnel worker started');
