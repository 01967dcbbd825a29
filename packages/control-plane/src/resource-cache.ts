import { createHash } from 'node:crypto';

/** One resource as served: encoded once, versioned by content so versions survive restarts. */
export interface CachedResource {
  readonly name: string;
  readonly version: string;
  /** `Any.type_url` of the payload. */
  readonly payloadType: string;
  readonly bytes: Uint8Array;
  /** Sent in ascending rank within a response: dependencies (services, waypoints) first. */
  readonly rank: number;
}

export interface TypeView {
  /** Bumped on every change to this type; what proxy status calls a version. */
  readonly version: number;
  readonly resources: ReadonlyMap<string, CachedResource>;
}

export function contentVersion(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('base64url').slice(0, 16);
}

/** How many versions of change history a type keeps; a proxy further behind gets a full diff. */
export const MAX_JOURNAL_VERSIONS = 1024;

/**
 * The served resources per type URL. Each change installs a new immutable map, so a push
 * diffs against one consistent view.
 */
export class ResourceCache {
  readonly #types = new Map<string, TypeView>();
  /** Per type: names changed (updated or removed) at each version, oldest first. */
  readonly #journals = new Map<string, Array<{ version: number; after: number; names: readonly string[] }>>();

  view(typeUrl: string): TypeView {
    return this.#types.get(typeUrl) ?? { version: 0, resources: new Map() };
  }

  /**
   * Replaces the whole set for a type; returns whether anything changed. A change takes
   * `version` when given and above the current one (versions from a shared store's
   * generation: not consecutive), else the next.
   */
  replace(typeUrl: string, resources: readonly CachedResource[], version?: number): boolean {
    const old = this.view(typeUrl).resources;
    const next = new Map(resources.map((r) => [r.name, r]));
    const changed: string[] = [];
    for (const [name, r] of next) if (old.get(name)?.version !== r.version) changed.push(name);
    for (const name of old.keys()) if (!next.has(name)) changed.push(name);
    if (changed.length > 0) this.#install(typeUrl, next, changed, version);
    return changed.length > 0;
  }

  /**
   * Names changed after `version` (updated or removed), or undefined when the journal no
   * longer reaches back that far and the caller must diff everything.
   */
  changesSince(typeUrl: string, version: number): string[] | undefined {
    const current = this.view(typeUrl).version;
    if (version === current) return [];
    const journal = this.#journals.get(typeUrl) ?? [];
    const first = journal[0];
    if (first === undefined || first.after > version) return undefined;
    const names = new Set<string>();
    for (const entry of journal) if (entry.version > version) for (const n of entry.names) names.add(n);
    return [...names];
  }

  /** Every type's version, to keep across a restart (`seedVersions`). */
  versions(): Record<string, number> {
    return Object.fromEntries([...this.#types].map(([typeUrl, v]) => [typeUrl, v.version]));
  }

  /**
   * Starts each type's version at a kept one (empty, no journal: a proxy is sent everything),
   * so versions keep increasing across a control-plane restart. Only before the first change.
   */
  seedVersions(versions: Readonly<Record<string, number>>): void {
    for (const [typeUrl, version] of Object.entries(versions)) {
      if (!this.#types.has(typeUrl) && Number.isSafeInteger(version) && version > 0)
        this.#types.set(typeUrl, { version, resources: new Map() });
    }
  }

  /** Upserts one resource (and the test hook that injects malformed bytes). */
  put(typeUrl: string, resource: CachedResource): void {
    const next = new Map(this.view(typeUrl).resources);
    next.set(resource.name, resource);
    this.#install(typeUrl, next, [resource.name]);
  }

  #install(
    typeUrl: string,
    resources: Map<string, CachedResource>,
    changed: readonly string[],
    at?: number,
  ): void {
    const after = this.view(typeUrl).version;
    const version = at !== undefined && at > after ? at : after + 1;
    this.#types.set(typeUrl, { version, resources });
    let journal = this.#journals.get(typeUrl);
    if (journal === undefined) {
      journal = [];
      this.#journals.set(typeUrl, journal);
    }
    journal.push({ version, after, names: changed });
    if (journal.length > MAX_JOURNAL_VERSIONS) journal.shift();
  }
}
