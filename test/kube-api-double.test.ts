import {
  AppsV1Api,
  AuthenticationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  type KubernetesObject,
  KubernetesObjectApi,
  makeInformer,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
  Watch,
} from '@kubernetes/client-node';
import {
  ApiServerDouble,
  DEFAULT_IMAGE,
  DEFAULT_NAMESPACE,
  DEFAULT_VALUES,
  installObjects,
} from '@zmesh/harness';
import test from 'ava';

/**
 * The API-server double (packages/harness/src/kube-api) under the real @kubernetes/client-node:
 * what the controller relies on, shown through the client rather than by calling the double.
 */

async function started(opts: ConstructorParameters<typeof ApiServerDouble>[0] = {}) {
  const api = new ApiServerDouble({ host: '127.34.0.1', bookmarkIntervalMs: 100, ...opts });
  await api.start();
  const kc = new KubeConfig();
  kc.loadFromString(api.kubeconfig());
  return { api, kc, core: kc.makeApiClient(CoreV1Api) };
}

const pod = (name: string, labels: Record<string, string> = {}, nodeName = 'node-1'): V1Pod => ({
  metadata: { name, labels },
  spec: { nodeName, containers: [{ name: 'app', image: 'app' }] },
});

async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('create, get, list with resourceVersion; AlreadyExists, NotFound and namespace checks as Status objects', async (t) => {
  const { api, core } = await started();
  t.teardown(() => api.close());
  await core.createNamespace({ body: { metadata: { name: 'shop' } } });
  const created = await core.createNamespacedPod({ namespace: 'shop', body: pod('a') });
  t.truthy(created.metadata?.uid);
  t.is(created.metadata?.resourceVersion, String(api.resourceVersion));
  const list = await core.listNamespacedPod({ namespace: 'shop' });
  t.is(list.metadata?.resourceVersion, String(api.resourceVersion));
  t.deepEqual(
    list.items.map((p) => p.metadata?.name),
    ['a'],
  );
  const dup = await t.throwsAsync(core.createNamespacedPod({ namespace: 'shop', body: pod('a') }));
  t.is((dup as unknown as { code: number }).code, 409);
  t.regex(String((dup as unknown as { body: string }).body), /AlreadyExists/);
  const missing = await t.throwsAsync(core.readNamespacedPod({ namespace: 'shop', name: 'zz' }));
  t.is((missing as unknown as { code: number }).code, 404);
  const noNs = await t.throwsAsync(core.createNamespacedPod({ namespace: 'nowhere', body: pod('b') }));
  t.is((noNs as unknown as { code: number }).code, 404);
});

test('a stale update is 409 Conflict; the status subresource changes only status, the main update never does', async (t) => {
  const { api, core } = await started();
  t.teardown(() => api.close());
  await core.createNamespace({ body: { metadata: { name: 'shop' } } });
  const first = await core.createNamespacedPod({
    namespace: 'shop',
    body: { ...pod('a'), status: { podIP: '1.1.1.1' } },
  });
  t.is(first.status, undefined, 'status on create is dropped');
  const withStatus = await core.replaceNamespacedPodStatus({
    namespace: 'shop',
    name: 'a',
    body: {
      ...first,
      status: { podIP: '10.0.0.5', phase: 'Running' },
      metadata: { ...first.metadata, labels: { x: 'y' } },
    },
  });
  t.is(withStatus.status?.podIP, '10.0.0.5');
  t.deepEqual(withStatus.metadata?.labels, {}, 'a status write does not change labels');
  const relabelled = await core.replaceNamespacedPod({
    namespace: 'shop',
    name: 'a',
    body: {
      ...withStatus,
      metadata: { ...withStatus.metadata, labels: { app: 'a' } },
      status: { podIP: '9.9.9.9' },
    },
  });
  t.is(relabelled.status?.podIP, '10.0.0.5', 'the main update keeps status');
  t.deepEqual(relabelled.metadata?.labels, { app: 'a' });
  // Writing with the version read before the relabel: refused, and nothing changes.
  const stale = await t.throwsAsync(
    core.replaceNamespacedPod({
      namespace: 'shop',
      name: 'a',
      body: { ...withStatus, metadata: { ...withStatus.metadata, labels: { app: 'stale' } } },
    }),
  );
  t.is((stale as unknown as { code: number }).code, 409);
  t.deepEqual(api.get('', 'v1', 'pods', 'shop', 'a')?.metadata.labels, { app: 'a' });
  const patched = await core.patchNamespacedPod(
    { namespace: 'shop', name: 'a', body: { metadata: { labels: { app: null, tier: 'web' } } } },
    setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
  );
  t.deepEqual(patched.metadata?.labels, { tier: 'web' });
  const jsonPatched = await core.patchNamespacedPod({
    namespace: 'shop',
    name: 'a',
    body: [{ op: 'add', path: '/metadata/labels/v', value: '2' }],
  });
  t.deepEqual(jsonPatched.metadata?.labels, { tier: 'web', v: '2' });
});

