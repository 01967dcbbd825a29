import { createServer, type Server, type Socket } from 'node:net';
import { listenServer, logger } from '@zmesh/shared';
import type { ForwardListener as ForwardConfig } from '../state/local-config.js';
import { handleOutbound, type OutboundInputs } from './outbound-handler.js';

const log = logger('outbound');

/**
 * Explicit-proxy mode's attribution (docs/design.md §11): a local port bound to one workload and
 * one destination. Whoever connects here speaks as that workload, so the listener binds
 * the workload's own loopback address only.
 */
export class ForwardListener {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();

  constructor(
    readonly config: ForwardConfig,
    private readonly inputs: OutboundInputs,
  ) {
    this.server = createServer({ allowHalfOpen: true, noDelay: true }, (socket) => this.onConnection(socket));
  }

  listen(): Promise<void> {
    const { host, port } = this.config.listen;
    return listenServer(
      this.server,
      { host, port },
      {
        name: 'forward',
        onError: (e) => log.error({ err: e.message }, 'forward listener error'),
      },
    );
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private onConnection(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => {});
    const source = this.inputs.state().workload(this.config.workloadUid);
    if (!source) {
      socket.resetAndDestroy();
      return;
    }
    handleOutbound(this.inputs, socket, source, this.config.destination).catch((e: unknown) => {
      log.error({ err: (e as Error).message }, 'outbound handler failed');
      socket.destroy();
    });
  }
}
