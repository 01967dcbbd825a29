import { canonicalIp, convertRequestAuthentication } from '@zmesh/shared';
import { grpcRouteSchemaReasons } from './grpc-route-schema.js';
import {
  type GatewayObject,
  KINDS,
  type Kind,
  type Meta,
  MTLS_MODES,
  type MtlsMode,
  type PeerAuthenticationObject,
  SERVICE_NAME_LABEL,
  type ServicePortSpec,
  type SliceEndpoint,
  type StoreObject,
} from './k8s-objects.js';

type Obj = Record<string, unknown>;

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * Checks one decoded YAML document and returns the store's form of it, or pushes
 * `field: reason` for every problem found. Never throws.
 */
export function parseObject(doc: unknown, reasons: string[]): StoreObject | undefined {
  if (!isObj(doc)) {
    reasons.push('document: not a mapping');
    return undefined;
  }
  const kind = doc.kind;
  if (typeof kind !== 'string' || !(KINDS as readonly string[]).includes(kind)) {
    reasons.push(`kind: ${JSON.stringify(kind)} is not one of ${KINDS.join(', ')}`);
    return undefined;
  }
  const metadata = parseMeta(doc.metadata, kind as Kind, reasons);
  const spec = isObj(doc.spec) ? doc.spec : {};
  const status = isObj(doc.status) ? doc.status : {};
  switch (kind as Kind) {
    case 'Namespace':
      return { kind: 'Namespace', metadata };
    case 'ServiceAccount':
      return { kind: 'ServiceAccount', metadata };
    case 'EndpointSlice':
      return parseEndpointSlice(metadata, doc, reasons);
    case 'Pod':
      return parsePod(metadata, isObj(doc.metadata) ? doc.metadata : {}, spec, status, reasons);
    case 'Service':
      return parseService(metadata, spec, reasons);
    case 'Gateway':
      return parseGateway(metadata, doc, spec, status, reasons);
    case 'AuthorizationPolicy':
      return { kind: 'AuthorizationPolicy', metadata, raw: doc };
    case 'HTTPRoute':
      return { kind: 'HTTPRoute', metadata, raw: doc };
    case 'GRPCRoute':
      reasons.push(...grpcRouteSchemaReasons(doc));
      return { kind: 'GRPCRoute', metadata, raw: doc };
    case 'DestinationRule':
      return { kind: 'DestinationRule', metadata, raw: doc };
    case 'RequestAuthentication': {
      // The waypoint's own reader: what a waypoint would NACK, apply refuses.
      const checked = convertRequestAuthentication(doc);
      if (!checked.ok) reasons.push(...checked.error);
      return { kind: 'RequestAuthentication', metadata, raw: doc };
    }
    case 'PeerAuthentication':
      return parsePeerAuthentication(metadata, spec, reasons);
  }
}

function parseMeta(value: unknown, kind: Kind, reasons: string[]): Meta {
  const m = isObj(value) ? value : {};
  if (!isObj(value)) reasons.push('metadata: missing');
  const name = typeof m.name === 'string' ? m.name : '';
  if (!DNS_SUBDOMAIN.test(name) || name.length > 253)
    reasons.push(`metadata.name: ${JSON.stringify(m.name)} is not a DNS-1123 name`);
  let namespace = '';
  if (kind !== 'Namespace') {
    namespace = m.namespace === undefined ? 'default' : String(m.namespace);
    if (!DNS_LABEL.test(namespace) || namespace.length > 63) {
      reasons.push(`metadata.namespace: ${JSON.stringify(m.namespace)} is not a DNS-1123 label`);
    }
  } else if (!DNS_LABEL.test(name) || name.length > 63) {
    reasons.push(`metadata.name: ${JSON.stringify(name)} is not a DNS-1123 label`);
  }
  const meta: Meta = { name, namespace, labels: stringMap(m.labels, 'metadata.labels', reasons) };
  if (m.uid !== undefined) meta.uid = String(m.uid);
  return meta;
}

/**
 * A Pod. Its readiness is the `Ready` condition, as Istio reads it (IsPodReady): when the Pod
 * lists `status.conditions`, `ready` is whether one of type Ready has status "True" (none:
 * not ready); a Pod without conditions (a YAML config) has no `ready` and the compiler falls
 * back on its phase and EndpointSlices (compiler.ts, podStatus).
 */
