import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { discoveryDocument } from './discovery.js';
import {
  apiVersionOf,
  DEFAULT_RESOURCES,
  type KubeObject,
  type Metadata,
  type ResourceType,
  typeKey,
} from './resources.js';
import { type FieldMatcher, type Matcher, parseFieldSelector, parseLabelSelector } from './selectors.js';
import { ServiceAccountTokens, type TokenRequestSpec } from './tokens.js';
import { WatchHub } from './watches.js';
import {
  ApiError,
  applyPatch,
  asObject,
  byKey,
  clone,
  conflict,
  readBody,
  sendJson,
  specOf,
  statusObject,
  withoutKind,
} from './wire.js';

export type { KubeObject } from './resources.js';

/**
 * A Kubernetes API server double for tests: the documented REST and list/watch protocol over
 * plain HTTP on loopback, so that `@kubernetes/client-node` (informers, typed and custom-object
 * clients) runs unmodified above it. One generic store keyed by group/version/resource holds
 * every type of `resources`; what it does and does not do is in docs/kubernetes.md.
 *
 * Faithful: a global resourceVersion, list `metadata.resourceVersion`, watch from a version
 * (replayed from a bounded event log, `410 Gone` as an ERROR event once compacted past it),
 * synthetic ADDED for a watch without a version, BOOKMARK events with allowWatchBookmarks,
 * `timeoutSeconds`; label and field selectors on list and watch (an object leaving a watch's
 * selector is DELETED to it); `409 Conflict` on a stale resourceVersion (update, patch, delete
 * preconditions) and `409 AlreadyExists`; status subresources; merge and JSON patches;
 * ownerReferences with background garbage collection and orphaning; a deleted namespace
 * takes its objects; Services get a cluster IP; ServiceAccount tokens bound to a pod (the
 * `serviceaccounts/token` TokenRequest a kubelet makes for a projected token) and
 * `tokenreviews` that authenticate only tokens this server issued, with their audiences,
 * expiry and bound pod (gone or replaced: invalid), and the pod and node in the user's extra
 * as Kubernetes 1.32+ puts them. Not: admission, defaulting, validation, RBAC, pagination, server-side
 * apply, foreground deletion, finalizers, strategic merge (read as a merge patch).
 */
export interface ApiServerDoubleOptions {
  host?: string;
  resources?: readonly ResourceType[];
  /** How often a watch that allows bookmarks gets one. Default 1 s (the API server's is ~1 min). */
  bookmarkIntervalMs?: number;
  /** Events kept for watches that resume from a resourceVersion; older ones get 410. */
  maxEvents?: number;
}

/** One request as served, for tests to assert on (relists, retries). */
export interface RequestRecord {
  method: string;
  path: string;
  query: string;
  status: number;
}

export class ApiServerDouble {
  readonly #types = new Map<string, ResourceType>();
  /** group/version/resource → namespace/name → object. */
  readonly #store = new Map<string, Map<string, KubeObject>>();
  #rv = 1;
  readonly #watches: WatchHub;
  readonly #server: Server;
  readonly #opts: ApiServerDoubleOptions;
  readonly requests: RequestRecord[] = [];
  /** Runs before each request is served: tests change state here to race a client (a stale write). */
  beforeRequest: ((method: string, path: string) => void) | undefined;
  #url = '';
  readonly #tokens: ServiceAccountTokens;

