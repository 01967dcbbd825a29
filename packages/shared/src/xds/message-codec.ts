import type protobuf from 'protobufjs';
import { err, ok, type Result } from '../result.js';
import { protoType } from './proto-root.js';
import type { Reasons } from './validate.js';
import type { WireExtension } from './wire-types.js';

/** enums stay numbers so the decoder, not protobufjs, decides what an unknown value means. */
const TO_OBJECT: protobuf.IConversionOptions = { longs: Number, arrays: true, objects: true, oneofs: true };

/** Decodes bytes into a plain object; malformed protobuf is a reason, never a throw. */
export function decodeMessage<T>(typeName: string, bytes: Uint8Array): Result<T> {
  try {
    const type = protoType(typeName);
    return ok(type.toObject(type.decode(bytes), TO_OBJECT) as T);
  } catch (e) {
    return err([`malformed ${typeName}: ${(e as Error).message}`]);
  }
}

/**
 * Encodes canonically: proto3 fields with implicit presence are left out when they hold
 * their default (protobufjs would write them when set explicitly), so our bytes match
 * what protoc-generated encoders emit.
 */
export function encodeMessage(typeName: string, value: object): Uint8Array {
  const type = protoType(typeName);
  const message = type.fromObject(value);
  pruneDefaults(type, message as unknown as Record<string, unknown>);
  return type.encode(message).finish();
}

function pruneDefaults(type: protobuf.Type, message: Record<string, unknown>): void {
  for (const field of type.fieldsArray) {
    const v = message[field.name];
    if (v === undefined || v === null) continue;
    const nested = field.resolvedType;
    if (field.map) {
      if (nested && 'fieldsArray' in nested) {
        for (const entry of Object.values(v as Record<string, Record<string, unknown>>))
          pruneDefaults(nested, entry);
      }
    } else if (field.repeated) {
      if (nested && 'fieldsArray' in nested)
        for (const e of v as Record<string, unknown>[]) pruneDefaults(nested, e);
    } else if (nested && 'fieldsArray' in nested) {
      pruneDefaults(nested, v as Record<string, unknown>);
    } else if (field.partOf === null && isDefault(v)) {
      delete message[field.name];
    }
  }
}

function isDefault(v: unknown): boolean {
  if (v === 0 || v === '' || v === false) return true;
  if (v instanceof Uint8Array) return v.length === 0;
  // protobufjs represents 64-bit fields as Long when the long library is present.
  const long = v as { low?: number; high?: number };
  return typeof v === 'object' && long.low === 0 && long.high === 0;
}

const STRUCT_TYPE_URL = 'type.googleapis.com/google.protobuf.Struct';
const LABELS_EXTENSION = 'zmesh.io/labels';

interface WireStruct {
  fields?: Record<string, { stringValue?: string; kind?: string }>;
}

/**
 * zmesh's tenancy label overrides are not on Istio's wire: they ride in an `Extension`
 * named `zmesh.io/labels` whose config is a `google.protobuf.Struct` of strings. Other
 * extensions are ignored, as Istio's clients do.
 */
export const labelsCodec = {
  toExtension(labels: Record<string, string>): WireExtension {
    const fields = Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, { stringValue: v }]));
    return {
      name: LABELS_EXTENSION,
      config: { type_url: STRUCT_TYPE_URL, value: encodeMessage('google.protobuf.Struct', { fields }) },
    };
  },

  fromExtensions(
    extensions: WireExtension[],
    path: string,
    reasons: Reasons,
  ): Record<string, string> | undefined {
    const i = extensions.findIndex((e) => e.name === LABELS_EXTENSION);
    const ext = extensions[i];
    if (ext === undefined) return undefined;
    const at = `${path}[${i}]`;
    if (ext.config?.type_url !== STRUCT_TYPE_URL) {
      reasons.push(
        `${at}.config: type ${JSON.stringify(ext.config?.type_url ?? '')}, want ${STRUCT_TYPE_URL}`,
      );
      return undefined;
    }
    const struct = decodeMessage<WireStruct>('google.protobuf.Struct', ext.config.value ?? new Uint8Array());
    if (!struct.ok) {
      reasons.push(...struct.error.map((r) => `${at}.config: ${r}`));
      return undefined;
    }
    const labels: Record<string, string> = {};
    for (const [k, v] of Object.entries(struct.value.fields ?? {})) {
      if (v.kind !== 'stringValue' || typeof v.stringValue !== 'string')
        reasons.push(`${at}.config.${k}: not a string`);
      else labels[k] = v.stringValue;
    }
    return labels;
  },
};
