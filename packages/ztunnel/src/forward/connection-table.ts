/** One open connection, as `zmesh ztunnel-config connections` lists it. */
export interface OpenConnection {
  /** The local workload's `namespace/name`. */
  workload: string;
  direction: 'inbound' | 'outbound';
  /** Outbound: the app's own address; inbound: the address the tunnel asked for (the app's). */
  local: string;
  /** Outbound: where the connection went (a peer's 15008, or the plain target); inbound: the peer. */
  remote: string;
  /** The other side's identity: expected (outbound HBONE) or authenticated (inbound); '' for plain TCP. */
  peer: string;
  protocol: 'HBONE' | 'TCP';
  /** Epoch ms it was opened. */
  since: number;
}

/** Listed per dump at most; the total is always exact. */
const MAX_LISTED_CONNECTIONS = 1000;

/**
 * The ztunnel's live connections, for its admin `/config_dump` (istioctl's
 * `ztunnel-config connections`). An entry is added once a connection is carried (after
 * policy and upstream setup) and removed when it closes; a refused connection never shows.
 */
export class ConnectionTable {
  readonly #open = new Set<OpenConnection>();

  /** Records `c` as open; the returned function (idempotent) records it closed. */
  open(c: OpenConnection): () => void {
    this.#open.add(c);
    return () => {
      this.#open.delete(c);
    };
  }

  get size(): number {
    return this.#open.size;
  }

  /** The oldest `limit` entries and the exact total. */
  dump(limit = MAX_LISTED_CONNECTIONS): { total: number; items: OpenConnection[] } {
    const items: OpenConnection[] = [];
    for (const c of this.#open) {
      if (items.length >= limit) break;
      items.push(c);
    }
    return { total: this.#open.size, items };
  }
}
