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

/**
 * The served resources per type URL. Each change installs a new immutable map, so a push
 * diffs against one consistent view.
 */
export class ResourceCache {
  readonly #types = new Map<string, TypeView>();

  view(typeUrl: string): TypeView {
    return this.#types.get(typeUrl) ?? { version: 0, resources: new Map() };
  }

  /** Replaces the whole set for a type; returns whether anything changed. */
  replace(typeUrl: string, resources: readonly CachedResource[]): boolean {
    const old = this.view(typeUrl).resources;
    const next = new Map(resources.map((r) => [r.name, r]));
    let changed = old.size !== next.size;
    if (!changed) {
      for (const [name, r] of next) {
        if (old.get(name)?.version !== r.version) {
          changed = true;
          break;
        }
      }
    }
    if (changed) this.#install(typeUrl, next);
    return changed;
  }

  /** Upserts one resource (and the test hook that injects malformed bytes). */
  put(typeUrl: string, resource: CachedResource): void {
    const next = new Map(this.view(typeUrl).resources);
    next.set(resource.name, resource);
    this.#install(typeUrl, next);
  }

  #install(typeUrl: string, resources: Map<string, CachedResource>): void {
    this.#types.set(typeUrl, { version: this.view(typeUrl).version + 1, resources });
  }
}
