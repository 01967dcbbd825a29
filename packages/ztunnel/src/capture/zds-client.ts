import {
  closeFds,
  decodeZdsRequest,
  encodeAck,
  encodeHello,
  err,
  guardedTimeout,
  isZmeshError,
  logger,
  ok,
  type ReceivedPacket,
  type Result,
  SeqpacketSocket,
  ZDS_MAX_MESSAGE,
  type ZdsRequest,
  type ZdsWorkloadInfo,
  ZmeshError,
} from '@zmesh/shared';
import { Counter, Gauge, type Registry } from 'prom-client';
import { checkPodNetns, findPodCgroup, netnsIdentity } from './pod-cgroup.js';

const log = logger('zds');

export interface AddWorkloadRequest {
  /** The pod's uid as ZDS names it (a Kubernetes pod UID). */
  uid: string;
  /** A path that opens the pod's network namespace while the request is handled. */
  netns: string;
  /** The pod's cgroup, found by ztunnel from the uid (never taken from the agent). */
  cgroup: string;
  /** The names the node agent sent (WorkloadInfo), when it sent them. */
  info?: ZdsWorkloadInfo;
}

/** What ztunnel does for the node agent. A rejection becomes the Ack's error, never a crash. */
export interface WorkloadHandler {
  addWorkload(req: AddWorkloadRequest): Promise<void>;
  delWorkload(uid: string): Promise<void>;
  /** The agent's complete set after a (re)connect: pods not in it are removed. */
  snapshot(uids: string[]): Promise<void>;
  has(uid: string): boolean;
}

export interface ZdsClientOptions {
  path: string;
  /** The cgroup v2 root under which kubelet's pod cgroups are found. */
  cgroupRoot: string;
  registry: Registry;
  /** Delay before reconnecting after the agent went away or a transport error. */
  reconnectMs?: number;
}

/**
 * ztunnel's side of Istio's ZDS (docs/zds.md): connects to the node agent's SOCK_SEQPACKET
 * socket, says ZdsHello, and answers every WorkloadRequest with an Ack, in order. A message
 * zds.proto does not allow there (undecodable, truncated, an Add without its netns fd, an fd
 * on anything else) drops the connection (ZM_ERR_ZDS_TRANSPORT) with enrolled pods unchanged;
 * ztunnel reconnects and the agent resends its snapshot.
 */
export class ZdsClient {
  readonly #handler: WorkloadHandler;
  readonly #options: ZdsClientOptions;
  readonly #errors: Counter<'reason'>;
  #socket: SeqpacketSocket | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  /** Per connection: uids the agent added or kept before SnapshotSent; undefined after it. */
  #seen: Set<string> | undefined;
  #chain: Promise<void> = Promise.resolve();
  #lastConnectError = '';

