import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tls from 'node:tls';
import { adminRequest } from '@zmesh/shared';
import { execa, type ResultPromise } from 'execa';
import { stringify } from 'yaml';
import { stopChild, ZMESH_BIN } from '../local/ztunnel-process.js';
import { clientForwards, startMesh } from '../mesh/mesh.js';
import { type FloodKind, type MeshPeerTarget, meshFlood, meshPeerTls, slowReader } from './mesh-peers.js';
import {
  type CpIncarnation,
  type CpRestart,
  type MeshPeerOutcome,
  PROXIES,
  type ProxyName,
  type ProxyTrend,
  type SoakReport,
} from './report.js';
import { cpLimits, judge, type SoakSample, type SoakSeries, soakLimits } from './verdict.js';

/** The soak's own loopback addresses (no other harness uses 127.44/16). */
const SOAK = {
  cp: '127.44.0.1',
  nodeA: '127.44.0.2',
  nodeB: '127.44.0.3',
  client: '127.44.1.1',
  server: '127.44.2.1',
  waypoint: '127.44.3.1',
  vip: '127.44.96.10',
  xdsPort: 25_930,
  serverPort: 7_070,
  forwardPort: 16_400,
  /** Inbound PING interval of the soak's ztunnels: a slow reader is closed 2–3 intervals in. */
  pingIntervalMs: 2000,
};

export interface SoakOptions {
  seconds: number;
  sampleMs?: number;
  /** Growth allowed per minute over the second half (defaults: `soakLimits(seconds)`). */
  limits?: Partial<Record<SoakSeries['name'], number>>;
  /** Control-plane restart period (default 180 s; a run shorter than two periods restarts once, a quarter in). */
  restartEverySeconds?: number;
  /** How the control plane is stopped: one signal, or SIGKILL and SIGTERM in turn (default), SIGKILL first. */
  restartSignal?: 'SIGTERM' | 'SIGKILL' | 'alternate';
  echo?: (line: string) => void;
}

/** A control plane not answering /healthz this long after its restart fails the restart. */
const CP_START_GIVE_UP_MS = 60_000;
/** A proxy not back on xDS this long after the signal fails the restart. */
const RECONNECT_GIVE_UP_MS = 90_000;
/** A control-plane incarnation shorter than this is reported, not judged (its second half is start-up). */
const CP_JUDGE_MIN_SECONDS = 60;

async function sample(pid: number, scrape: () => Promise<string>, t: number): Promise<SoakSample> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  const fds = (await readdir(`/proc/${pid}/fd`)).length;
  const text = await scrape();
  // Committed, not used: used climbs for minutes between major collections (a sawtooth
  // longer than a short run); committed grows only when what survives them needs room.
  const heapBytes = Number(/^nodejs_heap_size_total_bytes (\S+)/m.exec(text)?.[1] ?? Number.NaN);
  // prom-client resets the delay histogram at each scrape: this is the interval's p99.
  const loopDelay = Number(/^nodejs_eventloop_lag_p99_seconds (\S+)/m.exec(text)?.[1] ?? Number.NaN);
  return { t, rssBytes: rssKb * 1024, fds, heapBytes, loopDelay };
}

/** A proxy's xDS client from its metrics: streams ended (by gRPC status) and whether one is up. */
function xdsState(text: string): { ends: Record<string, number>; total: number; connected: boolean } {
  const ends: Record<string, number> = {};
  for (const m of text.matchAll(/^zmesh_xds_stream_ends_total\{[^}]*code="([^"]*)"[^}]*\} (\S+)$/gm))
    ends[m[1]!] = (ends[m[1]!] ?? 0) + Number(m[2]);
  const connected = /^zmesh_xds_connected(?:\{[^}]*\})? 1$/m.test(text);
  return { ends, total: Object.values(ends).reduce((x, y) => x + y, 0), connected };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * `zmesh harness soak`: a ztunnel pair on loopback (the loopback mesh the bench uses,
 * explicit-proxy mode) carries request/response traffic with connection churn while
 * hostile peers hit the server side's HBONE port (15008): pre-TLS idlers, garbage bytes,
 * TLS without a client certificate, HTTP/2 frames in plaintext, floods and slow readers with
 * a valid mesh certificate, and rapid connect/reset and slow workloads through the client
 * side's forward listener, while the control plane restarts. Both ztunnels' RSS, fds, V8 heap
 * and event-loop delay are sampled every `sampleMs`; the soak fails if one grows (the slope
 * of its floor over the second half above its limit, `judge`), if a ztunnel dies, if a flood
 * goes unanswered or a slow reader outlives its deadline, or if a good request fails.
 */
