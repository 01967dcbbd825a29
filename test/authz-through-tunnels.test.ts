import { connect } from 'node:net';
import { type Mesh, startMesh } from '@zmesh/harness';
import type { Workload } from '@zmesh/shared';
import { parseLocalConfig, type Ztunnel } from '@zmesh/ztunnel';
import { DECISION_TABLE, type DecisionCase } from '@zmesh/ztunnel/testing';
import test from 'ava';
import { startEcho } from './helpers/probes.js';

/**
 * The L4 decision table (packages/ztunnel/src/testing/decision-table.ts) run through real
 * HBONE tunnels: a source workload connects through its ztunnel, the destination ztunnel
 * decides on the identity from the client certificate and the tunnel's source address.
 * Explicit-proxy mode on loopback, so the table's 10.x addresses become 127.x; rows that
 * need a plaintext or IPv6 source have no loopback equivalent here and are counted apart.
 */
const toLoopback = <T>(value: T): T => JSON.parse(JSON.stringify(value).replace(/"10\./g, '"127.')) as T;
const SOURCES = { 'frontend/web': '127.1.0.10', 'batch/job': '127.1.0.20' } as const;
const SERVER_IP = '127.2.0.10';
const PORTS = [...new Set(DECISION_TABLE.map((c) => c.destination.port))];

function runnable(c: DecisionCase): boolean {
  return c.source.principal !== undefined && !c.source.ip.includes(':') && !c.destination.ip.includes(':');
}

function sourceKey(c: DecisionCase): keyof typeof SOURCES {
  const m = /\/ns\/([^/]+)\/sa\/([^/]+)$/.exec(c.source.principal!)!;
  return `${m[1]}/${m[2]}` as keyof typeof SOURCES;
}

const forwardPort = (src: keyof typeof SOURCES, port: number) =>
  20000 + (src === 'frontend/web' ? 0 : 1000) + (port % 1000);

const yaml = `
workloads:
  - { name: web, namespace: frontend, serviceAccount: web, addresses: [${SOURCES['frontend/web']}], node: node-a }
  - { name: job, namespace: batch, serviceAccount: job, addresses: [${SOURCES['batch/job']}], node: node-a }
  - { name: server, namespace: backend, serviceAccount: server, addresses: [${SERVER_IP}], node: node-b }
forwards:
${Object.entries(SOURCES)
  .flatMap(([key]) => {
    const [ns, name] = key.split('/');
    return PORTS.map(
      (p) =>
        `  - { workload: Kubernetes//Pod/${ns}/${name}, listen: "${SOURCES[key as keyof typeof SOURCES]}:${forwardPort(key as keyof typeof SOURCES, p)}", destination: "${SERVER_IP}:${p}" }`,
    );
  })
  .join('\n')}
`;

/** Resolves 'allow' when the echo came back through the tunnel, 'deny' when the connection was refused. */
function attempt(host: string, port: number): Promise<'allow' | 'deny'> {
  return new Promise((resolve) => {
    const s = connect({ host, port });
    const timer = setTimeout(() => {
      s.destroy();
      resolve('deny');
    }, 3000);
    s.once('data', () => {
      clearTimeout(timer);
      s.destroy();
      resolve('allow');
    });
    s.once('error', () => {
      clearTimeout(timer);
      resolve('deny');
    });
    s.once('close', () => {
      clearTimeout(timer);
      resolve('deny');
    });
    s.write('ping');
  });
}

let mesh: Mesh;
let b: Ztunnel;
let server: Workload;
let workloads: Workload[];
const echoes: Array<{ close: () => void }> = [];

test.before(async () => {
  const config = parseLocalConfig(yaml, 'authz-fixture');
  if (!config.ok) throw new Error(config.error.join('\n'));
  workloads = config.value.workloads;
  server = workloads.find((w) => w.name === 'server')!;
  // Proxies on 127.3.0.2 and .3; the workloads and forwards are this file's own.
  mesh = await startMesh({ run: 'in-process', block: 3, forwards: [], config: config.value });
  b = mesh.b;
  for (const p of PORTS) echoes.push(await startEcho(SERVER_IP, p));
});

test.after.always(async () => {
  for (const e of echoes) e.close();
  await mesh?.stop();
});

test.serial('the decision table through real tunnels: ≥ 40 cases, each as the evaluator says', async (t) => {
  const cases = DECISION_TABLE.filter(runnable);
  t.log(
    `${cases.length} of ${DECISION_TABLE.length} rows run through tunnels; the rest need a plaintext or IPv6 source`,
  );
  t.true(cases.length >= 40);
  for (const c of cases) {
    const applied = await b.applyConfig({
      workloads: workloads.map((w) =>
        w.uid === server.uid ? { ...w, authorizationPolicies: [...c.destination.policyNames] } : w,
      ),
      services: [],
      policies: toLoopback(c.policies),
    });
    t.true(applied.ok, c.name);
    const src = sourceKey(c);
    const seen = await attempt(SOURCES[src], forwardPort(src, c.destination.port));
    t.is(seen, c.expect, c.name);
  }
});

test.serial('a live connection is closed within 1 s when a DENY covering it is applied', async (t) => {
  await b.applyConfig({ workloads, services: [], policies: [] });
  const s = connect({ host: SOURCES['frontend/web'], port: forwardPort('frontend/web', 8080) });
  await new Promise<void>((resolve) => {
    s.once('data', () => resolve());
    s.write('hello');
  });
  const closed = new Promise<number>((resolve) => s.once('close', () => resolve(Date.now())));
  s.on('error', () => {});
  const applied = Date.now();
  await b.applyConfig({
    workloads,
    services: [],
    policies: [
      {
        name: 'no-web',
        namespace: 'backend',
        scope: 'NAMESPACE',
        action: 'DENY',
        rules: [{ clauses: [{ matches: [{ namespaces: [{ exact: 'frontend' }] }] }] }],
        dryRun: false,
      },
    ],
  });
  const closedAt = await closed;
  t.true(closedAt - applied < 1000, `closed after ${closedAt - applied} ms`);
  t.is(await attempt(SOURCES['frontend/web'], forwardPort('frontend/web', 8080)), 'deny');
  t.is(
    await attempt(SOURCES['batch/job'], forwardPort('batch/job', 8080)),
    'allow',
    'other sources unaffected',
  );
});

test.serial('an invalid policy set is refused whole and the active policies stay', async (t) => {
  await b.applyConfig({ workloads, services: [], policies: [] });
  const r = await b.applyConfig({
    workloads,
    services: [],
    policies: [{ name: 'bad', namespace: 'backend', action: 'MAYBE' }],
  });
  t.false(r.ok);
  t.is(await attempt(SOURCES['frontend/web'], forwardPort('frontend/web', 8080)), 'allow');
});
