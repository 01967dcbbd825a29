import { writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { CertificateAuthority } from '@zmesh/shared';
import { execa, type ResultPromise } from 'execa';
import { stringify } from 'yaml';
import { tempDir } from '../local/exit-cleanup.js';
import { startZtunnelProcess, stopChild, waitReady } from '../local/ztunnel-process.js';
import { principalLines } from '../report/principal-lines.js';
import { startHttpServer, startSinkServer } from './demo-servers.js';

const NODES = { 'node-a': '127.0.0.2', 'node-b': '127.0.0.3' } as const;
const CLIENT = '127.0.1.1';
const SERVER = '127.0.2.1';
const SERVICE_VIP = '127.96.0.10';
const BULK_BYTES = 64 * 1024 * 1024;

/**
 * `make demo` without root (explicit-proxy mode, docs/design.md §11): two ztunnels on their own loopback addresses, a client
 * workload on node-a and a server workload on node-b, real traffic through HBONE
 * (curl to a service VIP, a 64 MiB bulk transfer by pod IP), then what each side saw.
 */
export async function runExplicitDemo(): Promise<number> {
  const temp = tempDir('zmesh-demo-');
  const dir = temp.path;
  const children: ResultPromise[] = [];
  const servers: Array<{ close: () => void }> = [];
  try {
    const ca = await CertificateAuthority.create({ trustDomain: 'cluster.local' });
    await writeFile(join(dir, 'root-cert.pem'), ca.rootPem);
    await writeFile(join(dir, 'root-key.pem'), await ca.exportKeyPem(), { mode: 0o600 });
    await writeFile(join(dir, 'mesh.yaml'), stringify(meshConfig()));
    step('starting the workloads: an HTTP server and a bulk sink on node-b');
    servers.push(await startHttpServer(SERVER, 8080, 'server'), await startSinkServer(SERVER, 9000));
    for (const [node, address] of Object.entries(NODES)) {
      step(`starting ztunnel ${node} on ${address}`);
      children.push(startZtunnelProcess({ config: join(dir, 'mesh.yaml'), caDir: dir, node, address }));
    }
    await Promise.all(Object.values(NODES).map((a) => waitReady(a)));
    step(`curl http://${SERVICE_VIP}/ from the client (forward listener ${CLIENT}:18080 → service VIP)`);
    const curl = await execa('curl', ['-sS', '--max-time', '10', `http://${CLIENT}:18080/hello`], {
      reject: false,
    });
    console.log(`  ${(curl.stdout || curl.stderr).trim()}`);
    step(`bulk transfer: ${BULK_BYTES / 1048576} MiB to ${SERVER}:9000 by pod IP`);
    const bulk = await bulkTransfer(CLIENT, 18081, BULK_BYTES);
    console.log(
      `  sent ${bulk.sent} bytes, the server counted ${bulk.counted}, ${bulk.mibPerSec.toFixed(1)} MiB/s`,
    );
    for (const [node, address] of Object.entries(NODES)) {
      step(`what ${node} saw (istio_tcp_connections_opened_total from :15020/metrics)`);
      for (const line of principalLines(await (await fetch(`http://${address}:15020/metrics`)).text()))
        console.log(`  ${line}`);
    }
    const ok = curl.exitCode === 0 && bulk.counted === BULK_BYTES;
    step(ok ? 'demo passed: traffic crossed the mesh with mutual TLS both ways' : 'demo FAILED');
    return ok ? 0 : 1;
  } finally {
    await Promise.all(children.map((c) => stopChild(c)));
    for (const s of servers) s.close();
    temp.remove();
  }
}

function meshConfig(): unknown {
  const workload = (name: string, ip: string, node: string) => ({
    name,
    namespace: 'demo',
    serviceAccount: name,
    addresses: [ip],
    node,
    services:
      name === 'server'
        ? { 'demo/server.demo.svc.cluster.local': [{ servicePort: 80, targetPort: 8080 }] }
        : {},
  });
  return {
    workloads: [workload('client', CLIENT, 'node-a'), workload('server', SERVER, 'node-b')],
    services: [
      {
        name: 'server',
        namespace: 'demo',
        addresses: [SERVICE_VIP],
        ports: [{ servicePort: 80, targetPort: 8080 }],
      },
    ],
    forwards: [
      {
        workload: 'Kubernetes//Pod/demo/client',
        listen: `${CLIENT}:18080`,
        destination: `${SERVICE_VIP}:80`,
      },
      { workload: 'Kubernetes//Pod/demo/client', listen: `${CLIENT}:18081`, destination: `${SERVER}:9000` },
    ],
  };
}

function bulkTransfer(
  host: string,
  port: number,
  bytes: number,
): Promise<{ sent: number; counted: number; mibPerSec: number }> {
  return new Promise((resolvePromise, reject) => {
    const started = process.hrtime.bigint();
    const socket = connect({ host, port, allowHalfOpen: true });
    const chunk = Buffer.alloc(1 << 20, 0x5a);
    let sent = 0;
    let reply = '';
    const pump = (): void => {
      while (sent < bytes) {
        sent += chunk.length;
        if (!socket.write(chunk)) return void socket.once('drain', pump);
      }
      socket.end();
    };
    socket.once('connect', pump);
    socket.on('data', (d: Buffer) => {
      reply += d.toString();
    });
    socket.once('end', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      resolvePromise({ sent, counted: Number(reply.trim()), mibPerSec: bytes / 1048576 / seconds });
    });
    socket.once('error', reject);
  });
}

function step(text: string): void {
  console.log(`\n▶ ${text}`);
}
