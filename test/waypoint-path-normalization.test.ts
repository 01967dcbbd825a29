import type { WaypointOptions } from '@zmesh/waypoint';
import test from 'ava';
import { h1Request, startWaypointMesh, type WaypointMesh } from './helpers/waypoint-fixture.js';

/**
 * Istio's three pathNormalization modes through the real waypoint (the bypass table,
 * test/waypoint-l7-bypass.test.ts, runs the default BASE): one normalization decides both
 * the DENY on /admin* and the path the app receives, and what a mode cannot normalize
 * (an encoded slash or backslash under BASE and MERGE_SLASHES) is refused, never forwarded.
 */

let mesh: WaypointMesh;

const DENY_ADMIN = `
authorizationPolicies:
  - name: deny-admin
    namespace: team-b
    targetRefs: [{ kind: Gateway, group: gateway.networking.k8s.io, name: waypoint }]
    action: DENY
    rules: [{ to: [{ operation: { paths: ["/admin*"] } }] }]
`;

test.before(async () => {
  mesh = await startWaypointMesh(149);
});

test.after.always(async () => {
  await mesh?.stop();
});

/** Status, and the path the app saw when it was reached. */
async function get(path: string): Promise<string> {
  for (const a of [mesh.apps.v1, mesh.apps.v2]) delete a.last;
  const r = await h1Request(mesh.ip.client, mesh.port.client, { path });
  if (r.status !== 200) return String(r.status);
  return `200 ${(JSON.parse(r.body) as { url: string }).url}`;
}

type PathNormalization = NonNullable<WaypointOptions['pathNormalization']>;

const ROWS: Array<[string, Record<PathNormalization, string>]> = [
  ['/public', { BASE: '200 /public', MERGE_SLASHES: '200 /public', DECODE_AND_MERGE_SLASHES: '200 /public' }],
  ['/%61dmin', { BASE: '403', MERGE_SLASHES: '403', DECODE_AND_MERGE_SLASHES: '403' }],
  ['/public/../admin', { BASE: '403', MERGE_SLASHES: '403', DECODE_AND_MERGE_SLASHES: '403' }],
  // Istio: "//admin" is not "/admin*" under BASE; the app gets the path as it is.
  ['//admin', { BASE: '200 //admin', MERGE_SLASHES: '403', DECODE_AND_MERGE_SLASHES: '403' }],
  ['/x//y', { BASE: '200 /x//y', MERGE_SLASHES: '200 /x/y', DECODE_AND_MERGE_SLASHES: '200 /x/y' }],
  ['/public%2F..%2Fadmin', { BASE: '400', MERGE_SLASHES: '400', DECODE_AND_MERGE_SLASHES: '403' }],
  ['/public%5c..%5cadmin', { BASE: '400', MERGE_SLASHES: '400', DECODE_AND_MERGE_SLASHES: '403' }],
  ['/a/%2f/b', { BASE: '400', MERGE_SLASHES: '400', DECODE_AND_MERGE_SLASHES: '200 /a/b' }],
];

for (const mode of ['BASE', 'MERGE_SLASHES', 'DECODE_AND_MERGE_SLASHES'] as const) {
  test.serial(`${mode}: policy and route read the same normalized path`, async (t) => {
    await mesh.waypoint.stop();
    mesh.waypoint = await mesh.startWaypoint(mesh.config(DENY_ADMIN), { pathNormalization: mode });
    for (const [path, want] of ROWS) t.is(await get(path), want[mode], `${mode} ${path}`);
  });
}
