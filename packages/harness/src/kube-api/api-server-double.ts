import { randomBytes, randomUUID } from 'node:crypto';
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
  writeEvent,
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

interface LoggedEvent {
  rv: number;
  key: string;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  object: KubeObject;
  /** The object before a MODIFIED, for selector transitions on replay. */
  previous?: KubeObject;
}

interface Watcher {
  key: string;
  namespace: string | undefined;
  labels: Matcher;
  fields: FieldMatcher;
  res: ServerResponse;
  timers: NodeJS.Timeout[];
}

/** One request as served, for tests to assert on (relists, retries). */
export interface RequestRecord {
  method: string;
  path: string;
  query: string;
  status: number;
}

/** What the double recorded about a ServiceAccount token it issued (TokenReview reads it). */
interface IssuedToken {
  namespace: string;
  serviceAccount: string;
  serviceAccountUid: string;
  audiences: string[];
  expiresAt: number;
  pod?: { name: string; uid: string; node?: string };
}

/** What a kubelet asks for a pod's projected token (`TokenRequest.spec`). */
interface TokenRequestSpec {
  audiences?: string[];
  expirationSeconds?: number;
  boundObjectRef?: { kind?: string; apiVersion?: string; name?: string; uid?: string };
}

/** The API server's own audience: a TokenReview without audiences checks against it. */
const API_AUDIENCE = 'https://kubernetes.default.svc.cluster.local';

export class ApiServerDouble {
  readonly #types = new Map<string, ResourceType>();
  readonly #tokens = new Map<string, IssuedToken>();
  /** group/version/resource → namespace/name → object. */
  readonly #store = new Map<string, Map<string, KubeObject>>();
  #rv = 1;
  #events: LoggedEvent[] = [];
  /** Watches from below this resourceVersion get 410 Gone. */
  #compacted = 1;
  readonly #watchers = new Set<Watcher>();
  readonly #server: Server;
  readonly #opts: ApiServerDoubleOptions;
  readonly requests: RequestRecord[] = [];
  /** Runs before each request is served: tests change state here to race a client (a stale write). */
  beforeRequest: ((method: string, path: string) => void) | undefined;
  #url = '';

  constructor(opts: ApiServerDoubleOptions = {}) {
    this.#opts = opts;
    for (const t of opts.resources ?? DEFAULT_RESOURCES) {
      this.#types.set(typeKey(t), t);
      this.#store.set(typeKey(t), new Map());
    }
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
    this.#events = [];
    this.#compacted = this.#rv + 1;
  }

