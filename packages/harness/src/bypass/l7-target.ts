import { adminRequest } from '@zmesh/shared';
import { stringify } from 'yaml';
import { type L7Lab, startL7Lab } from '../demo/l7-lab.js';
import { type Received, rawExchange, startRecordingApp, statusesOf } from './raw-http.js';

/**
 * The L7 bypass attempts' own mesh: the demo's L7 lab (control plane, two ztunnels and the
 * `shop` waypoint as real processes over xDS, explicit-proxy mode on loopback 127.51/16)
 * with apps that record exactly what they received. One AuthorizationPolicy, replaced
 * whole to switch shapes: a DENY on `/admin*`, or an ALLOW on `/public*` only.
 */
export type PolicyShape = 'deny' | 'allow';

export const L7_HOST = 'web.shop.svc.cluster.local';
const BLOCK = '127.51';
/** Off the demo's 25810/25814, so the two labs can run side by side. */
const XDS_PORT = 25_820;
/** A policy switch reaches the waypoint over xDS; this bounds the wait for it. */
const SWITCH_TIMEOUT_MS = 15_000;

function policyYaml(shape: PolicyShape): string {
  return stringify({
    apiVersion: 'security.istio.io/v1',
    kind: 'AuthorizationPolicy',
    metadata: { name: 'l7-bypass', namespace: 'shop' },
    spec: {
      targetRefs: [{ kind: 'Gateway', group: 'gateway.networking.k8s.io', name: 'waypoint' }],
      action: shape === 'deny' ? 'DENY' : 'ALLOW',
      rules: [{ to: [{ operation: { paths: [shape === 'deny' ? '/admin*' : '/public*'] } }] }],
    },
  });
}

export interface L7Result {
  /** Status codes of the responses the client got, in order. */
  statuses: number[];
  /** What the apps received, in arrival order. */
  received: Received[];
}

export class L7Target {
  #shape: PolicyShape | undefined;

  private constructor(
    private readonly lab: L7Lab,
    private readonly received: Received[],
  ) {}

  static async up(): Promise<L7Target> {
    const received: Received[] = [];
    const lab = await startL7Lab({
      block: BLOCK,
      xdsPort: XDS_PORT,
      l7Config: false,
      app: (host) => startRecordingApp(host, 8080, received),
    });
    try {
      await lab.l7(true);
      return new L7Target(lab, received);
    } catch (e) {
      await lab.stop();
      throw e;
    }
  }

  /**
   * Puts `shape` in force and waits until the waypoint enforces it: `GET /other` is allowed
   * by the DENY and refused by the ALLOW, which also proves the path carries requests.
   */
  async use(shape: PolicyShape): Promise<void> {
    if (this.#shape === shape) return;
    const res = await adminRequest(this.lab.admin, '/apply?source=l7-bypass.yaml', {
      method: 'POST',
      body: policyYaml(shape),
    });
    if (!res.ok) throw new Error(`policy ${shape} not applied: ${res.status} ${res.text}`);
    const want = shape === 'deny' ? 200 : 403;
    const deadline = Date.now() + SWITCH_TIMEOUT_MS;
    for (;;) {
      const r = await this.send(`GET /other HTTP/1.1\r\nHost: ${L7_HOST}\r\nConnection: close\r\n\r\n`);
      if (r.statuses[0] === want) break;
      if (Date.now() > deadline)
        throw new Error(
          `the ${shape} policy was not in force after ${SWITCH_TIMEOUT_MS} ms (GET /other: ${r.statuses})`,
        );
      await new Promise((r) => setTimeout(r, 200));
    }
    this.#shape = shape;
  }

  /** Raw bytes from the frontend pod's forward listener (through its ztunnel and the waypoint). */
  async send(bytes: string): Promise<L7Result> {
    this.received.length = 0;
    const reply = await rawExchange(this.lab.entry.host, this.lab.entry.port, bytes, 1000);
    // A request smuggled behind the first would reach an app right after it.
    await new Promise((r) => setTimeout(r, 100));
    return { statuses: statusesOf(reply), received: [...this.received] };
  }

  down(): Promise<void> {
    return this.lab.stop();
  }
}

/**
 * The path an app that normalizes on its own would serve for `url` (WHATWG URL resolution,
 * percent-decoding, backslashes, `;` parameters dropped), independent of the waypoint's own
 * normalization: what the judge holds a delivery against.
 */
export function servedPath(url: string): string {
  const base = 'http://app.invalid';
  let path: string;
  try {
    path = new URL(url, base).pathname;
  } catch {
    return url;
  }
  let decoded = path;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    // A malformed encoding is served as it is.
  }
  const cleaned = decoded
    .replaceAll('\\', '/')
    .split('/')
    .map((s) => s.split(';')[0])
    .join('/');
  try {
    return new URL(cleaned, base).pathname;
  } catch {
    return cleaned;
  }
}

/** Whether `shape` forbids what an app would serve for `url`. */
export function forbidden(shape: PolicyShape, url: string): boolean {
  const path = servedPath(url);
  return shape === 'deny' ? path.startsWith('/admin') : !path.startsWith('/public');
}