  constructor(opts: ApiServerDoubleOptions = {}) {
    this.#opts = opts;
    for (const t of opts.resources ?? DEFAULT_RESOURCES) {
      this.#types.set(typeKey(t), t);
      this.#store.set(typeKey(t), new Map());
    }
    this.#watches = new WatchHub({
      maxEvents: opts.maxEvents ?? 1000,
      bookmarkIntervalMs: opts.bookmarkIntervalMs ?? 1000,
      resourceVersion: () => this.#rv,
      withKind: (type, o) => this.#withKind(type, o),
    });
    this.#tokens = new ServiceAccountTokens((resource, namespace, name) =>
      this.#store.get(typeKey({ group: '', version: 'v1', resource }))?.get(`${namespace}/${name}`),
    );
    this.#server = createServer((req, res) => void this.#serve(req, res));
  }

  async start(port = 0): Promise<string> {
    const host = this.#opts.host ?? '127.0.0.1';
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(port, host, () => resolve());
    });
    this.#url = `http://${host}:${(this.#server.address() as AddressInfo).port}`;
    return this.#url;
  }

  get url(): string {
    return this.#url;
  }

  /** A kubeconfig (YAML) that points a client at this server. */
  kubeconfig(): string {
    return [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      `- name: double\n  cluster:\n    server: ${this.#url}\n    insecure-skip-tls-verify: true`,
      'users:',
      '- name: test\n  user:\n    token: double-token',
      'contexts:',
      '- name: double\n  context:\n    cluster: double\n    user: test',
      'current-context: double',
      '',
    ].join('\n');
  }

  async close(): Promise<void> {
    this.closeWatches();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  get resourceVersion(): number {
    return this.#rv;
  }

  /** Forgets the event log: a watch resuming from any earlier resourceVersion gets 410 Gone. */
  compact(): void {
    this.#watches.compact(this.#rv + 1);
  }

  /** Ends every open watch, as an API server restart or a load balancer does; clients re-watch. */
  closeWatches(): void {
    this.#watches.closeAll();
  }

  /** Objects of a type (a test's view, straight from the store). */
  objects(group: string, version: string, resource: string): KubeObject[] {
    return [...(this.#store.get(typeKey({ group, version, resource })) ?? new Map()).values()].map(clone);
  }

  get(
    group: string,
    version: string,
    resource: string,
    namespace: string,
    name: string,
  ): KubeObject | undefined {
    const o = this.#store.get(typeKey({ group, version, resource }))?.get(`${namespace}/${name}`);
    return o && clone(o);
  }

  /**
   * Creates (or, when it exists, replaces spec and status of) an object, bypassing HTTP: test
   * setup. A given `metadata.uid` is kept on create (a client's never is): the harness's pods
   * already have kubelet-style cgroups named by their uid, as if the API server had assigned it.
   */
  put(object: KubeObject): KubeObject {
    const type = this.#typeOf(object);
    const ns = type.namespaced ? (object.metadata.namespace ?? 'default') : undefined;
    const current = this.#store.get(typeKey(type))?.get(`${ns ?? ''}/${object.metadata.name}`);
    if (current === undefined) {
      const created = this.#create(type, ns, object, true);
      return object.status === undefined ? created : this.#update(type, created, object, 'all');
    }
    return this.#update(type, current, { ...object, metadata: { ...object.metadata } }, 'all');
  }

  /** Deletes an object as a client's DELETE does (background garbage collection). */
  remove(object: KubeObject): void {
    const type = this.#typeOf(object);
    const ns = type.namespaced ? (object.metadata.namespace ?? 'default') : undefined;
    this.#delete(type, ns, object.metadata.name, 'Background');
  }

  /**
   * A ServiceAccount token, as the TokenRequest subresource issues it (what a kubelet mounts
   * as a projected token); see tokens.ts. Throws the API's error when it cannot be issued.
   */
  requestToken(
    namespace: string,
    serviceAccount: string,
    spec: TokenRequestSpec = {},
  ): { token: string; expirationTimestamp: string } {
    return this.#tokens.request(namespace, serviceAccount, spec);
  }

  /** `TokenReview.status` for `token` against `audiences` (the API's own when none). */
  reviewToken(token: string, audiences: readonly string[] = []): Record<string, unknown> {
    return this.#tokens.review(token, audiences);
  }

  #typeOf(object: KubeObject): ResourceType {
    for (const t of this.#types.values())
      if (apiVersionOf(t) === object.apiVersion && t.kind === object.kind) return t;
    throw new Error(`no resource type for ${object.apiVersion} ${object.kind}`);
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://double');
    const record: RequestRecord = {
      method: req.method ?? 'GET',
      path: url.pathname,
      query: url.search,
      status: 200,
    };
    this.requests.push(record);
    try {
      this.beforeRequest?.(record.method, url.pathname);
      const body = await readBody(req);
      const out = this.#route(record.method, url, body, res);
      if (out === undefined) return; // a watch: streaming
      record.status = out.status;
      sendJson(res, out.status, out.body);
    } catch (e) {
      const error =
        e instanceof ApiError
          ? e
          : new ApiError(500, 'InternalError', `internal error: ${(e as Error).message}`);
      record.status = error.code;
      sendJson(res, error.code, statusObject(error));
    }
  }

  #route(
    method: string,
    url: URL,
    body: unknown,
    res: ServerResponse,
  ): { status: number; body: unknown } | undefined {
    const parts = url.pathname.split('/').filter((p) => p !== '');
    const authn = this.#tokens.route(method, parts, body);
    if (authn !== undefined) return authn;
    const discovery = discoveryDocument(this.#types.values(), parts);
    if (discovery !== undefined) {
      if (method !== 'GET') throw new ApiError(405, 'MethodNotAllowed', 'discovery is read-only');
      return { status: 200, body: discovery };
    }
    let group: string;
    let version: string;
    let rest: string[];
    if (parts[0] === 'api' && parts.length >= 3) {
      group = '';
      version = parts[1] as string;
      rest = parts.slice(2);
    } else if (parts[0] === 'apis' && parts.length >= 4) {
      group = parts[1] as string;
      version = parts[2] as string;
      rest = parts.slice(3);
    } else throw new ApiError(404, 'NotFound', `the server could not find the requested resource`);
    let namespace: string | undefined;
    if (rest[0] === 'namespaces' && rest.length >= 3 && rest[2] !== 'status') {
      namespace = rest[1];
      rest = rest.slice(2);
    }
    const [resource, name, sub, ...extra] = rest as [string, string | undefined, string | undefined];
    const type = this.#types.get(typeKey({ group, version, resource }));
    if (type === undefined || extra.length > 0 || (sub !== undefined && sub !== 'status'))
      throw new ApiError(404, 'NotFound', `the server could not find the requested resource`);
    if (sub === 'status' && !type.status)
      throw new ApiError(404, 'NotFound', `${type.resource} has no status subresource`);
    if (namespace !== undefined && !type.namespaced)
      throw new ApiError(404, 'NotFound', `${type.resource} is not namespaced`);
    if (type.namespaced && name !== undefined && namespace === undefined)
      throw new ApiError(404, 'NotFound', `${type.resource} is namespaced: name a namespace`);
    const q = url.searchParams;
    if (name === undefined) {
      if (method === 'GET' && (q.get('watch') === 'true' || q.get('watch') === '1')) {
        this.#watch(type, namespace, q, res);
        return undefined;
      }
      if (method === 'GET') return { status: 200, body: this.#list(type, namespace, q) };
      if (method === 'POST') {
        if (type.namespaced && namespace === undefined)
          throw new ApiError(405, 'MethodNotAllowed', 'create a namespaced object under its namespace');
        return { status: 201, body: this.#create(type, namespace, asObject(body)) };
      }
      throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported on a collection here`);
    }
    const key = `${namespace ?? ''}/${name}`;
    const current = this.#store.get(typeKey(type))?.get(key);
    const notFound = () =>
      new ApiError(
        404,
        'NotFound',
        `${type.resource}${type.group ? `.${type.group}` : ''} "${name}" not found`,
      );
    switch (method) {
      case 'GET':
        if (current === undefined) throw notFound();
        return { status: 200, body: this.#withKind(type, current) };
      case 'PUT': {
        if (current === undefined) throw notFound();
        const next = asObject(body);
        if (next.metadata.name !== name)
          throw new ApiError(400, 'BadRequest', 'the name of the object does not match the name on the URL');
        return { status: 200, body: this.#update(type, current, next, sub === 'status' ? 'status' : 'main') };
      }
      case 'PATCH': {
        if (current === undefined) throw notFound();
        const patched = applyPatch(current, body);
        return {
          status: 200,
          body: this.#update(type, current, patched, sub === 'status' ? 'status' : 'main'),
        };
      }
      case 'DELETE': {
        if (current === undefined) throw notFound();
        const opts = (body ?? {}) as {
          propagationPolicy?: string;
          preconditions?: { uid?: string; resourceVersion?: string };
        };
        const pre = opts.preconditions ?? {};
        if (pre.uid !== undefined && pre.uid !== current.metadata.uid)
          throw new ApiError(409, 'Conflict', `Precondition failed: UID in precondition: ${pre.uid}`);
        if (pre.resourceVersion !== undefined && pre.resourceVersion !== current.metadata.resourceVersion)
          throw conflict(type, name);
        const policy = q.get('propagationPolicy') ?? opts.propagationPolicy ?? 'Background';
        return { status: 200, body: this.#delete(type, namespace, name, policy) };
      }
      default:
        throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported`);
    }
  }

  #selectors(type: ResourceType, q: URLSearchParams): { labels: Matcher; fields: FieldMatcher } {
    try {
      return {
        labels: parseLabelSelector(q.get('labelSelector') ?? ''),
        fields: parseFieldSelector(q.get('fieldSelector') ?? '', [
          'metadata.name',
          'metadata.namespace',
          ...(type.fields ?? []),
        ]),
      };
    } catch (e) {
      throw new ApiError(400, 'BadRequest', (e as Error).message);
    }
  }

  #matching(namespace: string | undefined, sel: { labels: Matcher; fields: FieldMatcher }) {
    return (o: KubeObject) =>
      (namespace === undefined || o.metadata.namespace === namespace) &&
      sel.labels(o.metadata.labels ?? {}) &&
      sel.fields(o);
  }

  #list(type: ResourceType, namespace: string | undefined, q: URLSearchParams): unknown {
    const match = this.#matching(namespace, this.#selectors(type, q));
    const items = [...(this.#store.get(typeKey(type)) ?? new Map<string, KubeObject>()).values()]
      .filter(match)
      .sort(byKey)
      // Built-in list items carry no apiVersion/kind; custom resources keep theirs.
      .map((o) => (type.custom ? this.#withKind(type, o) : withoutKind(o)));
    return {
      kind: `${type.kind}List`,
      apiVersion: apiVersionOf(type),
      metadata: { resourceVersion: String(this.#rv) },
      items,
    };
  }

  #watch(type: ResourceType, namespace: string | undefined, q: URLSearchParams, res: ServerResponse): void {
    const sel = this.#selectors(type, q);
    const match = this.#matching(namespace, sel);
    this.#watches.watch(type, namespace, sel, q, res, () =>
      [...(this.#store.get(typeKey(type))?.values() ?? [])].filter(match).sort(byKey),
    );
  }

  #create(type: ResourceType, namespace: string | undefined, body: KubeObject, keepUid = false): KubeObject {
    const meta = { ...(body.metadata ?? {}) } as Metadata;
    if (body.apiVersion !== undefined && body.apiVersion !== apiVersionOf(type))
      throw new ApiError(
        400,
        'BadRequest',
        `apiVersion ${body.apiVersion} does not match ${apiVersionOf(type)}`,
      );
    if (body.kind !== undefined && body.kind !== type.kind)
      throw new ApiError(400, 'BadRequest', `kind ${body.kind} does not match ${type.kind}`);
    if (type.namespaced) {
      if (meta.namespace !== undefined && meta.namespace !== namespace)
        throw new ApiError(
          400,
          'BadRequest',
          'the namespace of the provided object does not match the namespace sent on the request',
        );
      if (!this.#store.get('/v1/namespaces')?.has(`/${namespace}`))
        throw new ApiError(404, 'NotFound', `namespaces "${namespace}" not found`);
      meta.namespace = namespace as string;
    } else delete meta.namespace;
    if (!meta.name && meta.generateName) meta.name = `${meta.generateName}${randomUUID().slice(0, 5)}`;
    if (!meta.name || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(meta.name))
      throw new ApiError(
        422,
        'Invalid',
        `${type.kind} "${meta.name ?? ''}" is invalid: metadata.name: Invalid value`,
      );
    const objects = this.#store.get(typeKey(type)) as Map<string, KubeObject>;
    const key = `${meta.namespace ?? ''}/${meta.name}`;
    if (objects.has(key))
      throw new ApiError(409, 'AlreadyExists', `${type.resource} "${meta.name}" already exists`);
    this.#rv++;
    const object: KubeObject = {
      ...clone(body),
      apiVersion: apiVersionOf(type),
      kind: type.kind,
      metadata: {
        ...meta,
        uid: keepUid && meta.uid ? meta.uid : randomUUID(),
        resourceVersion: String(this.#rv),
        generation: 1,
        creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      },
    };
    // A type with a status subresource ignores status on create, as the API server's strategies do.
    if (type.status) delete object.status;
    if (type.kind === 'Service') this.#allocateClusterIp(object);
    objects.set(key, object);
    this.#watches.emit(type, { rv: this.#rv, type: 'ADDED', object });
    // The garbage collector also deletes a dependent created after all its owners were gone
    // (a controller that wrote it in the moment its owner was deleted).
    if ((object.metadata.ownerReferences ?? []).length > 0)
      setImmediate(() => this.#collectDangling(type, key));
    return clone(object);
  }

  #collectDangling(type: ResourceType, key: string): void {
    const o = this.#store.get(typeKey(type))?.get(key);
    if (o === undefined) return;
    const live = this.#liveUids();
    if (!(o.metadata.ownerReferences ?? []).some((r) => live.has(r.uid)))
      this.#delete(type, o.metadata.namespace, o.metadata.name, 'Background');
  }

  /** The one piece of defaulting done: a Service gets a cluster IP (10.96.0.0/16) unless headless or ExternalName. */
  #allocateClusterIp(service: KubeObject): void {
    const spec = (service.spec ?? {}) as { clusterIP?: string; clusterIPs?: string[]; type?: string };
    if (spec.type === 'ExternalName' || (spec.clusterIP !== undefined && spec.clusterIP !== '')) return;
    this.#nextIp++;
    const ip = `10.96.${this.#nextIp >> 8}.${this.#nextIp & 255}`;
    service.spec = { ...spec, clusterIP: ip, clusterIPs: [ip] };
  }

  #nextIp = 0;

  /** `main`: all but status; `status`: status only; `all`: both (test setup). */
  #update(
    type: ResourceType,
    current: KubeObject,
    next: KubeObject,
    part: 'main' | 'status' | 'all',
  ): KubeObject {
    const rv = next.metadata?.resourceVersion;
    if (rv !== undefined && rv !== '' && rv !== current.metadata.resourceVersion)
      throw conflict(type, current.metadata.name);
    if (next.metadata?.uid !== undefined && next.metadata.uid !== current.metadata.uid)
      throw new ApiError(409, 'Conflict', `Precondition failed: UID in precondition: ${next.metadata.uid}`);
    const base = clone(current);
    let object: KubeObject;
    if (part === 'status' && type.status) object = { ...base, status: clone(next.status) };
    else {
      object = { ...clone(next), apiVersion: base.apiVersion, kind: base.kind };
      if (type.status && part === 'main') {
        if (base.status === undefined) delete object.status;
        else object.status = base.status;
      }
      object.metadata = {
        ...clone(next.metadata),
        name: base.metadata.name,
        uid: base.metadata.uid,
        creationTimestamp: base.metadata.creationTimestamp,
        generation: base.metadata.generation,
        ...(base.metadata.namespace === undefined ? {} : { namespace: base.metadata.namespace }),
      } as Metadata;
      if (JSON.stringify(specOf(object)) !== JSON.stringify(specOf(base)))
        object.metadata.generation = (base.metadata.generation ?? 1) + 1;
    }
    if (
      JSON.stringify({ ...object, metadata: { ...object.metadata, resourceVersion: '' } }) ===
      JSON.stringify({ ...base, metadata: { ...base.metadata, resourceVersion: '' } })
    )
      return clone(current); // a no-op write: no new version, no event
    this.#rv++;
    object.metadata.resourceVersion = String(this.#rv);
    const key = `${object.metadata.namespace ?? ''}/${object.metadata.name}`;
    this.#store.get(typeKey(type))?.set(key, object);
    this.#watches.emit(type, { rv: this.#rv, type: 'MODIFIED', object, previous: current });
    return clone(object);
  }

  #delete(type: ResourceType, namespace: string | undefined, name: string, policy: string): KubeObject {
    if (policy !== 'Background' && policy !== 'Orphan')
      throw new ApiError(
        422,
        'Invalid',
        `propagationPolicy ${policy}: the double does only Background and Orphan`,
      );
    const objects = this.#store.get(typeKey(type)) as Map<string, KubeObject>;
    const key = `${namespace ?? ''}/${name}`;
    const current = objects.get(key);
    if (current === undefined) throw new ApiError(404, 'NotFound', `${type.resource} "${name}" not found`);
    objects.delete(key);
    this.#rv++;
    const gone = { ...current, metadata: { ...current.metadata, resourceVersion: String(this.#rv) } };
    this.#watches.emit(type, { rv: this.#rv, type: 'DELETED', object: gone });
    const uid = current.metadata.uid;
    if (type.kind === 'Namespace') {
      // The namespace controller's job, done at once: everything in it goes.
      for (const t of this.#types.values())
        if (t.namespaced)
          for (const o of [...(this.#store.get(typeKey(t))?.values() ?? [])])
            if (o.metadata.namespace === name) this.#delete(t, name, o.metadata.name, 'Background');
    }
    // The garbage collector: dependents whose owners are all gone are deleted (or orphaned).
    setImmediate(() => this.#collect(uid, policy));
    return clone(gone);
  }

  #liveUids(): Set<string> {
    const live = new Set<string>();
    for (const objects of this.#store.values())
      for (const o of objects.values()) if (o.metadata.uid) live.add(o.metadata.uid);
    return live;
  }

  #collect(uid: string | undefined, policy: string): void {
    if (uid === undefined) return;
    const live = this.#liveUids();
    for (const t of this.#types.values()) {
      for (const o of [...(this.#store.get(typeKey(t))?.values() ?? [])]) {
        const owners = o.metadata.ownerReferences ?? [];
        if (!owners.some((r) => r.uid === uid)) continue;
        if (policy === 'Orphan') {
          const metadata = { ...o.metadata, ownerReferences: owners.filter((r) => r.uid !== uid) };
          this.#update(t, o, { ...o, metadata }, 'all');
        } else if (!owners.some((r) => live.has(r.uid)))
          this.#delete(t, o.metadata.namespace, o.metadata.name, 'Background');
      }
    }
  }

  #withKind(type: ResourceType, o: KubeObject): KubeObject {
    return { ...clone(o), apiVersion: apiVersionOf(type), kind: type.kind };
  }
}