function parsePod(metadata: Meta, rawMeta: Obj, spec: Obj, status: Obj, reasons: string[]): StoreObject {
  const serviceAccountName =
    spec.serviceAccountName === undefined ? 'default' : String(spec.serviceAccountName);
  if (!DNS_SUBDOMAIN.test(serviceAccountName)) {
    reasons.push(`spec.serviceAccountName: ${JSON.stringify(serviceAccountName)} is not a DNS-1123 name`);
  }
  const nodeName = typeof spec.nodeName === 'string' ? spec.nodeName : '';
  if (nodeName === '') reasons.push('spec.nodeName: must be set (zmesh serves only scheduled pods)');
  const listed = Array.isArray(status.podIPs)
    ? status.podIPs.map((p: unknown) => (isObj(p) ? p.ip : p))
    : status.podIP === undefined
      ? []
      : [status.podIP];
  const podIPs = ips(listed, Array.isArray(status.podIPs) ? 'status.podIPs' : 'status.podIP', reasons);
  const pod: StoreObject = {
    kind: 'Pod',
    metadata,
    spec: { serviceAccountName, nodeName },
    status: { podIPs },
  };
  if (typeof status.phase === 'string') pod.status.phase = status.phase;
  if (status.conditions !== undefined && status.conditions !== null) {
    if (!Array.isArray(status.conditions)) reasons.push('status.conditions: not a list');
    const conditions = Array.isArray(status.conditions) ? status.conditions : [];
    const ready = conditions.find((c) => isObj(c) && c.type === 'Ready');
    pod.status.ready = isObj(ready) && ready.status === 'True';
  }
  if (rawMeta.deletionTimestamp !== undefined && rawMeta.deletionTimestamp !== null)
    pod.status.terminating = true;
  return pod;
}

function parseService(metadata: Meta, spec: Obj, reasons: string[]): StoreObject {
  const listed = Array.isArray(spec.clusterIPs)
    ? spec.clusterIPs
    : spec.clusterIP === undefined
      ? []
      : [spec.clusterIP];
  const clusterIPs = ips(
    listed.filter((ip) => ip !== 'None'),
    'spec.clusterIPs',
    reasons,
  );
  const rawPorts = Array.isArray(spec.ports) ? spec.ports : [];
  if (spec.ports !== undefined && !Array.isArray(spec.ports)) reasons.push('spec.ports: not a list');
  const ports = rawPorts.map((p, i) => parseServicePort(p, `spec.ports[${i}]`, reasons));
  const service: StoreObject = { kind: 'Service', metadata, spec: { clusterIPs, ports } };
  if (spec.selector !== undefined) service.spec.selector = stringMap(spec.selector, 'spec.selector', reasons);
  return service;
}

/**
 * An EndpointSlice (its fields are top-level, not under spec). IPv4/IPv6 slices only: an FQDN
 * slice's addresses are names, kept out (no endpoints). Conditions default as Kubernetes says:
 * ready and serving nil mean true (serving follows ready when absent), terminating nil false.
 */
function parseEndpointSlice(metadata: Meta, doc: Obj, reasons: string[]): StoreObject {
  const service = metadata.labels[SERVICE_NAME_LABEL] ?? '';
  if (service === '') reasons.push(`metadata.labels: ${SERVICE_NAME_LABEL} must name the slice's Service`);
  const addressType = doc.addressType;
  if (addressType !== 'IPv4' && addressType !== 'IPv6' && addressType !== 'FQDN')
    reasons.push(`addressType: ${JSON.stringify(addressType)} is not one of IPv4, IPv6, FQDN`);
  const rawPorts = Array.isArray(doc.ports) ? doc.ports : [];
  if (doc.ports !== undefined && doc.ports !== null && !Array.isArray(doc.ports))
    reasons.push('ports: not a list');
  const ports = rawPorts.map((p, i) => {
    const o = isObj(p) ? p : {};
    return {
      name: typeof o.name === 'string' ? o.name : '',
      port: portNumber(o.port, `ports[${i}].port`, reasons),
    };
  });
  const rawEndpoints = Array.isArray(doc.endpoints) ? doc.endpoints : [];
  if (doc.endpoints !== undefined && doc.endpoints !== null && !Array.isArray(doc.endpoints))
    reasons.push('endpoints: not a list');
  const endpoints =
    addressType === 'FQDN'
      ? []
      : rawEndpoints.map((e, i): SliceEndpoint => {
          const o = isObj(e) ? e : {};
          const path = `endpoints[${i}]`;
          const listed = Array.isArray(o.addresses) ? o.addresses : [];
          if (listed.length === 0) reasons.push(`${path}.addresses: must list an address`);
          const c = isObj(o.conditions) ? o.conditions : {};
          const flag = (v: unknown, dflt: boolean, name: string) => {
            if (v === undefined || v === null) return dflt;
            if (typeof v !== 'boolean') reasons.push(`${path}.conditions.${name}: not a boolean`);
            return v === true;
          };
          const ready = flag(c.ready, true, 'ready');
          const out: SliceEndpoint = {
            addresses: ips(listed, `${path}.addresses`, reasons),
            ready,
            serving: flag(c.serving, ready, 'serving'),
            terminating: flag(c.terminating, false, 'terminating'),
          };
          if (typeof o.nodeName === 'string') out.node = o.nodeName;
          const ref = isObj(o.targetRef) ? o.targetRef : undefined;
          if (ref?.kind === 'Pod' && typeof ref.name === 'string')
            out.pod = `${typeof ref.namespace === 'string' ? ref.namespace : metadata.namespace}/${ref.name}`;
          return out;
        });
  return { kind: 'EndpointSlice', metadata, spec: { service, ports, endpoints } };
}

