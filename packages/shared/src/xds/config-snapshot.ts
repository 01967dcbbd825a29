import type { Authorization } from '../authz/policy-model.js';
import type { Service, Workload } from '../model/workload.js';
import { serviceKey } from '../model/workload.js';
import type { DecodedAddress } from './address-codec.js';
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
 * that needs it fails closed instead of going around the waypoint (docs/design.md §5).
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
  const workloads = new Map<string, Workload>();
  const services = new Map<string, Service>();
  const pending = new Map<string, PendingResource>();
  for (const name of accepted.addresses.keys()) place(accepted, name, workloads, services, pending);
  const authorizations = new Map<string, Authorization>();
  for (const [name, a] of accepted.authorizations) authorizations.set(name, a.value);
  return freeze(accepted, activatedAt, workloads, services, authorizations, pending, {
    [ADDRESS_TYPE_URL]: versionsOf(accepted.addresses),
    [AUTHORIZATION_TYPE_URL]: versionsOf(accepted.authorizations),
  });
}

/**
 * The snapshot after `changed`/`removed` names of one type were applied to `prev.accepted`,
 * touching only those names unless the set of known services changed (then every pending
 * reference may resolve or break, and it rebuilds). Same result as buildSnapshot.
 */
export function advanceSnapshot(
  prev: ConfigSnapshot,
  accepted: AcceptedState,
  typeUrl: string,
  changed: readonly string[],
  removed: readonly string[],
  activatedAt: number,
): ConfigSnapshot {
  const isService = (s: AcceptedState, n: string) => s.addresses.get(n)?.value.kind === 'service';
  const touched = [...changed, ...removed];
  if (
    typeUrl === ADDRESS_TYPE_URL &&
    touched.some((n) => isService(prev.accepted, n) !== isService(accepted, n))
  ) {
    return buildSnapshot(accepted, activatedAt);
  }
  const versions = { ...prev.versions };
  const workloads = new Map(prev.workloads);
  const services = new Map(prev.services);
  const authorizations = new Map(prev.authorizations);
  const pending = new Map(prev.pending.map((p) => [p.name, p]));
  const source = typeUrl === ADDRESS_TYPE_URL ? accepted.addresses : accepted.authorizations;
  const typeVersions = new Map(prev.versions[typeUrl]);
  for (const name of touched) {
    workloads.delete(name);
    services.delete(name);
    authorizations.delete(name);
    pending.delete(name);
    const a = source.get(name);
    if (a === undefined) typeVersions.delete(name);
    else typeVersions.set(name, a.version);
    if (typeUrl === ADDRESS_TYPE_URL) place(accepted, name, workloads, services, pending);
    else if (a !== undefined) authorizations.set(name, a.value as Authorization);
  }
  versions[typeUrl] = typeVersions;
  return freeze(accepted, activatedAt, workloads, services, authorizations, pending, versions);
}

/** Puts one accepted address where it belongs: active, or pending on a missing reference. */
function place(
  accepted: AcceptedState,
  name: string,
  workloads: Map<string, Workload>,
  services: Map<string, Service>,
  pending: Map<string, PendingResource>,
): void {
  const a = accepted.addresses.get(name);
  if (a === undefined) return;
  const missing = missingReferences(a.value, (key) => accepted.addresses.get(key)?.value.kind === 'service');
  if (missing.length > 0) pending.set(name, { name, missing });
  else if (a.value.kind === 'workload') workloads.set(name, a.value.workload);
  else services.set(name, a.value.service);
}

function freeze(
  accepted: AcceptedState,
  activatedAt: number,
  workloads: Map<string, Workload>,
  services: Map<string, Service>,
  authorizations: Map<string, Authorization>,
  pending: Map<string, PendingResource>,
  versions: Record<string, ReadonlyMap<string, string>>,
): ConfigSnapshot {
  return Object.freeze({
    workloads,
    services,
    authorizations,
    pending: Object.freeze([...pending.values()].sort((a, b) => a.name.localeCompare(b.name))),
    versions: Object.freeze(versions),
    accepted,
    activatedAt,
  });
}

/** A waypoint named by hostname must be a known Service (key `namespace/hostname`). */
function missingReferences(address: DecodedAddress, isKnownService: (key: string) => boolean): string[] {
  const ref = address.kind === 'workload' ? address.workload.waypoint : address.service.waypoint;
  if (ref?.hostname === undefined) return [];
  const key = serviceKey(ref.hostname);
  if (address.kind === 'service' && key === serviceKey(address.service)) return [];
  return isKnownService(key) ? [] : [key];
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
