import * as http from 'node:http';
import test from 'ava';
import {
  type ConformanceCase,
  PERCENTAGE_MIRROR,
  type PercentageMirrorCase,
  SKIPPED,
  SUITES,
} from './conformance/httproute-cases.js';
import { h1Request, startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

/**
 * The Gateway API HTTPRoute conformance table (test/conformance/httproute-cases.ts) through
 * the real path: client → source ztunnel → HBONE → waypoint → HBONE → destination ztunnel →
 * app, one waypoint config per upstream test, each request checked for the backend that
 * answered, the status, and the headers on both sides.
 */

let mesh: WaypointMesh;

/** mulberry32: a small seeded generator, so a count of random draws is the same every run. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/** The waypoint's random source (weights, faults, mirror shares): swapped by the tests below. */
let draw: () => number = seeded(36);

test.before(async () => {
  mesh = await startWaypointMesh(146, { random: () => draw() });
});

test.after.always(async () => {
  await mesh?.stop();
});

async function send(c: ConformanceCase, agent?: http.Agent) {
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
    ...(agent ? { agent } : {}),
  });
}

const appOf = (name: string) =>
  name === 'server-v1' ? mesh.apps.v1 : name === 'server-v2' ? mesh.apps.v2 : mesh.apps.v3;

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
        if (!c.reached)
          t.is(
            mesh.apps.v1.last ?? mesh.apps.v2.last ?? mesh.apps.v3.last,
            undefined,
            `${at}: no backend saw it`,
          );
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
      for (const to of [c.mirroredTo ?? []].flat()) {
        // The copy is sent once the request is complete and is not waited for: poll briefly.
        const mirror = appOf(to);
        const deadline = Date.now() + 2000;
        while (mirror.last === undefined && Date.now() < deadline)
          await new Promise((r) => setTimeout(r, 10));
        t.truthy(mirror.last, `${at}: mirrored to ${to}`);
        for (const [k, v] of Object.entries(c.backendHeaders ?? {}))
          t.is(mirror.last?.[k], v, `${at}: ${to} mirror header ${k}`);
        for (const k of c.absentBackendHeaders ?? [])
          t.is(mirror.last?.[k], undefined, `${at}: ${to} mirror header ${k} absent`);
      }
      for (const [k, v] of Object.entries(c.responseHeaders ?? {}))
        t.is(res.headers[k], v, `${at}: response header ${k}`);
      for (const k of c.absentResponseHeaders ?? [])
        t.is(res.headers[k], undefined, `${at}: response header ${k} absent`);
    }
  });
}

/**
 * Sends the request `n` times, `parallel` at a time on kept-alive connections (as the
 * upstream suite's client does); each must be answered 200 by server-v1.
 */
async function sendMany(c: PercentageMirrorCase, n: number, parallel = 8): Promise<string[]> {
  const wrong: string[] = [];
  const agent = new http.Agent({ keepAlive: true, maxSockets: parallel });
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      const res = await send({ request: c.request }, agent);
      const app = res.status === 200 ? (JSON.parse(res.body) as { app: string }).app : '';
      if (app !== 'server-v1') wrong.push(`${res.status} ${res.body.slice(0, 300)}`);
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
  agent.destroy();
  return wrong;
}

/** Copies go out once each request is complete, not waited for: read the count once it holds still. */
async function settledHits(app: { hits: number }, quietMs = 300): Promise<number> {
  let last = app.hits;
  let since = Date.now();
  const deadline = Date.now() + 5000;
  while (Date.now() - since < quietMs && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
    if (app.hits !== last) {
      last = app.hits;
      since = Date.now();
    }
  }
  return last;
}

const PER_CASE = 300;

