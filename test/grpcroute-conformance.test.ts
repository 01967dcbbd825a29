import test from 'ava';
import {
  type Backend,
  type GrpcCase,
  type GrpcSuite,
  SKIPPED,
  SUITES,
} from './conformance/grpcroute-cases.js';
import { call, type EchoClient, echoClient, startGrpcEcho } from './helpers/grpc-echo.js';
import { startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

/**
 * The Gateway API GRPCRoute conformance table (test/conformance/grpcroute-cases.ts) through
 * the real path: a @grpc/grpc-js client → source ztunnel → HBONE → waypoint → HBONE →
 * destination ztunnel → @grpc/grpc-js servers, one waypoint config per upstream test, each
 * call checked for the gRPC status, the backend that answered and the metadata it saw.
 */

let mesh: WaypointMesh;
let client: EchoClient;

test.before(async () => {
  mesh = await startWaypointMesh(85, { app: startGrpcEcho });
  client = echoClient(`${mesh.ip.client}:${mesh.port.client}`, 'server');
});

test.after.always(async () => {
  client?.close();
  await mesh?.stop();
});

const appOf = (name: Backend) => (name === 'server-v1' ? mesh.apps.v1 : mesh.apps.v2);

/** Upstream's weight check: 500 calls within ±5% of each weight, up to 3 tries (weight.MaxTestRetries). */
async function weightsHold(suite: GrpcSuite, c: GrpcCase, log: (s: string) => void): Promise<boolean> {
  const total = 500;
  for (let attempt = 1; attempt <= 3; attempt++) {
    const counts: Record<string, number> = {};
    let next = 0;
    const worker = async () => {
      while (next < total) {
        next++;
        const r = await call(client, c.method, c.metadata);
        const app = r.reply?.app ?? `status ${r.code}`;
        counts[app] = (counts[app] ?? 0) + 1;
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    log(`try ${attempt}: ${JSON.stringify(counts)}`);
    const ok = Object.entries(suite.weights ?? {}).every(
      ([app, w]) => Math.abs((counts[app] ?? 0) / total - w) <= 0.05,
    );
    if (ok && Object.keys(counts).every((k) => k in (suite.weights ?? {}))) return true;
  }
  return false;
}

for (const suite of SUITES) {
  test.serial(
    `${suite.name} (${suite.cases.length} calls${suite.weights ? ', weighted' : ''})`,
    async (t) => {
      mesh.waypoint.setConfig(mesh.config(`grpcRoutes:${suite.routes}`));
      for (const c of suite.cases) {
        const at = `${c.method} ${JSON.stringify(c.metadata ?? {})}`;
        for (const app of Object.values(mesh.apps)) delete app.last;
        const r = await call(client, c.method, c.metadata);
        t.is(r.code, c.code ?? 0, `${at}: grpc-status (${r.details ?? ''})`);
        if (c.backend === undefined) {
          if (!suite.weights)
            t.is(mesh.apps.v1.last ?? mesh.apps.v2.last, undefined, `${at}: no backend saw it`);
          continue;
        }
        t.is(r.reply?.app, c.backend, `${at}: backend`);
        const seen = (appOf(c.backend).last ?? {}) as Record<string, unknown>;
        for (const [k, v] of Object.entries(c.backendHeaders ?? {})) t.is(seen[k], v, `${at}: metadata ${k}`);
        for (const k of c.absentBackendHeaders ?? []) t.is(seen[k], undefined, `${at}: metadata ${k} absent`);
      }
      const weighted = suite.cases[0];
      if (suite.weights && weighted)
        t.true(await weightsHold(suite, weighted, (s) => t.log(s)), 'weights hold');
    },
  );
}

test.serial('the table says why each left-out GRPCRoute case is left out', (t) => {
  const total = SUITES.reduce((n, s) => n + s.cases.length, 0);
  t.log(`${SUITES.length} suites, ${total} calls ported; ${SKIPPED.length} groups skipped`);
  for (const s of SKIPPED) t.log(`skipped ${s.name}: ${s.reason}`);
  t.true(total >= 15, `${total} calls`);
  t.true(SKIPPED.every((s) => s.reason.length > 20));
});
