import { chmodSync, lstatSync, mkdirSync, unlinkSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { dirname } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { isZmeshError, listenServer, logger } from '@zmesh/shared';
import {
  decodeRequest,
  idOf,
  MAX_LINE_BYTES,
  type NodeAgentReply,
  type NodeAgentRequest,
} from './node-agent-protocol.js';
import * as sys from './sys.js';

const log = logger('node-agent');

/** Bound on concurrent agent connections (there is normally one: the node agent). */
export const MAX_AGENT_CONNECTIONS = 16;
/** Bound on requests one connection may have waiting; beyond it requests are refused. */
export const MAX_PENDING_PER_CONNECTION = 256;

export interface AddWorkloadRequest {
  uid: string;
  netns: string;
  cgroup: string;
}

/** What ztunnel does for the agent. A rejection becomes an error reply, never a crash. */
export interface NodeAgentHandler {
  addWorkload(req: AddWorkloadRequest): Promise<void>;
  delWorkload(uid: string): Promise<void>;
  snapshot(uids: string[]): Promise<void>;
}

export interface NodeAgentServerOptions {
  path: string;
  /** Peer uids allowed in (SO_PEERCRED), on top of the socket's 0600 mode. Default: root. */
  allowedUids?: number[];
}

/**
 * ztunnel's side of the node-agent socket. Requests on one connection are handled one
 * at a time, in order, so an AddWorkload is acknowledged only once capture is in place.
 */
export class NodeAgentServer {
  readonly #handler: NodeAgentHandler;
  readonly #options: NodeAgentServerOptions;
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();

  constructor(handler: NodeAgentHandler, options: NodeAgentServerOptions) {
    this.#handler = handler;
    this.#options = options;
    this.#server = createServer((s) => this.#accept(s));
    this.#server.maxConnections = MAX_AGENT_CONNECTIONS;
  }

  async listen(): Promise<void> {
    const { path } = this.#options;
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    removeStaleSocket(path);
    // The socket file is created by bind() inside listen(), synchronously: a umask of
    // 0177 makes it 0600 from birth, with no window in which others could connect.
    // (A throw inside listen() becomes the promise's rejection, so the umask is always restored.)
    const old = process.umask(0o177);
    const listening = listenServer(
      this.#server,
      { path },
      {
        name: 'node-agent',
        onError: (e) => log.warn({ err: e.message }, 'node agent accept failed'),
      },
    );
    process.umask(old);
    await listening;
    chmodSync(path, 0o600);
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(socket: Socket): void {
    if (!this.#peerAllowed(socket)) {
      socket.destroy();
      return;
    }
    this.#sockets.add(socket);
    socket.on('close', () => this.#sockets.delete(socket));
    socket.on('error', (e) => log.debug({ err: e }, 'agent connection error'));
    const lines = new LineReader(MAX_LINE_BYTES);
    let chain = Promise.resolve();
    let pending = 0;
    socket.on('data', (chunk: Buffer) => {
      for (const line of lines.push(chunk)) {
        if (pending >= MAX_PENDING_PER_CONNECTION) {
          write(socket, fail(idOf(line ?? ''), 'ZM_ERR_AGENT_BAD_REQUEST', 'too many pending requests'));
          continue;
        }
        pending++;
        chain = chain
          .then(() => this.#handle(line))
          .then((reply) => write(socket, reply))
          .finally(() => pending--);
      }
    });
  }

  #peerAllowed(socket: Socket): boolean {
    const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof fd !== 'number') return false;
    try {
      const { uid } = sys.peerCred(fd);
      const allowed = (this.#options.allowedUids ?? [0]).includes(uid);
      if (!allowed) log.warn({ uid }, 'node-agent connection refused');
      return allowed;
    } catch {
      return false;
    }
  }

  /** One request to one reply; never rejects. `undefined` stands for an oversize line. */
  async #handle(line: string | undefined): Promise<NodeAgentReply> {
    if (line === undefined) {
      return fail({}, 'ZM_ERR_AGENT_BAD_REQUEST', `request longer than ${MAX_LINE_BYTES} bytes`);
    }
    const decoded = decodeRequest(line);
    if (!decoded.ok) return fail(idOf(line), 'ZM_ERR_AGENT_BAD_REQUEST', decoded.error.join('; '));
    const req = decoded.value;
    const id = req.id === undefined ? {} : { id: req.id };
    try {
      await this.#dispatch(req);
      return { ok: true, ...id };
    } catch (e) {
      log.warn({ op: req.op, err: e }, 'node-agent request failed');
      return isZmeshError(e) ? fail(id, e.code, e.message) : fail(id, 'ZM_ERR_INTERNAL_FAULT', String(e));
    }
  }

  #dispatch(req: NodeAgentRequest): Promise<void> {
    switch (req.op) {
      case 'AddWorkload':
        return this.#handler.addWorkload({ uid: req.uid, netns: req.netns, cgroup: req.cgroup });
      case 'DelWorkload':
        return this.#handler.delWorkload(req.uid);
      case 'Snapshot':
        return this.#handler.snapshot(req.uids);
    }
  }
}

function fail(id: { id?: string | number }, code: string, error: string): NodeAgentReply {
  return { ok: false, ...id, code, error };
}

function write(socket: Socket, reply: NodeAgentReply): void {
  if (!socket.destroyed) socket.write(`${JSON.stringify(reply)}\n`);
}

/** Splits a byte stream into lines; a line over the bound yields `undefined` once. */
export class LineReader {
  #buf = '';
  #skipping = false;
  readonly #decoder = new StringDecoder('utf8');
  readonly #max: number;

  constructor(max: number) {
    this.#max = max;
  }

  push(chunk: Buffer | string): (string | undefined)[] {
    const out: (string | undefined)[] = [];
    this.#buf += typeof chunk === 'string' ? chunk : this.#decoder.write(chunk);
    for (let nl = this.#buf.indexOf('\n'); nl >= 0; nl = this.#buf.indexOf('\n')) {
      const line = this.#buf.slice(0, nl);
      this.#buf = this.#buf.slice(nl + 1);
      if (this.#skipping) this.#skipping = false;
      else if (line.length > this.#max) out.push(undefined);
      else if (line.trim() !== '') out.push(line);
    }
    if (this.#buf.length > this.#max) {
      if (!this.#skipping) out.push(undefined);
      this.#skipping = true;
      this.#buf = '';
    }
    return out;
  }
}

function removeStaleSocket(path: string): void {
  try {
    if (lstatSync(path).isSocket()) unlinkSync(path);
  } catch {
    // Nothing there.
  }
}
