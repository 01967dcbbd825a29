import { err, ok, type Result } from '../result.js';

/**
 * A waypoint's whole config as one xDS resource, named `<namespace>/<gateway>`. Istio has
 * no message for it (its waypoint is Envoy, fed LDS/CDS); ours is
 * `message WaypointConfig { bytes json = 1; }` — the same wire form as
 * google.protobuf.BytesValue — holding the UTF-8 JSON that `decodeWaypointConfig` reads, so
 * the waypoint validates it exactly as it validates its `--config` file (docs/xds.md).
 */
export const WAYPOINT_CONFIG_TYPE_URL = 'type.googleapis.com/zmesh.waypoint.WaypointConfig';
/** Far above any namespace's config; a payload past it is refused rather than parsed. */
export const MAX_WAYPOINT_CONFIG_BYTES = 16 * 1024 * 1024;
/** Field 1, wire type 2 (length-delimited): (1 << 3) | 2. */
const JSON_FIELD_TAG = 0x0a;

export function waypointResourceName(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

export function encodeWaypointResource(config: unknown): Uint8Array {
  const json = Buffer.from(JSON.stringify(config), 'utf8');
  return Buffer.concat([Buffer.from([JSON_FIELD_TAG]), varint(json.length), json]);
}

/** Bytes → the plain object inside, or why not. Never throws. */
export function decodeWaypointResource(bytes: Uint8Array): Result<unknown> {
  if (bytes.length === 0) return ok({});
  if (bytes[0] !== JSON_FIELD_TAG) return err([`field tag 0x${bytes[0]!.toString(16)}, want 0x0a (json)`]);
  let length = 0;
  let shift = 0;
  let at = 1;
  for (; at < bytes.length && at <= 5; at++) {
    const b = bytes[at]!;
    length += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if ((b & 0x80) === 0) break;
  }
  at++;
  if (length > MAX_WAYPOINT_CONFIG_BYTES) return err([`${length} bytes, over ${MAX_WAYPOINT_CONFIG_BYTES}`]);
  if (at + length !== bytes.length) return err([`length ${length} does not match the payload`]);
  try {
    return ok(JSON.parse(Buffer.from(bytes.subarray(at)).toString('utf8')) as unknown);
  } catch (e) {
    return err([`json: ${(e as Error).message}`]);
  }
}

function varint(n: number): Buffer {
  const out: number[] = [];
  let v = n;
  while (v >= 0x80) {
    out.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return Buffer.from(out);
}
