import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { adminRequest } from '@zmesh/shared';
import test from 'ava';
import { execa } from 'execa';
import { CP_IP, createNetnsPair, getIn, netnsPairUnavailable, PX_IP } from './helpers/netns-pair.js';

/**
 * The control plane off loopback (docs/xds.md, Transport): in one of two network namespaces
 * joined by a veth pair (10.255.0.1 ↔ 10.255.0.2, the harness's fabric range, in namespaces
 * of this test only), serving xDS and the CA with TLS; a ztunnel in the other namespace gets
 * its config and a certificate over that address, after failing over from a plaintext
 * server and from a control plane of another root, both refused with ZM_ERR_XDS_TLS_REFUSED.
 */
const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');
const DNS = 'zmesh-control-plane.zmesh-system.svc';

const CONFIG = `apiVersion: v1
kind: Namespace
metadata: { name: team-b, labels: { istio.io/dataplane-mode: ambient } }
---
kind: Pod
metadata: { name: server, namespace: team-b, labels: { app: server } }
spec: { serviceAccountName: server, nodeName: node-a }
status: { podIP: 10.244.9.5 }
`;

const skip = netnsPairUnavailable();

async function poll(cond: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 100));
  }
}

(skip ? test.skip : test)(
  `control plane on a netns address serves TLS; ztunnel verifies it, refuses another root and plaintext, fails over${skip ? ` (skipped: ${skip})` : ''}`,
  async (t) => {
    const { cpNs, pxNs, dir, started } = await createNetnsPair(t, 'tls');
    await mkdir(join(dir, 'cfg'));
    await writeFile(join(dir, 'cfg', 'mesh.yaml'), CONFIG);
    const inCp = (args: string[]) =>
      execa('ip', ['netns', 'exec', cpNs, ZMESH, ...args], { reject: false, all: true });

    // Plaintext on a non-loopback address: refused at start, one line, nothing left behind.
    const plain = await inCp([
      'control-plane',
      '--host',
      CP_IP,
      '--port',
      '15010',
      '--no-state-dir',
      '--admin-socket',
      join(dir, 'plain.sock'),
    ]);
    t.is(plain.exitCode, 1);
    t.regex(plain.stderr, /ZM_ERR_XDS_BIND_REFUSED/);
    t.is(plain.stderr.trim().split('\n').length, 1, plain.stderr);

    const controlPlane = (name: string, port: number) => {
      const p = inCp([
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
        join(dir, `${name}-ca`),
        '--roots-file',
        join(dir, `${name}-roots.pem`),
        '--no-state-dir',
      ]);
      started.push(p);
      return join(dir, `${name}.sock`);
    };
    const admin = controlPlane('good', 15010);
    // A control plane of another mesh (its own root) where the ztunnel looks first.
    const otherAdmin = controlPlane('other', 15011);
    // And a plaintext HTTP/2 server before it.
    started.push(
      execa(
        'ip',
        [
          'netns',
          'exec',
          cpNs,
          process.execPath,
          '-e',
          `require('node:http2').createServer(()=>{}).listen(15012, ${JSON.stringify(CP_IP)})`,
        ],
        { reject: false },
      ),
    );
    for (const a of [admin, otherAdmin])
      await poll(
        async () => (await adminRequest({ admin: a }, '/healthz').catch(() => undefined))?.ok === true,
      );
    const { token } = (await adminRequest({ admin }, '/node-token?node=node-a', { method: 'POST' })).json<{
      token: string;
    }>();
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
        `${CP_IP}:15012,${CP_IP}:15011,${CP_IP}:15010`,
        '--xds-backoff',
        '100:200',
        '--node',
        'node-a',
        '--address',
        PX_IP,
        '--token-file',
        join(dir, 'token'),
        '--roots-file',
        join(dir, 'good-roots.pem'),
      ],
      // make test runs with ZMESH_LOG=error; the refusals asserted below are warn lines.
      { reject: false, all: true, env: { ZMESH_LOG: 'warn' } },
    );
    started.push(ztunnel);
    type Dump = { workloads: unknown[]; certificates: Array<{ notAfter?: string }> };
    let dump: Dump | undefined;
    await poll(async () => {
      const text = await getIn(pxNs, `http://${PX_IP}:15000/config_dump`);
      dump = text ? (JSON.parse(text) as Dump) : undefined;
      return (dump?.certificates[0]?.notAfter ?? '') !== '' && (dump?.workloads.length ?? 0) > 0;
    });
    t.is(dump?.workloads.length, 1);
    const metrics = (await getIn(pxNs, `http://${PX_IP}:15020/metrics`)) ?? '';
    const refusals = Number(/^zmesh_xds_tls_refusals_total (\d+)/m.exec(metrics)?.[1] ?? 0);
    t.true(refusals >= 2, `zmesh_xds_tls_refusals_total ${refusals}`);
    ztunnel.kill('SIGTERM');
    const out = (await ztunnel).all ?? '';
    t.regex(out, /ZM_ERR_XDS_TLS_REFUSED.*10\.255\.0\.1:15011/);
    t.regex(out, /ZM_ERR_XDS_TLS_REFUSED.*10\.255\.0\.1:15012/);
  },
);
