import {
  CustomObjectsApi,
  type KubeConfig,
  type KubernetesObject,
  KubernetesObjectApi,
} from '@kubernetes/client-node';
import { Gateway } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/Gateway';
import { GRPCRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/GRPCRoute';
import { HTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute';
import { logger } from '@zmesh/shared';
import { isWaypointClass } from '../k8s-objects.js';
import type { RouteStatus } from '../route-status.js';
import type { KubeSource, RawObject } from './kube-source.js';
import { type WaypointTemplate, waypointObjects } from './waypoint-objects.js';

const log = logger('kube-writer');

const CONTROLLER_NAME = 'zmesh.io/waypoint-controller';
/** A status write that meets 409 Conflict re-reads the object and tries again, this many times. */
const CONFLICT_RETRIES = 4;

interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime?: string;
}

type Meta = { name: string; namespace: string; uid: string; generation?: number; resourceVersion?: string };

/**
 * The leader's writes: each waypoint Gateway's owned objects (waypoint-objects.ts), kept in
 * step by a spec hash, and status on Gateways (Accepted, Programmed once a waypoint ACKed its
 * config), HTTPRoutes and GRPCRoutes (Accepted, ResolvedRefs per parent) and AuthorizationPolicies (Accepted
 * False with admission's reasons when refused). Status goes through the status subresource
 * with the resourceVersion read; a 409 re-reads and retries. One pass at a time; a pass asked
 * for during one runs after it.
 */
export class KubeWriter {
  readonly #objects: KubernetesObjectApi;
  readonly #custom: CustomObjectsApi;
  readonly #source: KubeSource;
  readonly #template: WaypointTemplate;
  readonly #waypointReady: (key: string) => boolean;
  readonly #failed: (write: 'waypoint' | 'status') => void;
  readonly #routes: () => RouteStatus[];
  #running: Promise<void> | undefined;
  #again = false;
  /** Counted for tests and metrics: status writes retried after a 409. */
  conflicts = 0;

  constructor(
    kc: KubeConfig,
    source: KubeSource,
    template: WaypointTemplate,
    waypointReady: (namespaceName: string) => boolean,
    failed: (write: 'waypoint' | 'status') => void = () => undefined,
    routes: () => RouteStatus[] = () => [],
  ) {
    this.#failed = failed;
    this.#routes = routes;
    this.#objects = KubernetesObjectApi.makeApiClient(kc);
    this.#custom = kc.makeApiClient(CustomObjectsApi);
    this.#source = source;
    this.#template = template;
    this.#waypointReady = waypointReady;
  }

  /** Runs a pass (or queues one after the running pass); resolves when that pass is done. */
  reconcile(): Promise<void> {
    if (this.#running) {
      this.#again = true;
      return this.#running;
    }
    this.#running = (async () => {
      do {
        this.#again = false;
        await this.#pass().catch((e) => log.warn({ err: (e as Error).message }, 'reconcile pass failed'));
      } while (this.#again);
      this.#running = undefined;
    })();
    return this.#running;
  }

  async #pass(): Promise<void> {
    const gateways = this.#source.rawOf('Gateway');
    for (const gw of gateways) {
      const spec = (gw.spec ?? {}) as { gatewayClassName?: string };
      if (!isWaypointClass(spec.gatewayClassName ?? '')) continue;
      const m = gw.metadata as Meta;
      const address = await this.#ensureWaypoint(m);
      const key = `${m.namespace}/${m.name}`;
      const ready = this.#waypointReady(key);
      await this.#writeStatus(gw, 'gateways', (current) => {
        const conditions = [
          cond('Accepted', 'True', 'Accepted', `waypoint of class ${spec.gatewayClassName}`, m),
          ready
            ? cond('Programmed', 'True', 'Programmed', 'a waypoint proxy holds its config', m)
            : cond('Programmed', 'False', 'Pending', 'no waypoint proxy has ACKed its config yet', m),
        ];
        return {
          ...(current ?? {}),
          conditions: keepTransitions(conditions, current?.conditions as Condition[] | undefined),
          // A Gateway that asks for an address (spec.addresses) keeps it; else its Service's.
          ...(address && !(spec as { addresses?: unknown[] }).addresses?.length
            ? { addresses: [{ type: 'IPAddress', value: address }] }
            : {}),
        };
      });
    }
    // The control plane's own route status (route-status.ts): what proxy-status shows.
    const statuses = new Map(this.#routes().map((r) => [`${r.kind}/${r.namespace}/${r.name}`, r]));
    const routes = [
      ...this.#source.rawOf('HTTPRoute').map((r) => ['httproutes', r] as const),
      ...this.#source.rawOf('GRPCRoute').map((r) => ['grpcroutes', r] as const),
    ];
    for (const [plural, route] of routes) {
      const m = route.metadata as Meta;
      const key = `${route.kind}/${m.namespace}/${m.name}`;
      const spec = (route.spec ?? {}) as { parentRefs?: Array<Record<string, unknown>> };
      const refused = this.#source.refused().get(key);
      const served = statuses.get(key);
      // Neither refused nor stored yet: the next pass (after the store's sync) writes it.
      if (!refused && !served) continue;
      await this.#writeStatus(route, plural, (current) => ({
        ...(current ?? {}),
        parents: (spec.parentRefs ?? []).map((p, i) => {
          const conditions = refused
            ? [cond('Accepted', 'False', 'Invalid', refused.reasons.join('; '), m)]
            : (served?.parents[i]?.conditions ?? []).map((c) =>
                cond(c.type, c.status, c.reason, c.message, m),
              );
          const before = (
            (current?.parents ?? []) as Array<{ parentRef: { name: string }; conditions: Condition[] }>
          ).find((x) => x.parentRef?.name === p.name);
          return {
            parentRef: p,
            controllerName: CONTROLLER_NAME,
            conditions: keepTransitions(conditions, before?.conditions),
          };
        }),
      }));
    }
    for (const policy of this.#source.rawOf('AuthorizationPolicy')) {
      const m = policy.metadata as Meta;
      const refused = this.#source.refused().get(`AuthorizationPolicy/${m.namespace}/${m.name}`);
      await this.#writeStatus(policy, 'authorizationpolicies', (current) => ({
        ...(current ?? {}),
        conditions: keepTransitions(
          [
            refused
              ? cond('Accepted', 'False', 'Invalid', refused.reasons.join('; '), m)
              : cond('Accepted', 'True', 'Accepted', 'compiled and served', m),
          ],
          current?.conditions as Condition[] | undefined,
        ),
      }));
    }
  }

  /** Creates or updates the Gateway's owned objects; returns its Service's cluster IP once it has one. */
  async #ensureWaypoint(gw: Meta): Promise<string | undefined> {
    let address: string | undefined;
    for (const desired of waypointObjects(gw, this.#template)) {
      const d = desired as KubernetesObject & Record<string, unknown>;
      const ref = {
        apiVersion: d.apiVersion as string,
        kind: d.kind as string,
        metadata: { name: d.metadata?.name as string, namespace: gw.namespace },
      };
      try {
        const current = await this.#objects.read(ref).catch((e: { code?: number }) => {
          if (e.code === 404) return undefined;
          throw e;
        });
        let written: KubernetesObject | undefined = current;
        if (current === undefined) {
          written = await this.#objects.create(d);
          log.info(
            { kind: d.kind, object: `${gw.namespace}/${ref.metadata.name}` },
            'waypoint object created',
          );
        } else if (!inStep(d, JSON.parse(JSON.stringify(current)))) {
          const next: Record<string, unknown> & KubernetesObject = {
            ...d,
            metadata: { ...d.metadata, resourceVersion: current.metadata?.resourceVersion },
          };
          if (d.kind === 'Service') {
            // clusterIP is immutable once allocated.
            const spec = (current as { spec?: { clusterIP?: string; clusterIPs?: string[] } }).spec ?? {};
            next.spec = { ...(d.spec as object), clusterIP: spec.clusterIP, clusterIPs: spec.clusterIPs };
          }
          written = await this.#objects.replace(next);
          log.info(
            { kind: d.kind, object: `${gw.namespace}/${ref.metadata.name}` },
            'waypoint object updated',
          );
        }
        if (d.kind === 'Service') address = (written as { spec?: { clusterIP?: string } }).spec?.clusterIP;
      } catch (e) {
        const code = (e as { code?: number }).code;
        if (code === 409) this.#again = true;
        else this.#failed('waypoint');
        log.warn(
          { kind: d.kind, object: `${gw.namespace}/${ref.metadata.name}`, code, err: (e as Error).message },
          'waypoint object not written',
        );
      }
    }
    return address && address !== 'None' ? address : undefined;
  }

  /** Replaces the object's status with `next(current status)` unless equal; 409 re-reads and retries. */
  async #writeStatus(
    raw: RawObject,
    plural: string,
    next: (current: Record<string, unknown> | undefined) => Record<string, unknown>,
  ): Promise<void> {
    const [group, version] = String(raw.apiVersion).split('/') as [string, string];
    const m = raw.metadata as Meta;
    let object: RawObject = raw;
    for (let attempt = 0; attempt <= CONFLICT_RETRIES; attempt++) {
      const current = object.status as Record<string, unknown> | undefined;
      const status = next(current);
      if (same(status, current)) return;
      const body = { ...object, status };
      validateStatus(body);
      try {
        await this.#custom.replaceNamespacedCustomObjectStatus({
          group,
          version,
          namespace: m.namespace,
          plural,
          name: m.name,
          body,
        });
        return;
      } catch (e) {
        const code = (e as { code?: number }).code;
        if (code !== 409) {
          if (code !== 404) {
            this.#failed('status');
            log.warn({ object: `${raw.kind} ${m.namespace}/${m.name}`, code }, 'status not written');
          }
          return;
        }
        this.conflicts++;
        object = (await this.#custom
          .getNamespacedCustomObject({ group, version, namespace: m.namespace, plural, name: m.name })
          .catch(() => undefined)) as RawObject;
        if (object === undefined) return;
      }
    }
    this.#failed('status');
    log.warn({ object: `${raw.kind} ${m.namespace}/${m.name}` }, 'status not written: conflicts persisted');
  }
}

