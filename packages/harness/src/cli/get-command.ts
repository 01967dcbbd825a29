import { resolveKind } from '@zmesh/control-plane/kinds';
import { adminRequest, UsageError } from '@zmesh/shared/cli';
import { type AdminOptions, printRefusal, type Refusal, target } from './operator-commands.js';
import { age, structured, table } from './table.js';

export interface GetOptions extends AdminOptions {
  namespace?: string;
  allNamespaces?: boolean;
  output: 'table' | 'wide' | 'json' | 'yaml';
}

interface Obj {
  kind: string;
  metadata: { name: string; namespace: string; labels?: Record<string, string>; creationTimestamp?: string };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

/**
 * `zmesh get KIND [NAME] [-n NS | -A] [-o table|wide|json|yaml]`: the control plane's applied
 * objects (GET /objects?full=1). json/yaml print `{generation, objects: [...]}` as stored.
 */
export async function runGet(kindText: string, name: string | undefined, opts: GetOptions): Promise<number> {
  const kind = resolveKind(kindText);
  if (kind === undefined)
    throw new UsageError(
      `unknown kind ${JSON.stringify(kindText)}: want Namespace, Pod, Service, ServiceAccount, AuthorizationPolicy, Gateway, HTTPRoute, GRPCRoute, DestinationRule, RequestAuthentication, PeerAuthentication or all`,
    );
  if (opts.allNamespaces && opts.namespace !== undefined)
    throw new UsageError('-n and -A exclude each other');
  const query = new URLSearchParams({ full: '1', kind });
  if (!opts.allNamespaces) query.set('namespace', opts.namespace ?? 'default');
  if (name !== undefined) query.set('name', name);
  const res = await adminRequest(await target(opts), `/objects?${query}`);
  const out = res.json<{ generation: number; objects: Obj[] } & Refusal>();
  if (!res.ok) return printRefusal('get', 'refused', res.status, out);
  if (opts.output === 'json' || opts.output === 'yaml') {
    console.log(structured(out, opts.output));
    return 0;
  }
  if (out.objects.length === 0) {
    const where = opts.allNamespaces ? '' : ` in namespace ${opts.namespace ?? 'default'}`;
    console.error(name ? `no ${kind} ${name}${where}` : `no resources found${where}`);
    return name ? 1 : 0;
  }
  console.log(getTable(out.objects, { wide: opts.output === 'wide', kindColumn: kind === 'all' }));
  return 0;
}

/**
 * The table `zmesh get` prints (exported for golden tests): AGE as kubectl's, from the
 * control plane's creationTimestamp (`-` when it has none); wide adds LABELS.
 */
export function getTable(
  objects: Obj[],
  opts: { wide: boolean; kindColumn: boolean },
  now = Date.now(),
): string {
  const headers = [...(opts.kindColumn ? ['KIND'] : []), 'NAMESPACE', 'NAME', 'SUMMARY', 'AGE'];
  if (opts.wide) headers.push('LABELS');
  const rows = objects.map((o) => {
    const created = Date.parse(o.metadata.creationTimestamp ?? '');
    const row = [
      ...(opts.kindColumn ? [o.kind] : []),
      o.metadata.namespace || '-',
      o.metadata.name,
      summary(o) || '-',
      Number.isNaN(created) ? '-' : age((now - created) / 1000),
    ];
    if (opts.wide)
      row.push(
        Object.entries(o.metadata.labels ?? {})
          .map(([k, v]) => `${k}=${v}`)
          .join(',') || '-',
      );
    return row;
  });
  return table(headers, rows);
}

/** One kind-specific cell: what an operator looks for first. */
function summary(o: Obj): string {
  const spec = (o.spec ?? {}) as Record<string, unknown>;
  switch (o.kind) {
    case 'Pod': {
      const ips = ((o.status?.podIPs as string[] | undefined) ?? []).join(',');
      return `node=${spec.nodeName} sa=${spec.serviceAccountName} ip=${ips}`;
    }
    case 'Service':
      return `clusterIP=${spec.clusterIP ?? spec.clusterIPs ?? '-'}`;
    case 'Namespace': {
      const mode = o.metadata.labels?.['istio.io/dataplane-mode'];
      const wp = o.metadata.labels?.['istio.io/use-waypoint'];
      return [mode ? `mode=${mode}` : '', wp ? `waypoint=${wp}` : ''].filter(Boolean).join(' ');
    }
    case 'Gateway':
      return `class=${spec.gatewayClassName ?? '-'}`;
    case 'AuthorizationPolicy':
      return `action=${spec.action ?? 'ALLOW'}`;
    default:
      return '';
  }
}
