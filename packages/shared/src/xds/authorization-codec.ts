import type {
  Authorization,
  Address as Cidr,
  Match,
  Rule,
  ServiceAccountMatch,
  StringMatch,
} from '../authz/policy-model.js';
import { ipToBytes } from '../net/ip.js';
import { err, ok, type Result } from '../result.js';
import { decodeMessage, encodeMessage } from './message-codec.js';
import { enumName, ipBytes, namespaceName, nonEmpty, port, type Reasons } from './validate.js';
import type {
  WireAuthorization,
  WireCidr,
  WireMatch,
  WireServiceAccountMatch,
  WireStringMatch,
} from './wire-types.js';

const SCOPES = ['GLOBAL', 'NAMESPACE', 'WORKLOAD_SELECTOR'] as const;
const ACTIONS = ['ALLOW', 'DENY'] as const;
const TYPE = 'istio.security.Authorization';

/** Decodes and validates one `istio.security.Authorization`; never throws, returns every reason. */
export function decodeAuthorization(bytes: Uint8Array): Result<Authorization> {
  const decoded = decodeMessage<WireAuthorization>(TYPE, bytes);
  if (!decoded.ok) return decoded;
  const w = decoded.value;
  const reasons: Reasons = [];
  const policy: Authorization = {
    name: nonEmpty(w.name, 'authorization.name', reasons),
    namespace: namespaceName(w.namespace, 'authorization.namespace', reasons),
    scope: enumName(SCOPES, w.scope, 'authorization.scope', reasons),
    action: enumName(ACTIONS, w.action, 'authorization.action', reasons),
    rules: (w.rules ?? []).map((rule, r) => ({
      clauses: (rule.clauses ?? []).map((clause, c) => ({
        matches: (clause.matches ?? []).map((m, i) =>
          matchFromWire(m, `authorization.rules[${r}].clauses[${c}].matches[${i}]`, reasons),
        ),
      })),
    })),
    dryRun: w.dryRun ?? false,
  };
  return reasons.length > 0 ? err(reasons) : ok(policy);
}

export function encodeAuthorization(policy: Authorization): Uint8Array {
  const wire: WireAuthorization = {
    name: policy.name,
    namespace: policy.namespace,
    scope: policy.scope,
    action: policy.action,
    rules: policy.rules.map((rule: Rule) => ({
      clauses: rule.clauses.map((clause) => ({ matches: clause.matches.map(matchToWire) })),
    })),
    dryRun: policy.dryRun,
  };
  return encodeMessage(TYPE, wire);
}

function matchFromWire(m: WireMatch, path: string, reasons: Reasons): Match {
  const strings = (list: WireStringMatch[] | undefined, field: string) =>
    (list ?? []).map((s, i) => stringMatchFromWire(s, `${path}.${field}[${i}]`, reasons));
  const accounts = (list: WireServiceAccountMatch[] | undefined, field: string) =>
    (list ?? []).map((s, i) => ({
      namespace: namespaceName(s.namespace, `${path}.${field}[${i}].namespace`, reasons),
      serviceAccount: nonEmpty(s.serviceAccount, `${path}.${field}[${i}].serviceAccount`, reasons),
    }));
  const cidrs = (list: WireCidr[] | undefined, field: string) =>
    (list ?? []).map((c, i) => cidrFromWire(c, `${path}.${field}[${i}]`, reasons));
  const ports = (list: number[] | undefined, field: string) =>
    (list ?? []).map((p, i) => port(p, `${path}.${field}[${i}]`, reasons));
  return {
    namespaces: strings(m.namespaces, 'namespaces'),
    notNamespaces: strings(m.notNamespaces, 'not_namespaces'),
    serviceAccounts: accounts(m.serviceAccounts, 'service_accounts'),
    notServiceAccounts: accounts(m.notServiceAccounts, 'not_service_accounts'),
    principals: strings(m.principals, 'principals'),
    notPrincipals: strings(m.notPrincipals, 'not_principals'),
    sourceIps: cidrs(m.sourceIps, 'source_ips'),
    notSourceIps: cidrs(m.notSourceIps, 'not_source_ips'),
    destinationIps: cidrs(m.destinationIps, 'destination_ips'),
    notDestinationIps: cidrs(m.notDestinationIps, 'not_destination_ips'),
    destinationPorts: ports(m.destinationPorts, 'destination_ports'),
    notDestinationPorts: ports(m.notDestinationPorts, 'not_destination_ports'),
  };
}

function stringMatchFromWire(s: WireStringMatch, path: string, reasons: Reasons): StringMatch {
  switch (s.matchType) {
    case 'exact':
      return { exact: s.exact ?? '' };
    case 'prefix':
      return { prefix: s.prefix ?? '' };
    case 'suffix':
      return { suffix: s.suffix ?? '' };
    case 'presence':
      return { presence: {} };
    default:
      reasons.push(`${path}: no match_type set`);
      return { exact: '' };
  }
}

function cidrFromWire(c: WireCidr, path: string, reasons: Reasons): Cidr {
  const address = ipBytes(c.address, `${path}.address`, reasons);
  const length = Number(c.length ?? 0);
  const max = c.address?.length === 16 ? 128 : 32;
  if (address !== '' && (!Number.isInteger(length) || length > max)) {
    reasons.push(`${path}.length: ${length} exceeds ${max}`);
  }
  return { address, length };
}

/** The model's fields are optional (absent = no constraint); the wire has empty lists. */
function matchToWire(m: Match): WireMatch {
  const accounts = (list: readonly ServiceAccountMatch[] | undefined) => (list ?? []).map((s) => ({ ...s }));
  return {
    namespaces: (m.namespaces ?? []).map(stringMatchToWire),
    notNamespaces: (m.notNamespaces ?? []).map(stringMatchToWire),
    serviceAccounts: accounts(m.serviceAccounts),
    notServiceAccounts: accounts(m.notServiceAccounts),
    principals: (m.principals ?? []).map(stringMatchToWire),
    notPrincipals: (m.notPrincipals ?? []).map(stringMatchToWire),
    sourceIps: (m.sourceIps ?? []).map(cidrToWire),
    notSourceIps: (m.notSourceIps ?? []).map(cidrToWire),
    destinationIps: (m.destinationIps ?? []).map(cidrToWire),
    notDestinationIps: (m.notDestinationIps ?? []).map(cidrToWire),
    destinationPorts: [...(m.destinationPorts ?? [])],
    notDestinationPorts: [...(m.notDestinationPorts ?? [])],
  };
}

function stringMatchToWire(s: StringMatch): WireStringMatch {
  if ('exact' in s) return { exact: s.exact };
  if ('prefix' in s) return { prefix: s.prefix };
  if ('suffix' in s) return { suffix: s.suffix };
  return { presence: {} };
}

function cidrToWire(c: Cidr): WireCidr {
  const address = ipToBytes(c.address);
  if (address === undefined) throw new TypeError(`not an IP address: ${c.address}`);
  return { address, length: c.length };
}
