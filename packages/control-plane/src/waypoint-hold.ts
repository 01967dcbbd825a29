import type { Service, Workload } from '@zmesh/shared';
import type { CompiledConfig } from './compiler.js';

type Ref = Workload['waypoint'];

/** A workload or service newly bound to a waypoint that is not ready, kept on its previous path. */
export interface HeldUser {
  /** `Pod/ns/name` or `Service/ns/name`. */
  object: string;
  /** The waypoint (`ns/name`) it is bound to in the config. */
  waypoint: string;
  /** The waypoint it is still served through; undefined: direct (ztunnel to ztunnel). */
  keptOn: string | undefined;
}

/**
 * The transition hold: traffic is never cut by a new waypoint binding. A workload or
 * service the control plane has served before, whose compiled waypoint differs from the
 * one it was last served with and is not ready (no connected waypoint has ACKed its
 * config), keeps being served with its last binding (another waypoint, or none: direct)
 * until the new waypoint ACKs; then it switches. Once served through a waypoint, an object
 * stays bound to it: a waypoint that disconnects later fails its users closed, it is never
 * bypassed. An object the control plane has not served before (the first load after a
 * start, a new pod) is served as compiled. Same compiled config, same last-served
 * bindings and same readiness give the same output (the resources stay content-hashed).
 */
export class WaypointHold {
  /** Binding last served per object; undefined until the first serve. */
  #last: Map<string, string | undefined> | undefined;
  readonly #copies = new WeakMap<object, { keptOn: Ref; copy: Workload | Service }>();
  #held: HeldUser[] = [];

  get held(): readonly HeldUser[] {
    return this.#held;
  }

  serve(compiled: CompiledConfig, ready: (waypoint: string) => boolean): CompiledConfig {
    const prev = this.#last;
    const next = new Map<string, string | undefined>();
    const lastRef = new Map<string, Ref>();
    const held: HeldUser[] = [];
    // Refs of the previous bindings, to rebuild a held object's waypoint field.
    const refs = new Map<string, Ref>();
    for (const o of [...compiled.workloads, ...compiled.services])
      if (o.waypoint) refs.set(waypointName(o.waypoint)!, o.waypoint);
    for (const [name, ref] of this.#refs) if (!refs.has(name)) refs.set(name, ref);
    const pick = <T extends Workload | Service>(key: string, object: string, o: T): T => {
      const want = waypointName(o.waypoint);
      let out = o;
      if (want !== undefined && prev?.has(key) && !ready(want)) {
        const keptOn = prev.get(key);
        if (keptOn !== want) {
          held.push({ object, waypoint: want, keptOn });
          out = this.#copy(o, keptOn === undefined ? undefined : refs.get(keptOn));
        }
      }
      const served = waypointName(out.waypoint);
      next.set(key, served);
      if (served !== undefined) lastRef.set(served, out.waypoint);
      return out;
    };
    const served: CompiledConfig = {
      ...compiled,
      workloads: compiled.workloads.map((w) => pick(`w/${w.uid}`, `Pod/${w.namespace}/${w.name}`, w)),
      services: compiled.services.map((s) =>
        pick(`s/${s.namespace}/${s.hostname}`, `Service/${s.namespace}/${s.name}`, s),
      ),
    };
    this.#last = next;
    this.#refs = lastRef;
    this.#held = held.sort((a, b) => a.object.localeCompare(b.object));
    return served;
  }

  #refs = new Map<string, Ref>();

  /** The same copy for the same object and binding, so the xDS server's encoding memo holds. */
  #copy<T extends Workload | Service>(o: T, keptOn: Ref): T {
    const memo = this.#copies.get(o);
    if (memo !== undefined && memo.keptOn === keptOn) return memo.copy as T;
    const copy = { ...o };
    if (keptOn === undefined) delete copy.waypoint;
    else copy.waypoint = keptOn;
    this.#copies.set(o, { keptOn, copy });
    return copy;
  }
}

/** `ns/name` of a waypoint reference (its hostname's first label). */
export function waypointName(ref: Ref): string | undefined {
  const h = ref?.hostname;
  return h ? `${h.namespace}/${h.hostname.split('.')[0]}` : undefined;
}
