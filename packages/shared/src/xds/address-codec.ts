import type { GatewayRef, NetworkAddress, Port, Service, Workload } from '../model/workload.js';
import { ipToBytes } from '../net/ip.js';
import { err, ok, type Result } from '../result.js';
import { decodeMessage, encodeMessage, labelsCodec } from './message-codec.js';
import {
  enumName,
  ipBytes,
  namespaceName,
  nonEmpty,
  port,
  type Reasons,
  serviceAccountName,
  trustDomain,
} from './validate.js';
import type { WireAddress, WireGatewayAddress, WirePort, WireService, WireWorkload } from './wire-types.js';

export type DecodedAddress = { kind: 'workload'; workload: Workload } | { kind: 'service'; service: Service };

const TUNNEL = ['NONE', 'HBONE', 'LEGACY_ISTIO_MTLS'] as const;
const APP_PROTOCOLS = ['UNKNOWN', 'HTTP11', 'HTTP2', 'GRPC', 'TCP', 'TLS'] as const;
const STATUS = ['HEALTHY', 'UNHEALTHY'] as const;
const WORKLOAD_TYPE = ['DEPLOYMENT', 'CRONJOB', 'POD', 'JOB'] as const;
const NETWORK_MODE = ['STANDARD', 'HOST_NETWORK'] as const;
const IP_FAMILIES = ['AUTOMATIC', 'IPV4_ONLY', 'IPV6_ONLY', 'DUAL'] as const;
const VISIBILITY = ['PUBLIC', 'NAMESPACE'] as const;
const KEY = /^[^/]+\/[^/]+$/;

/** Decodes and validates one `istio.workload.Address`; never throws, returns every reason. */
export function decodeAddress(bytes: Uint8Array): Result<DecodedAddress> {
  const decoded = decodeMessage<WireAddress>('istio.workload.Address', bytes);
  if (!decoded.ok) return decoded;
  const wire = decoded.value;
  const reasons: Reasons = [];
  if (wire.type === 'workload' && wire.workload) {
    const workload = workloadFromWire(wire.workload, reasons);
    return reasons.length > 0 ? err(reasons) : ok({ kind: 'workload', workload });
  }
  if (wire.type === 'service' && wire.service) {
    const service = serviceFromWire(wire.service, reasons);
    return reasons.length > 0 ? err(reasons) : ok({ kind: 'service', service });
  }
  return err(['address: neither workload nor service is set']);
}

export function encodeAddress(address: DecodedAddress): Uint8Array {
  const wire: WireAddress =
    address.kind === 'workload'
      ? { workload: workloadToWire(address.workload) }
      : { service: serviceToWire(address.service) };
  return encodeMessage('istio.workload.Address', wire);
}

function workloadFromWire(w: WireWorkload, reasons: Reasons): Workload {
  const p = 'workload';
  const tunnel = enumName(TUNNEL, w.tunnelProtocol, `${p}.tunnel_protocol`, reasons);
  if (tunnel === 'LEGACY_ISTIO_MTLS')
    reasons.push(`${p}.tunnel_protocol: LEGACY_ISTIO_MTLS is not supported`);
  enumName(WORKLOAD_TYPE, w.workloadType, `${p}.workload_type`, reasons);
  enumName(NETWORK_MODE, w.networkMode, `${p}.network_mode`, reasons);
  const workload: Workload = {
    uid: nonEmpty(w.uid, `${p}.uid`, reasons),
    name: nonEmpty(w.name, `${p}.name`, reasons),
    namespace: namespaceName(w.namespace, `${p}.namespace`, reasons),
    addresses: (w.addresses ?? []).map((a, i) => ipBytes(a, `${p}.addresses[${i}]`, reasons)),
    network: w.network ?? '',
    node: w.node ?? '',
    trustDomain: trustDomain(w.trustDomain, `${p}.trust_domain`, reasons),
    serviceAccount: serviceAccountName(w.serviceAccount, `${p}.service_account`, reasons),
    tunnelProtocol: tunnel === 'HBONE' ? 'HBONE' : 'NONE',
    services: servicesFromWire(w.services ?? {}, `${p}.services`, reasons),
    authorizationPolicies: (w.authorizationPolicies ?? []).map((name, i) => {
      if (!KEY.test(name))
        reasons.push(`${p}.authorization_policies[${i}]: ${JSON.stringify(name)} is not namespace/name`);
      return name;
    }),
    status: enumName(STATUS, w.status, `${p}.status`, reasons),
    canonicalName: w.canonicalName ?? '',
    canonicalRevision: w.canonicalRevision ?? '',
    workloadName: w.workloadName ?? '',
    clusterId: w.clusterId ?? '',
  };
  if (w.waypoint) workload.waypoint = gatewayFromWire(w.waypoint, `${p}.waypoint`, reasons);
  const labels = labelsCodec.fromExtensions(w.extensions ?? [], `${p}.extensions`, reasons);
  if (labels !== undefined) workload.labels = labels;
  return workload;
}

