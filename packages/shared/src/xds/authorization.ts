/**
 * The L4 authorization policy as decoded from `istio.security.Authorization` (field
 * numbers in shared/WIRE.md), camelCase. This mirrors the authz model's `Authorization`
 * shape so the two can be unified; until then the xds layer owns this copy.
 */
export type AuthzAction = 'ALLOW' | 'DENY';
export type AuthzScope = 'GLOBAL' | 'NAMESPACE' | 'WORKLOAD_SELECTOR';

export type StringMatch = { exact: string } | { prefix: string } | { suffix: string } | { presence: true };

/** A CIDR; `address` is canonical IP text, `length` the prefix length. */
export interface Cidr {
  address: string;
  length: number;
}

export interface ServiceAccountMatch {
  namespace: string;
  serviceAccount: string;
}

/** Fields of one match are ANDed; values within a field are ORed (Istio semantics). */
export interface AuthzMatch {
  namespaces: StringMatch[];
  notNamespaces: StringMatch[];
  serviceAccounts: ServiceAccountMatch[];
  notServiceAccounts: ServiceAccountMatch[];
  principals: StringMatch[];
  notPrincipals: StringMatch[];
  sourceIps: Cidr[];
  notSourceIps: Cidr[];
  destinationIps: Cidr[];
  notDestinationIps: Cidr[];
  destinationPorts: number[];
  notDestinationPorts: number[];
}

export interface AuthzClause {
  matches: AuthzMatch[];
}

export interface AuthzRule {
  clauses: AuthzClause[];
}

export interface Authorization {
  name: string;
  namespace: string;
  scope: AuthzScope;
  action: AuthzAction;
  rules: AuthzRule[];
  dryRun: boolean;
}

/** xDS resource name of a policy. */
export function authorizationKey(policy: Pick<Authorization, 'namespace' | 'name'>): string {
  return `${policy.namespace}/${policy.name}`;
}
