import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { AdminTarget } from '@zmesh/shared';
import { execa, type ResultPromise } from 'execa';

/** Why etcd cannot run here (the Debian package bootstrap installs is missing), or undefined. */
export function etcdUnavailable(): string | undefined {
  try {
    execFileSync('etcd', ['--version'], { stdio: 'ignore' });
    return undefined;
  } catch {
    return 'etcd is not installed (Debian etcd-server; scripts/bootstrap.sh installs it as root)';
  }
}

interface EtcdMember {
  name: string;
  /** host:port of its client URL. */
  client: string;
  child: ResultPromise;
}

export interface EtcdCluster {
  members: EtcdMember[];
  /** `etcd://a,b,c` for `--store`. */
  url: string;
  /** The member that leads now (asked through etcd's JSON gateway). */
  leader(): Promise<EtcdMember>;
  /** SIGKILLs one member (by pid) and waits for it to exit. */
  kill(member: EtcdMember): Promise<void>;
  /** Kills every member still running and removes the data directories. */
  stop(): Promise<void>;
}

async function freePort(host: string): Promise<number> {
  const server = createServer();
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(0, host, ok);
  });
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

/**
 * A `size`-member etcd cluster on loopback `host`, each member with free ports and its own
 * data directory under one temporary directory. Resolves once every member answers; on any
 * failure to start, what did start is killed before the error is thrown.
 */
export async function startEtcdCluster(host: string, size = 3): Promise<EtcdCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-etcd-'));
  const specs = [];
  for (let i = 0; i < size; i++)
    specs.push({ name: `m${i}`, clientPort: await freePort(host), peerPort: await freePort(host) });
  const initial = specs.map((s) => `${s.name}=http://${host}:${s.peerPort}`).join(',');
  const members: EtcdMember[] = specs.map((s) => {
    const client = `http://${host}:${s.clientPort}`;
    const peer = `http://${host}:${s.peerPort}`;
    const child = execa(
      'etcd',
      [
        ...['--name', s.name, '--data-dir', join(dir, s.name)],
        ...['--listen-client-urls', client, '--advertise-client-urls', client],
        ...['--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer],
        ...['--initial-cluster', initial, '--initial-cluster-state', 'new'],
        ...['--initial-cluster-token', `zmesh-test-${process.pid}`],
        // Loopback: short heartbeats make a lost leader replaced in well under a second.
        ...['--heartbeat-interval', '50', '--election-timeout', '500'],
        ...['--log-level', 'error'],
      ],
      { reject: false, stdin: 'ignore', stdout: 'ignore', stderr: 'pipe' },
    );
    return { name: s.name, client: `${host}:${s.clientPort}`, child };
  });
  const gateway = async (m: EtcdMember, path: string, body = '{}') => {
    const res = await fetch(`http://${m.client}${path}`, { method: 'POST', body });
    if (!res.ok) throw new Error(`${m.name} ${path}: ${res.status}`);
    return (await res.json()) as { header: { member_id: string }; leader?: string };
  };
  const alive = new Set(members);
  const cluster: EtcdCluster = {
    members,
    url: `etcd://${members.map((m) => m.client).join(',')}`,
    leader: async () => {
      for (const m of alive) {
        const status = await gateway(m, '/v3/maintenance/status').catch(() => undefined);
        if (status && status.leader === status.header.member_id) return m;
      }
      throw new Error('no etcd member says it leads');
    },
    kill: async (m) => {
      alive.delete(m);
      m.child.kill('SIGKILL');
      await m.child;
    },
    stop: async () => {
      for (const m of alive) m.child.kill('SIGKILL');
      await Promise.allSettled(members.map((m) => m.child));
      alive.clear();
      await rm(dir, { recursive: true, force: true });
    },
  };
  try {
    const deadline = Date.now() + 20_000;
    for (const m of members) {
      // A linearizable read: answered only once the cluster has a leader.
      while (
        !(await gateway(m, '/v3/kv/range', '{"key":"eg=="}').then(
          () => true,
          () => false,
        ))
      ) {
        if (m.child.exitCode !== null) throw new Error(`etcd ${m.name} exited: ${(await m.child).stderr}`);
        if (Date.now() > deadline) throw new Error(`etcd ${m.name} did not answer within 20 s`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    return cluster;
  } catch (e) {
    await cluster.stop();
    throw e;
  }
}

const ZMESH = resolve(import.meta.dirname, '../../../bin/zmesh');

/** A `zmesh control-plane --store etcd://…` child. */
export interface Replica {
  name: string;
  xds: string;
  admin: AdminTarget;
  roots: string;
  child: ResultPromise;
  alive: boolean;
}

/** `zmesh control-plane --store etcd://…`, resolved once it says where its admin socket is. */
export async function startReplica(name: string, host: string, store: string, dir: string): Promise<Replica> {
  const port = await freePort(host);
  const socket = join(dir, `${name}.sock`);
  const roots = join(dir, `${name}-roots.pem`);
  const child = execa(
    ZMESH,
    [
      ...['control-plane', '--store', store, '--no-state-dir'],
      ...['--host', host, '--port', String(port), '--admin-socket', socket, '--roots-file', roots],
    ],
    { reject: false, stdin: 'ignore', stdout: 'ignore', env: { ZMESH_LOG: 'error' } },
  );
  await new Promise<void>((ok, fail) => {
    let seen = '';
    const timer = setTimeout(() => fail(new Error(`replica ${name} did not start: ${seen}`)), 20_000);
    child.stderr?.on('data', (d: Buffer) => {
      seen += d.toString();
      if (seen.includes(`admin on unix:${socket}`)) {
        clearTimeout(timer);
        ok();
      }
    });
    void child.then((r) => fail(new Error(`replica ${name} exited ${r.exitCode}: ${seen}`)));
  });
  return { name, xds: `${host}:${port}`, admin: { admin: socket }, roots, child, alive: true };
}