function cond(
  type: string,
  status: Condition['status'],
  reason: string,
  message: string,
  m: Meta,
): Condition {
  return {
    type,
    status,
    reason,
    message,
    ...(m.generation === undefined ? {} : { observedGeneration: m.generation }),
  };
}

/** lastTransitionTime changes only when a condition's status does. */
function keepTransitions(next: Condition[], before: Condition[] | undefined): Condition[] {
  const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  return next.map((c) => {
    const old = before?.find((b) => b.type === c.type);
    return {
      ...c,
      lastTransitionTime:
        old && old.status === c.status && old.lastTransitionTime ? old.lastTransitionTime : now,
    };
  });
}

/**
 * Whether the current object still holds everything the controller wants: its spec (or data),
 * labels and owner references, as a subset, so that fields the API server defaults do not
 * count as drift but a field someone changed does.
 */
function inStep(desired: Record<string, unknown>, current: Record<string, unknown>): boolean {
  const pick = (o: Record<string, unknown>) => {
    const m = (o.metadata ?? {}) as Record<string, unknown>;
    return { spec: o.spec, data: o.data, labels: m.labels, ownerReferences: m.ownerReferences };
  };
  return subset(pick(desired), pick(current));
}

function subset(want: unknown, have: unknown): boolean {
  if (want === undefined) return true;
  if (Array.isArray(want))
    return Array.isArray(have) && want.length === have.length && want.every((w, i) => subset(w, have[i]));
  if (want !== null && typeof want === 'object')
    return (
      have !== null &&
      typeof have === 'object' &&
      Object.entries(want).every(([k, v]) => subset(v, (have as Record<string, unknown>)[k]))
    );
  return want === have;
}

/** Equal as JSON regardless of key order (the API server need not keep ours). */
function same(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v !== null && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

/** Gateway, HTTPRoute and GRPCRoute statuses against the Gateway API schema before they are written. */
function validateStatus(body: RawObject): void {
  if (body.kind === 'Gateway') new Gateway(body as never).validate();
  if (body.kind === 'HTTPRoute') new HTTPRoute(body as never).validate();
  if (body.kind === 'GRPCRoute') new GRPCRoute(body as never).validate();
}
