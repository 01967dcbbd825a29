import { chmod, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { peerCred } from '@zmesh/ztunnel';

/** Connections relayed at once; a node's ztunnel holds two (xDS, CA), so this is generous. */
const MAX_LINK_CONNECTIONS = 256;
/** Accepts remembered for a drill's reconnect-spread check. */
const MAX_RECORDED_ACCEPTS = 10_000;

/**
 * The path between the proxies and the control plane's Unix socket, owned by the harness so
 * that a drill can cut it: `cut()` resets every relayed connection and removes the socket
 * file (new connects fail at once, as with a control plane that is gone); `heal()` serves
 * it again. The control plane itself keeps running, so it still remembers every proxy and
 * can report a change applied meanwhile as pending (docs/design.md §8).
 */
export class ControlPlaneLink {
  private server: Server | undefined;
  private readonly conns = new Set<Socket>();
  /** Wall-clock ms and peer pid (SO_PEERCRED) of accepted connections, newest last, bounded. */
  readonly accepts: Array<{ t: number; pid?: number }> = [];

  constructor(
    /** Where proxies connect. */
    readonly path: string,
    /** Where the control plane listens. */
    readonly target: string,
  ) {}

  get up(): boolean {
    return this.server !== undefined;
  }

  async heal(): Promise<void> {
    if (this.server) return;
    await rm(this.path, { force: true });
    const server = createServer((client) => this.relay(client));
    server.maxConnections = MAX_LINK_CONNECTIONS;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.path, () => resolve());
    });
    await chmod(this.path, 0o600);
    this.server = server;
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.conns) s.destroy();
    this.conns.clear();
    if (server) await new Promise<void>((r) => server.close(() => r()));
    await rm(this.path, { force: true });
  }

  private relay(client: Socket): void {
    if (this.accepts.length < MAX_RECORDED_ACCEPTS)
      this.accepts.push({ t: Date.now(), pid: peerPid(client) });
    const upstream = connect(this.target);
    for (const s of [client, upstream]) {
      this.conns.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        this.conns.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

function peerPid(socket: Socket): number | undefined {
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  try {
    return fd === undefined ? undefined : peerCred(fd).pid;
  } catch {
    return undefined;
  }
}
