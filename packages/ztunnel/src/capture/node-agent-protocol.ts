import { err, ok, type Result } from '@zmesh/shared';

/**
 * The node-agent protocol (docs/design.md §6): newline-delimited JSON on a root-only Unix
 * socket. One reply line per request line, in order. An optional `id` is echoed back.
 *   {"op":"AddWorkload","uid":"…","netns":"/run/netns/…","cgroup":"/sys/fs/cgroup/…"}
 *   {"op":"DelWorkload","uid":"…"}
 *   {"op":"Snapshot","uids":["…"]}      the complete set of pods on this node
 * Replies: {"ok":true} or {"ok":false,"code":"ZM_ERR_…","error":"…"}.
 */
export type NodeAgentRequest =
  | { op: 'AddWorkload'; id?: string | number; uid: string; netns: string; cgroup: string }
  | { op: 'DelWorkload'; id?: string | number; uid: string }
  | { op: 'Snapshot'; id?: string | number; uids: string[] };

export type NodeAgentReply =
  | { ok: true; id?: string | number }
  | { ok: false; id?: string | number; code: string; error: string };

/** Longest accepted request line; longer ones are answered with an error and skipped. */
export const MAX_LINE_BYTES = 64 * 1024;
/** Most uids one Snapshot may carry. */
export const MAX_SNAPSHOT_UIDS = 4096;
const MAX_FIELD = 4096;

export function decodeRequest(line: string): Result<NodeAgentRequest> {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch {
    return err(['request is not JSON']);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return err(['request is not an object']);
  const r = raw as Record<string, unknown>;
  const reasons: string[] = [];
  const id = typeof r.id === 'string' || typeof r.id === 'number' ? { id: r.id } : {};
  const str = (k: string): string => {
    const v = r[k];
    if (typeof v !== 'string' || v.length === 0 || v.length > MAX_FIELD)
      reasons.push(`${k}: want a non-empty string`);
    return v as string;
  };
  switch (r.op) {
    case 'AddWorkload': {
      const req = { op: r.op, ...id, uid: str('uid'), netns: str('netns'), cgroup: str('cgroup') } as const;
      return reasons.length > 0 ? err(reasons) : ok(req);
    }
    case 'DelWorkload': {
      const req = { op: r.op, ...id, uid: str('uid') } as const;
      return reasons.length > 0 ? err(reasons) : ok(req);
    }
    case 'Snapshot': {
      const uids = r.uids;
      if (
        !Array.isArray(uids) ||
        uids.length > MAX_SNAPSHOT_UIDS ||
        !uids.every((u) => typeof u === 'string')
      ) {
        return err([`uids: want at most ${MAX_SNAPSHOT_UIDS} strings`]);
      }
      return ok({ op: r.op, ...id, uids: uids as string[] });
    }
    default:
      return err([`unknown op ${JSON.stringify(r.op)?.slice(0, 64)}`]);
  }
}

/** The request's id, when a request that failed to decode still carried one. */
export function idOf(line: string): { id?: string | number } {
  try {
    const id = (JSON.parse(line) as { id?: unknown })?.id;
    return typeof id === 'string' || typeof id === 'number' ? { id } : {};
  } catch {
    return {};
  }
}