test.serial(
  `HTTPRouteRequestPercentageMirror (${PERCENTAGE_MIRROR.cases.length} requests × ${PER_CASE}, copies counted)`,
  async (t) => {
    mesh.waypoint.setConfig(mesh.config(`httpRoutes:${PERCENTAGE_MIRROR.routes}`));
    draw = seeded(0x36);
    for (const c of PERCENTAGE_MIRROR.cases) {
      const at = c.request.path;
      const mirrors = [
        { app: mesh.apps.v2, percent: c.percent },
        { app: mesh.apps.v3, percent: c.percentV3 ?? 0 },
      ];
      const before = await Promise.all(mirrors.map((m) => settledHits(m.app, 50)));
      for (const app of Object.values(mesh.apps)) delete app.last;
      t.deepEqual(await sendMany(c, PER_CASE), [], `${at}: every request answered by server-v1`);
      for (const [i, { app, percent }] of mirrors.entries()) {
        const mirrored = (await settledHits(app)) - before[i]!;
        // Binomial: the count of copies for a share p of n requests has mean np and standard
        // deviation sqrt(np(1-p)); 4 of them is a bound a correct sampler misses once in ~16,000.
        const p = percent / 100;
        const mean = PER_CASE * p;
        const bound = 4 * Math.sqrt(PER_CASE * p * (1 - p));
        t.log(
          `${at}: ${mirrored} of ${PER_CASE} copied to ${app.name} (${percent}% is ${mean} ± ${bound.toFixed(1)})`,
        );
        t.true(
          Math.abs(mirrored - mean) <= bound,
          `${at}: ${mirrored} copies to ${app.name}, want ${mean} ± ${bound.toFixed(1)}`,
        );
      }
      const reached = [mesh.apps.v1, ...mirrors.filter((m) => m.percent > 0).map((m) => m.app)];
      for (const app of reached) {
        for (const [k, v] of Object.entries(c.backendHeaders ?? {}))
          t.is(app.last?.[k], v, `${at}: ${app.name} header ${k}`);
        for (const k of c.absentBackendHeaders ?? [])
          t.is(app.last?.[k], undefined, `${at}: ${app.name} header ${k} absent`);
      }
    }
  },
);

test.serial(
  'a mirror share is drawn per request: a draw under the share copies, one at it does not; 0 never, 100 always',
  async (t) => {
    const mirror = (path: string, share: string) => `
      - matches: [{ path: { type: PathPrefix, value: ${path} } }]
        filters: [{ type: RequestMirror, requestMirror: { backendRef: { name: server-v2, port: 80 }${share} } }]
        backendRefs: [{ name: server-v1, port: 80 }]`;
    mesh.waypoint.setConfig(
      mesh.config(`httpRoutes:
  - name: shares
    parentRefs: [{ name: server, port: 80 }]
    rules:${mirror('/twenty', ', percent: 20')}${mirror('/third', ', fraction: { numerator: 1, denominator: 3 }')}${mirror('/never', ', percent: 0')}${mirror('/always', ', percent: 100')}`),
    );
    const copies = async (path: string, n: number, value?: number) => {
      draw = value === undefined ? seeded(7) : () => value;
      const before = await settledHits(mesh.apps.v2, 50);
      t.deepEqual(await sendMany({ request: { path }, percent: 0 }, n, 4), [], path);
      return (await settledHits(mesh.apps.v2)) - before;
    };
    t.is(await copies('/twenty', 10, 0.1999), 10, 'draw 0.1999 < 20%: every request copied');
    t.is(await copies('/twenty', 10, 0.2), 0, 'draw 0.2 is not under 20%: none');
    t.is(await copies('/third', 10, 0.3333), 10, '1/3: 0.3333 is under');
    t.is(await copies('/third', 10, 0.33334), 0, '1/3: 0.33334 is not');
    t.is(await copies('/never', 60), 0, 'percent 0: never, whatever is drawn');
    t.is(await copies('/always', 60), 60, 'percent 100: always');
    t.is(await copies('/always', 10, 0.99999), 10);
    draw = seeded(36);
  },
);

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
