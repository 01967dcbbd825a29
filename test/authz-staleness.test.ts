import { connect } from 'node:net';
import { startMesh, waitFor, type XdsMesh } from '@zmesh/harness';
import { isPeerAuthenticationPolicy } from '@zmesh/shared';
import test from 'ava';
import { echoes, startEcho } from './helpers/probes.js';

/**
 * docs/design.md §5, authorization through a control-plane outage: policies stay last-known-good up
 * to the staleness bound; past it, new connections to a destination with an enforced policy
 * are refused, while one without any policy keeps working and live connections run on.
 * Explicit-proxy mode on loopback (no root needed).
 */
/** 127.73.0.0/16 is this file's. */
const BLOCK = 73;
const ip = (s: string) => `127.${BLOCK}.${s}`;
const STALENESS_MS = 1500;
let mesh: XdsMesh;
let echo: Awaited<ReturnType<typeof startEcho>>;
let open: Awaited<ReturnType<typeof startEcho>>;

test.before(async () => {
  mesh = await startMesh({
    run: 'in-process',
    block: BLOCK,
    forwards: [
      { port: 18000, to: `${ip('2.1')}:7000` },
      { port: 18001, to: `${ip('3.1')}:7000` },
    ],
    controlPlane: {
      authzMaxStalenessMs: STALENESS_MS,
      extraDocs: [
        {
          kind: 'Namespace',
          metadata: { name: 'team-c', labels: { 'istio.io/dataplane-mode': 'ambient' } },
        },
        {
          kind: 'Pod',
          metadata: { name: 'open', namespace: 'team-c', labels: { app: 'open' } },
          spec: { serviceAccountName: 'open', nodeName: 'node-b' },
          status: { podIP: ip('3.1') },
        },
        {
          apiVersion: 'security.istio.io/v1',
          kind: 'AuthorizationPolicy',
          metadata: { name: 'allow-team-a', namespace: 'team-b' },
          spec: { action: 'ALLOW', rules: [{ from: [{ source: { namespaces: ['team-a'] } }] }] },
        },
      ],
    },
  });
  echo = await startEcho(ip('2.1'), 7000);
  open = await startEcho(ip('3.1'), 7000);
  await waitFor(
    () =>
      mesh.nodes.b.z.authorizer.store.list().filter((p) => !isPeerAuthenticationPolicy(p.name)).length === 1,
    5000,
  );
});

test.after.always(async () => {
  for (const s of [...(echo?.sockets ?? []), ...(open?.sockets ?? [])]) s.destroy();
  echo?.close();
  open?.close();
  await mesh?.stop();
});

test.serial(
  'past the staleness bound, new connections to a policy-protected destination fail closed',
  async (t) => {
    t.true(await echoes(ip('1.1'), 18000), 'allowed by policy while connected');
    const live = connect({ host: ip('1.1'), port: 18000 });
    await new Promise((r) => live.once('connect', r));
    await mesh.stopControlPlane();
    const stoppedAt = Date.now();
    t.true(await echoes(ip('1.1'), 18000), 'within the bound: last-known-good policy still admits');
    await new Promise((r) => setTimeout(r, Math.max(0, stoppedAt + STALENESS_MS + 300 - Date.now())));
    t.false(await echoes(ip('1.1'), 18000), 'stale policy: the new connection is refused');
    t.true(await echoes(ip('1.1'), 18001), 'a destination without policies is unaffected');
    const answered = await new Promise<boolean>((resolve) => {
      live.once('data', () => resolve(true));
      live.once('close', () => resolve(false));
      live.write('still here');
      setTimeout(() => resolve(false), 2000);
    });
    live.destroy();
    t.true(answered, 'the live connection is not cut for staleness alone');
    const refused = await mesh.nodes.b.z.metrics.registry
      .getSingleMetric('zmesh_authz_decisions_total')!
      .get();
    t.true(refused.values.some((v) => v.labels.reason === 'stale-policy' && v.value > 0));
  },
);