function workloadToWire(w: Workload): WireWorkload {
  const wire: WireWorkload = {
    uid: w.uid,
    name: w.name,
    namespace: w.namespace,
    addresses: w.addresses.map(mustIpBytes),
    network: w.network,
    tunnelProtocol: w.tunnelProtocol,
    trustDomain: w.trustDomain,
    serviceAccount: w.serviceAccount,
    node: w.node,
    canonicalName: w.canonicalName,
    canonicalRevision: w.canonicalRevision,
    workloadName: w.workloadName,
    services: Object.fromEntries(
      Object.entries(w.services).map(([key, ports]) => [key, { ports: ports.map(portToWire) }]),
    ),
    authorizationPolicies: w.authorizationPolicies,
    status: w.status,
    clusterId: w.clusterId,
  };
  if (w.waypoint) wire.waypoint = gatewayToWire(w.waypoint);
  if (w.labels !== undefined) wire.extensions = [labelsCodec.toExtension(w.labels)];
  return wire;
}

function serviceFromWire(s: WireService, reasons: Reasons): Service {
  const p = 'service';
  enumName(IP_FAMILIES, s.ipFamilies, `${p}.ip_families`, reasons);
  enumName(VISIBILITY, s.visibility, `${p}.visibility`, reasons);
  const service: Service = {
    name: nonEmpty(s.name, `${p}.name`, reasons),
    namespace: namespaceName(s.namespace, `${p}.namespace`, reasons),
    hostname: nonEmpty(s.hostname, `${p}.hostname`, reasons),
    addresses: (s.addresses ?? []).map((a, i) => ({
      network: a.network ?? '',
      address: ipBytes(a.address, `${p}.addresses[${i}].address`, reasons),
    })),
    ports: (s.ports ?? []).map((x, i) => portFromWire(x, `${p}.ports[${i}]`, reasons)),
    subjectAltNames: s.subjectAltNames ?? [],
  };
  if (s.waypoint) service.waypoint = gatewayFromWire(s.waypoint, `${p}.waypoint`, reasons);
  return service;
}

function serviceToWire(s: Service): WireService {
  const wire: WireService = {
    name: s.name,
    namespace: s.namespace,
    hostname: s.hostname,
    addresses: s.addresses.map(networkAddressToWire),
    ports: s.ports.map(portToWire),
    subjectAltNames: s.subjectAltNames,
  };
  if (s.waypoint) wire.waypoint = gatewayToWire(s.waypoint);
  return wire;
}

function servicesFromWire(
  services: Record<string, { ports?: WirePort[] }>,
  path: string,
  reasons: Reasons,
): Record<string, Port[]> {
  const out: Record<string, Port[]> = {};
  for (const [key, list] of Object.entries(services)) {
    if (!KEY.test(key)) reasons.push(`${path}[${JSON.stringify(key)}]: key is not namespace/hostname`);
    out[key] = (list.ports ?? []).map((x, i) =>
      portFromWire(x, `${path}[${JSON.stringify(key)}].ports[${i}]`, reasons),
    );
  }
  return out;
}

function portFromWire(x: WirePort, path: string, reasons: Reasons): Port {
  const out: Port = {
    servicePort: port(x.servicePort, `${path}.service_port`, reasons),
    targetPort: port(x.targetPort, `${path}.target_port`, reasons),
  };
  const proto = enumName(APP_PROTOCOLS, x.appProtocol, `${path}.app_protocol`, reasons);
  if (proto !== 'UNKNOWN') out.appProtocol = proto;
  return out;
}

function portToWire(x: Port): WirePort {
  return { servicePort: x.servicePort, targetPort: x.targetPort, appProtocol: x.appProtocol ?? 'UNKNOWN' };
}

function gatewayFromWire(g: WireGatewayAddress, path: string, reasons: Reasons): GatewayRef {
  const ref: GatewayRef = { hbonePort: port(g.hboneMtlsPort, `${path}.hbone_mtls_port`, reasons) };
  if (g.hostname) {
    ref.hostname = {
      namespace: namespaceName(g.hostname.namespace, `${path}.hostname.namespace`, reasons),
      hostname: nonEmpty(g.hostname.hostname, `${path}.hostname.hostname`, reasons),
    };
  } else if (g.address) {
    ref.address = {
      network: g.address.network ?? '',
      address: ipBytes(g.address.address, `${path}.address.address`, reasons),
    };
  } else {
    reasons.push(`${path}: neither hostname nor address is set`);
  }
  return ref;
}

function gatewayToWire(g: GatewayRef): WireGatewayAddress {
  const wire: WireGatewayAddress = { hboneMtlsPort: g.hbonePort };
  if (g.hostname) wire.hostname = { namespace: g.hostname.namespace, hostname: g.hostname.hostname };
  else if (g.address) wire.address = networkAddressToWire(g.address);
  return wire;
}

function networkAddressToWire(a: NetworkAddress) {
  return { network: a.network, address: mustIpBytes(a.address) };
}

/** Encoding takes zmesh's own model, whose IPs were validated when it was built. */
function mustIpBytes(ip: string): Uint8Array {
  const bytes = ipToBytes(ip);
  if (bytes === undefined) throw new TypeError(`not an IP address: ${ip}`);
  return bytes;
}