export async function runSoak(opts: SoakOptions): Promise<SoakReport> {
  const echo = opts.echo ?? (() => {});
  const limits = { ...soakLimits(opts.seconds), ...opts.limits };
  const sampleMs = opts.sampleMs ?? 2000;
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-soak-'));
  const children: ResultPromise[] = [];
  const sockets = new Set<net.Socket>();
  const track = <S extends net.Socket>(s: S): S => {
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
    return s;
  };
  const server = net.createServer((s) => track(s).pipe(s));
  let stopping = false;
  let cpArgv: string[] = [];
  const spawnZmesh = (argv: string[], name: string) =>
    execa(ZMESH_BIN, argv, {
      reject: false,
      stdin: 'ignore',
      stdout: 'ignore',
      stderr: { file: join(dir, `${name}.log`), append: true },
    });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(SOAK.serverPort, SOAK.server, resolve);
    });
    await mkdir(join(dir, 'cfg'));
    await writeFile(join(dir, 'cfg', 'mesh.yaml'), meshYaml());
    await writeFile(
      join(dir, 'forwards.yaml'),
      stringify(
        clientForwards({ name: 'soak-client', namespace: 'front', address: SOAK.client }, [
          { listen: `${SOAK.client}:${SOAK.forwardPort}`, destination: `${SOAK.vip}:${SOAK.serverPort}` },
        ]),
      ),
    );
    const lab = await startMesh({
      run: 'processes',
      children,
      dir,
      cp: SOAK.cp,
      xdsPort: SOAK.xdsPort,
      nodes: { 'node-a': SOAK.nodeA, 'node-b': SOAK.nodeB },
      forwards: join(dir, 'forwards.yaml'),
      waypoint: { gateway: 'back/waypoint', address: SOAK.waypoint },
      // Idlers are cut at 2 s instead of 10 s, so the soak reaches its steady state soon.
      // PINGs every 2 s, so a slow reader meets its deadline (twice that) within a short run.
      ztunnelArgs: ['--handshake-timeout-ms', '2000', '--ping-interval-ms', String(SOAK.pingIntervalMs)],
      readyTimeoutMs: 30_000,
      spawn: (argv, role, name) => {
        // The control plane restarts during the soak: its state (and so its node-token
        // key, which the ztunnels' tokens are bound to) must outlive the process.
        if (role === 'control-plane') {
          cpArgv = argv.map((a) => (a === '--no-state-dir' ? `--state-dir=${join(dir, 'state')}` : a));
          return spawnZmesh(cpArgv, name);
        }
        return spawnZmesh(argv, name);
      },
    });
    // children: control plane, node-a, node-b, waypoint; the control plane's entry changes at each restart.
    const proxy: Record<ProxyName, { child: ResultPromise; metricsUrl: string }> = {
      'node-a': { child: children[1]!, metricsUrl: `http://${SOAK.nodeA}:15020/metrics` },
      'node-b': { child: children[2]!, metricsUrl: `http://${SOAK.nodeB}:15020/metrics` },
      waypoint: { child: lab.waypoint, metricsUrl: `http://${SOAK.waypoint}:15020/metrics` },
    };
    const scrape = (name: ProxyName) => async () => (await fetch(proxy[name].metricsUrl)).text();
    const pid = proxy['node-b'].child.pid!;
    let died: string | undefined;
    for (const name of PROXIES) {
      void proxy[name].child.then((r) => {
        if (!stopping) died ??= `${name}: exit ${r.exitCode ?? r.signal}`;
      });
    }
    // The control plane may exit only when the soak signals it.
    let signalled: ResultPromise | undefined;
    const watchCp = (child: ResultPromise) =>
      void child.then((r) => {
        if (!stopping && child !== signalled) died ??= `control-plane: exit ${r.exitCode ?? r.signal}`;
      });
    watchCp(children[0]!);
    echo(`soak: ztunnel pair up (server side pid ${pid}); ${opts.seconds} s of traffic and hostile peers`);

    const traffic = { requests: 0, failed: 0, firstFailure: undefined as string | undefined };
    const hostile: Record<string, number> = {
      idlers: 0,
      garbage: 0,
      tlsNoCert: 0,
      plainH2: 0,
      resets: 0,
      slowApps: 0,
    };
    const loops: Promise<void>[] = [];
    const every = (ms: number, fn: () => Promise<void> | void) =>
      loops.push(
        (async () => {
          while (!stopping) {
            await Promise.resolve(fn()).catch(() => {});
            await new Promise((r) => setTimeout(r, ms));
          }
        })(),
      );
    // In explicit-proxy mode 15008 listens on every workload address of the node, not the node's.
    const hbone = { host: SOAK.server, port: 15008 };

    // Good traffic: a 1 KiB request/response on a fresh connection (churn), 4 at a time.
    const request = async () => {
      const payload = randomBytes(1024);
      const s = track(net.connect({ host: SOAK.client, port: SOAK.forwardPort }));
      try {
        const got = await new Promise<Buffer>((resolve, reject) => {
          const parts: Buffer[] = [];
          let n = 0;
          const timer = setTimeout(() => reject(new Error('no echo within 5 s')), 5000);
          s.on('connect', () => s.write(payload));
          s.on('data', (d: Buffer) => {
            parts.push(d);
            n += d.length;
            if (n >= payload.length) {
              clearTimeout(timer);
              resolve(Buffer.concat(parts));
            }
          });
          s.on('error', (e) => {
            clearTimeout(timer);
            reject(e);
          });
        });
        traffic.requests++;
        if (!got.equals(payload)) throw new Error('echo differs');
      } catch (e) {
        if (stopping) return;
        traffic.failed++;
        traffic.firstFailure ??= (e as Error).message;
      } finally {
        s.destroy();
      }
    };
    for (let i = 0; i < 4; i++) every(50, request);

    // Pre-TLS idlers: 40 plain TCP connections kept open (the server cuts them at 2 s).
    let idlers = 0;
    every(200, () => {
      while (idlers < 40) {
        idlers++;
        hostile.idlers!++;
        track(net.connect(hbone)).on('close', () => idlers--);
      }
    });
    // Garbage bytes instead of a TLS ClientHello.
    every(100, () => {
      hostile.garbage!++;
      const s = track(net.connect(hbone, () => s.end(randomBytes(4096))));
    });
    // HTTP/2 in plaintext: the preface and a SETTINGS flood where TLS is required.
    every(250, () => {
      hostile.plainH2!++;
      const settings = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);
      const s = track(
        net.connect(hbone, () =>
          s.end(
            Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), ...Array(500).fill(settings)]),
          ),
        ),
      );
    });
    // TLS without a client certificate (the server requires one).
    every(250, () => {
      hostile.tlsNoCert!++;
      const s = track(
        tls.connect({ ...hbone, rejectUnauthorized: false, ALPNProtocols: ['h2'] }, () => s.destroy()),
      );
    });
    // Rapid connect/reset through the client side's forward listener.
    every(50, () => {
      hostile.resets!++;
      const s = track(net.connect({ host: SOAK.client, port: SOAK.forwardPort }, () => s.resetAndDestroy()));
    });

    const mesh = await meshPeers(dir, every, () => stopping);
    const started = performance.now();
    const now = () => (performance.now() - started) / 1000;
    // The control plane restarts every `restartEverySeconds` (once, a quarter into a run
    // shorter than two periods, leaving time for a start that takes 10 s on a loaded
    // machine): killed by pid (SIGKILL and SIGTERM in turn), then started again on the same
    // state directory, CA and ports. The proxies keep serving from the config and
    // certificates they hold and reconnect; good traffic goes on throughout.
    const admin = lab.admin;
    const incarnations: CpIncarnation[] = [
      { pid: children[0]!.pid!, startedAt: 0, endedAt: opts.seconds, samples: [] },
    ];
    let cpUp = true;
    const restarts: CpRestart[] = [];
    const period = opts.restartEverySeconds ?? 180;
    const once = opts.seconds < 2 * period;
    const restartEvery = (once ? opts.seconds / 4 : period) * 1000;
    const signalFor = (n: number): CpRestart['signal'] =>
      opts.restartSignal === 'SIGTERM' || opts.restartSignal === 'SIGKILL'
        ? opts.restartSignal
        : n % 2 === 0
          ? 'SIGKILL'
          : 'SIGTERM';
    const restartCp = async (signal: CpRestart['signal']): Promise<CpRestart> => {
      const before = Object.fromEntries(
        await Promise.all(PROXIES.map(async (n) => [n, xdsState(await scrape(n)()).total] as const)),
      ) as Record<ProxyName, number>;
      const done = { requests: traffic.requests, failed: traffic.failed };
      const atSeconds = now();
      const signalledAt = performance.now();
      const old = children[0]!;
      signalled = old;
      cpUp = false;
      incarnations.at(-1)!.endedAt = atSeconds;
      if (signal === 'SIGKILL') {
        old.kill('SIGKILL');
        await old.catch(() => {});
      } else await stopChild(old);
      const fresh = spawnZmesh(cpArgv, 'control-plane');
      children[0] = fresh;
      watchCp(fresh);
      let downSeconds: number | null = null;
      while (performance.now() - signalledAt < CP_START_GIVE_UP_MS) {
        if ((await adminRequest(admin, '/healthz').catch(() => undefined))?.ok) {
          downSeconds = (performance.now() - signalledAt) / 1000;
          incarnations.push({ pid: fresh.pid!, startedAt: now(), endedAt: opts.seconds, samples: [] });
          cpUp = true;
          break;
        }
        await sleep(200);
      }
      const reconnectSeconds = Object.fromEntries(PROXIES.map((n) => [n, null])) as Record<
        ProxyName,
        number | null
      >;
      while (
        downSeconds !== null &&
        PROXIES.some((n) => reconnectSeconds[n] === null) &&
        performance.now() - signalledAt < RECONNECT_GIVE_UP_MS
      ) {
        for (const n of PROXIES) {
          if (reconnectSeconds[n] !== null) continue;
          const x = xdsState(await scrape(n)().catch(() => ''));
          if (x.connected && x.total > before[n])
            reconnectSeconds[n] = (performance.now() - signalledAt) / 1000;
        }
        // Each scrape resets the proxy's event-loop delay histogram: once a second keeps the
        // next sample's p99 over a second at least.
        await sleep(1000);
      }
      return {
        atSeconds,
        signal,
        downSeconds,
        reconnectSeconds,
        requestsWhileDown: traffic.requests - done.requests,
        failedWhileDown: traffic.failed - done.failed,
      };
    };
    let restarting: Promise<void> | undefined;
    loops.push(
      (async () => {
        for (let next = started + restartEvery; ; next += restartEvery) {
          while (!stopping && performance.now() < next) await sleep(200);
          // None at (or after) the run's end: the proxies would have no run left to reconnect in.
          if (stopping || (once && restarts.length > 0) || next - started >= opts.seconds * 1000) return;
          const signal = signalFor(restarts.length);
          echo(`  control plane: ${signal} to pid ${children[0]!.pid}`);
          restarting = restartCp(signal).then((r) => {
            restarts.push(r);
            const back = PROXIES.map((n) => `${n} ${r.reconnectSeconds[n]?.toFixed(1) ?? 'never'} s`).join(
              ', ',
            );
            echo(
              `  control plane restarted (${restarts.length}): healthz after ${r.downSeconds?.toFixed(1) ?? 'never'} s; reconnected ${back}; ${r.requestsWhileDown} good requests meanwhile, ${r.failedWhileDown} failed`,
            );
          });
          await restarting;
        }
      })(),
    );
    // A workload that writes 1 MiB through its forward listener and never reads the echo:
    // backpressure must hold it (no deadline: an application may be slow), 3 at a time for 5 s.
    let slowApps = 0;
    every(1000, () => {
      if (slowApps >= 3) return;
      slowApps++;
      hostile.slowApps!++;
      const s = track(
        net.connect({ host: SOAK.client, port: SOAK.forwardPort }, () => s.write(randomBytes(2 ** 20))),
      );
      s.pause();
      setTimeout(() => {
        slowApps--;
        s.destroy();
      }, 5000);
    });

    const samples = Object.fromEntries(PROXIES.map((n) => [n, [] as SoakSample[]])) as Record<
      ProxyName,
      SoakSample[]
    >;
    const cpScrape = async () => (await adminRequest(admin, '/metrics')).text;
    while (now() < opts.seconds && died === undefined) {
      await sleep(sampleMs);
      const t = now();
      const got: Partial<Record<ProxyName, SoakSample>> = {};
      for (const n of PROXIES) {
        got[n] = await sample(proxy[n].child.pid!, scrape(n), t).catch((e: Error) => {
          died ??= `${n} sampling failed: ${e.message}`;
          return undefined;
        });
      }
      if (died !== undefined) break;
      for (const n of PROXIES) samples[n].push(got[n]!);
      // The control plane only while it is up, into its own incarnation; a restart racing
      // the sample drops it.
      const incarnation = incarnations.at(-1)!;
      if (cpUp) {
        const c = await sample(incarnation.pid, cpScrape, t).catch(() => undefined);
        if (c !== undefined && cpUp && incarnations.at(-1) === incarnation) incarnation.samples.push(c);
      }
      const s = got['node-b']!;
      echo(
        `  ${t.toFixed(0).padStart(4)} s  node-b rss ${(s.rssBytes / 2 ** 20).toFixed(1)} MiB  fds ${s.fds}  heap ${(s.heapBytes / 2 ** 20).toFixed(1)} MiB  requests ${traffic.requests} (failed ${traffic.failed})  cp restarts ${restarts.length}`,
      );
    }
    // A restart under way finishes (its proxies reconnect or give up) while traffic still flows.
    await restarting;
    stopping = true;
    await Promise.all(loops);
    const proxies = {} as Record<ProxyName, ProxyTrend>;
    for (const n of PROXIES) {
      const x = xdsState(await scrape(n)().catch(() => ''));
      proxies[n] = {
        samples: samples[n],
        series: judge(samples[n], limits),
        xdsStreamEnds: x.ends,
        xdsConnected: x.connected,
      };
    }
    const last = incarnations.at(-1)!;
    last.endedAt = Math.max(last.startedAt, Math.min(last.endedAt, now()));
    for (const inc of incarnations) {
      const span = inc.endedAt - inc.startedAt;
      if (span >= CP_JUDGE_MIN_SECONDS && inc.samples.length >= 10)
        inc.series = judge(inc.samples, { ...cpLimits(span), ...opts.limits });
    }
    const reconnects = restarts.reduce(
      (sum, r) => sum + PROXIES.filter((n) => r.reconnectSeconds[n] !== null).length,
      0,
    );
    const meshPassed = mesh.unanswered === 0 && mesh.slowReadersHeld === 0;
    const restartsPassed =
      restarts.length > 0 &&
      restarts.every((r) => r.downSeconds !== null) &&
      reconnects === restarts.length * PROXIES.length;
    return {
      seconds: opts.seconds,
      proxies,
      traffic,
      hostile,
      mesh,
      controlPlane: { restarts, reconnects, incarnations },
      ...(died ? { died } : {}),
      passed:
        died === undefined &&
        traffic.failed === 0 &&
        traffic.requests > 0 &&
        meshPassed &&
        restartsPassed &&
        PROXIES.every((n) => proxies[n].xdsConnected && proxies[n].series.every((s) => s.passed)) &&
        incarnations.every((inc) => inc.series?.every((s) => s.passed) ?? true),
    };
  } finally {
    stopping = true;
    for (const s of sockets) s.destroy();
    await Promise.all(children.map((c) => stopChild(c)));
    await new Promise((r) => server.close(r));
    await rm(dir, { recursive: true, force: true });
  }
}

