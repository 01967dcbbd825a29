/**
 * Label and field selectors as the API server reads them (`labelSelector=`, `fieldSelector=`
 * query parameters). A selector that does not parse is a 400 at the caller.
 */

type Requirement =
  | { op: 'exists' | 'notexists'; key: string }
  | { op: 'in' | 'notin'; key: string; values: string[] };

export type Matcher = (labels: Record<string, string>) => boolean;

/**
 * Parses `a=b,c!=d,e,!f,g in (x,y),h notin (z)` (Kubernetes' set-based grammar; `==` is `=`).
 * Throws with the reason on a bad selector.
 */
export function parseLabelSelector(text: string): Matcher {
  const reqs: Requirement[] = [];
  for (const part of splitTopLevel(text)) {
    const p = part.trim();
    if (p === '') continue;
    let m = /^([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(p);
    if (m) {
      const values = (m[3] ?? '').split(',').map((v) => v.trim());
      reqs.push({ op: m[2] as 'in' | 'notin', key: m[1] as string, values });
      continue;
    }
    m = /^([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)$/.exec(p);
    if (m) {
      reqs.push({ op: m[2] === '!=' ? 'notin' : 'in', key: m[1] as string, values: [m[3] as string] });
      continue;
    }
    m = /^(!?)([\w./-]+)$/.exec(p);
    if (m) {
      reqs.push({ op: m[1] === '!' ? 'notexists' : 'exists', key: m[2] as string });
      continue;
    }
    throw new Error(`unable to parse requirement: ${JSON.stringify(p)}`);
  }
  return (labels) =>
    reqs.every((r) => {
      const v = labels[r.key];
      switch (r.op) {
        case 'exists':
          return v !== undefined;
        case 'notexists':
          return v === undefined;
        case 'in':
          return v !== undefined && r.values.includes(v);
        default:
          return v === undefined || !r.values.includes(v);
      }
    });
}

/** `a,b in (c,d)` split on the commas outside parentheses. */
function splitTopLevel(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of text) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur);
      cur = '';
    } else cur += ch;
  }
  out.push(cur);
  return out;
}

export type FieldMatcher = (object: Record<string, unknown>) => boolean;

/**
 * Parses `metadata.name=x,spec.nodeName!=y` (`=`, `==`, `!=` only, as the API server). Which
 * fields a resource supports is the caller's: `fields` lists them, anything else is refused
 * as the API server refuses it ("field label not supported").
 */
export function parseFieldSelector(text: string, fields: readonly string[]): FieldMatcher {
  const reqs: Array<{ path: string; equal: boolean; value: string }> = [];
  for (const part of text.split(',')) {
    const p = part.trim();
    if (p === '') continue;
    const m = /^([\w.]+)\s*(==|=|!=)\s*(.*)$/.exec(p);
    if (!m) throw new Error(`invalid field selector: ${JSON.stringify(p)}`);
    const path = m[1] as string;
    if (!fields.includes(path)) throw new Error(`field label not supported: ${path}`);
    reqs.push({ path, equal: m[2] !== '!=', value: m[3] as string });
  }
  return (object) => reqs.every((r) => (fieldValue(object, r.path) === r.value) === r.equal);
}

function fieldValue(object: Record<string, unknown>, path: string): string {
  let cur: unknown = object;
  for (const seg of path.split('.')) {
    cur = cur !== null && typeof cur === 'object' ? (cur as Record<string, unknown>)[seg] : undefined;
  }
  return cur === undefined || cur === null ? '' : String(cur);
}