function parseServicePort(value: unknown, path: string, reasons: string[]): ServicePortSpec {
  const p = isObj(value) ? value : {};
  const port = portNumber(p.port, `${path}.port`, reasons);
  let targetPort = port;
  if (typeof p.targetPort === 'string')
    reasons.push(`${path}.targetPort: named ports are not supported; use a number`);
  else if (p.targetPort !== undefined) targetPort = portNumber(p.targetPort, `${path}.targetPort`, reasons);
  const out: ServicePortSpec = { port, targetPort };
  if (typeof p.name === 'string') out.name = p.name;
  if (p.appProtocol !== undefined) out.appProtocol = String(p.appProtocol);
  return out;
}

function parseGateway(metadata: Meta, doc: Obj, spec: Obj, status: Obj, reasons: string[]): GatewayObject {
  const gatewayClassName = typeof spec.gatewayClassName === 'string' ? spec.gatewayClassName : '';
  if (gatewayClassName === '') reasons.push('spec.gatewayClassName: must be set');
  const listed = [spec.addresses, status.addresses].flatMap((a) => (Array.isArray(a) ? a : []));
  const values = listed.map((a: unknown) => (isObj(a) ? a.value : a));
  const addresses = [...new Set(ips(values, 'spec.addresses', reasons))];
  return { kind: 'Gateway', metadata, spec: { gatewayClassName, addresses }, raw: doc };
}

const LABEL_KEY = /^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

/** Istio's validation (ValidatePeerAuthentication) plus the shapes zmesh reads. */
function parsePeerAuthentication(metadata: Meta, spec: Obj, reasons: string[]): PeerAuthenticationObject {
  const out: PeerAuthenticationObject = {
    kind: 'PeerAuthentication',
    metadata,
    spec: { mode: mtlsMode(spec.mtls, 'spec.mtls', reasons), portLevelMtls: {} },
  };
  if (spec.selector !== undefined) {
    const sel = isObj(spec.selector) ? spec.selector : undefined;
    if (!sel) reasons.push('spec.selector: not a mapping');
    const labels = stringMap(sel?.matchLabels, 'spec.selector.matchLabels', reasons);
    for (const k of Object.keys(labels)) {
      if (!LABEL_KEY.test(k) || k.length > 317)
        reasons.push(`spec.selector.matchLabels: ${JSON.stringify(k)} is not a label key`);
    }
    if (sel && Object.keys(labels).length === 0)
      reasons.push(
        'spec.selector.matchLabels: must name at least one label (omit selector for the namespace)',
      );
    out.spec.selector = labels;
  }
  if (spec.portLevelMtls !== undefined) {
    if (!isObj(spec.portLevelMtls)) reasons.push('spec.portLevelMtls: not a mapping');
    else if (spec.selector === undefined)
      reasons.push('spec.portLevelMtls: needs spec.selector (a namespace or mesh policy has no port level)');
    for (const [k, v] of Object.entries(isObj(spec.portLevelMtls) ? spec.portLevelMtls : {})) {
      const path = `spec.portLevelMtls.${k}`;
      const port = /^[0-9]+$/.test(k) ? Number(k) : Number.NaN;
      if (!Number.isInteger(port) || port < 1 || port > 65535) {
        reasons.push(`${path}: ${JSON.stringify(k)} is not a port in 1..65535`);
        continue;
      }
      if (!isObj(v)) reasons.push(`${path}: not a mapping`);
      out.spec.portLevelMtls[port] = mtlsMode(v, path, reasons);
    }
  }
  return out;
}

function mtlsMode(value: unknown, path: string, reasons: string[]): MtlsMode {
  if (value === undefined || value === null) return 'UNSET';
  if (!isObj(value)) {
    reasons.push(`${path}: not a mapping`);
    return 'UNSET';
  }
  const mode = value.mode ?? 'UNSET';
  if (typeof mode === 'string' && (MTLS_MODES as readonly string[]).includes(mode)) return mode as MtlsMode;
  reasons.push(`${path}.mode: ${JSON.stringify(mode)} is not one of ${MTLS_MODES.join(', ')}`);
  return 'UNSET';
}

function ips(values: unknown[], path: string, reasons: string[]): string[] {
  return values.flatMap((v, i) => {
    const ip = typeof v === 'string' ? canonicalIp(v) : undefined;
    if (ip === undefined) reasons.push(`${path}[${i}]: ${JSON.stringify(v)} is not an IP address`);
    return ip === undefined ? [] : [ip];
  });
}

function portNumber(value: unknown, path: string, reasons: string[]): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 65535)
    reasons.push(`${path}: ${JSON.stringify(value)} is not a port in 1..65535`);
  return n;
}

function stringMap(value: unknown, path: string, reasons: string[]): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (!isObj(value)) {
    reasons.push(`${path}: not a mapping`);
    return {};
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== 'string') reasons.push(`${path}.${k}: not a string`);
    else out[k] = v;
  }
  return out;
}

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
