import test from 'ava';
import { type ConformanceCase, SKIPPED, SUITES } from './conformance/httproute-cases.js';
import { h1Request, startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

/**
 * The Gateway API HTTPRoute conformance table (test/conformance/httproute-cases.ts) through
 * the real path: client → source ztunnel → HBONE → waypoint → HBONE → destination ztunnel →
 * app, one waypoint config per upstream test, each request checked for the backend that
 * answered, the status, and the headers on both sides.
 */

let mesh: WaypointMesh;

test.before(async () => {
  mesh = await startWaypointMesh(146);
});

test.after.always(async () => {
  await mesh?.stop();
});

async function send(c: ConformanceCase) {
  const headers: Record<string, string> = { host: c.request.host ?? 'server', ...c.request.headers };
  const echo = c.request.echoResponseHeaders;
  if (echo)
    headers['x-echo-set-header'] = Object.entries(echo)
      .map(([k, v]) => `${k}:${v}`)
      .join(',');
  return h1Request(mesh.ip.client, mesh.port.client, {
    path: c.request.path,
    method: c.request.method ?? 'GET',
    headers,
  });
}

const appOf = (name: string) => (name === 'server-v1' ? mesh.apps.v1 : mesh.apps.v2);

for (const suite of SUITES) {
  test.serial(`${suite.name} (${suite.cases.length} requests)`, async (t) => {
    mesh.waypoint.setConfig(mesh.config(`httpRoutes:${suite.routes}`));
    for (const c of suite.cases) {
      const at = `${c.request.method ?? 'GET'} ${c.request.path} ${JSON.stringify(c.request.headers ?? {})}`;
      for (const app of Object.values(mesh.apps)) delete app.last;
      const res = await send(c);
      t.is(res.status, c.status ?? 200, `${at}: status (${res.body.slice(0, 120)})`);
      if (c.location !== undefined) t.is(res.headers.location, c.location, `${at}: Location`);
      if (c.reached) t.truthy(appOf(c.reached).last, `${at}: reached ${c.reached}`);
      if (c.backend === undefined) {
        // A redirect or a local reply before forwarding: nothing reached an app.
        if (!c.reached) t.is(mesh.apps.v1.last ?? mesh.apps.v2.last, undefined, `${at}: no backend saw it`);
        continue;
      }
      const body = JSON.parse(res.body) as { app: string; url: string };
      t.is(body.app, c.backend, `${at}: backend`);
      const seen = appOf(c.backend).last ?? {};
      if (c.backendTarget !== undefined) t.is(body.url, c.backendTarget, `${at}: path the backend saw`);
      if (c.backendHost !== undefined) t.is(seen.host, c.backendHost, `${at}: Host the backend saw`);
      for (const [k, v] of Object.entries(c.backendHeaders ?? {}))
        t.is(seen[k], v, `${at}: backend header ${k}`);
      for (const k of c.absentBackendHeaders ?? [])
        t.is(seen[k], undefined, `${at}: backend header ${k} absent`);
      if (c.mirroredTo) {
        // The copy is sent once the request is complete and is not waited for: poll briefly.
        const mirror = appOf(c.mirroredTo);
        const deadline = Date.now() + 2000;
        while (mirror.last === undefined && Date.now() < deadline)
          await new Promise((r) => setTimeout(r, 10));
        t.truthy(mirror.last, `${at}: mirrored to ${c.mirroredTo}`);
        for (const [k, v] of Object.entries(c.backendHeaders ?? {}))
          t.is(mirror.last?.[k], v, `${at}: mirror header ${k}`);
      }
      for (const [k, v] of Object.entries(c.responseHeaders ?? {}))
        t.is(res.headers[k], v, `${at}: response header ${k}`);
      for (const k of c.absentResponseHeaders ?? [])
        t.is(res.headers[k], undefined, `${at}: response header ${k} absent`);
    }
  });
}

test.serial(
  'the table ports at least 60 upstream requests and says why each left-out case is left out',
  (t) => {
    const total = SUITES.reduce((n, s) => n + s.cases.length, 0);
    // The bypass table and the gRPC table are separate files; this counts HTTPRoute only.
    t.log(`${SUITES.length} suites, ${total} requests ported; ${SKIPPED.length} groups skipped`);
    for (const s of SKIPPED) t.log(`skipped ${s.name}: ${s.reason}`);
    t.true(total >= 60, `${total} requests`);
    t.true(SKIPPED.every((s) => s.reason.length > 20));
  },
);
