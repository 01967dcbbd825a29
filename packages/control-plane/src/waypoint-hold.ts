import { logger, type Service, type Workload } from '@zmesh/shared';
import type { CompiledConfig } from './compiler.js';
import type { Bindings } from './store/state-store.js';

type Ref = Workload['waypoint'];

const log = logger('waypoint-hold');

/** A workload or service newly bound to a waypoint that is not ready, kept on its previous path. */
export interface HeldUser {
  /** `Pod/ns/name` or `Service/ns/name`. */
  object: string;
  /** The waypoint (`ns/name`) it is bound to in the config. */
  waypoint: string;
  /** The waypoint it is still served through; undefined: direct (ztunnel to ztunnel). */
  keptOn: string | undefined;
}

/** What serving a compiled config through the hold gives. */
export interface HoldDecision {
  /** The config to serve. */
  config: CompiledConfig;
  /** The last-served bindings once `config` is served: recorded in the store before it is. */
  bindings: Map<string, string>;
  held: HeldUser[];
}

/**
 * The transition hold: traffic is never cut by a new waypoint binding. A workload or
 * service the control plane has served before, whose compiled waypoint differs from the
 * one it was last served with and is not ready (no connected waypoint has ACKed its
 * config), keeps being served with its last binding (another waypoint, or none: direct)
 * until the new waypoint ACKs; then it switches. Once served through a waypoint, an object
 * stays bound to it: a waypoint that disconnects later fails its users closed, it is never
 * bypassed. An object never served before (a new pod, a store that never served) is served
 * as compiled.
 *
 * The last-served bindings are not this object's: they live in the state store
 * (`Bindings`, store/state-store.ts) and are written before what they describe is served,
 * in the same transaction as the change that moves them, so every replica and a restarted
 * control plane decide the same. Same compiled config, same bindings and same readiness
 * give the same output (the resources stay content-hashed).
 */
export class WaypointHold {
  readonly #copies = new WeakMap<object, { keptOn: Ref; copy: Workload | Service }>();
  readonly #keys = new WeakMap<object, string>();
  /** Stored binding text → the reference it names (few distinct: one per waypoint). */
  #decoded = new Map<string, Ref>();
  readonly #unreadable = new Set<string>();
  #held: HeldUser[] = [];

  /** `onUnreadable`: a stored binding that is not a reference was read (each distinct text once). */
  constructor(private readonly onUnreadable: () => void = () => {}) {}

  get held(): readonly HeldUser[] {
    return this.#held;
  }

  /** Records `decision` as the one served (proxy-status, the gauges). */
  served(decision: HoldDecision): void {
    this.#held = decision.held;
  }

  decide(compiled: CompiledConfig, ready: (waypoint: string) => boolean, last: Bindings): HoldDecision {
    const next = new Map<string, string>();
    const held: HeldUser[] = [];
    const decoded = new Map<string, Ref>();
    // Current refs of the waypoints by name, to rebuild a held object's waypoint field;
    // a waypoint no compiled object names any more is rebuilt from its stored reference.
    const refs = new Map<string, Ref>();
    for (const o of [...compiled.workloads, ...compiled.services])
      if (o.waypoint) refs.set(waypointName(o.waypoint)!, o.waypoint);
    const pick = <T extends Workload | Service>(kind: 'Pod' | 'Service', o: T): T => {
      const key = this.#keyOf(o);
      const want = waypointName(o.waypoint);
      let out = o;
      const stored = want === undefined ? undefined : last.get(key);
      if (want !== undefined && stored !== undefined && !ready(want)) {
        const keptRef = this.#decode(stored, decoded);
        const keptOn = waypointName(keptRef);
        // Unreadable text is not "direct": such an object is served as compiled.
        if (keptOn !== want && (stored === '' || keptRef !== undefined)) {
          held.push({ object: `${kind}/${o.namespace}/${o.name}`, waypoint: want, keptOn });
          out = this.#copy(o, keptOn === undefined ? undefined : (refs.get(keptOn) ?? keptRef));
        }
      }
      next.set(key, out.waypoint === undefined ? '' : JSON.stringify(out.waypoint));
      return out;
    };
    const config: CompiledConfig = {
      ...compiled,
      workloads: compiled.workloads.map((w) => pick('Pod', w)),
      services: compiled.services.map((s) => pick('Service', s)),
    };
    this.#decoded = decoded;
    return { config, bindings: next, held: held.sort((a, b) => a.object.localeCompare(b.object)) };
  }

  /**
   * The reference a stored binding names; undefined for direct, and for text that is not a
   * reference (a store written by something else), which is then served as compiled.
   */
  #decode(text: string, seen: Map<string, Ref>): Ref {
    if (text === '') return undefined;
    let ref = seen.get(text) ?? this.#decoded.get(text);
    if (ref === undefined) {
      try {
        const o = JSON.parse(text) as Ref;
        ref = waypointName(o) === undefined || typeof o?.hbonePort !== 'number' ? undefined : o;
      } catch {
        ref = undefined;
      }
      // Logged and counted once per text: the record that serves the object replaces it. The
      // set is bounded; past 64 texts each read is counted and none logged.
      if (ref === undefined && !this.#unreadable.has(text)) {
        this.onUnreadable();
        if (this.#unreadable.size < 64) {
          this.#unreadable.add(text);
          log.warn(
            { code: 'ZM_ERR_STATE_STORE', binding: text.slice(0, 200) },
            'stored waypoint binding is not a reference; served as compiled (zmesh_cp_waypoint_bindings_unreadable_total)',
          );
        }
      }
    }
    if (ref !== undefined) seen.set(text, ref);
    return ref;
  }

  /**
   * The binding key of a compiled object (`Bindings`): the same string for the same object,
   * as compiled objects are kept while unchanged, so map lookups do not rebuild it.
   */
  #keyOf(o: Workload | Service): string {
    let key = this.#keys.get(o);
    if (key === undefined) {
      key = 'uid' in o ? `${o.namespace}/w/${o.uid}` : `${o.namespace}/s/${o.hostname}`;
      this.#keys.set(o, key);
    }
    return key;
  }

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
