/**
 * The waypoint's one reading of a request target (RFC 9112 §3.2, RFC 9113 §8.3.1): what
 * policy matches, what routes match and what the app receives are the same string. A target
 * that cannot be read one way only is refused, never passed on for the app to read its own way.
 *
 * - origin-form (`/path?query`) is the only form sent upstream;
 * - absolute-form (`http://host/path`, HTTP/1.1 only) is reduced to its path, and its
 *   authority must be the request's Host;
 * - `*` only with OPTIONS; authority-form (CONNECT) is not served;
 * - the path is normalized as Istio's `pathNormalization` does (Envoy's RFC 3986
 *   normalization), before anything reads it.
 */

/**
 * Istio's MeshConfig.pathNormalization modes, without NONE (a proxy enforcing L7 policy on
 * paths it did not normalize is the bypass this module exists to close):
 * - BASE: percent-decoding of unreserved characters, `\` → `/`, RFC 3986 §5.2.4 dot segments;
 * - MERGE_SLASHES: BASE, then `//` → `/`;
 * - DECODE_AND_MERGE_SLASHES: `%2F` and `%5C` decoded first, then MERGE_SLASHES.
 * An encoded slash or backslash is refused in the first two, as Envoy's REJECT_REQUEST does.
 */
export const PATH_NORMALIZATIONS = ['BASE', 'MERGE_SLASHES', 'DECODE_AND_MERGE_SLASHES'] as const;
export type PathNormalization = (typeof PATH_NORMALIZATIONS)[number];
export const DEFAULT_PATH_NORMALIZATION: PathNormalization = 'BASE';

/** A `--path-normalization` value the CLI has checked against PATH_NORMALIZATIONS, as a Waypoint option. */
export function normalizationOf(mode: string | undefined): { pathNormalization?: PathNormalization } {
  return mode === undefined ? {} : { pathNormalization: mode as PathNormalization };
}

export type TargetReading =
  | {
      ok: true;
      /** Normalized path, for policy and routes. */
      path: string;
      /** Normalized path plus the query as received: what goes upstream. */
      target: string;
    }
  /** `reason` is a stable snake_case word: a metric label and the 400's reason. */
  | { ok: false; reason: string; detail: string };

const refuse = (reason: string, detail: string): TargetReading => ({ ok: false, reason, detail });

/**
 * Reads `raw` (HTTP/1.1 request-target or HTTP/2 `:path`) for `method`, against the request's
 * authority (`Host` or `:authority`).
 */
export function readRequestTarget(
  protocol: 'h1' | 'h2',
  method: string,
  raw: string,
  authority: string,
  mode: PathNormalization = DEFAULT_PATH_NORMALIZATION,
): TargetReading {
  if (raw === '*') {
    return method === 'OPTIONS'
      ? { ok: true, path: '*', target: '*' }
      : refuse('asterisk_form', `"*" is a target only for OPTIONS, not ${method}`);
  }
  let originForm = raw;
  if (!raw.startsWith('/')) {
    if (protocol === 'h2') return refuse('target_form', ':path must begin with "/"');
    const absolute = /^(https?):\/\/([^/?#]*)(.*)$/i.exec(raw);
    if (!absolute) return refuse('target_form', 'the request target is not origin-form or absolute-form');
    const [, scheme, targetAuthority, rest] = absolute as unknown as [string, string, string, string];
    if (targetAuthority.includes('@')) return refuse('target_userinfo', 'userinfo in the request target');
    if (!sameAuthority(targetAuthority, authority, scheme.toLowerCase() === 'https' ? 443 : 80))
      return refuse('target_authority', 'the request target names another authority than Host');
    originForm = rest.startsWith('/') ? rest : `/${rest}`;
  }
  // A fragment is never part of a request target (RFC 9112 §3.2); servers disagree on it.
  if (originForm.includes('#')) return refuse('target_fragment', '"#" in the request target');
  const q = originForm.indexOf('?');
  const rawPath = q === -1 ? originForm : originForm.slice(0, q);
  const query = q === -1 ? '' : originForm.slice(q);
  const normalized = normalizePath(rawPath, mode);
  if (!normalized.ok) return normalized;
  return { ok: true, path: normalized.path, target: normalized.path + query };
}

/** Host text compared without case, with the scheme's default port filled in on both sides. */
function sameAuthority(a: string, b: string, defaultPort: number): boolean {
  const split = (s: string): [string, string] => {
    const m = /^(\[[^\]]*\]|[^:]*)(?::(\d*))?$/.exec(s.trim());
    if (!m) return [s.toLowerCase(), ''];
    return [m[1]!.toLowerCase(), m[2] ? String(Number(m[2])) : String(defaultPort)];
  };
  const [ha, pa] = split(a);
  const [hb, pb] = split(b);
  return ha !== '' && ha === hb && pa === pb;
}

const HEX = /^[0-9A-Fa-f]{2}$/;
const UNRESERVED = /[A-Za-z0-9\-._~]/;

/** One of the modes above applied to a path that begins with "/". Never throws. */
export function normalizePath(
  path: string,
  mode: PathNormalization = DEFAULT_PATH_NORMALIZATION,
): { ok: true; path: string } | { ok: false; reason: string; detail: string } {
  // 1. Percent-encodings: each must be well formed; unreserved characters are decoded (RFC 3986
  //    §6.2.2.2), slashes and backslashes refused or decoded by mode, the rest kept in upper case.
  let decoded = '';
  for (let i = 0; i < path.length; i++) {
    const c = path[i]!;
    if (c !== '%') {
      decoded += c;
      continue;
    }
    const hex = path.slice(i + 1, i + 3);
    if (!HEX.test(hex)) return { ok: false, reason: 'path_encoding', detail: 'a malformed %-encoding' };
    const ch = String.fromCharCode(Number.parseInt(hex, 16));
    i += 2;
    if (ch === '/' || ch === '\\') {
      if (mode !== 'DECODE_AND_MERGE_SLASHES')
        return {
          ok: false,
          reason: 'path_encoded_slash',
          detail: `an encoded ${ch === '/' ? 'slash' : 'backslash'}`,
        };
      decoded += '/';
    } else if (UNRESERVED.test(ch)) decoded += ch;
    else decoded += `%${hex.toUpperCase()}`;
  }
  // 2. Backslash is a slash (what Windows and some frameworks do with it).
  decoded = decoded.replaceAll('\\', '/');
  if (!decoded.startsWith('/')) decoded = `/${decoded}`;
  // 3. A dot segment with parameters (`..;x`): servlet containers resolve it as `..`.
  for (const segment of decoded.split('/'))
    if (/^\.\.?;/.test(segment))
      return { ok: false, reason: 'path_dot_parameter', detail: 'a dot segment with parameters' };
  // 4. Dot segments, then (by mode) repeated slashes.
  let out = removeDotSegments(decoded);
  if (mode !== 'BASE') out = out.replace(/\/{2,}/g, '/');
  return { ok: true, path: out };
}

/** RFC 3986 §5.2.4 on an absolute path: "." and ".." resolved, never above the root. */
export function removeDotSegments(path: string): string {
  const input = path.split('/').slice(1);
  const output: string[] = [];
  for (let i = 0; i < input.length; i++) {
    const seg = input[i]!;
    const last = i === input.length - 1;
    if (seg === '.' || seg === '..') {
      if (seg === '..') output.pop();
      // "/a/." and "/a/.." end in a directory: keep the trailing slash.
      if (last) output.push('');
      continue;
    }
    output.push(seg);
  }
  return `/${output.join('/')}`;
}
