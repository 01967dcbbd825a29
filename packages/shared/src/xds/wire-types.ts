/**
 * Plain-object shapes of the istio.workload / istio.security messages as protobufjs's
 * `toObject` yields them (camelCase, enums as numbers, bytes as Uint8Array) and as
 * `fromObject` accepts them. Every field is optional: the decoder checks presence.
 */
/** protobufjs's bundled google/protobuf/any.proto keeps the snake_case field name. */
export interface WireAny {
  type_url?: string;
  value?: Uint8Array;
}

export interface WireExtension {
  name?: string;
  config?: WireAny;
}

interface WireNetworkAddress {
  network?: string;
  address?: Uint8Array;
  length?: number;
}

export interface WireGatewayAddress {
  hostname?: { namespace?: string; hostname?: string };
  address?: WireNetworkAddress;
  hboneMtlsPort?: number;
}

export interface WirePort {
  servicePort?: number;
  targetPort?: number;
  appProtocol?: number | string;
}

export interface WireWorkload {
  uid?: string;
  name?: string;
  namespace?: string;
  addresses?: Uint8Array[];
  hostname?: string;
  network?: string;
  tunnelProtocol?: number | string;
  trustDomain?: string;
  serviceAccount?: string;
  waypoint?: WireGatewayAddress;
  networkGateway?: WireGatewayAddress;
  node?: string;
  canonicalName?: string;
  canonicalRevision?: string;
  workloadType?: number | string;
  workloadName?: string;
  services?: Record<string, { ports?: WirePort[] }>;
  authorizationPolicies?: string[];
  status?: number | string;
  clusterId?: string;
  networkMode?: number | string;
  extensions?: WireExtension[];
}

export interface WireService {
  name?: string;
  namespace?: string;
  hostname?: string;
  addresses?: WireNetworkAddress[];
  ports?: WirePort[];
  subjectAltNames?: string[];
  waypoint?: WireGatewayAddress;
  ipFamilies?: number | string;
  visibility?: number | string;
  extensions?: WireExtension[];
}

export interface WireAddress {
  workload?: WireWorkload;
  service?: WireService;
  type?: 'workload' | 'service';
}

export interface WireStringMatch {
  exact?: string;
  prefix?: string;
  suffix?: string;
  presence?: object;
  matchType?: 'exact' | 'prefix' | 'suffix' | 'presence';
}

export interface WireCidr {
  address?: Uint8Array;
  length?: number;
}

export interface WireServiceAccountMatch {
  namespace?: string;
  serviceAccount?: string;
}

export interface WireMatch {
  namespaces?: WireStringMatch[];
  notNamespaces?: WireStringMatch[];
  serviceAccounts?: WireServiceAccountMatch[];
  notServiceAccounts?: WireServiceAccountMatch[];
  principals?: WireStringMatch[];
  notPrincipals?: WireStringMatch[];
  sourceIps?: WireCidr[];
  notSourceIps?: WireCidr[];
  destinationIps?: WireCidr[];
  notDestinationIps?: WireCidr[];
  destinationPorts?: number[];
  notDestinationPorts?: number[];
}

export interface WireAuthorization {
  name?: string;
  namespace?: string;
  scope?: number | string;
  action?: number | string;
  rules?: { clauses?: { matches?: WireMatch[] }[] }[];
  dryRun?: boolean;
}
