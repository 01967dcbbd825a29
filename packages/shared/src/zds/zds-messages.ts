import { err, ok, type Result } from '../result.js';
import { decodeMessage, encodeMessage } from '../xds/message-codec.js';

/**
 * Istio's ZDS messages (packages/shared/src/xds/proto/istio/zds/zds.proto, docs/zds.md):
 * the node agent sends WorkloadRequests, ztunnel answers each with a WorkloadResponse
 * carrying an Ack whose non-empty `error` says why the request failed.
 */
export const ZDS_VERSION_V1 = 1;

/** Longest ZDS message either side accepts (Istio's ztunnel reads into 1 KiB). */
export const ZDS_MAX_MESSAGE = 1024;

/** A pod uid as ZDS carries it: a Kubernetes UID, or any short name safe in a path. */
const UID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const NAME_MAX = 253;

export interface ZdsWorkloadInfo {
  name: string;
  namespace: string;
  serviceAccount: string;
}

export type ZdsRequest =
  | { kind: 'add'; uid: string; info?: ZdsWorkloadInfo }
  | { kind: 'keep'; uid: string }
  | { kind: 'del'; uid: string }
  | { kind: 'snapshotSent' };

const HELLO = 'istio.workload.zds.ZdsHello';
const REQUEST = 'istio.workload.zds.WorkloadRequest';
const RESPONSE = 'istio.workload.zds.WorkloadResponse';

export function encodeHello(version = ZDS_VERSION_V1): Uint8Array {
  return encodeMessage(HELLO, { version });
}

/** ztunnel's first message. A version other than V1 is refused. */
export function decodeHello(bytes: Uint8Array): Result<{ version: number }> {
  const decoded = decodeMessage<{ version?: number }>(HELLO, bytes);
  if (!decoded.ok) return decoded;
  const version = decoded.value.version ?? 0;
  return version === ZDS_VERSION_V1 ? ok({ version }) : err([`unsupported ZDS version ${version}`]);
}

export function encodeRequest(req: ZdsRequest): Uint8Array {
  switch (req.kind) {
    case 'add':
      return encodeMessage(REQUEST, {
        add: { uid: req.uid, ...(req.info ? { workloadInfo: req.info } : {}) },
      });
    case 'keep':
      return encodeMessage(REQUEST, { keep: { uid: req.uid } });
    case 'del':
      return encodeMessage(REQUEST, { del: { uid: req.uid } });
    case 'snapshotSent':
      return encodeMessage(REQUEST, { snapshotSent: {} });
  }
}

interface RawRequest {
  payload?: 'add' | 'keep' | 'del' | 'snapshotSent';
  add?: { uid?: string; workloadInfo?: { name?: string; namespace?: string; serviceAccount?: string } };
  keep?: { uid?: string };
  del?: { uid?: string };
}

/** A WorkloadRequest, checked: a known payload, a well-formed uid, bounded names. */
export function decodeRequest(bytes: Uint8Array): Result<ZdsRequest> {
  const decoded = decodeMessage<RawRequest>(REQUEST, bytes);
  if (!decoded.ok) return decoded;
  const r = decoded.value;
  const uidOf = (v: { uid?: string } | undefined): Result<string> =>
    typeof v?.uid === 'string' && UID_PATTERN.test(v.uid)
      ? ok(v.uid)
      : err([`uid ${JSON.stringify(v?.uid ?? '').slice(0, 80)}: want 1-128 of [A-Za-z0-9._-]`]);
  switch (r.payload) {
    case 'add': {
      const uid = uidOf(r.add);
      if (!uid.ok) return uid;
      const wi = r.add?.workloadInfo;
      if (wi === undefined) return ok({ kind: 'add', uid: uid.value });
      const info = {
        name: wi.name ?? '',
        namespace: wi.namespace ?? '',
        serviceAccount: wi.serviceAccount ?? '',
      };
      if (Object.values(info).some((v) => v.length > NAME_MAX || /[/\s]/.test(v)))
        return err(['workload_info: names are at most 253 characters, without slashes or spaces']);
      return ok({ kind: 'add', uid: uid.value, info });
    }
    case 'keep':
    case 'del': {
      const uid = uidOf(r[r.payload]);
      return uid.ok ? ok({ kind: r.payload, uid: uid.value }) : uid;
    }
    case 'snapshotSent':
      return ok({ kind: 'snapshotSent' });
    default:
      return err(['WorkloadRequest has no payload']);
  }
}

/** An Ack; `error` empty means success. */
export function encodeAck(error = ''): Uint8Array {
  return encodeMessage(RESPONSE, { ack: { error } });
}

export function decodeAck(bytes: Uint8Array): Result<{ error: string }> {
  const decoded = decodeMessage<{ ack?: { error?: string } }>(RESPONSE, bytes);
  if (!decoded.ok) return decoded;
  if (decoded.value.ack === undefined) return err(['WorkloadResponse has no ack']);
  return ok({ error: decoded.value.ack.error ?? '' });
}