test('label and field selectors on list; bad selectors are 400', async (t) => {
  const { api, core } = await started();
  t.teardown(() => api.close());
  await core.createNamespace({ body: { metadata: { name: 'shop' } } });
  await core.createNamespacedPod({ namespace: 'shop', body: pod('a', { app: 'web', tier: 'front' }, 'n1') });
  await core.createNamespacedPod({ namespace: 'shop', body: pod('b', { app: 'db' }, 'n2') });
  await core.createNamespacedPod({ namespace: 'shop', body: pod('c', { app: 'web' }, 'n2') });
  const names = async (q: { labelSelector?: string; fieldSelector?: string }) =>
    (await core.listPodForAllNamespaces(q)).items.map((p) => p.metadata?.name);
  t.deepEqual(await names({ labelSelector: 'app=web' }), ['a', 'c']);
  t.deepEqual(await names({ labelSelector: 'app in (web,db),!tier' }), ['b', 'c']);
  t.deepEqual(await names({ labelSelector: 'app!=web' }), ['b']);
  t.deepEqual(await names({ fieldSelector: 'spec.nodeName=n2' }), ['b', 'c']);
  t.deepEqual(await names({ fieldSelector: 'spec.nodeName=n2,metadata.name!=b', labelSelector: 'app' }), [
    'c',
  ]);
  const bad = await t.throwsAsync(names({ fieldSelector: 'spec.hostname=x' }));
  t.is((bad as unknown as { code: number }).code, 400);
});

test('an informer lists, then watches: adds, updates, deletes, and an object leaving its selector is deleted to it', async (t) => {
  const { api, kc, core } = await started();
  t.teardown(() => api.close());
  await core.createNamespace({ body: { metadata: { name: 'shop' } } });
  await core.createNamespacedPod({ namespace: 'shop', body: pod('a', { app: 'web' }) });
  const informer = makeInformer(
    kc,
    '/api/v1/pods',
    () => core.listPodForAllNamespaces({ labelSelector: 'app=web' }),
    'app=web',
  );
  const seen: string[] = [];
  informer.on('add', (o) => seen.push(`add ${o.metadata?.name}`));
  informer.on('update', (o) => seen.push(`update ${o.metadata?.name}`));
  informer.on('delete', (o) => seen.push(`delete ${o.metadata?.name}`));
  await informer.start();
  t.teardown(() => informer.stop());
  await until(() => seen.length === 1, 'the listed pod');
  await core.createNamespacedPod({ namespace: 'shop', body: pod('b', { app: 'web' }) });
  await core.createNamespacedPod({ namespace: 'shop', body: pod('hidden', { app: 'db' }) });
  await core.patchNamespacedPod(
    { namespace: 'shop', name: 'b', body: { metadata: { labels: { app: 'web', v: '2' } } } },
    setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
  );
  await core.patchNamespacedPod(
    { namespace: 'shop', name: 'a', body: { metadata: { labels: { app: 'other' } } } },
    setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
  );
  await core.deleteNamespacedPod({ namespace: 'shop', name: 'b' });
  await until(() => seen.length === 5, 'the watched events');
  t.deepEqual(seen, ['add a', 'add b', 'update b', 'delete a', 'delete b']);
  t.deepEqual(
    informer.list().map((p) => p.metadata?.name),
    [],
  );
});

test('a watch resumed from a compacted resourceVersion gets 410 Gone, and the informer relists', async (t) => {
  const { api, kc, core } = await started();
  t.teardown(() => api.close());
  await core.createNamespace({ body: { metadata: { name: 'shop' } } });
  await core.createNamespacedPod({ namespace: 'shop', body: pod('a') });
  const informer = makeInformer(kc, '/api/v1/namespaces/shop/pods', () =>
    core.listNamespacedPod({ namespace: 'shop' }),
  );
  const seen: string[] = [];
  informer.on('add', (o) => seen.push(`add ${o.metadata?.name}`));
  informer.on('delete', (o) => seen.push(`delete ${o.metadata?.name}`));
  await informer.start();
  t.teardown(() => informer.stop());
  await until(() => seen.length === 1, 'the first list');
  const lists = () =>
    api.requests.filter(
      (r) => r.method === 'GET' && r.path === '/api/v1/namespaces/shop/pods' && !r.query.includes('watch'),
    ).length;
  t.is(lists(), 1);
  // In one turn, before the client can re-watch: its watch ends, a pod goes and another
  // comes, and history is compacted past them.
  api.closeWatches();
  api.remove({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'a', namespace: 'shop' } });
  api.put({ apiVersion: 'v1', kind: 'Pod', ...pod('b'), metadata: { name: 'b', namespace: 'shop' } });
  api.compact();
  await until(() => seen.length === 3, 'the relist');
  t.deepEqual(seen, ['add a', 'delete a', 'add b']);
  t.true(lists() >= 2, 'relisted after 410');
  // A raw watch from the old version shows the protocol itself: an ERROR event with code 410.
  const events: Array<{ type: string; code?: number }> = [];
  await new Promise<void>((resolve) => {
    void new Watch(kc).watch(
      '/api/v1/namespaces/shop/pods',
      { resourceVersion: '2' },
      (type, obj) => events.push({ type, code: (obj as { code?: number }).code }),
      () => resolve(),
    );
  });
  t.deepEqual(events, [{ type: 'ERROR', code: 410 }]);
});