  constructor(handler: WorkloadHandler, options: ZdsClientOptions) {
    this.#handler = handler;
    this.#options = options;
    this.#errors = new Counter({
      name: 'zmesh_zds_transport_errors_total',
      help: 'ZDS connections dropped for a message zds.proto does not allow there (ZM_ERR_ZDS_TRANSPORT)',
      labelNames: ['reason'],
      registers: [options.registry],
    });
    const self = this;
    new Gauge({
      name: 'zmesh_zds_connected',
      help: '1 while connected to the node agent over ZDS',
      registers: [options.registry],
      collect() {
        this.set(self.connected ? 1 : 0);
      },
    });
  }

  get connected(): boolean {
    return this.#socket !== undefined && !this.#socket.closed;
  }

  start(): void {
    this.#connect();
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#socket?.close();
    this.#socket = undefined;
  }

  #connect(): void {
    if (this.#closed) return;
    let socket: SeqpacketSocket;
    try {
      socket = SeqpacketSocket.connect(this.#options.path, ZDS_MAX_MESSAGE, (p) => this.#onPacket(socket, p));
      socket.send(encodeHello());
    } catch (e) {
      const reason = (e as Error).message;
      if (reason !== this.#lastConnectError)
        log.warn({ path: this.#options.path, err: reason }, 'ZDS connect failed');
      this.#lastConnectError = reason;
      this.#retry();
      return;
    }
    this.#lastConnectError = '';
    this.#socket = socket;
    this.#seen = new Set();
    log.info({ path: this.#options.path }, 'ZDS connected to the node agent');
    socket.onClose((e) => {
      if (this.#socket === socket) this.#socket = undefined;
      if (!this.#closed) log.warn({ err: e?.message }, 'ZDS connection closed; reconnecting');
      this.#retry();
    });
  }

  #retry(): void {
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#timer = guardedTimeout('zds_reconnect', () => this.#connect(), this.#options.reconnectMs ?? 500);
  }

  #transportError(socket: SeqpacketSocket, reason: string, label: string): void {
    this.#errors.inc({ reason: label });
    log.warn({ code: 'ZM_ERR_ZDS_TRANSPORT', reason }, 'ZDS connection dropped');
    socket.close(new Error(reason));
  }

  #onPacket(socket: SeqpacketSocket, packet: ReceivedPacket): void {
    const checked = this.#check(packet);
    if (!checked.ok) {
      closeFds(packet.fds);
      this.#transportError(socket, checked.error.reason, checked.error.label);
      return;
    }
    const req = checked.value;
    const fd = packet.fds[0];
    const seen = this.#seen;
    // One at a time, in order: an Add is acknowledged only once capture is in place.
    this.#chain = this.#chain
      .then(() => this.#handle(req, fd, seen))
      .then(
        () => '',
        (e: unknown) => errorText(e),
      )
      .then((error) => {
        if (error) log.warn({ request: req.kind, err: error }, 'ZDS request refused');
        if (!socket.closed) {
          try {
            socket.send(encodeAck(error));
          } catch (e) {
            this.#transportError(socket, `Ack not sent: ${(e as Error).message}`, 'send');
          }
        }
      });
  }

  /** A message as zds.proto allows it here, or why not (the connection is then dropped). */
  #check(packet: ReceivedPacket): Result<ZdsRequest, { reason: string; label: string }> {
    const refuse = (reason: string, label: string) => err({ reason, label });
    if (packet.truncated)
      return refuse(`message longer than ${ZDS_MAX_MESSAGE} bytes (MSG_TRUNC)`, 'truncated');
    if (packet.controlTruncated) return refuse('ancillary data truncated (MSG_CTRUNC)', 'truncated');
    if (packet.fds.length > 1) return refuse(`${packet.fds.length} fds on one message`, 'fds');
    const decoded = decodeZdsRequest(packet.data);
    if (!decoded.ok) return refuse(`bad WorkloadRequest: ${decoded.error.join('; ')}`, 'decode');
    const req = decoded.value;
    const hasFd = packet.fds.length === 1;
    if (req.kind === 'add' && !hasFd) return refuse('AddWorkload without its netns fd', 'fds');
    if (req.kind !== 'add' && hasFd) return refuse(`${req.kind} carried an fd`, 'fds');
    if (req.kind === 'keep' && this.#seen === undefined)
      return refuse('KeepWorkload after SnapshotSent', 'order');
    return ok(req);
  }

  async #handle(req: ZdsRequest, fd: number | undefined, seen: Set<string> | undefined): Promise<void> {
    switch (req.kind) {
      case 'add':
        try {
          const netns = `/proc/self/fd/${fd}`;
          let identity: string;
          try {
            identity = netnsIdentity(netns);
          } catch (e) {
            throw zdsRefusal(req.uid, `the passed fd is not a network namespace: ${(e as Error).message}`);
          }
          const cgroup = findPodCgroup(this.#options.cgroupRoot, req.uid);
          checkPodNetns(req.uid, cgroup, identity);
          await this.#handler.addWorkload({
            uid: req.uid,
            netns,
            cgroup,
            ...(req.info ? { info: req.info } : {}),
          });
          seen?.add(req.uid);
        } finally {
          closeFds(fd === undefined ? [] : [fd]);
        }
        return;
      case 'keep':
        seen?.add(req.uid);
        return;
      case 'del':
        // Deleting a pod ztunnel does not have is done already (Deletes go to every ztunnel).
        if (this.#handler.has(req.uid)) await this.#handler.delWorkload(req.uid);
        seen?.delete(req.uid);
        return;
      case 'snapshotSent': {
        if (seen === undefined) throw new Error('SnapshotSent twice on one connection');
        if (this.#seen === seen) this.#seen = undefined;
        await this.#handler.snapshot([...seen]);
        log.info({ pods: seen.size }, 'ZDS snapshot reconciled');
        return;
      }
    }
  }
}

function zdsRefusal(uid: string, reason: string): Error {
  return new ZmeshError('ZM_ERR_ZDS_WORKLOAD', { uid, reason });
}

/** The Ack's error: the stable code first, so the agent can tell refusals apart. */
function errorText(e: unknown): string {
  if (isZmeshError(e)) return `${e.code}: ${e.message}`;
  return `ZM_ERR_INTERNAL_FAULT: ${(e as Error)?.message ?? String(e)}`;
}