/** A slow reader not closed this long after it opened is held for good: the deadline failed. */
const SLOW_READER_GIVE_UP_MS = 6 * SOAK.pingIntervalMs;

/**
 * The authenticated hostile peers: a certificate for the client workload from the control
 * plane's CA, then on node-b's 15008 a rapid-reset and a CONTINUATION flood every 2 s, a
 * SETTINGS flood that reads no ACK every 4 s, and two slow readers at a time, each
 * waited for until ztunnel closes it. The outcome object fills in as they run.
 */
async function meshPeers(
  dir: string,
  every: (ms: number, fn: () => Promise<void> | void) => void,
  stopping: () => boolean,
): Promise<MeshPeerOutcome> {
  const td = 'cluster.local';
  const target: MeshPeerTarget = {
    host: SOAK.server,
    port: 15008,
    authority: `${SOAK.server}:${SOAK.serverPort}`,
    tls: await meshPeerTls(
      join(dir, 'ca'),
      td,
      `spiffe://${td}/ns/front/sa/soak-client`,
      `spiffe://${td}/ns/back/sa/soak-server`,
    ),
  };
  const out: MeshPeerOutcome = {
    floods: { rapidReset: 0, continuation: 0, settings: 0 },
    unanswered: 0,
    settingsClosed: 0,
    slowReaders: 0,
    slowReadersClosed: 0,
    slowestCloseMs: 0,
    slowReadersHeld: 0,
  };
  const flood = (kind: FloodKind) => async () => {
    out.floods[kind]++;
    const answered = await meshFlood(target, kind);
    if (kind === 'settings') out.settingsClosed += answered ? 1 : 0;
    else if (!answered && !stopping()) out.unanswered++;
  };
  every(2000, flood('rapidReset'));
  every(2000, flood('continuation'));
  every(4000, flood('settings'));
  const reader = async () => {
    out.slowReaders++;
    const closed = await slowReader(target, randomBytes(16 * 1024), SLOW_READER_GIVE_UP_MS, stopping);
    if (typeof closed === 'number') {
      out.slowReadersClosed++;
      out.slowestCloseMs = Math.max(out.slowestCloseMs, closed);
    } else if (closed === 'held') out.slowReadersHeld++;
  };
  every(500, reader);
  every(500, reader);
  return out;
}

