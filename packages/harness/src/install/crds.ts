import { parseAllDocuments } from 'yaml';

/**
 * The CustomResourceDefinitions zmesh reads and writes but does not ship: Gateway API's
 * standard channel and Istio's security API are installed by their own projects (their
 * versions are the cluster operator's choice), and `zmesh install` only checks for them.
 */
export const REQUIRED_CRDS: ReadonlyArray<{ name: string; version: string; from: string }> = [
  { name: 'gatewayclasses.gateway.networking.k8s.io', version: 'v1', from: 'Gateway API (standard channel)' },
  { name: 'gateways.gateway.networking.k8s.io', version: 'v1', from: 'Gateway API (standard channel)' },
  { name: 'httproutes.gateway.networking.k8s.io', version: 'v1', from: 'Gateway API (standard channel)' },
  { name: 'grpcroutes.gateway.networking.k8s.io', version: 'v1', from: 'Gateway API (standard channel)' },
  { name: 'authorizationpolicies.security.istio.io', version: 'v1', from: "Istio's base CRDs" },
];

export interface CrdCheck {
  readonly missing: string[];
  readonly present: string[];
}

/**
 * Which required CRDs a cluster dump lacks. The dump is what `kubectl get crd -o yaml` (or
 * `-o json`) prints: a List of CustomResourceDefinitions, or CRD documents one after another.
 * A CRD counts only when it serves the version zmesh uses. Throws with the reason on a file
 * that is not such a dump.
 */
export function checkCrds(text: string): CrdCheck {
  const served = new Map<string, Set<string>>();
  let crdsSeen = 0;
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) throw new Error(`not YAML or JSON: ${doc.errors[0]!.message.split('\n')[0]}`);
    const value = doc.toJS() as unknown;
    if (value === null || value === undefined) continue;
    for (const item of crdItems(value)) {
      crdsSeen++;
      const name = item.metadata?.name;
      if (typeof name !== 'string') throw new Error('a CustomResourceDefinition without metadata.name');
      const versions = new Set(
        (item.spec?.versions ?? []).filter((v) => v.served !== false).map((v) => String(v.name)),
      );
      served.set(name, versions);
    }
  }
  if (crdsSeen === 0) throw new Error('no CustomResourceDefinition in it (want `kubectl get crd -o yaml`)');
  const missing: string[] = [];
  const present: string[] = [];
  for (const crd of REQUIRED_CRDS) {
    const versions = served.get(crd.name);
    if (!versions) missing.push(`${crd.name} (${crd.from})`);
    else if (!versions.has(crd.version))
      missing.push(`${crd.name} serving ${crd.version} (has ${[...versions].join(', ') || 'none'})`);
    else present.push(crd.name);
  }
  return { missing, present };
}

interface CrdLike {
  kind?: unknown;
  metadata?: { name?: unknown };
  spec?: { versions?: Array<{ name?: unknown; served?: unknown }> };
}

function crdItems(value: unknown): CrdLike[] {
  if (typeof value !== 'object' || value === null) throw new Error('a document that is not an object');
  const obj = value as { kind?: unknown; items?: unknown };
  if (obj.kind === 'CustomResourceDefinition') return [obj as CrdLike];
  if (typeof obj.kind === 'string' && obj.kind.endsWith('List') && Array.isArray(obj.items))
    return (obj.items as CrdLike[]).filter(
      (i) => i?.kind === undefined || i.kind === 'CustomResourceDefinition',
    );
  throw new Error(`a ${String(obj.kind ?? 'kind-less')} document, not a CustomResourceDefinition or List`);
}
