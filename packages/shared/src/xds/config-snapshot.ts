import type { Service, Workload } from '../model/workload.js';
import { serviceKey } from '../model/workload.js';
import type { DecodedAddress } from './address-codec.js';
import type { Authorization } from './authorization.js';
import { ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL } from './proto-root.js';

/** One accepted resource: its decoded value, its version and the bytes it came in. */
export interface Accepted<T> {
  readonly version: string;
  readonly value: T;
  /** The wire bytes, kept so the on-disk snapshot is re-validated by the same decoder on load. */
  readonly bytes: Uint8Array;
}

/** Every valid resource received, including those whose references are not yet resolved. */
export interface AcceptedState {
  readonly addresses: ReadonlyMap<string, Accepted<DecodedAddress>>;
  readonly authorizations: ReadonlyMap<string, Accepted<Authorization>>;
}

export interface PendingResource {
  readonly name: string;
  /** Resource names (`namespace/hostname` of services) it waits for. */
  readonly missing: readonly string[];
}

/**
 * The configuration a proxy acts on, swapped atomically as a whole. A workload or service
 * whose waypoint is not yet known is *pending*: absent from the active maps, so traffic
 * that needs it fails closed instead of going around the waypoint (DESIGN.md §5).
 */
export interface ConfigSnapshot {
  readonly workloads: ReadonlyMap<string, Workload>;
  readonly services: ReadonlyMap<string, Service>;
  readonly authorizations: ReadonlyMap<string, Authorization>;
  readonly pending: readonly PendingResource[];
  /** Per type URL: resource name → version of every accepted resource (pending included). */
  readonly versions: Readonly<Record<string, ReadonlyMap<string, string>>>;
  readonly accepted: AcceptedState;
  /** Milliseconds since the epoch when this snapshot became active (or was written, if loaded). */
  readonly activatedAt: number;
}

export const EMPTY_STATE: AcceptedState = { addresses: new Map(), authorizations: new Map() };

export function buildSnapshot(accepted: AcceptedState, activatedAt: number): ConfigSnapshot {
  const known = new Set<string>();
  for (const [name, a] of accepted.addresses) if (a.value.kind === 'service') known.add(name);
  const workloads = new Map<string, Workload>();
  const services = new Map<string, Service>();
  const pending: PendingResource[] = [];
  for (const [name, a] of accepted.addresses) {
    const missing = missingReferences(a.value, known);
    if (missing.length > 0) pending.push({ name, missing });
    else if (a.value.kind === 'workload') workloads.set(name, a.value.workload);
    else services.set(name, a.value.service);
  }
  const authorizations = new Map<string, Authorization>();
  for (const [name, a] of accepted.authorizations) authorizations.set(name, a.value);
  return Object.freeze({
    workloads,
    services,
    authorizations,
    pending: Object.freeze(pending),
    versions: Object.freeze({
      [ADDRESS_TYPE_URL]: versionsOf(accepted.addresses),
      [AUTHORIZATION_TYPE_URL]: versionsOf(accepted.authorizations),
    }),
    accepted,
    activatedAt,
  });
}

/** A waypoint named by hostname must be a known Service (key `namespace/hostname`). */
function missingReferences(address: DecodedAddress, knownServices: ReadonlySet<string>): string[] {
  const ref = address.kind === 'workload' ? address.workload.waypoint : address.service.waypoint;
  if (ref?.hostname === undefined) return [];
  const key = serviceKey(ref.hostname);
  if (address.kind === 'service' && key === serviceKey(address.service)) return [];
  return knownServices.has(key) ? [] : [key];
}

function versionsOf(map: ReadonlyMap<string, Accepted<unknown>>): ReadonlyMap<string, string> {
  const out = new Map<string, string>();
  for (const [name, a] of map) out.set(name, a.version);
  return out;
}

/** The xDS resource name a decoded value must arrive under. */
export function expectedName(address: DecodedAddress): string {
  return address.kind === 'workload' ? address.workload.uid : serviceKey(address.service);
}
