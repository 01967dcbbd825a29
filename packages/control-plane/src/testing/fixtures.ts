import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import {
  ADDRESS_TYPE_URL,
  AUTHORIZATION_TYPE_URL,
  type ConfigSnapshot,
  XdsClient,
  type XdsClientOptions,
} from '@zmesh/shared';
import { ControlPlane, type ControlPlaneOptions } from '../control-plane.js';

/** Test-only helpers: a YAML config directory, a control plane on loopback, a real client. */
export const TOKEN_KEY = Buffer.alloc(32, 7);

export function podYaml(
  name: string,
  ip: string,
  node = 'node-1',
  labels: Record<string, string> = { app: name },
) {
  const labelLines = Object.entries(labels)
    .map(([k, v]) => `    ${k}: ${JSON.stringify(v)}`)
    .join('\n');
  return `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: ns1
  labels:
${labelLines}
spec:
  serviceAccountName: sa-${name}
  nodeName: ${node}
status:
  podIP: ${ip}
`;
}

export const NAMESPACE_YAML = `apiVersion: v1
kind: Namespace
metadata:
  name: ns1
  labels:
    istio.io/dataplane-mode: ambient
`;

export const SERVICE_YAML = `apiVersion: v1
kind: Service
metadata: { name: svc, namespace: ns1 }
spec:
  clusterIP: 10.96.0.10
  selector: { app: a }
  ports:
    - { name: http, port: 80, targetPort: 8080 }
`;

export async function configDir(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cp-'));
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  return dir;
}

export async function removeDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
}

export async function startControlPlane(dir: string, extra: Partial<ControlPlaneOptions> = {}, port = 0) {
  const cp = new ControlPlane({
    configDir: dir,
    trustDomain: 'cluster.local',
    tokenKey: TOKEN_KEY,
    ...extra,
  });
  const bound = await cp.start(port);
  return { cp, port: bound };
}

export function newClient(port: number, token: string, extra: Partial<XdsClientOptions> = {}): XdsClient {
  return new XdsClient({
    address: `127.0.0.1:${port}`,
    node: { id: 'ztunnel~10.0.0.1~ztunnel-1.istio-system~istio-system.svc.cluster.local' },
    token,
    typeUrls: [ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL],
    credentials: grpc.credentials.createInsecure(),
    backoff: { initialMs: 20, maxMs: 200 },
    ...extra,
  });
}

/** Resolves with the first snapshot (current or next) that satisfies `predicate`. */
export function snapshotWhere(
  client: XdsClient,
  predicate: (s: ConfigSnapshot) => boolean,
  timeoutMs = 5000,
): Promise<ConfigSnapshot> {
  if (predicate(client.snapshot())) return Promise.resolve(client.snapshot());
  return eventWhere(client, 'snapshot', predicate, timeoutMs);
}

export function eventWhere<T>(
  emitter: NodeJS.EventEmitter,
  event: string,
  predicate: (value: T) => boolean = () => true,
  timeoutMs = 5000,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      emitter.off(event, on);
      reject(new Error(`timed out waiting for ${event}`));
    }, timeoutMs);
    const on = (value: T) => {
      if (!predicate(value)) return;
      clearTimeout(timer);
      emitter.off(event, on);
      resolve(value);
    };
    emitter.on(event, on);
  });
}

/** Polls `condition` (for state that changes without an event, like the server's view of ACKs). */
export async function until(condition: () => boolean, timeoutMs = 5000, everyMs = 10): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting for condition');
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
