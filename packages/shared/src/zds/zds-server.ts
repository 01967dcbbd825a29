import { chmodSync, closeSync, lstatSync, mkdirSync, openSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import { Counter, type Registry } from 'prom-client';
import { ZmeshError } from '../errors/index.js';
import { logger } from '../log/index.js';
import { closeFds, type ReceivedPacket, SeqpacketServer, SeqpacketSocket } from './seqpacket.js';
import {
  decodeAck,
  decodeHello,
  encodeRequest,
  ZDS_MAX_MESSAGE,
  type ZdsRequest,
  type ZdsWorkloadInfo,
} from './zds-messages.js';

const log = logger('zds');

/** A pod as the node agent knows it: its uid, the path of its network namespace, its names. */
export interface ZdsPod {
  uid: string;
  netnsPath: string;
  info?: ZdsWorkloadInfo;
}

export interface ZdsServerOptions {
  path: string;
  /** How long ztunnel has to acknowledge one request before the connection is dropped. */
  ackTimeoutMs?: number;
  /** How long a new connection has to send its ZdsHello. */
  helloTimeoutMs?: number;
  registry?: Registry;
}

interface Pending {
  req: ZdsRequest;
  netnsPath?: string;
  resolve: () => void;
  reject: (e: Error) => void;
}

/**
 * The node agent's side of Istio's ZDS (docs/zds.md): a SOCK_SEQPACKET server that ztunnels
 * connect to. Each ztunnel says ZdsHello first, then gets the snapshot (an AddWorkload with
 * the netns fd per pod, KeepWorkload for one whose netns cannot be opened now) and
 * SnapshotSent; afterwards live changes. Requests go one at a time, each waiting for its Ack.
 * With several ztunnels connected (during a rolling update), Adds go to the newest and
 * Deletes to all, as Istio's node agent does.
 */
export class ZdsServer {
  readonly #pods = new Map<string, ZdsPod>();
  readonly #connections: ZdsConnection[] = [];
  readonly #options: Required<Omit<ZdsServerOptions, 'registry'>>;
  readonly #errors: Counter<'side'> | undefined;
  #server: SeqpacketServer | undefined;
  readonly #waiters: Array<() => void> = [];

  constructor(options: ZdsServerOptions) {
    this.#options = { ackTimeoutMs: 10_000, helloTimeoutMs: 5_000, ...options };
    this.#errors = options.registry
      ? new Counter({
          name: 'zmesh_zds_transport_errors_total',
          help: 'ZDS connections dropped for a message zds.proto does not allow there (ZM_ERR_ZDS_TRANSPORT)',
          labelNames: ['side'],
          registers: [options.registry],
        })
      : undefined;
  }

  listen(): void {
    const { path } = this.#options;
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    try {
      if (lstatSync(path).isSocket()) unlinkSync(path);
    } catch {
      // Nothing there.
    }
    // bind() creates the file: a umask of 0177 makes it 0600 from birth.
    const old = process.umask(0o177);
    try {
      this.#server = new SeqpacketServer(path, (fd) => this.#accept(fd));
    } finally {
      process.umask(old);
    }
    chmodSync(path, 0o600);
  }

  close(): void {
    this.#server?.close();
    this.#server = undefined;
    for (const c of [...this.#connections]) c.drop();
    try {
      unlinkSync(this.#options.path);
    } catch {
      // Already gone.
    }
  }

  /** ztunnels that said Hello, oldest first. */
  get clients(): number {
    return this.#connections.filter((c) => c.ready).length;
  }

  /** ztunnels that have their snapshot (two during an upgrade's overlap). */
  get syncedClients(): number {
    return this.#connections.filter((c) => c.synced).length;
  }

  /** Resolves once at least one ztunnel is connected and has its snapshot. */
  async waitForClient(timeoutMs = 15_000): Promise<void> {
    if (this.#connections.some((c) => c.synced)) return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no ztunnel connected to ${this.#options.path}`)),
        timeoutMs,
      );
      this.#waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /**
   * Adds or updates a pod. Resolves when the newest ztunnel acknowledges it (rejects with its
   * Ack's error); with no ztunnel connected it is only recorded, and goes in the next snapshot.
   */
  async addPod(pod: ZdsPod): Promise<void> {
    this.#pods.set(pod.uid, pod);
    const newest = this.#newest();
    if (!newest) return;
    await newest.request(
      { kind: 'add', uid: pod.uid, ...(pod.info ? { info: pod.info } : {}) },
      pod.netnsPath,
    );
  }

  /** Removes a pod from every connected ztunnel; rejects with the first Ack error. */
  async removePod(uid: string): Promise<void> {
    this.#pods.delete(uid);
    const results = await Promise.allSettled(
      this.#connections.filter((c) => c.ready).map((c) => c.request({ kind: 'del', uid })),
    );
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
  }

  #newest(): ZdsConnection | undefined {
    for (let i = this.#connections.length - 1; i >= 0; i--)
      if (this.#connections[i]?.ready) return this.#connections[i];
    return undefined;
  }

  #accept(fd: number): void {
    const conn = new ZdsConnection(fd, this.#options, {
      hello: () => this.#sendSnapshot(conn),
      dropped: (reason) => {
        const i = this.#connections.indexOf(conn);
        if (i >= 0) this.#connections.splice(i, 1);
        if (reason !== undefined) {
          this.#errors?.inc({ side: 'node-agent' });
          log.warn({ code: 'ZM_ERR_ZDS_TRANSPORT', reason }, 'ZDS connection dropped');
        }
      },
    });
    this.#connections.push(conn);
  }

  async #sendSnapshot(conn: ZdsConnection): Promise<void> {
    const sends: Promise<void>[] = [];
    for (const pod of this.#pods.values()) {
      let netnsOk = true;
      try {
        closeSync(openSync(pod.netnsPath, 'r'));
      } catch {
        netnsOk = false;
      }
      sends.push(
        netnsOk
          ? conn.request(
              { kind: 'add', uid: pod.uid, ...(pod.info ? { info: pod.info } : {}) },
              pod.netnsPath,
            )
          : conn.request({ kind: 'keep', uid: pod.uid }),
      );
    }
    sends.push(conn.request({ kind: 'snapshotSent' }));
    const results = await Promise.allSettled(sends);
    for (const r of results)
      if (r.status === 'rejected')
        log.warn({ err: (r.reason as Error).message }, 'ZDS snapshot entry refused');
    if (conn.ready) {
      conn.synced = true;
      log.info({ pods: this.#pods.size }, 'ZDS snapshot sent');
      for (const w of this.#waiters.splice(0)) w();
    }
  }
}

/** One ztunnel's connection: Hello first, then requests one at a time, each acknowledged. */
class ZdsConnection {
  ready = false;
  synced = false;
  readonly #socket: SeqpacketSocket;
  readonly #queue: Pending[] = [];
  #inflight: (Pending & { timer: NodeJS.Timeout }) | undefined;
  readonly #helloTimer: NodeJS.Timeout;

  constructor(
    fd: number,
    private readonly options: { ackTimeoutMs: number; helloTimeoutMs: number },
    private readonly events: { hello: () => void; dropped: (reason?: string) => void },
  ) {
    this.#socket = new SeqpacketSocket(fd, ZDS_MAX_MESSAGE, (p) => this.#onMessage(p));
    this.#socket.onClose((e) => this.#closed(e?.message));
    this.#helloTimer = setTimeout(() => this.drop('no ZdsHello in time'), options.helloTimeoutMs);
  }

  request(req: ZdsRequest, netnsPath?: string): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.#socket.closed) {
        reject(new Error('ztunnel disconnected'));
        return;
      }
      this.#queue.push({ req, ...(netnsPath ? { netnsPath } : {}), resolve, reject });
      this.#pump();
    });
  }

  /** Drops the connection; `reason` set means a transport error (logged and counted). */
  drop(reason?: string): void {
    if (this.#socket.closed) return;
    this.#socket.close(reason === undefined ? undefined : new Error(reason));
  }

  #closed(reason: string | undefined): void {
    clearTimeout(this.#helloTimer);
    this.ready = false;
    const gone = new Error(`ztunnel disconnected${reason ? `: ${reason}` : ''}`);
    if (this.#inflight) {
      clearTimeout(this.#inflight.timer);
      this.#inflight.reject(gone);
      this.#inflight = undefined;
    }
    for (const p of this.#queue.splice(0)) p.reject(gone);
    this.events.dropped(reason);
  }

  #onMessage(packet: ReceivedPacket): void {
    const problem = this.#receive(packet);
    if (problem !== undefined) this.drop(problem);
  }

  /** Handles one message from ztunnel; returns why the connection must go, if it must. */
  #receive(packet: ReceivedPacket): string | undefined {
    // ztunnel never passes fds: close any it sent before looking at the message.
    closeFds(packet.fds);
    if (packet.fds.length > 0) return 'ztunnel sent file descriptors';
    if (packet.truncated) return `message longer than ${ZDS_MAX_MESSAGE} bytes (MSG_TRUNC)`;
    if (!this.ready) {
      const hello = decodeHello(packet.data);
      if (!hello.ok) return `bad ZdsHello: ${hello.error.join('; ')}`;
      clearTimeout(this.#helloTimer);
      this.ready = true;
      this.events.hello();
      return undefined;
    }
    const ack = decodeAck(packet.data);
    if (!ack.ok) return `bad WorkloadResponse: ${ack.error.join('; ')}`;
    const inflight = this.#inflight;
    if (!inflight) return 'an Ack for no request';
    clearTimeout(inflight.timer);
    this.#inflight = undefined;
    if (ack.value.error === '') inflight.resolve();
    else
      inflight.reject(
        new ZmeshError('ZM_ERR_ZDS_WORKLOAD', { uid: uidOf(inflight.req), reason: ack.value.error }),
      );
    this.#pump();
    return undefined;
  }

  #pump(): void {
    if (this.#inflight || !this.ready || this.#socket.closed) return;
    const next = this.#queue.shift();
    if (!next) return;
    let fd: number | undefined;
    try {
      if (next.netnsPath !== undefined) fd = openSync(next.netnsPath, 'r');
      this.#socket.send(encodeRequest(next.req), fd);
    } catch (e) {
      next.reject(e as Error);
      if ((e as { code?: string }).code === 'EAGAIN') this.drop('ztunnel is not reading');
      else queueMicrotask(() => this.#pump());
      return;
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
    const timer = setTimeout(
      () => this.drop(`no Ack within ${this.options.ackTimeoutMs} ms`),
      this.options.ackTimeoutMs,
    );
    this.#inflight = { ...next, timer };
  }
}

function uidOf(req: ZdsRequest): string {
  return req.kind === 'snapshotSent' ? '(snapshot)' : req.uid;
}