test('bookmarks carry the current resourceVersion to a watch that allows them, and only to it', async (t) => {
  const { api, kc, core } = await started({ bookmarkIntervalMs: 50 });
  t.teardown(() => api.close());
  await core.createNamespace({ body: { metadata: { name: 'shop' } } });
  const rv = String(api.resourceVersion);
  const got = async (allow: boolean) => {
    const events: Array<{ type: string; rv?: string }> = [];
    const ctl = await new Watch(kc).watch(
      '/api/v1/pods',
      { resourceVersion: rv, ...(allow ? { allowWatchBookmarks: true } : {}) },
      (type, obj) => events.push({ type, rv: (obj as KubernetesObject).metadata?.resourceVersion }),
      () => undefined,
    );
    // Long enough for several bookmarks, even on a loaded machine.
    await until(() => events.length >= 2, 'two bookmarks', allow ? 3000 : 0).catch(() => undefined);
    if (!allow) await new Promise((r) => setTimeout(r, 300));
    ctl.abort();
    return events;
  };
  const with_ = await got(true);
  t.true(with_.length >= 2);
  t.true(with_.every((e) => e.type === 'BOOKMARK' && e.rv === rv));
  t.deepEqual(await got(false), []);
});

test('ownerReferences: deleting the owner garbage-collects dependents (background), Orphan keeps them unowned', async (t) => {
  const { api, kc, core } = await started();
  t.teardown(() => api.close());
  const apps = kc.makeApiClient(AppsV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  await core.createNamespace({ body: { metadata: { name: 'shop' } } });
  const gw = (await custom.createNamespacedCustomObject({
    group: 'gateway.networking.k8s.io',
    version: 'v1',
    namespace: 'shop',
    plural: 'gateways',
    body: {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'Gateway',
      metadata: { name: 'waypoint' },
      spec: { gatewayClassName: 'zmesh-waypoint', listeners: [] },
    },
  })) as KubernetesObject;
  const owner = {
    apiVersion: 'gateway.networking.k8s.io/v1',
    kind: 'Gateway',
    name: 'waypoint',
    uid: gw.metadata?.uid as string,
    controller: true,
  };
  await core.createNamespacedServiceAccount({
    namespace: 'shop',
    body: { metadata: { name: 'waypoint', ownerReferences: [owner] } },
  });
  await apps.createNamespacedDeployment({
    namespace: 'shop',
    body: {
      metadata: { name: 'waypoint', ownerReferences: [owner] },
      spec: {
        selector: { matchLabels: { app: 'w' } },
        template: {
          metadata: { labels: { app: 'w' } },
          spec: { containers: [{ name: 'w', image: 'zmesh' }] },
        },
      },
    },
  });
  await core.createNamespacedServiceAccount({ namespace: 'shop', body: { metadata: { name: 'unowned' } } });
  await custom.deleteNamespacedCustomObject({
    group: 'gateway.networking.k8s.io',
    version: 'v1',
    namespace: 'shop',
    plural: 'gateways',
    name: 'waypoint',
  });
  await until(() => api.objects('apps', 'v1', 'deployments').length === 0, 'the Deployment collected');
  t.deepEqual(
    api.objects('', 'v1', 'serviceaccounts').map((o) => o.metadata.name),
    ['unowned'],
  );
  // Orphan: the dependent stays, without the reference.
  await core.createNamespacedConfigMap({ namespace: 'shop', body: { metadata: { name: 'owner' } } });
  const cmOwner = api.get('', 'v1', 'configmaps', 'shop', 'owner');
  await core.createNamespacedServiceAccount({
    namespace: 'shop',
    body: {
      metadata: {
        name: 'kept',
        ownerReferences: [
          { apiVersion: 'v1', kind: 'ConfigMap', name: 'owner', uid: cmOwner?.metadata.uid as string },
        ],
      },
    },
  });
  await core.deleteNamespacedConfigMap({ namespace: 'shop', name: 'owner', propagationPolicy: 'Orphan' });
  await until(
    () =>
      (api.get('', 'v1', 'serviceaccounts', 'shop', 'kept')?.metadata.ownerReferences ?? [1]).length === 0,
    'orphaned',
  );
  t.truthy(api.get('', 'v1', 'serviceaccounts', 'shop', 'kept'));
  // A dependent created after its owner is gone (a controller racing the delete) is collected too.
  await core.createNamespacedServiceAccount({
    namespace: 'shop',
    body: { metadata: { name: 'late', ownerReferences: [owner] } },
  });
  await until(
    () => api.get('', 'v1', 'serviceaccounts', 'shop', 'late') === undefined,
    'the late dependent collected',
  );
  // Deleting the namespace takes what is in it.
  await core.deleteNamespace({ name: 'shop' });
  t.deepEqual(api.objects('', 'v1', 'serviceaccounts'), []);
});

test('every object `zmesh install` prints is created through the client, as kubectl apply would', async (t) => {
  const { api, kc } = await started();
  t.teardown(() => api.close());
  const objects = installObjects({
    namespace: DEFAULT_NAMESPACE,
    image: DEFAULT_IMAGE,
    values: DEFAULT_VALUES,
  });
  const client = KubernetesObjectApi.makeApiClient(kc);
  for (const o of objects) await client.create(o as KubernetesObject);
  const deployment = api.get('apps', 'v1', 'deployments', DEFAULT_NAMESPACE, 'zmesh-control-plane');
  t.truthy(deployment?.metadata.uid);
  t.truthy(api.get('gateway.networking.k8s.io', 'v1', 'gatewayclasses', '', 'zmesh-waypoint'));
  t.truthy(api.get('apps', 'v1', 'daemonsets', DEFAULT_NAMESPACE, 'ztunnel'));
  const listed = await client.list('rbac.authorization.k8s.io/v1', 'ClusterRole');
  t.true(listed.items.some((r) => r.metadata?.name === 'zmesh-control-plane'));
  t.is(
    objects.length,
    api.requests.filter((r) => r.method === 'POST' && r.status === 201).length,
    'each object created once',
  );
});

test('TokenRequest issues a pod-bound ServiceAccount token; TokenReview authenticates only its own, for its audience, while the pod lives', async (t) => {
  const { api, kc, core } = await started();
  t.teardown(() => api.close());
  const authn = kc.makeApiClient(AuthenticationV1Api);
  await core.createNamespace({ body: { metadata: { name: 'mesh' } } });
  await core.createNamespacedServiceAccount({ namespace: 'mesh', body: { metadata: { name: 'node' } } });
  const p = await core.createNamespacedPod({ namespace: 'mesh', body: pod('ztunnel-a', {}, 'node-a') });
  const issued = await core.createNamespacedServiceAccountToken({
    namespace: 'mesh',
    name: 'node',
    body: {
      spec: {
        audiences: ['zmesh'],
        expirationSeconds: 3600,
        boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'ztunnel-a', uid: p.metadata?.uid ?? '' },
      },
    },
  });
  const token = issued.status?.token ?? '';
  t.true(token.length > 20);
  const review = async (tok: string, audiences: string[]) =>
    (await authn.createTokenReview({ body: { spec: { token: tok, audiences } } })).status ?? {};
  const ok = await review(token, ['zmesh']);
  t.true(ok.authenticated);
  t.is(ok.user?.username, 'system:serviceaccount:mesh:node');
  t.deepEqual(ok.user?.extra?.['authentication.kubernetes.io/pod-name'], ['ztunnel-a']);
  t.deepEqual(ok.user?.extra?.['authentication.kubernetes.io/node-name'], ['node-a']);
  t.deepEqual(ok.audiences, ['zmesh']);
  const wrongAudience = await review(token, ['other']);
  t.false(wrongAudience.authenticated);
  t.regex(
    wrongAudience.error ?? '',
    /token audiences \["zmesh"\] is invalid for the target audiences \["other"\]/,
  );
  const forged = await review(`${token}x`, ['zmesh']);
  t.false(forged.authenticated, 'a token this server did not issue');
  // No such ServiceAccount or pod: refused as the API server refuses.
  await t.throwsAsync(
    core.createNamespacedServiceAccountToken({ namespace: 'mesh', name: 'nobody', body: { spec: {} } }),
    { message: /404/ },
  );
  await core.deleteNamespacedPod({ namespace: 'mesh', name: 'ztunnel-a' });
  const gone = await review(token, ['zmesh']);
  t.false(gone.authenticated, 'a token bound to a deleted pod is invalid');
  t.regex(gone.error ?? '', /bound to is gone/);
});
