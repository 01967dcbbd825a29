import { encodeMessage } from './message-codec.js';
import { protoType } from './proto-root.js';
import type { WireAny } from './wire-types.js';

/** google.protobuf.Struct as protobufjs's toObject/fromObject see it. */
interface WireStructValue {
  nullValue?: number;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: WireStruct;
  listValue?: { values?: WireStructValue[] };
}
export interface WireStruct {
  fields?: Record<string, WireStructValue>;
}

export interface WireNode {
  id?: string;
  cluster?: string;
  metadata?: WireStruct;
  buildVersion?: string;
}

export interface DeltaRequest {
  node?: WireNode;
  typeUrl?: string;
  resourceNamesSubscribe?: string[];
  resourceNamesUnsubscribe?: string[];
  initialResourceVersions?: Record<string, string>;
  responseNonce?: string;
  errorDetail?: { code?: number; message?: string };
}

export interface DeltaResource {
  version?: string;
  resource?: WireAny;
  name?: string;
  aliases?: string[];
}

export interface DeltaResponse {
  systemVersionInfo?: string;
  resources?: DeltaResource[];
  typeUrl?: string;
  nonce?: string;
  removedResources?: string[];
}

export const ADS_METHOD = '/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources';
export const CA_METHOD = '/istio.v1.auth.IstioCertificateService/CreateCertificate';

const TO_OBJECT = { longs: Number, arrays: true, objects: true } as const;

function codecFor<T extends object>(typeName: string) {
  return {
    serialize: (value: T): Buffer => Buffer.from(encodeMessage(typeName, value)),
    /** grpc-js turns a throw here into an INTERNAL status on the call, which is what malformed framing deserves. */
    deserialize: (bytes: Buffer): T => {
      const type = protoType(typeName);
      return type.toObject(type.decode(bytes), TO_OBJECT) as T;
    },
  };
}

export const deltaRequestCodec = codecFor<DeltaRequest>('envoy.service.discovery.v3.DeltaDiscoveryRequest');
export const deltaResponseCodec = codecFor<DeltaResponse>(
  'envoy.service.discovery.v3.DeltaDiscoveryResponse',
);

export interface CertificateRequest {
  csr?: string;
  validityDuration?: number;
  metadata?: WireStruct;
}
export interface CertificateResponse {
  certChain?: string[];
}
export const certificateRequestCodec = codecFor<CertificateRequest>('istio.v1.auth.IstioCertificateRequest');
export const certificateResponseCodec = codecFor<CertificateResponse>(
  'istio.v1.auth.IstioCertificateResponse',
);

/** Plain JS metadata to a Struct of strings, numbers and booleans. */
export function toStruct(values: Record<string, string | number | boolean>): WireStruct {
  const fields: Record<string, WireStructValue> = {};
  for (const [k, v] of Object.entries(values)) {
    fields[k] =
      typeof v === 'string'
        ? { stringValue: v }
        : typeof v === 'number'
          ? { numberValue: v }
          : { boolValue: v };
  }
  return { fields };
}

export function structString(struct: WireStruct | undefined, key: string): string | undefined {
  const v = struct?.fields?.[key]?.stringValue;
  return typeof v === 'string' ? v : undefined;
}
