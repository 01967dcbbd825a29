import type { CompiledConfig } from './compiler.js';
import { KINDS } from './k8s-objects.js';

/** One event, as `zmesh describe` lists it (kubectl's Events). */
export interface ControlPlaneEvent {
  /** ISO-8601. */
  time: string;
  type: 'Normal' | 'Warning';
  reason: string;
  /** `Kind/namespace/name` of the object it is about, when it names one. */
  object?: string;
  /** Who saw it: the source of a refused change (a file, `apply`, `-`), or `control-plane`. */
  from: string;
  message: string;
}

/** Kept at most; the oldest go first. */
export const MAX_EVENTS = 1000;

/**
 * The object a refusal's reason names, as `Kind/ns/name`: `file#doc (Kind ns/name): …`
 * (parsing and admission), `Kind ns/name: …` or `Kind name: …` (admission without an
 * origin), `Kind/ns/name: …` (delete).
 */
export function objectOf(reason: string): string | undefined {
  const m =
    /\((\w+) ([^/\s)]*)\/([^\s)]+)\)/.exec(reason) ??
    /^(\w+) (?:([^/\s:]+)\/)?([^/\s:]+):/.exec(reason) ??
    /^(\w+)\/([^/\s]*)\/([^/\s:]+):/.exec(reason);
  if (!m || !(KINDS as readonly string[]).includes(m[1] as string)) return undefined;
  return `${m[1]}/${m[2] ?? ''}/${m[3]}`;
}

/**
 * The control plane's recent events, in memory and bounded: changes it refused (each
 * reason, on the object it names) and workloads or services bound to or unbound from a
 * waypoint. What proxies did with what was served (ACKs, NACKs, pending) is read from
 * proxy-status instead, as it is now.
 */
export class EventLog {
  readonly #events: ControlPlaneEvent[] = [];

  record(e: Omit<ControlPlaneEvent, 'time'>, now = Date.now()): void {
    this.#events.push({ time: new Date(now).toISOString(), ...e });
    if (this.#events.length > MAX_EVENTS) this.#events.splice(0, this.#events.length - MAX_EVENTS);
  }

  /** A refused apply, delete or reload: one Warning per reason, on the object it names. */
  refused(reasons: readonly string[], source: string, now = Date.now()): void {
    for (const message of reasons) {
      const object = objectOf(message);
      this.record(
        { type: 'Warning', reason: 'Refused', ...(object ? { object } : {}), from: source, message },
        now,
      );
    }
  }

  /** Waypoint bindings that changed between two compiled configs (the first compile binds all). */
  compiled(before: CompiledConfig | undefined, after: CompiledConfig, now = Date.now()): void {
    const bindings = (c: CompiledConfig | undefined) =>
      new Map([
        ...(c?.workloads ?? []).map((w) => [`Pod/${w.namespace}/${w.name}`, waypointOf(w.waypoint)] as const),
        ...(c?.services ?? []).map(
          (s) => [`Service/${s.namespace}/${s.name}`, waypointOf(s.waypoint)] as const,
        ),
      ]);
    const old = bindings(before);
    for (const [object, waypoint] of bindings(after)) {
      const was = old.get(object);
      if (waypoint === was) continue;
      if (waypoint !== undefined)
        this.record(
          {
            type: 'Normal',
            reason: 'WaypointBound',
            object,
            from: 'control-plane',
            message: `uses waypoint ${waypoint}${was ? ` (was ${was})` : ''}`,
          },
          now,
        );
      else if (was !== undefined)
        this.record(
          {
            type: 'Normal',
            reason: 'WaypointUnbound',
            object,
            from: 'control-plane',
            message: `no longer uses waypoint ${was}`,
          },
          now,
        );
    }
  }

  /** Events about `object` (`Kind/namespace/name`), or all of them, oldest first. */
  list(object?: string): ControlPlaneEvent[] {
    return object === undefined ? [...this.#events] : this.#events.filter((e) => e.object === object);
  }
}

function waypointOf(
  ref: { hostname?: { namespace: string; hostname: string } } | undefined,
): string | undefined {
  const h = ref?.hostname;
  return h ? `${h.namespace}/${h.hostname.split('.')[0]}` : undefined;
}
