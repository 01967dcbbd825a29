import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { adminRequest } from '@zmesh/shared';
import test from 'ava';
import { execa } from 'execa';
import { CP_IP, createNetnsPair, getIn, netnsPairUnavailable, PX_IP } from './helpers/netns-pair.js';

/**
 * The mesh root rotates while a ztunnel runs (docs/xds.md, Transport): the control plane, off
 * loopback (TLS) in a network namespace of this test, restarts under a new root (another
 * `--ca-dir`, the same `--state-dir`, so node tokens stay valid) and rewrites the roots file.
 * The ztunnel, in the other namespace and never restarted, follows the file: its xDS client
 * and its CA client both dial with the new roots, so the certificate of a workload that
 * appears after the rotation is issued over TLS. A control plane of another root (not in the
 * roots file) is refused by the CA client and by the xDS client throughout.
 */
const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');
const DNS = 'zmesh-control-plane.zmesh-system.svc';

const pod = (name: string) => `apiVersion: v1
kind: Pod
metadata: { name: ${name}, namespace: team-b, labels: { app: ${name} } }
spec: { serviceAccountName: ${name}, nodeName: node-a }
status: { podIP: 10.244.9.${name === 'server' ? 5 : 6} }
`;
const NAMESPACE = `apiVersion: v1
kind: Namespace
metadata: { name: team-b, labels: { istio.io/dataplane-mode: ambient } }
`;

const skip = netnsPairUnavailable();

async function poll(cond: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

(skip ? test.skip : test)(
  `a rotated mesh root is trusted by the running ztunnel's CA client; another root is still refused${skip ? ` (skipped: ${skip})` : ''}`,
  async (t) => {
    const { cpNs, pxNs, dir, started } = await createNetnsPair(t, 'rot');
    await mkdir(join(dir, 'cfg'));
    await writeFile(join(dir, 'cfg', 'mesh.yaml'), `${NAMESPACE}---\n${pod('server')}`);
    const roots = join(dir, 'roots.pem');

    /** A control plane in cpNs; `root` names its CA directory (its root), `roots` where it publishes it. */
    const controlPlane = (name: string, port: number, root: string, rootsFile: string) => {
      const p = execa(
        'ip',
        [
          'netns',
          'exec',
          cpNs,
          ZMESH,
          'control-plane',
          '-c',
          join(dir, 'cfg'),
          '--host',
          CP_IP,
          '--port',
          String(port),
          '--serving-dns',
          DNS,
          '--admin-socket',
          join(dir, `${name}.sock`),
          '--ca-dir',
          join(dir, root),
          '--roots-file',
          rootsFile,
          '--state-dir',
          join(dir, `${name === 'other' ? 'other' : 'mesh'}-state`),
        ],
        { reject: false, all: true },
      );
      started.push(p);
      return { proc: p, admin: join(dir, `${name}.sock`) };
    };
    const healthy = (admin: string) =>
      poll(
        async () => (await adminRequest({ admin }, '/healthz').catch(() => undefined))?.ok === true,
        `${admin} healthy`,
      );
    const first = controlPlane('first', 15010, 'root-1', roots);
    // Another mesh's control plane (its own root, published elsewhere), where the ztunnel looks first.
    const other = controlPlane('other', 15011, 'root-other', join(dir, 'other-roots.pem'));
    await Promise.all([healthy(first.admin), healthy(other.admin)]);
    const { token } = (
      await adminRequest({ admin: first.admin }, '/node-token?node=node-a', { method: 'POST' })
    ).json<{ token: string }>();
    await writeFile(join(dir, 'token'), token);

    const ztunnel = execa(
      'ip',
      [
        'netns',
        'exec',
        pxNs,
        ZMESH,
        'ztunnel',
        '--xds',
        `${CP_IP}:15011,${CP_IP}:15010`,
        '--xds-backoff',
        '100:200',
        '--node',
        'node-a',
        '--address',
        PX_IP,
        '--token-file',
        join(dir, 'token'),
        '--roots-file',
        roots,
      ],
      // make test runs with ZMESH_LOG=error; the refusals asserted below are warn lines.
      { reject: false, all: true, env: { ZMESH_LOG: 'warn' } },
    );
    started.push(ztunnel);
    type Dump = { certificates: Array<{ identity: string; notAfter?: string }> };
    const certified = async (sa: string) => {
      const text = await getIn(pxNs, `http://${PX_IP}:15000/config_dump`);
      const dump = text ? (JSON.parse(text) as Dump) : undefined;
      return (
        dump?.certificates.some((c) => c.identity.endsWith(`/sa/${sa}`) && (c.notAfter ?? '') !== '') ?? false
      );
    };
    await poll(() => certified('server'), 'the first certificate');

    // Rotation: the control plane comes back under a new root, which it writes to the roots file.
    first.proc.kill('SIGTERM');
    await first.proc;
    await writeFile(join(dir, 'cfg', 'client.yaml'), pod('client'));
    const second = controlPlane('second', 15010, 'root-2', roots);
    await healthy(second.admin);
    // A workload that appears after the rotation: its certificate is asked for over TLS, of the new root.
    await poll(() => certified('client'), 'a certificate issued under the rotated root');

    ztunnel.kill('SIGTERM');
    const out = (await ztunnel).all ?? '';
    // The other mesh's root was never trusted: its address refused, by the CA client too.
    const refusals = out
      .split('\n')
      .filter((l) => /ZM_ERR_XDS_TLS_REFUSED/.test(l) && /10\.255\.0\.1:15011/.test(l));
    t.true(
      refusals.some((l) => /ca-client/.test(l)),
      `CA client refused the other root:\n${refusals.join('\n')}`,
    );
  },
);
