import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CertificateAuthority } from '@zmesh/shared';
import test from 'ava';
import { execa } from 'execa';
import { stringify } from 'yaml';
import { stopChild, waitReady, ZMESH_BIN } from './ztunnel-process.js';

/*
 * A workload connecting in a loop to a destination it is refused (here: outside the mesh,
 * passthrough denied) must not turn into a log storm. In the noisy-neighbor storm ztunnel
 * refused ~3,300 connects a second and logged a warning for each; the metrics count every
 * refusal, the log says it once per interval per source workload and error code, with how
 * many it left out.
 */

const ADDRESS = '127.0.77.3';
const POD = '127.0.78.101';
const REFUSED = 40;

/** Connects and waits for ztunnel's reset (or close): true when nothing came back. */
function refusedConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: POD, port });
    let got = 0;
    s.on('data', (d) => {
      got += d.length;
    });
    s.on('error', () => {});
    s.on('close', () => resolve(got === 0));
  });
}

test('refused connections are counted each and logged once per interval per source and code', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-refusals-'));
  const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
  await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
  await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
  await writeFile(
    join(dir, 'mesh.yaml'),
    stringify({
      workloads: [
        { name: 'app', namespace: 'refusals', serviceAccount: 'app', addresses: [POD], node: 'node-a' },
      ],
      // Nothing listens at the destination, and passthrough is denied: no byte goes there.
      forwards: [
        {
          workload: 'Kubernetes//Pod/refusals/app',
          listen: `${POD}:16298`,
          destination: '127.0.78.250:5201',
        },
      ],
    }),
  );
  const child = execa(
    ZMESH_BIN,
    [
      'ztunnel',
      '--config',
      join(dir, 'mesh.yaml'),
      '--node',
      'node-a',
      '--address',
      ADDRESS,
      '--ca-dir',
      dir,
    ],
    { reject: false, stdout: 'ignore', stderr: 'pipe', env: { ZMESH_LOG: 'warn' } },
  );
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  try {
    await waitReady(ADDRESS);
    for (let i = 0; i < REFUSED; i++) t.true(await refusedConnect(16298), `connect ${i} got bytes back`);
    const metrics = await (await fetch(`http://${ADDRESS}:15020/metrics`)).text();
    const counted = Number(
      /^zmesh_errors_total\{code="ZM_ERR_ROUTE_NO_DESTINATION"[^}]*\} (\d+)/m.exec(metrics)?.[1] ?? 0,
    );
    t.is(counted, REFUSED, 'every refusal is counted');
    const lines = stderr
      .split('\n')
      .filter((l) => l.includes('"connection refused"'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    t.is(lines.length, 1, stderr.slice(0, 2000));
    t.like(lines[0], {
      code: 'ZM_ERR_ROUTE_NO_DESTINATION',
      src: 'spiffe://cluster.local/ns/refusals/sa/app',
    });
  } finally {
    await stopChild(child);
    await rm(dir, { recursive: true, force: true });
  }
});