function meshYaml(): string {
  const doc = (o: unknown) => stringify(o);
  const pod = (name: string, ns: string, node: string, ip: string, labels: Record<string, string>) =>
    doc({
      kind: 'Pod',
      metadata: { name, namespace: ns, labels },
      spec: { serviceAccountName: name, nodeName: node },
      status: { podIP: ip },
    });
  return [
    doc({ kind: 'Namespace', metadata: { name: 'front', labels: { 'istio.io/dataplane-mode': 'ambient' } } }),
    doc({ kind: 'Namespace', metadata: { name: 'back', labels: { 'istio.io/dataplane-mode': 'ambient' } } }),
    pod('soak-client', 'front', 'node-a', SOAK.client, { app: 'soak-client' }),
    pod('soak-server', 'back', 'node-b', SOAK.server, { app: 'soak-server' }),
    pod('waypoint', 'back', 'node-w', SOAK.waypoint, {
      'gateway.networking.k8s.io/gateway-name': 'waypoint',
    }),
    doc({
      kind: 'Gateway',
      metadata: { name: 'waypoint', namespace: 'back' },
      spec: { gatewayClassName: 'istio-waypoint', addresses: [{ value: SOAK.waypoint }] },
    }),
    doc({
      kind: 'Service',
      metadata: { name: 'soak-echo', namespace: 'back' },
      spec: {
        clusterIP: SOAK.vip,
        selector: { app: 'soak-server' },
        ports: [{ port: SOAK.serverPort, targetPort: SOAK.serverPort }],
      },
    }),
  ].join('---\n');
}
