import type { ResourceType } from './resources.js';

/** The discovery documents (/api, /api/v1, /apis, /apis/<group>/<version>) for the types the double serves; undefined for any other path. */
export function discoveryDocument(all: Iterable<ResourceType>, parts: string[]): unknown {
  const types = [...all];
  const resourceList = (group: string, version: string) => ({
    kind: 'APIResourceList',
    apiVersion: 'v1',
    groupVersion: group === '' ? version : `${group}/${version}`,
    resources: types
      .filter((t) => t.group === group && t.version === version)
      .flatMap((t) => [
        {
          name: t.resource,
          singularName: t.kind.toLowerCase(),
          namespaced: t.namespaced,
          kind: t.kind,
          verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
        },
        ...(t.status
          ? [
              {
                name: `${t.resource}/status`,
                singularName: '',
                namespaced: t.namespaced,
                kind: t.kind,
                verbs: ['get', 'patch', 'update'],
              },
            ]
          : []),
      ]),
  });
  if (parts.length === 1 && parts[0] === 'api') return { kind: 'APIVersions', versions: ['v1'] };
  if (parts.length === 2 && parts[0] === 'api') return resourceList('', parts[1] as string);
  if (parts.length === 1 && parts[0] === 'apis') {
    const groups = [...new Set(types.filter((t) => t.group !== '').map((t) => t.group))];
    return {
      kind: 'APIGroupList',
      apiVersion: 'v1',
      groups: groups.map((name) => {
        const versions = [...new Set(types.filter((t) => t.group === name).map((t) => t.version))].map(
          (version) => ({ groupVersion: `${name}/${version}`, version }),
        );
        return { name, versions, preferredVersion: versions[0] };
      }),
    };
  }
  if (parts.length === 3 && parts[0] === 'apis') return resourceList(parts[1] as string, parts[2] as string);
  return undefined;
}
