import { createConnection, type Socket } from 'node:net';
import { CATALOGUE, type ErrorCode, guardedTimeout, ZmeshError } from '@zmesh/shared';
import type { AddWorkloadRequest } from './node-agent.js';
import type { NodeAgentReply } from './node-agent-protocol.js';

/** Default bound on one request (an AddWorkload loads and attaches BPF programs). */
export const AGENT_REQUEST_TIMEOUT_MS = 30_000;

interface Waiter {
  resolve: (reply: NodeAgentReply) => void;
  reject: (e: unknown) => void;
  timer: NodeJS.Timeout;
}

/**
 * The node agent's side (the harness, or a CNI plugin): sends requests on one connection
 * and resolves each when its reply arrives (replies come in request order). An error
 * reply rejects with a ZmeshError carrying the reply's code.
 */
export class NodeAgentClient {
  readonly #path: string;
  readonly #timeoutMs: number;
  #socket: Socket | undefined;
  #connecting: Promise<Socket> | undefined;
  readonly #waiters: Waiter[] = [];
  #buf = '';

  constructor(path: string, options: { timeoutMs?: number } = {}) {
    this.#path = path;
    this.#timeoutMs = options.timeoutMs ?? AGENT_REQUEST_TIMEOUT_MS;
  }

  addWorkload(req: AddWorkloadRequest): Promise<void> {
    return this.#call({ op: 'AddWorkload', ...req });
  }

  delWorkload(uid: string): Promise<void> {
    return this.#call({ op: 'DelWorkload', uid });
  }

  snapshot(uids: string[]): Promise<void> {
    return this.#call({ op: 'Snapshot', uids });
  }

  /** Sends one raw line and returns the reply as is (for tests of the protocol). */
  async raw(line: string): Promise<NodeAgentReply> {
    const socket = await this.#connect();
    return new Promise((resolve, reject) => {
      const timer = guardedTimeout(
        'node_agent_timeout',
        () => this.#failAll(new Error('node-agent request timed out')),
        this.#timeoutMs,
      );
      this.#waiters.push({ resolve, reject, timer });
      socket.write(line.endsWith('\n') ? line : `${line}\n`);
    });
  }

  close(): void {
    this.#socket?.destroy();
    this.#socket = undefined;
    this.#connecting = undefined;
  }

  async #call(req: Record<string, unknown>): Promise<void> {
    const reply = await this.raw(JSON.stringify(req));
    if (reply.ok) return;
    const code: ErrorCode = reply.code in CATALOGUE ? (reply.code as ErrorCode) : 'ZM_ERR_INTERNAL_FAULT';
    throw new ZmeshError(code, { reason: reply.error }, { cause: new Error(reply.error) });
  }

  #connect(): Promise<Socket> {
    if (this.#socket !== undefined && !this.#socket.destroyed) return Promise.resolve(this.#socket);
    this.#connecting ??= new Promise<Socket>((resolve, reject) => {
      const socket = createConnection(this.#path);
      socket.once('connect', () => {
        this.#socket = socket;
        this.#connecting = undefined;
        resolve(socket);
      });
      socket.once('error', (e) => {
        this.#connecting = undefined;
        reject(e);
        this.#failAll(e);
      });
      socket.on('close', () => this.#failAll(new Error('node-agent connection closed')));
      socket.on('data', (chunk) => this.#onData(chunk));
    });
    return this.#connecting;
  }

  #onData(chunk: Buffer): void {
    this.#buf += chunk.toString();
    for (let nl = this.#buf.indexOf('\n'); nl >= 0; nl = this.#buf.indexOf('\n')) {
      const line = this.#buf.slice(0, nl);
      this.#buf = this.#buf.slice(nl + 1);
      const waiter = this.#waiters.shift();
      if (waiter === undefined) continue;
      clearTimeout(waiter.timer);
      try {
        waiter.resolve(JSON.parse(line) as NodeAgentReply);
      } catch (e) {
        waiter.reject(e);
      }
    }
  }

  #failAll(e: unknown): void {
    for (const w of this.#waiters.splice(0)) {
      clearTimeout(w.timer);
      w.reject(e);
    }
    this.#socket?.destroy();
    this.#socket = undefined;
  }
}
