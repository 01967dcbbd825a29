/**
 * @peculiar/x509 resolves its algorithm providers through tsyringe, which refuses to load
 * unless `Reflect.getMetadata` exists. This is the smallest subset of the reflect-metadata
 * API that tsyringe calls (define/get/getOwn), kept here rather than adding a dependency.
 * A real polyfill loaded earlier in the process wins: nothing is replaced if present.
 */
type MetadataMap = Map<unknown, unknown>;

const store = new WeakMap<object, Map<string | symbol | undefined, MetadataMap>>();

function ownMap(
  target: object,
  property: string | symbol | undefined,
  create: boolean,
): MetadataMap | undefined {
  let byProperty = store.get(target);
  if (byProperty === undefined) {
    if (!create) return undefined;
    byProperty = new Map();
    store.set(target, byProperty);
  }
  let map = byProperty.get(property);
  if (map === undefined && create) {
    map = new Map();
    byProperty.set(property, map);
  }
  return map;
}

function getOwnMetadata(key: unknown, target: object, property?: string | symbol): unknown {
  return ownMap(target, property, false)?.get(key);
}

function getMetadata(key: unknown, target: object, property?: string | symbol): unknown {
  for (let t: object | null = target; t !== null; t = Object.getPrototypeOf(t)) {
    const map = ownMap(t, property, false);
    if (map?.has(key)) return map.get(key);
  }
  return undefined;
}

function defineMetadata(key: unknown, value: unknown, target: object, property?: string | symbol): void {
  ownMap(target, property, true)!.set(key, value);
}

function metadata(key: unknown, value: unknown) {
  return (target: object, property?: string | symbol): void => defineMetadata(key, value, target, property);
}

const reflect = Reflect as unknown as Record<string, unknown>;
if (typeof reflect.getMetadata !== 'function') {
  Object.assign(reflect, {
    getOwnMetadata,
    getMetadata,
    defineMetadata,
    metadata,
    hasMetadata: (k: unknown, t: object, p?: string | symbol) => getMetadata(k, t, p) !== undefined,
  });
}
