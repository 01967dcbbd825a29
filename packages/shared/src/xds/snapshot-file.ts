import { createHash, randomBytes } from 'node:crypto';
import { open, readFile, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { err, ok, type Result } from '../result.js';
import { type AcceptedState, buildSnapshot, type ConfigSnapshot, EMPTY_STATE } from './config-snapshot.js';
import { ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL } from './proto-root.js';
import { applyBatch, decodeResources, type RawResource } from './resource-decoder.js';

/**
 * The last-known-good snapshot on disk (docs/design.md §5), so a proxy restarted during an
 * outage is born with config. Layout: one header line `{"format","sha256"}` then the body;
 * the sha256 is over the body bytes. The body holds each resource's wire bytes, so loading
 * re-runs the same validation as an xDS response.
 */
const FORMAT = 'zmesh-xds-snapshot/v1';

interface Body {
  writtenAt: number;
  resources: Record<string, Array<[name: string, version: string, base64: string]>>;
}

export async function writeSnapshot(path: string, snapshot: ConfigSnapshot): Promise<void> {
  const body = Buffer.from(JSON.stringify(bodyOf(snapshot.accepted, snapshot.activatedAt)));
  const header = JSON.stringify({ format: FORMAT, sha256: createHash('sha256').update(body).digest('hex') });
  // Unique per target and write: proxies sharing a directory (and a process, in tests) must
  // never rename each other's half-written files.
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  const handle = await open(tmp, 'w', 0o600);
  try {
    await handle.writeFile(Buffer.concat([Buffer.from(`${header}\n`), body]));
    await handle.sync();
  } catch (e) {
    await handle.close();
    await unlink(tmp).catch(() => {});
    throw e;
  }
  await handle.close();
  await rename(tmp, path);
  await syncDir(dirname(path));
}

/** Verifies the checksum and re-validates every resource; any damage is a clear reason. */
export async function loadSnapshot(path: string): Promise<Result<ConfigSnapshot>> {
  let raw: Buffer;
  try {
    raw = await readFile(path);
  } catch (e) {
    return err([`cannot read snapshot ${path}: ${(e as Error).message}`]);
  }
  const nl = raw.indexOf(0x0a);
  const header = nl < 0 ? undefined : parseJson<{ format?: string; sha256?: string }>(raw.subarray(0, nl));
  if (header?.format !== FORMAT) return err([`snapshot ${path}: missing or unknown header (want ${FORMAT})`]);
  const body = raw.subarray(nl + 1);
  const actual = createHash('sha256').update(body).digest('hex');
  if (actual !== header.sha256) {
    return err([
      `snapshot ${path}: checksum mismatch (header ${header.sha256}, body ${actual}): file is corrupted`,
    ]);
  }
  const parsed = parseJson<Body>(body);
  if (parsed === undefined) return err([`snapshot ${path}: body is not JSON`]);
  let state: Result<AcceptedState>;
  try {
    state = stateFromBody(parsed);
  } catch (e) {
    return err([`snapshot ${path}: body has the wrong shape: ${(e as Error).message}`]);
  }
  return state.ok ? ok(buildSnapshot(state.value, parsed.writtenAt)) : state;
}

function bodyOf(state: AcceptedState, writtenAt: number): Body {
  const rows = (map: AcceptedState['addresses'] | AcceptedState['authorizations']) =>
    [...map].map(([name, a]): [string, string, string] => [
      name,
      a.version,
      Buffer.from(a.bytes).toString('base64'),
    ]);
  return {
    writtenAt,
    resources: {
      [ADDRESS_TYPE_URL]: rows(state.addresses),
      [AUTHORIZATION_TYPE_URL]: rows(state.authorizations),
    },
  };
}

function stateFromBody(body: Body): Result<AcceptedState> {
  let state = EMPTY_STATE;
  const reasons: string[] = [];
  for (const typeUrl of [ADDRESS_TYPE_URL, AUTHORIZATION_TYPE_URL]) {
    const raws: RawResource[] = (body.resources?.[typeUrl] ?? []).map(([name, version, b64]) => ({
      name,
      version,
      typeUrl,
      bytes: Buffer.from(b64, 'base64'),
    }));
    const batch = decodeResources(typeUrl, raws);
    reasons.push(...batch.reasons);
    state = applyBatch(state, typeUrl, batch, []);
  }
  return reasons.length > 0 ? err(reasons.map((r) => `snapshot resource ${r}`)) : ok(state);
}

function parseJson<T>(bytes: Uint8Array): T | undefined {
  try {
    return JSON.parse(Buffer.from(bytes).toString('utf8')) as T;
  } catch {
    return undefined;
  }
}

/** fsync the directory so the rename itself survives a crash (POSIX rename is atomic, not durable). */
async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * The "last known current" stamp beside a snapshot (`<path>.current`): when the proxy last
 * knew its config matched the control plane's. The snapshot itself is rewritten only when
 * config changes, so its own time says nothing about a mesh whose config is stable; ages
 * after a restart (snapshot bound, authorization staleness) are measured from this stamp.
 */
const STAMP_FORMAT = 'zmesh-xds-current/v1';

export function currentStampPath(snapshotPath: string): string {
  return `${snapshotPath}.current`;
}

export async function writeCurrentStamp(snapshotPath: string, at: number): Promise<void> {
  const path = currentStampPath(snapshotPath);
  const tmp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  const handle = await open(tmp, 'w', 0o600);
  try {
    await handle.writeFile(JSON.stringify({ format: STAMP_FORMAT, lastCurrentAt: at }));
  } finally {
    await handle.close();
  }
  await rename(tmp, path);
}

/** The stamp, if present, well-formed and not in the future (a bad stamp is ignored, never trusted). */
export async function readCurrentStamp(snapshotPath: string, now: number): Promise<number | undefined> {
  try {
    const s = JSON.parse(await readFile(currentStampPath(snapshotPath), 'utf8')) as {
      format?: string;
      lastCurrentAt?: unknown;
    };
    const at = s.lastCurrentAt;
    return s.format === STAMP_FORMAT && typeof at === 'number' && Number.isFinite(at) && at <= now
      ? at
      : undefined;
  } catch {
    return undefined;
  }
}
