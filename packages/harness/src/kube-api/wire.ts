import type { IncomingMessage, ServerResponse } from 'node:http';
import type { KubeObject, ResourceType } from './resources.js';

/**
 * The API server double's wire: Status errors, JSON and watch-event writes, request bodies
 * and the patches it applies (merge and JSON patch; strategic merge is read as merge).
 */
export class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

const MAX_BODY_BYTES = 3 * 1024 * 1024;

export function conflict(type: ResourceType, name: string): ApiError {
  return new ApiError(
    409,
    'Conflict',
    `Operation cannot be fulfilled on ${type.resource}${type.group ? `.${type.group}` : ''} "${name}": ` +
      'the object has been modified; please apply your changes to the latest version and try again',
  );
}

export function statusObject(e: ApiError): unknown {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message: e.message,
    reason: e.reason,
    code: e.code,
  };
}

export function writeEvent(res: ServerResponse, type: string, object: unknown): void {
  if (!res.writableEnded) res.write(`${JSON.stringify({ type, object })}\n`);
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_BODY_BYTES) throw new ApiError(413, 'RequestEntityTooLarge', 'request body too large');
    chunks.push(c);
  }
  if (size === 0) return undefined;
  const text = Buffer.concat(chunks).toString('utf8');
  const type = req.headers['content-type'] ?? 'application/json';
  if (type.startsWith('application/apply-patch'))
    throw new ApiError(415, 'UnsupportedMediaType', 'server-side apply is not implemented by the double');
  try {
    const parsed = JSON.parse(text) as unknown;
    return type.startsWith('application/json-patch+json') ? { jsonPatch: parsed } : parsed;
  } catch {
    throw new ApiError(400, 'BadRequest', 'the request body is not JSON');
  }
}

export function asObject(body: unknown): KubeObject {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new ApiError(400, 'BadRequest', 'the request body is not an object');
  const o = body as KubeObject;
  if (o.metadata === null || typeof o.metadata !== 'object')
    throw new ApiError(422, 'Invalid', 'metadata: Required value');
  return o;
}

/** JSON patch (RFC 6902: add, remove, replace, test) or merge patch (RFC 7386; strategic merge is read as one). */
export function applyPatch(current: KubeObject, body: unknown): KubeObject {
  if (body !== null && typeof body === 'object' && 'jsonPatch' in body) {
    const ops = (body as { jsonPatch: unknown }).jsonPatch;
    if (!Array.isArray(ops)) throw new ApiError(400, 'BadRequest', 'a JSON patch is an array of operations');
    let doc: unknown = clone(current);
    for (const op of ops as Array<{ op: string; path: string; value?: unknown }>) doc = jsonPatchOp(doc, op);
    return asObject(doc);
  }
  return asObject(mergePatch(clone(current), body));
}

function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return clone(patch);
  const out: Record<string, unknown> =
    target !== null && typeof target === 'object' && !Array.isArray(target) ? { ...(target as object) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

function jsonPatchOp(doc: unknown, op: { op: string; path: string; value?: unknown }): unknown {
  const segs = op.path
    .split('/')
    .slice(1)
    .map((s) => s.replaceAll('~1', '/').replaceAll('~0', '~'));
  const last = segs.pop();
  if (last === undefined) throw new ApiError(422, 'Invalid', `JSON patch path ${op.path}: empty`);
  let parent: unknown = doc;
  for (const s of segs) {
    parent =
      parent !== null && typeof parent === 'object' ? (parent as Record<string, unknown>)[s] : undefined;
    if (parent === undefined) throw new ApiError(422, 'Invalid', `JSON patch path ${op.path}: not found`);
  }
  if (parent === null || typeof parent !== 'object')
    throw new ApiError(422, 'Invalid', `JSON patch path ${op.path}: not a container`);
  const rec = parent as Record<string, unknown>;
  const arr = parent as unknown[];
  const isArray = Array.isArray(parent);
  const index = isArray ? (last === '-' ? arr.length : Number(last)) : -1;
  const present = isArray ? index >= 0 && index < arr.length : last in rec;
  switch (op.op) {
    case 'add':
      if (isArray) arr.splice(index, 0, clone(op.value));
      else rec[last] = clone(op.value);
      return doc;
    case 'replace':
    case 'remove':
      if (!present) throw new ApiError(422, 'Invalid', `JSON patch path ${op.path}: not found`);
      if (op.op === 'replace') {
        if (isArray) arr[index] = clone(op.value);
        else rec[last] = clone(op.value);
      } else if (isArray) arr.splice(index, 1);
      else delete rec[last];
      return doc;
    case 'test':
      if (JSON.stringify(isArray ? arr[index] : rec[last]) !== JSON.stringify(op.value))
        throw new ApiError(422, 'Invalid', `JSON patch test failed at ${op.path}`);
      return doc;
    default:
      throw new ApiError(422, 'Invalid', `JSON patch op ${op.op}: not supported by the double`);
  }
}

export function specOf(o: KubeObject): unknown {
  const { metadata: _m, status: _s, ...rest } = o;
  return rest;
}

export function withoutKind(o: KubeObject): KubeObject {
  const { apiVersion: _a, kind: _k, ...rest } = clone(o);
  return rest as KubeObject;
}

export function byKey(a: KubeObject, b: KubeObject): number {
  const ka = `${a.metadata.namespace ?? ''}/${a.metadata.name}`;
  const kb = `${b.metadata.namespace ?? ''}/${b.metadata.name}`;
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

export function clone<T>(v: T): T {
  return v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T);
}
