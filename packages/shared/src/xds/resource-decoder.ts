import { type Authorization, policyKey } from '../authz/policy-model.js';
import type { Result } from '../result.js';
import { type DecodedAddress, decodeAddress } from './address-codec.js';
import { decodeAuthorization } from './authorization-codec.js';
import { type Accepted, type AcceptedState, expectedName } from './config-snapshot.js';
import { ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL } from './proto-root.js';

/** One resource as it arrives in a DeltaDiscoveryResponse. */
export interface RawResource {
  name: string;
  version: string;
  /** `Any.type_url` of the payload. */
  typeUrl: string;
  bytes: Uint8Array;
}

export interface DecodedBatch {
  addresses: Map<string, Accepted<DecodedAddress>>;
  authorizations: Map<string, Accepted<Authorization>>;
  /** `name: reason` for every rejected resource; these change nothing. */
  reasons: string[];
}

/** Decodes and validates a batch off to the side; nothing is applied here. */
export function decodeResources(typeUrl: string, resources: readonly RawResource[]): DecodedBatch {
  const batch: DecodedBatch = { addresses: new Map(), authorizations: new Map(), reasons: [] };
  for (const r of resources) {
    const problems = decodeOne(typeUrl, r, batch);
    for (const p of problems) batch.reasons.push(`${r.name || '(unnamed)'}: ${p}`);
  }
  return batch;
}

function decodeOne(typeUrl: string, r: RawResource, batch: DecodedBatch): string[] {
  if (r.typeUrl !== typeUrl) return [`payload type ${r.typeUrl} in a ${typeUrl} response`];
  if (typeUrl === ADDRESS_TYPE_URL) {
    const result = decodeAddress(r.bytes);
    return accept(result, r, expectedName, batch.addresses);
  }
  if (typeUrl === AUTHORIZATION_TYPE_URL) {
    const result = decodeAuthorization(r.bytes);
    return accept(result, r, policyKey, batch.authorizations);
  }
  return [`unsupported type ${typeUrl}`];
}

function accept<T>(
  result: Result<T>,
  r: RawResource,
  nameOf: (value: T) => string,
  into: Map<string, Accepted<T>>,
): string[] {
  if (!result.ok) return result.error;
  const want = nameOf(result.value);
  if (r.name !== want) return [`resource name does not match its content (${want})`];
  into.set(r.name, { version: r.version, value: result.value, bytes: r.bytes });
  return [];
}

/** Returns the state with the batch's valid resources applied and `removed` names dropped. */
export function applyBatch(
  state: AcceptedState,
  typeUrl: string,
  batch: DecodedBatch,
  removed: readonly string[],
): AcceptedState {
  if (typeUrl === ADDRESS_TYPE_URL) {
    return { ...state, addresses: merged(state.addresses, batch.addresses, removed) };
  }
  return { ...state, authorizations: merged(state.authorizations, batch.authorizations, removed) };
}

function merged<T>(
  base: ReadonlyMap<string, T>,
  updates: ReadonlyMap<string, T>,
  removed: readonly string[],
): ReadonlyMap<string, T> {
  const out = new Map(base);
  for (const name of removed) out.delete(name);
  for (const [name, value] of updates) out.set(name, value);
  return out;
}