  /** Ends every open watch, as an API server restart or a load balancer does; clients re-watch. */
  closeWatches(): void {
    for (const w of this.#watchers) this.#endWatch(w);
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
   * as a projected token): for `namespace/serviceAccount`, bound to a pod when `boundObjectRef`
   * names one (it must exist, with that uid if given). Throws the API's error otherwise.
   */
  requestToken(
    namespace: string,
    serviceAccount: string,
    spec: TokenRequestSpec = {},
  ): { token: string; expirationTimestamp: string } {
    const sa = this.#store
      .get(typeKey({ group: '', version: 'v1', resource: 'serviceaccounts' }))
      ?.get(`${namespace}/${serviceAccount}`);
    if (sa === undefined)
      throw new ApiError(404, 'NotFound', `serviceaccounts "${serviceAccount}" not found`);
    const seconds = spec.expirationSeconds ?? 3600;
    if (!Number.isInteger(seconds) || seconds < 600)
      throw new ApiError(
        422,
        'Invalid',
        'spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes',
      );
    const issued: IssuedToken = {
      namespace,
      serviceAccount,
      serviceAccountUid: String(sa.metadata.uid),
      audiences: spec.audiences?.length ? [...spec.audiences] : [API_AUDIENCE],
      expiresAt: Date.now() + seconds * 1000,
    };
    const ref = spec.boundObjectRef;
    if (ref !== undefined) {
      if (ref.kind !== 'Pod' || !ref.name)
        throw new ApiError(422, 'Invalid', 'spec.boundObjectRef: only a Pod, by name, is supported here');
      const pod = this.#store
        .get(typeKey({ group: '', version: 'v1', resource: 'pods' }))
        ?.get(`${namespace}/${ref.name}`);
      if (pod === undefined || (ref.uid !== undefined && ref.uid !== pod.metadata.uid))
        throw new ApiError(404, 'NotFound', `pods "${ref.name}" not found`);
      const node = (pod.spec as { nodeName?: string } | undefined)?.nodeName;
      issued.pod = { name: ref.name, uid: String(pod.metadata.uid), ...(node ? { node } : {}) };
    }
    const token = `double.${randomBytes(24).toString('base64url')}`;
    this.#tokens.set(token, issued);
    return { token, expirationTimestamp: new Date(issued.expiresAt).toISOString() };
  }

  /** `TokenReview.status` for `token` against `audiences` (the API's own when none). */
  reviewToken(token: string, audiences: readonly string[] = []): Record<string, unknown> {
    const issued = this.#tokens.get(token);
    const invalid = (why: string) => ({
      authenticated: false,
      user: {},
      error: `[invalid bearer token, ${why}]`,
    });
    if (issued === undefined) return invalid('token is not one this server issued');
    if (Date.now() >= issued.expiresAt) return invalid('Token has expired.');
    const wanted = audiences.length > 0 ? audiences : [API_AUDIENCE];
    const matched = wanted.filter((a) => issued.audiences.includes(a));
    if (matched.length === 0)
      return invalid(
        `token audiences ${JSON.stringify(issued.audiences)} is invalid for the target audiences ${JSON.stringify(wanted)}`,
      );
    const sa = this.#store
      .get(typeKey({ group: '', version: 'v1', resource: 'serviceaccounts' }))
      ?.get(`${issued.namespace}/${issued.serviceAccount}`);
    if (sa === undefined || String(sa.metadata.uid) !== issued.serviceAccountUid)
      return invalid(`service account ${issued.namespace}/${issued.serviceAccount} has been deleted`);
    const extra: Record<string, string[]> = {};
    if (issued.pod !== undefined) {
      const pod = this.#store
        .get(typeKey({ group: '', version: 'v1', resource: 'pods' }))
        ?.get(`${issued.namespace}/${issued.pod.name}`);
      if (pod === undefined || String(pod.metadata.uid) !== issued.pod.uid)
        return invalid(`pod ${issued.namespace}/${issued.pod.name} the token is bound to is gone`);
      extra['authentication.kubernetes.io/pod-name'] = [issued.pod.name];
      extra['authentication.kubernetes.io/pod-uid'] = [issued.pod.uid];
      if (issued.pod.node !== undefined) extra['authentication.kubernetes.io/node-name'] = [issued.pod.node];
    }
    return {
      authenticated: true,
      user: {
        username: `system:serviceaccount:${issued.namespace}:${issued.serviceAccount}`,
        uid: issued.serviceAccountUid,
        groups: [
          'system:serviceaccounts',
          `system:serviceaccounts:${issued.namespace}`,
          'system:authenticated',
        ],
        extra,
      },
      audiences: matched,
    };
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

  /** TokenRequest (`serviceaccounts/NAME/token`) and TokenReview (`tokenreviews`), or undefined. */
  #authentication(
    method: string,
    parts: string[],
    body: unknown,
  ): { status: number; body: unknown } | undefined {
    const tokenRequest =
      parts.length === 7 &&
      parts[0] === 'api' &&
      parts[1] === 'v1' &&
      parts[2] === 'namespaces' &&
      parts[4] === 'serviceaccounts' &&
      parts[6] === 'token';
    const tokenReview = parts.join('/') === 'apis/authentication.k8s.io/v1/tokenreviews';
    if (!tokenRequest && !tokenReview) return undefined;
    if (method !== 'POST') throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported`);
    const spec = ((body ?? {}) as { spec?: Record<string, unknown> }).spec ?? {};
    if (tokenRequest) {
      const status = this.requestToken(parts[3] as string, parts[5] as string, spec as TokenRequestSpec);
      return {
        status: 201,
        body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', metadata: {}, spec, status },
      };
    }
    if (typeof spec.token !== 'string' || spec.token === '')
      throw new ApiError(422, 'Invalid', 'spec.token: Required value');
    const audiences = Array.isArray(spec.audiences) ? spec.audiences.map(String) : [];
    return {
      status: 201,
      body: {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenReview',
        metadata: {},
        spec,
        status: this.reviewToken(spec.token, audiences),
      },
    };
  }

  #route(
    method: string,
    url: URL,
    body: unknown,
    res: ServerResponse,
  ): { status: number; body: unknown } | undefined {
    const parts = url.pathname.split('/').filter((p) => p !== '');
    const authn = this.#authentication(method, parts, body);
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
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    const w: Watcher = { key: typeKey(type), namespace, ...sel, res, timers: [] };
    const from = q.get('resourceVersion') ?? '';
    if (from === '' || from === '0') {
      for (const o of [...(this.#store.get(w.key)?.values() ?? [])].filter(match).sort(byKey))
        writeEvent(res, 'ADDED', this.#withKind(type, o));
    } else {
      const rv = Number(from);
      if (!Number.isInteger(rv) || rv < 0) {
        writeEvent(
          res,
          'ERROR',
          statusObject(new ApiError(400, 'BadRequest', `invalid resourceVersion ${from}`)),
        );
        res.end();
        return;
      }
      if (rv + 1 < this.#compacted) {
        writeEvent(
          res,
          'ERROR',
          statusObject(
            new ApiError(410, 'Expired', `too old resource version: ${rv} (${this.#compacted - 1})`),
          ),
        );
        res.end();
        return;
      }
      for (const e of this.#events) if (e.rv > rv && e.key === w.key) this.#deliver(w, type, e);
    }
    this.#watchers.add(w);
    res.on('close', () => this.#endWatch(w));
    const timeout = Number(q.get('timeoutSeconds') ?? '0');
    if (timeout > 0) w.timers.push(setTimeout(() => this.#endWatch(w), timeout * 1000).unref());
    if (q.get('allowWatchBookmarks') === 'true') {
      const every = this.#opts.bookmarkIntervalMs ?? 1000;
      w.timers.push(
        setInterval(
          () =>
            writeEvent(res, 'BOOKMARK', {
              kind: type.kind,
              apiVersion: apiVersionOf(type),
              metadata: { resourceVersion: String(this.#rv) },
            }),
          every,
        ).unref(),
      );
    }
  }

  #endWatch(w: Watcher): void {
    if (!this.#watchers.delete(w)) return;
    for (const t of w.timers) clearTimeout(t);
    w.res.end();
  }

  /** Sends one logged event to one watcher, as its selectors see it. */
  #deliver(w: Watcher, type: ResourceType, e: LoggedEvent): void {
    const match = (o: KubeObject | undefined) =>
      o !== undefined &&
      (w.namespace === undefined || o.metadata.namespace === w.namespace) &&
      w.labels(o.metadata.labels ?? {}) &&
      w.fields(o);
    const now = match(e.object);
    const before = e.type === 'MODIFIED' ? match(e.previous) : now;
    let kind: LoggedEvent['type'] | undefined;
    if (e.type === 'MODIFIED')
      kind = now && before ? 'MODIFIED' : now ? 'ADDED' : before ? 'DELETED' : undefined;
    else kind = now ? e.type : undefined;
    if (kind !== undefined) writeEvent(w.res, kind, this.#withKind(type, e.object));
  }

  #emit(type: ResourceType, e: Omit<LoggedEvent, 'key'>): void {
    const logged = { ...e, key: typeKey(type) };
    this.#events.push(logged);
    const max = this.#opts.maxEvents ?? 1000;
    if (this.#events.length > max) {
      const dropped = this.#events.splice(0, this.#events.length - max);
      this.#compacted = (dropped.at(-1)?.rv ?? 0) + 1;
    }
    for (const w of this.#watchers) if (w.key === logged.key) this.#deliver(w, type, logged);
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
    this.#emit(type, { rv: this.#rv, type: 'ADDED', object });
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
    this.#emit(type, { rv: this.#rv, type: 'MODIFIED', object, previous: current });
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
    this.#emit(type, { rv: this.#rv, type: 'DELETED', object: gone });
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
